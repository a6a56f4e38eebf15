package dev.kvtransfer.bench;

import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.memory.MemoryKind;
import dev.kvtransfer.core.memory.HostBufferManager;


/**
 * The ceiling every transfer is compared with: a plain single-thread bulk copy (the {@link HostBufferManager} copy,
 * i.e. {@code Unsafe.copyMemory}) of the same bytes, between two off-heap buffers of the chunk's size (at most
 * 1 GiB), in this JVM. Both buffers are touched once before timing, so page faults are not timed.
 */
public final class CopyBaseline {
    /** Largest buffer pair it allocates. */
    public static final long MAX_CHUNK = 1L << 30;

    private CopyBaseline() {
    }

    /**
     * One timed run.
     *
     * @param chunkBytes  bytes per copy
     * @param copies      timed copies
     * @param nanos       elapsed time of all of them
     * @param copyNanos   the time of each copy, in order
     */
    public record Result(long chunkBytes, long copies, long nanos, long[] copyNanos) {
        /** @return bytes copied */
        public long bytes() {
            return chunkBytes * copies;
        }

        /** @return bytes per second */
        public double bytesPerSecond() {
            return bytes() / (nanos / 1e9);
        }
    }

    /**
     * Copies {@code copies} times {@code chunkBytes} (capped at {@link #MAX_CHUNK}) and times each copy.
     *
     * @param chunkBytes bytes per copy, at least 1
     * @param copies     how many, at least 1
     * @return the result
     */
    public static Result measure(long chunkBytes, long copies) {
        if (chunkBytes < 1 || copies < 1) {
            throw new IllegalArgumentException("chunkBytes = " + chunkBytes + ", copies = " + copies
                    + ": both must be positive");
        }
        long size = Math.min(chunkBytes, MAX_CHUNK);
        if (copies > Integer.MAX_VALUE - 8) {
            throw new IllegalArgumentException("copies = " + copies + ": at most " + (Integer.MAX_VALUE - 8));
        }
        long[] each = new long[(int) copies];
        try (HostBufferManager mm = new HostBufferManager()) {
            MemoryBuffer src = mm.allocate(size, MemoryKind.HOST);
            MemoryBuffer dst = mm.allocate(size, MemoryKind.HOST);
            try {
                mm.copy(src, 0, dst, 0, size); // touch both
                mm.copy(src, 0, dst, 0, size);
                long start = System.nanoTime();
                long prev = start;
                for (int i = 0; i < copies; i++) {
                    mm.copy(src, 0, dst, 0, size);
                    long now = System.nanoTime();
                    each[i] = Math.max(1, now - prev);
                    prev = now;
                }
                return new Result(size, copies, Math.max(1, prev - start), each);
            } finally {
                src.close();
                dst.close();
            }
        }
    }

    /**
     * The copy speed for {@code totalBytes} moved in requests of {@code requestBytes} (copies of one request's size,
     * at least 1 MiB and at most 1 GiB, until the total is reached).
     *
     * @param totalBytes   bytes to copy in all
     * @param requestBytes bytes per request
     * @return GB/s (1e9 bytes per second)
     */
    public static double gigabytesPerSecond(long totalBytes, long requestBytes) {
        long size = Math.max(1L << 20, Math.min(requestBytes, MAX_CHUNK));
        try (HostBufferManager mm = new HostBufferManager()) {
            MemoryBuffer src = mm.allocate(size, MemoryKind.HOST);
            MemoryBuffer dst = mm.allocate(size, MemoryKind.HOST);
            try {
                mm.copy(src, 0, dst, 0, size); // touch both so page faults are not timed
                long copied = 0;
                long start = System.nanoTime();
                while (copied < totalBytes) {
                    long n = Math.min(size, totalBytes - copied);
                    mm.copy(src, 0, dst, 0, n);
                    copied += n;
                }
                long nanos = Math.max(1, System.nanoTime() - start);
                return copied / (nanos / 1e9) / 1e9;
            } finally {
                src.close();
                dst.close();
            }
        }
    }

    static String describe() {
        return "single-thread Unsafe.copyMemory between two off-heap buffers (HostBufferManager.copy)";
    }

}
