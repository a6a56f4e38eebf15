package dev.kvtransfer.core.transfer;

import dev.kvtransfer.api.memory.BufferManager;
import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.memory.MemoryKind;

import java.nio.ByteBuffer;
import java.util.ArrayDeque;
import java.util.Objects;

/**
 * Small reusable HOST buffers for control messages (request header and info, ready signal): the protocol used to
 * allocate (and free) an off-heap buffer and its {@code ByteBuffer} view per message, a few hundred heap bytes each
 * on the per-request path. A {@link Lease} is taken for one message exchange and closed after it; closed leases of at most
 * {@link #SLOT_BYTES} whose exchange completed ({@link Lease#reusable()}) go back to a free list (at most
 * {@link #MAX_FREE}); bigger ones, and any lease closed after a failed or timed-out send or receive (a transport
 * could in principle still touch it), are freed as before. The transport is done with a buffer when its
 * {@code send} / {@code recv} returns normally. {@link #close()} frees the free list; a lease closed later is freed
 * at once.
 */
final class ControlBuffers implements AutoCloseable {
    /** Size of a pooled buffer: a request info with a few hundred block ids, or a ready signal. */
    static final int SLOT_BYTES = 4096;
    /** Free buffers kept at most (one per control thread in flight is enough). */
    static final int MAX_FREE = 64;

    private final BufferManager buffers;
    private final ArrayDeque<Lease> free = new ArrayDeque<>();
    private volatile boolean closed;
    /** Leases out (acquired, not closed yet); guarded by {@link #free}, which {@link #awaitReturned} waits on. */
    private int out;

    ControlBuffers(BufferManager buffers) {
        this(buffers, false);
    }

    private ControlBuffers(BufferManager buffers, boolean closed) {
        this.buffers = Objects.requireNonNull(buffers, "buffers");
        this.closed = closed;
    }

    /** @return buffers that are never pooled: each lease is allocated and freed (as before the pool) */
    static ControlBuffers unpooled(BufferManager buffers) {
        return new ControlBuffers(buffers, true);
    }

    /**
     * @param bytes at least this many bytes
     * @return a lease on a HOST buffer of at least {@code bytes} (contents unspecified)
     */
    Lease acquire(long bytes) {
        if (bytes <= SLOT_BYTES && !closed) {
            synchronized (free) {
                Lease l = free.pollLast();
                out++;
                if (l != null) {
                    l.out = true;
                    l.reusable = false;
                    return l;
                }
            }
            return counted(() -> new Lease(this, buffers.allocate(SLOT_BYTES, MemoryKind.HOST), true));
        }
        synchronized (free) {
            out++;
        }
        return counted(() -> new Lease(this, buffers.allocate(bytes, MemoryKind.HOST), false));
    }

    /** An allocation already counted as out: uncounted again when it fails. */
    private Lease counted(java.util.function.Supplier<Lease> allocation) {
        try {
            return allocation.get();
        } catch (RuntimeException | Error e) {
            returned();
            throw e;
        }
    }

    private void release(Lease l) {
        try {
            if (l.pooled && l.reusable) {
                synchronized (free) {
                    if (!closed && free.size() < MAX_FREE) {
                        free.addLast(l);
                        return;
                    }
                }
            }
            l.buffer.close();
        } finally {
            returned(); // after the buffer is freed: a waiter then sees it gone from its buffer manager
        }
    }

    private void returned() {
        synchronized (free) {
            out--;
            if (out == 0) {
                free.notifyAll();
            }
        }
    }

    /**
     * Waits until every lease was closed: on close, those of posted receives come back on the transport's thread once
     * the transport closed, and must be freed before the buffer manager counts what is outstanding.
     *
     * @return true when none is out
     */
    boolean awaitReturned(java.time.Duration timeout) {
        long deadline = System.nanoTime() + timeout.toNanos();
        synchronized (free) {
            while (out > 0) {
                long left = deadline - System.nanoTime();
                if (left <= 0) {
                    return false;
                }
                try {
                    free.wait(Math.max(1, left / 1_000_000));
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                    return false;
                }
            }
            return true;
        }
    }

    /** Frees the pooled buffers; later closed leases are freed at once. Idempotent. */
    @Override
    public void close() {
        synchronized (free) {
            closed = true;
            for (Lease l : free) {
                l.buffer.close();
            }
            free.clear();
        }
    }

    /** @return pooled free buffers (tests) */
    int freeCount() {
        synchronized (free) {
            return free.size();
        }
    }

    /** One control buffer, for one exchange; close it when the sends and receives on it have returned. */
    static final class Lease implements AutoCloseable {
        private final ControlBuffers owner;
        private final MemoryBuffer buffer;
        private final ByteBuffer bytes;
        private final boolean pooled;
        private boolean out = true;
        private boolean reusable;

        private Lease(ControlBuffers owner, MemoryBuffer buffer, boolean pooled) {
            this.owner = owner;
            this.buffer = buffer;
            this.bytes = buffer.asByteBuffer();
            this.pooled = pooled;
        }

        /** @return the buffer (at least the bytes asked for; maybe more) */
        MemoryBuffer buffer() {
            return buffer;
        }

        /** @return a little-endian view of the whole buffer (absolute gets and puts only) */
        ByteBuffer bytes() {
            return bytes;
        }

        /** Marks the exchange complete: every send and receive on the buffer returned normally. */
        void reusable() {
            reusable = true;
        }

        /** Gives the buffer back (to the free list when {@link #reusable()}, else frees it); idempotent. */
        @Override
        public void close() {
            if (!out) {
                return;
            }
            out = false;
            owner.release(this);
        }
    }
}
