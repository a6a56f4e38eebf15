package dev.kvtransfer.aeron;

import dev.kvtransfer.api.memory.MemoryBuffer;
import org.agrona.UnsafeApi;

/**
 * A deterministic byte pattern: byte {@code i} of message ({@code seed}) is a byte of a mixed 64-bit word, so a
 * receiver checks every byte without the sender's data. Works on ranges of any length, beyond 2 GiB too.
 */
final class TestPattern {
    private TestPattern() {
    }

    static long word(long seed, long index) {
        long z = seed * 0x9E3779B97F4A7C15L + index * 0xBF58476D1CE4E5B9L;
        z = (z ^ (z >>> 30)) * 0xBF58476D1CE4E5B9L;
        z = (z ^ (z >>> 27)) * 0x94D049BB133111EBL;
        return z ^ (z >>> 31);
    }

    static byte byteAt(long seed, long i) {
        return (byte) (word(seed, i >>> 3) >>> ((i & 7) * 8));
    }

    static void fill(MemoryBuffer b, long offset, long length, long seed) {
        long a = b.address() + offset;
        long i = 0;
        for (; i + 8 <= length; i += 8) {
            UnsafeApi.putLong(a + i, word(seed, i >>> 3));
        }
        for (; i < length; i++) {
            UnsafeApi.putByte(a + i, byteAt(seed, i));
        }
    }

    /** @return -1 when every byte matches, else the first mismatching index */
    static long firstMismatch(MemoryBuffer b, long offset, long length, long seed) {
        long a = b.address() + offset;
        long i = 0;
        for (; i + 8 <= length; i += 8) {
            if (UnsafeApi.getLong(a + i) != word(seed, i >>> 3)) {
                for (long j = i; j < i + 8; j++) {
                    if (UnsafeApi.getByte(a + j) != byteAt(seed, j)) {
                        return j;
                    }
                }
            }
        }
        for (; i < length; i++) {
            if (UnsafeApi.getByte(a + i) != byteAt(seed, i)) {
                return i;
            }
        }
        return -1;
    }

    static void assertPattern(MemoryBuffer b, long offset, long length, long seed) {
        long m = firstMismatch(b, offset, length, seed);
        if (m >= 0) {
            throw new AssertionError("byte " + m + " of " + length + " (seed " + seed + ") is "
                    + UnsafeApi.getByte(b.address() + offset + m) + ", expected " + byteAt(seed, m));
        }
    }

    static void clear(MemoryBuffer b, long offset, long length) {
        UnsafeApi.setMemory(b.address() + offset, length, (byte) 0x5A);
    }
}
