package dev.kvtransfer.core.testsupport;

import dev.kvtransfer.api.cache.KvCacheView;
import dev.kvtransfer.api.memory.MemoryBuffer;

import java.nio.ByteBuffer;

/** A byte pattern for core's protocol tests (the full KvPattern lives in testkit, which core cannot use). */
public final class Bytes {
    private Bytes() {
    }

    /** @return the byte at (request, block index in the request, byte in block) */
    public static byte at(long requestId, int blockIndex, long offset) {
        long z = requestId * 0x9E3779B97F4A7C15L + blockIndex * 0xBF58476D1CE4E5B9L + offset * 0x94D049BB133111EBL;
        z ^= z >>> 31;
        return (byte) z;
    }

    /** Fills a request's blocks. */
    public static void fill(KvCacheView cache, int[] blocks, long requestId) {
        for (int i = 0; i < blocks.length; i++) {
            MemoryBuffer b = cache.block(blocks[i]);
            ByteBuffer bb = b.asByteBuffer();
            for (int o = 0; o < bb.capacity(); o++) {
                bb.put(o, at(requestId, i, o));
            }
        }
    }

    /** Zeroes a request's blocks. */
    public static void clear(KvCacheView cache, int[] blocks) {
        for (int block : blocks) {
            ByteBuffer bb = cache.block(block).asByteBuffer();
            for (int o = 0; o < bb.capacity(); o++) {
                bb.put(o, (byte) 0);
            }
        }
    }

    /** @return the number of bytes that differ from the pattern (0 = exact) */
    public static long mismatches(KvCacheView cache, int[] blocks, long requestId) {
        long bad = 0;
        for (int i = 0; i < blocks.length; i++) {
            ByteBuffer bb = cache.block(blocks[i]).asByteBuffer();
            for (int o = 0; o < bb.capacity(); o++) {
                if (bb.get(o) != at(requestId, i, o)) {
                    bad++;
                }
            }
        }
        return bad;
    }
}
