package dev.kvtransfer.api.format;

import dev.kvtransfer.api.memory.MemoryBuffer;

import java.time.Duration;

/**
 * Pre-allocated staging memory for formatting, implemented by core: a fixed number of send slots and receive
 * slots of {@link #slotBytes()} each. A slot is taken with a deadline (never an unbounded wait) and carved into
 * per-peer buffers; parts that do not fit get dynamically allocated buffers when the pool allows it.
 *
 * <p>Thread-safe.
 */
public interface TransferBufferPool {
    /** Which slot set to take from. */
    enum Direction {
        /** Formatting on the context side. */
        SEND,
        /** Unformatting on the generation side. */
        RECV
    }

    /** @return bytes of one pre-allocated slot (0 = dynamic-only) */
    long slotBytes();

    /**
     * Takes a free slot.
     *
     * @param direction send or receive slots
     * @param timeout   how long to wait for one
     * @return the slot; close it to give it back
     * @throws dev.kvtransfer.api.KvTransferException with {@code TIMEOUT} when none frees up in time
     */
    Slot acquire(Direction direction, Duration timeout);

    /** A taken slot. Not thread-safe; owned by one transfer. */
    interface Slot extends AutoCloseable {
        /**
         * Buffers of the given sizes: slices of the slot while they fit (in order), dynamic buffers after.
         * Buffers stay valid until {@link #close()}.
         *
         * @param sizes byte size of each buffer
         * @return one buffer per size
         * @throws dev.kvtransfer.api.KvTransferException when a part does not fit and dynamic allocation is
         *                                                off
         */
        MemoryBuffer[] carve(long[] sizes);

        /** @return how many of the last {@link #carve} buffers are slices of the pre-allocated slot */
        int covered();

        /** Frees dynamic buffers and gives the slot back. Idempotent. */
        @Override
        void close();
    }
}
