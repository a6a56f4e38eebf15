package dev.kvtransfer.core.transfer;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.KvTransferException;
import dev.kvtransfer.api.memory.BufferManager;
import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.memory.MemoryKind;
import dev.kvtransfer.api.transport.Connection;
import dev.kvtransfer.core.protocol.RefusalCodec;

import java.nio.ByteBuffer;
import java.time.Duration;

/**
 * Sends and reads a refusal's reason ({@link RefusalCodec}) on a request's data tag, after a ready signal whose
 * status is refused: the requester fails with the same code as the responder.
 */
public final class Signals {
    /** Longest reason accepted (bytes); longer ones are cut by the sender and refused by the receiver. */
    public static final int MAX_REASON_BYTES = RefusalCodec.MAX_REASON_BYTES;

    private Signals() {
    }

    /**
     * Sends a refusal's reason (length, text); the refused ready signal went first.
     *
     * @param bm      allocates the small off-heap message buffer
     * @param conn    the requester's connection
     * @param tag     the request's data tag
     * @param code    why, as a code
     * @param reason  why, for a human
     * @param timeout deadline of each send
     */
    public static void sendReason(BufferManager bm, Connection conn, int tag, ErrorCode code, String reason,
                                  Duration timeout) {
        byte[] text = RefusalCodec.text(code, reason);
        int len = text.length;
        try (MemoryBuffer buf = bm.allocate(8 + len, MemoryKind.HOST)) {
            ByteBuffer bb = buf.asByteBuffer();
            RefusalCodec.writeLength(bb, 4, len);
            bb.put(8, text, 0, len);
            conn.send(tag, buf, 4, RefusalCodec.LENGTH_BYTES, timeout);
            conn.send(tag, buf, 8, len, timeout);
        }
    }

    /**
     * Reads the reason that follows a refused ready signal.
     *
     * @param bm        allocates the receive buffers
     * @param conn      the responder's connection
     * @param tag       the request's data tag
     * @param timeout   deadline of each receive
     * @param requestId for errors
     * @return the exception the refusal means, with the responder's code and reason
     */
    public static KvTransferException readRefusal(BufferManager bm, Connection conn, int tag, Duration timeout,
                                                  long requestId) {
        int len;
        int announced;
        try (MemoryBuffer lb = bm.allocate(RefusalCodec.LENGTH_BYTES, MemoryKind.HOST)) {
            conn.recv(tag, lb, 0, RefusalCodec.LENGTH_BYTES, timeout);
            announced = lb.asByteBuffer().order(java.nio.ByteOrder.LITTLE_ENDIAN).getInt(0);
            len = RefusalCodec.readLength(lb.asByteBuffer(), 0);
        }
        if (len < 0) {
            return new KvTransferException(ErrorCode.MALFORMED, requestId, "peer " + conn.peer()
                    + " refused with a reason of " + announced + " bytes (limit " + MAX_REASON_BYTES + ")", null);
        }
        byte[] bytes = new byte[len];
        try (MemoryBuffer rb = bm.allocate(Math.max(1, len), MemoryKind.HOST)) {
            conn.recv(tag, rb, 0, len, timeout);
            rb.asByteBuffer().get(0, bytes);
        }
        RefusalCodec.Refusal r = RefusalCodec.decode(bytes);
        return new KvTransferException(r.code(), requestId, "refused by context rank at " + Texts.peer(conn.peer())
                + ": " + Texts.reason(r.reason()), null);
    }
}
