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

    /**
     * CRC32C speed over a cache-resident buffer, as the part checksum runs right after a message moved: CRC32C (the
     * JDK's, as {@code Checksums.crc32c}) of one {@code pieceBytes} off-heap buffer, over and over until
     * {@code totalBytes} were summed. The first pass is not timed.
     *
     * @param pieceBytes bytes per checksum, 1 to 1 GiB
     * @param totalBytes bytes to sum in all, at least 1
     * @return GB/s (1e9 bytes per second)
     */
    public static double crc32cGigabytesPerSecond(long pieceBytes, long totalBytes) {
        if (pieceBytes < 1 || pieceBytes > MAX_CHUNK || totalBytes < 1) {
            throw new IllegalArgumentException("pieceBytes = " + pieceBytes + ", totalBytes = " + totalBytes
                    + ": both must be positive, the piece at most 1 GiB");
        }
        try (HostBufferManager mm = new HostBufferManager()) {
            MemoryBuffer piece = mm.allocate(pieceBytes, MemoryKind.HOST);
            try {
                java.nio.ByteBuffer bb = piece.asByteBuffer();
                java.util.zip.CRC32C crc = new java.util.zip.CRC32C();
                crc.update(bb.clear()); // touch it, warm the intrinsic
                long summed = 0;
                long start = System.nanoTime();
                while (summed < totalBytes) {
                    int n = (int) Math.min(pieceBytes, totalBytes - summed);
                    crc.reset();
                    crc.update(bb.clear().limit(n));
                    summed += n;
                }
                long nanos = Math.max(1, System.nanoTime() - start);
                if (crc.getValue() == 0x1_0000_0000L) { // never: keeps the sums live
                    throw new AssertionError();
                }
                return summed / (nanos / 1e9) / 1e9;
            } finally {
                piece.close();
            }
        }
    }

    /**
     * The GB/s of a path with part checksums on when, without them, it reaches {@code offGbps} and both sides' sums
     * of every byte add to its critical path (the sender after each message, the receiver before placing it):
     * {@code 1 / (1 / off + 2 / crc)}. A serial estimate: where a pass overlaps other work on another core the
     * path does better.
     *
     * @param offGbps the path's GB/s with part checksums off
     * @param crcGbps CRC32C GB/s ({@link #crc32cGigabytesPerSecond})
     * @return GB/s
     */
    public static double withTwoChecksumPasses(double offGbps, double crcGbps) {
        return 1 / (1 / offGbps + 2 / crcGbps);
    }

    static String describe() {
        return "single-thread Unsafe.copyMemory between two off-heap buffers (HostBufferManager.copy)";
    }

}
