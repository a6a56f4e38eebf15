package dev.kvtransfer.mpi;

import dev.kvtransfer.api.memory.MemoryBuffer;

import java.nio.ByteBuffer;

/**
 * A position-dependent byte pattern for transfer checks: the long at byte offset {@code 8k} of a message is
 * {@code mix(seed, k)}, written little-endian; a tail shorter than 8 bytes holds the low bytes of the next
 * word. Works on buffers above 2 GiB by walking slices.
 */
final class Patterns {
    private static final long SLICE = 1L << 30;

    private Patterns() {
    }

    static long mix(long seed, long index) {
        long z = seed * 0x9E3779B97F4A7C15L + index * 0xBF58476D1CE4E5B9L + 0x94D049BB133111EBL;
        z = (z ^ (z >>> 30)) * 0xBF58476D1CE4E5B9L;
        z = (z ^ (z >>> 27)) * 0x94D049BB133111EBL;
        return z ^ (z >>> 31);
    }

    static void fill(MemoryBuffer buffer, long offset, long length, long seed) {
        for (long base = 0; base < length; base += SLICE) {
            long n = Math.min(SLICE, length - base);
            ByteBuffer bb = buffer.slice(offset + base, n).asByteBuffer();
            long word = base / 8;
            int i = 0;
            for (; i + 8 <= n; i += 8) {
                bb.putLong(i, mix(seed, word++));
            }
            long last = mix(seed, word);
            for (int b = 0; i < n; i++, b++) {
                bb.put(i, (byte) (last >>> (8 * b)));
            }
        }
    }

    /** @return -1 when the bytes match, else the first wrong byte offset (relative to {@code offset}) */
    static long firstMismatch(MemoryBuffer buffer, long offset, long length, long seed) {
        for (long base = 0; base < length; base += SLICE) {
            long n = Math.min(SLICE, length - base);
            ByteBuffer bb = buffer.slice(offset + base, n).asByteBuffer();
            long word = base / 8;
            int i = 0;
            for (; i + 8 <= n; i += 8) {
                long expected = mix(seed, word++);
                long actual = bb.getLong(i);
                if (actual != expected) {
                    return base + i + Long.numberOfTrailingZeros(actual ^ expected) / 8;
                }
            }
            long last = mix(seed, word);
            for (int b = 0; i < n; i++, b++) {
                if (bb.get(i) != (byte) (last >>> (8 * b))) {
                    return base + i;
                }
            }
        }
        return -1;
    }
}
