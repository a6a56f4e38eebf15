package dev.kvtransfer.core.transfer;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.KvTransferException;
import dev.kvtransfer.api.memory.BufferManager;
import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.memory.MemoryKind;
import dev.kvtransfer.api.transport.Connection;

import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.time.Duration;

/**
 * The reason of a refusal, on a request's data tag after a ready signal whose status is 0 (see
 * {@link CacheReceiver#readyBytes}): two messages, a little-endian int32 length, then that many UTF-8 bytes. A
 * reason starts with the {@link ErrorCode} name and a colon ({@code "UNSUPPORTED_LAYOUT: ..."}) so the requester
 * fails with the same code as the responder.
 */
public final class Signals {
    /** Longest reason accepted (bytes); longer ones are cut by the sender and refused by the receiver. */
    public static final int MAX_REASON_BYTES = 64 * 1024;

    private Signals() {
    }

    /**
     * Sends a refusal's reason (length, text); the status-0 ready signal went first.
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
        byte[] text = (code.name() + ": " + reason).getBytes(StandardCharsets.UTF_8);
        int len = Math.min(text.length, MAX_REASON_BYTES);
        try (MemoryBuffer buf = bm.allocate(8 + len, MemoryKind.HOST)) {
            ByteBuffer bb = buf.asByteBuffer();
            bb.putInt(4, len);
            bb.put(8, text, 0, len);
            conn.send(tag, buf, 4, 4, timeout);
            conn.send(tag, buf, 8, len, timeout);
        }
    }

    /**
     * Reads the reason that follows a 0 ready signal.
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
        try (MemoryBuffer lb = bm.allocate(4, MemoryKind.HOST)) {
            conn.recv(tag, lb, 0, 4, timeout);
            len = lb.asByteBuffer().getInt(0);
        }
        if (len < 0 || len > MAX_REASON_BYTES) {
            return new KvTransferException(ErrorCode.MALFORMED, requestId, "peer " + conn.peer()
                    + " refused with a reason of " + len + " bytes (limit " + MAX_REASON_BYTES + ")", null);
        }
        String text;
        try (MemoryBuffer rb = bm.allocate(len, MemoryKind.HOST)) {
            conn.recv(tag, rb, 0, len, timeout);
            byte[] bytes = new byte[len];
            rb.asByteBuffer().get(0, bytes);
            text = new String(bytes, StandardCharsets.UTF_8);
        }
        ErrorCode code = ErrorCode.INTERNAL;
        String reason = text;
        int colon = text.indexOf(':');
        if (colon > 0) {
            try {
                code = ErrorCode.valueOf(text.substring(0, colon));
                reason = text.substring(colon + 1).trim();
            } catch (IllegalArgumentException e) {
                // Not one of ours: keep the whole text as the reason.
            }
        }
        return new KvTransferException(code, requestId, "refused by context rank at " + Texts.peer(conn.peer())
                + ": " + Texts.reason(reason), null);
    }
}
