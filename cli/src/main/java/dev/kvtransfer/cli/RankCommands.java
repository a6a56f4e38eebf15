package dev.kvtransfer.cli;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.KvTransferException;
import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.memory.MemoryKind;
import dev.kvtransfer.api.transport.Connection;
import dev.kvtransfer.api.transport.ConnectionManager;
import dev.kvtransfer.core.memory.HostBufferManager;
import dev.kvtransfer.core.sync.TransportGroupComm;

import java.nio.ByteBuffer;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.function.BooleanSupplier;
import java.util.function.Consumer;

/**
 * Rank 0 of a context instance split over processes ({@code serve --rank}) hands each request the router gave it to
 * the other ranks over their transports: one 32-byte command (magic, kind, request id, isl, layer-wise) on channel
 * {@code MAX_CHANNEL - 1} of the group tag range, so it is authenticated as the transport is and never meets a
 * transceiver message. STOP ends the other ranks when rank 0 drains.
 */
final class RankCommands implements AutoCloseable {
    static final int TAG = TransportGroupComm.FIRST_TAG + 2 * (TransportGroupComm.MAX_CHANNEL - 1);
    static final int BYTES = 32;
    static final int MAGIC = 0x4D43564B; // "KVCM" little-endian
    static final int KIND_START = 1;
    static final int KIND_STOP = 2;
    /** How long one wait of a follower lasts before it checks whether it should stop. */
    private static final Duration SLICE = Duration.ofSeconds(1);

    private final HostBufferManager memory = new HostBufferManager();
    private final MemoryBuffer buffer = memory.allocate(BYTES, MemoryKind.HOST);
    private final List<Connection> followers = new ArrayList<>();
    private final Duration timeout;

    private RankCommands(Duration timeout) {
        this.timeout = timeout;
    }

    /** Rank 0's side: the connections to ranks 1 .. n-1. */
    static RankCommands leader(ConnectionManager cm, List<String> addresses, Duration timeout) {
        RankCommands c = new RankCommands(timeout);
        for (int r = 1; r < addresses.size(); r++) {
            c.followers.add(cm.connection(addresses.get(r)));
        }
        return c;
    }

    /** Hands one request to every other rank. */
    synchronized void start(ControlApi.ContextRequest q) {
        send(KIND_START, q.requestId(), q.isl(), q.layerwise());
    }

    /** Tells every other rank to stop (best effort). */
    synchronized void stop() {
        try {
            send(KIND_STOP, 0, 0, false);
        } catch (RuntimeException e) {
            System.err.println("kvtransfer: telling the other ranks to stop: " + CliErrors.oneLine(e));
        }
    }

    private void send(int kind, long rid, int isl, boolean layerwise) {
        buffer.asByteBuffer().putInt(0, MAGIC).putInt(4, kind).putLong(8, rid).putInt(16, isl)
                .putInt(20, layerwise ? 1 : 0).putLong(24, 0);
        for (Connection c : followers) {
            c.send(TAG, buffer, 0, BYTES, timeout);
        }
    }

    /**
     * A rank other than 0: runs rank 0's commands until STOP (returns true), or until {@code stopping} says so
     * (returns false).
     *
     * @throws KvTransferException when rank 0 is lost or sends a malformed command
     */
    static boolean follow(ConnectionManager cm, String leader, Consumer<ControlApi.ContextRequest> onStart,
                          BooleanSupplier stopping) {
        Connection c = cm.connection(leader);
        try (HostBufferManager mem = new HostBufferManager()) {
            MemoryBuffer b = mem.allocate(BYTES, MemoryKind.HOST);
            try {
                while (!stopping.getAsBoolean()) {
                    try {
                        c.recv(TAG, b, 0, BYTES, SLICE);
                    } catch (KvTransferException e) {
                        if (e.code() == ErrorCode.TIMEOUT) {
                            continue;
                        }
                        throw e;
                    }
                    ByteBuffer m = b.asByteBuffer();
                    int kind = m.getInt(4);
                    if (m.getInt(0) != MAGIC || (kind != KIND_START && kind != KIND_STOP)) {
                        throw new KvTransferException(ErrorCode.MALFORMED, "a malformed command from rank 0 at "
                                + leader);
                    }
                    if (kind == KIND_STOP) {
                        return true;
                    }
                    ControlApi.ContextRequest q = new ControlApi.ContextRequest(m.getLong(8), m.getInt(16),
                            m.getInt(20) != 0);
                    try {
                        onStart.accept(q);
                    } catch (RuntimeException e) {
                        System.err.println("kvtransfer: request " + q.requestId() + ": " + CliErrors.oneLine(e));
                    }
                }
                return false;
            } finally {
                b.close();
            }
        }
    }

    @Override
    public synchronized void close() {
        buffer.close();
        memory.close();
    }
}
