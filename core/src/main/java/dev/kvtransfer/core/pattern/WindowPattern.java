package dev.kvtransfer.core.pattern;

import dev.kvtransfer.api.cache.KvCacheView;
import dev.kvtransfer.api.layout.BlockDistribution;
import dev.kvtransfer.api.layout.BlockLayout;
import dev.kvtransfer.api.memory.BufferManager;
import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.api.model.WindowGroups;

import java.util.Objects;

/**
 * {@link KvPattern} for caches with sliding windows ({@link WindowGroups}): what a generation rank receives is, per
 * layer, only the blocks inside the layer's window after the reused prefix; the blocks before the window must keep
 * whatever they held (a poison), the rest the request's pattern. Device pools through a host mirror.
 */
public final class WindowPattern {
    private WindowPattern() {
    }

    /**
     * Bytes a rank's blocks of a request take part in a transfer: per local layer, its blocks from
     * {@link WindowGroups#firstMovedBlock} on, times the layer's bytes in a block. Without windows: every block after
     * the reused prefix, whole.
     *
     * @param state        the rank's instance cache state
     * @param rank         the rank index
     * @param totalBlocks  blocks of the request's prompt (all CP ranks)
     * @param reusedBlocks leading blocks the generation side already holds
     * @return the bytes
     */
    public static long movedBytes(CacheState state, int rank, int totalBlocks, int reusedBlocks) {
        Objects.requireNonNull(state, "state");
        BlockLayout l = BlockLayout.of(state, rank);
        int pp = state.ppRank(rank);
        int s0 = BlockDistribution.firstGlobalBlock(totalBlocks, state.contextParallelism(), state.cpRank(rank));
        int s1 = s0 + BlockDistribution.count(totalBlocks, state.contextParallelism(), state.cpRank(rank));
        long layerBytes = l.localLayers() == 0 ? 0 : l.blockBytes() / l.localLayers();
        long bytes = 0;
        for (int g = state.firstLayer(pp); g < state.firstLayer(pp) + state.layerCount(pp); g++) {
            int from = state.windowGroups() == null ? reusedBlocks
                    : state.windowGroups().firstMovedBlock(g, state.tokensPerBlock(), totalBlocks, reusedBlocks);
            bytes += Math.max(0, s1 - Math.max(s0, from)) * layerBytes;
        }
        return bytes;
    }

    /**
     * Checks every element of a generation rank's blocks of a windowed request: per run of layers with one window,
     * the blocks inside the window and the reused prefix hold {@code requestId}'s pattern, the blocks between the
     * prefix and the window still hold {@code poisonId}'s (nothing was written there).
     *
     * @param cache        the rank's KV pool (host memory)
     * @param blockIds     the rank's blocks of the request
     * @param state        the rank's instance cache state (with windows)
     * @param rank         the rank index
     * @param requestId    the request's pattern
     * @param poisonId     the pattern written before the transfer into the blocks after the prefix
     * @param totalBlocks  blocks of the request's prompt
     * @param reusedBlocks leading blocks the rank already held
     * @return what was found
     */
    public static KvPattern.Result verify(KvCacheView cache, int[] blockIds, CacheState state, int rank,
                                          long requestId, long poisonId, int totalBlocks, int reusedBlocks) {
        Objects.requireNonNull(cache, "cache");
        if (KvPattern.onDevice(cache)) {
            throw new IllegalArgumentException("the pool " + cache + " is DEVICE memory, which the CPU cannot read:"
                    + " use the WindowPattern.verify overload that takes the pool's BufferManager (host mirror)");
        }
        return verify(cache, null, blockIds, state, rank, requestId, poisonId, totalBlocks, reusedBlocks);
    }

    /**
     * {@link #verify(KvCacheView, int[], CacheState, int, long, long, int, int)} for a pool in any memory: a device
     * pool through a host mirror and {@code copier}, host memory directly.
     *
     * @param cache        the rank's KV pool
     * @param copier       a manager that copies between the pool's memory and host memory (the rank's)
     * @param blockIds     the rank's blocks of the request
     * @param state        the rank's instance cache state (with windows)
     * @param rank         the rank index
     * @param requestId    the request's pattern
     * @param poisonId     the pattern written before the transfer into the blocks after the prefix
     * @param totalBlocks  blocks of the request's prompt
     * @param reusedBlocks leading blocks the rank already held
     * @return what was found
     */
    public static KvPattern.Result verify(KvCacheView cache, BufferManager copier, int[] blockIds, CacheState state,
                                          int rank, long requestId, long poisonId, int totalBlocks,
                                          int reusedBlocks) {
        Objects.requireNonNull(cache, "cache");
        boolean device = KvPattern.onDevice(cache);
        if (device) {
            Objects.requireNonNull(copier, "copier");
        }
        WindowGroups w = Objects.requireNonNull(state.windowGroups(), "state.windowGroups");
        int pp = state.ppRank(rank);
        int end = state.firstLayer(pp) + state.layerCount(pp);
        KvPattern.Result r = new KvPattern.Result();
        int a = state.firstLayer(pp);
        while (a < end) {
            int b = w.runEnd(a, end);
            int from = w.firstMovedBlock(a, state.tokensPerBlock(), totalBlocks, reusedBlocks);
            walk(cache, copier, device, blockIds, state, rank, requestId, totalBlocks, a, b, r, 0, reusedBlocks);
            walk(cache, copier, device, blockIds, state, rank, poisonId, totalBlocks, a, b, r, reusedBlocks, from);
            walk(cache, copier, device, blockIds, state, rank, requestId, totalBlocks, a, b, r, from, totalBlocks);
            a = b;
        }
        return r;
    }

    /** Checks global layers {@code [a, b)} of global blocks {@code [from, to)} against one request's pattern. */
    private static void walk(KvCacheView cache, BufferManager copier, boolean device, int[] blockIds, CacheState state,
                             int rank, long id, int totalBlocks, int a, int b, KvPattern.Result r, int from, int to) {
        if (from >= to) {
            return;
        }
        PatternWalk walk = PatternWalk.main(cache, blockIds, state, rank, id, totalBlocks).layers(a, b);
        if (device) {
            KvPattern.mirrored(cache, copier, blockIds, walk, r, from, to);
        } else {
            walk.run(cache, blockIds, blockIds, r, from, to);
        }
    }
}
