package dev.kvtransfer.testkit.loopback;

import dev.kvtransfer.core.memory.MemoryAccess;

import java.util.ArrayDeque;

/**
 * Eager buffers by power-of-two class (4 KiB and up; smaller ones are plain allocations), keeping at most
 * {@code retainBytes} between messages; freed on close. Thread-safe. Used by {@link LoopbackConnectionManager} for
 * the messages queued at it.
 */
final class EagerPool {
    private static final int MIN_SHIFT = 12;
    private final long retainBytes;
    private final ArrayDeque<Long>[] free;
    private long retained;
    private boolean closed;

    @SuppressWarnings("unchecked")
    EagerPool(long retainBytes) {
        if (retainBytes < 0) {
            throw new IllegalArgumentException("eager pool of " + retainBytes + " bytes: must be >= 0");
        }
        this.retainBytes = retainBytes;
        this.free = new ArrayDeque[64];
    }

    private static int shift(long length) {
        return Math.max(MIN_SHIFT, 64 - Long.numberOfLeadingZeros(length - 1));
    }

    /** @return a buffer of at least {@code length} bytes (0 for an empty message) */
    long take(long length) {
        if (length == 0) {
            return 0;
        }
        if (length < (1L << MIN_SHIFT)) {
            return MemoryAccess.allocate(length);
        }
        int k = shift(length);
        synchronized (this) {
            ArrayDeque<Long> q = free[k];
            if (q != null && !q.isEmpty()) {
                retained -= 1L << k;
                return q.pop();
            }
        }
        return MemoryAccess.allocate(1L << k);
    }

    /** Returns a buffer from {@link #take} of the same {@code length}. */
    void give(long address, long length) {
        if (address == 0) {
            return;
        }
        if (length < (1L << MIN_SHIFT)) {
            MemoryAccess.free(address);
            return;
        }
        int k = shift(length);
        synchronized (this) {
            if (!closed && retained + (1L << k) <= retainBytes) {
                if (free[k] == null) {
                    free[k] = new ArrayDeque<>();
                }
                free[k].push(address);
                retained += 1L << k;
                return;
            }
        }
        MemoryAccess.free(address);
    }

    /** @return bytes held for reuse */
    synchronized long retained() {
        return retained;
    }

    /** Frees what it holds; later returns are freed at once. */
    void close() {
        synchronized (this) {
            closed = true;
            for (ArrayDeque<Long> q : free) {
                while (q != null && !q.isEmpty()) {
                    MemoryAccess.free(q.pop());
                }
            }
            retained = 0;
        }
    }
}
