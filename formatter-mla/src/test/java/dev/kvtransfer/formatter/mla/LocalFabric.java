package dev.kvtransfer.formatter.mla;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.KvTransferException;
import dev.kvtransfer.api.memory.BufferManager;
import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.memory.MemoryKind;

import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;

/**
 * In-JVM message fabric between the ranks of one context and one generation instance: one FIFO of parts per
 * directed (context rank, generation rank) pair, each part copied into its own off-heap buffer. Parts are
 * whole and ordered, as on a real connection's data tag; a receive of the wrong length is {@code MALFORMED}, a
 * receive that finds nothing within the deadline is {@code TIMEOUT}.
 */
final class LocalFabric {
    private final BufferManager memory;
    private final long recvTimeoutMs;
    private final Map<Long, LinkedBlockingQueue<MemoryBuffer>> queues = new ConcurrentHashMap<>();

    LocalFabric(BufferManager memory) {
        this(memory, 5_000);
    }

    LocalFabric(BufferManager memory, long recvTimeoutMs) {
        this.memory = memory;
        this.recvTimeoutMs = recvTimeoutMs;
    }

    private LinkedBlockingQueue<MemoryBuffer> queue(int ctxRank, int genRank) {
        return queues.computeIfAbsent(((long) ctxRank << 32) | genRank, k -> new LinkedBlockingQueue<>());
    }

    void send(int ctxRank, int genRank, MemoryBuffer src, long offset, long length) {
        MemoryBuffer msg = memory.allocate(length, MemoryKind.HOST);
        memory.copy(src, offset, msg, 0, length);
        queue(ctxRank, genRank).add(msg);
    }

    void recv(long requestId, int ctxRank, int genRank, MemoryBuffer dst, long offset, long length) {
        MemoryBuffer msg;
        try {
            msg = queue(ctxRank, genRank).poll(recvTimeoutMs, TimeUnit.MILLISECONDS);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new KvTransferException(ErrorCode.INTERNAL, requestId, "interrupted", e);
        }
        if (msg == null) {
            throw new KvTransferException(ErrorCode.TIMEOUT, requestId, "generation rank " + genRank
                    + " got no part from context rank " + ctxRank + " within " + recvTimeoutMs + " ms", null);
        }
        try {
            if (msg.size() != length) {
                throw new KvTransferException(ErrorCode.MALFORMED, requestId, "generation rank " + genRank
                        + " expected a part of " + length + " bytes from context rank " + ctxRank + ", got "
                        + msg.size(), null);
            }
            memory.copy(msg, 0, dst, offset, length);
        } finally {
            msg.close();
        }
    }

    /** @return parts sent and never received (a sender sent to a rank that did not pick it) */
    int undelivered() {
        int n = 0;
        for (LinkedBlockingQueue<MemoryBuffer> q : queues.values()) {
            n += q.size();
        }
        return n;
    }

    /** Frees undelivered parts. */
    void drain() {
        for (LinkedBlockingQueue<MemoryBuffer> q : queues.values()) {
            MemoryBuffer m;
            while ((m = q.poll()) != null) {
                m.close();
            }
        }
    }
}
