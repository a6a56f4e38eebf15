package dev.kvtransfer.memory.cuda;

import dev.kvtransfer.api.cache.KvCacheView;
import dev.kvtransfer.api.memory.BufferManager;
import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.testkit.KvPattern;

/**
 * DESIGN §6's verification pattern on a device-resident pool: the main code's device path of {@link KvPattern}
 * (core's {@code KvPattern.fill/verify(cache, copier, ...)}: a host mirror of the request's blocks, one copy per
 * run of blocks adjacent in both pools), under the names these tests have always used.
 */
final class DeviceKvPattern {
    private DeviceKvPattern() {
    }

    /**
     * Writes the pattern of a rank's blocks of a request into a device pool.
     *
     * @param cuda        the manager that copies (host to device)
     * @param pool        the rank's device pool (its layout must be {@code BlockLayout.of(state, rank)})
     * @param blockIds    the rank's blocks of the request, in order
     * @param state       the rank's instance cache state
     * @param rank        the rank index
     * @param requestId   the request id
     * @param totalBlocks blocks of the whole request
     */
    static void fill(BufferManager cuda, KvCacheView pool, int[] blockIds, CacheState state, int rank,
                     long requestId, int totalBlocks) {
        KvPattern.fill(pool, cuda, blockIds, state, rank, requestId, totalBlocks);
    }

    /**
     * Checks every element of a rank's blocks of a request in a device pool.
     *
     * @return what {@link KvPattern#verify} found in the copy
     */
    static KvPattern.Result verify(BufferManager cuda, KvCacheView pool, int[] blockIds, CacheState state, int rank,
                                   long requestId, int totalBlocks) {
        return KvPattern.verify(pool, cuda, blockIds, state, rank, requestId, totalBlocks);
    }
}
