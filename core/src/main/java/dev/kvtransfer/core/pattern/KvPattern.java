package dev.kvtransfer.core.pattern;

import dev.kvtransfer.api.cache.KvCacheView;
import dev.kvtransfer.api.layout.BlockDistribution;
import dev.kvtransfer.api.layout.BlockLayout;
import dev.kvtransfer.api.layout.PoolGeometry;
import dev.kvtransfer.api.layout.PoolLayout;
import dev.kvtransfer.api.memory.BufferManager;
import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.memory.MemoryKind;
import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.core.cache.PagedKvCache;
import dev.kvtransfer.core.memory.HostBufferManager;
import dev.kvtransfer.core.memory.MemoryAccess;

import java.util.Objects;

/**
 * The verification pattern of DESIGN §6: every element of a request's KV cache holds a value computed from its
 * global coordinates, so a receiver checks every byte without the sender's data, whatever the two layouts are.
 *
 * <p>Element {@code (requestId r, global layer l, kv k, global head h, absolute token t, dim d)} holds the low
 * {@code elementBytes} bytes, little-endian, of {@link #value}{@code = mix(key)} with, in wrapping 64-bit
 * arithmetic, {@code key = r*C_R + l*C_L + k*C_K + h*C_H + t*C_T + d*C_D} and {@code mix} the SplitMix64
 * finalizer. Global layer = {@code state.firstLayer(ppRank) + local layer}; global head =
 * {@code state.firstGlobalHead(tpRank) + local head} (0 for MLA); token =
 * {@code (BlockDistribution.firstGlobalBlock(totalBlocks, cp, cpRank) + i) * tokensPerBlock + token in block}
 * for the {@code i}-th of the rank's {@code blockIds}.
 *
 * <p>The indexer-K pool of MLA ({@link #fillIndexer}, {@link #verifyIndexer}) uses the same formula with
 * {@code k = }{@value #INDEXER_KV} (so its values differ from the main pool's K and V planes) and head 0, over
 * the pool's own layout (uint8 elements).
 *
 * <p>Any pool layout: elements are found through the cache's {@link KvCacheView#geometry()} (block pools through
 * {@link KvCacheView#block}, layer pools through {@link KvCacheView#region}), so the values depend only on the
 * global coordinates and every checker keeps its meaning whatever the two sides' pool layouts are. A mismatch
 * report names the pool layout, the region and the byte.
 *
 * <p>Speed: keys are linear, so {@code key = base + tab[j]} over each contiguous run: one head's
 * {@code [token][dim]} in block and layer-hnd pools ({@code tab} precomputed per block), one token's
 * {@code [head][dim]} in layer-nhd pools ({@code tab} precomputed once); the inner loop is an add, the mix and one
 * 64-bit store (or load and compare) per word of elements. Measured numbers are in testkit/README.md.
 *
 * <p>Device pools ({@link MemoryKind#DEVICE} regions, never read by the CPU): the overloads taking a
 * {@link BufferManager} fill and verify through a host mirror of the request's blocks (a host {@link PagedKvCache} in
 * the same block and pool layout, block {@code i} of the mirror standing for {@code blockIds[i]}): verify copies the
 * blocks device-to-host, fill host-to-device, one {@code copy} per run of blocks adjacent in both pools (block pools:
 * whole blocks; layer pools: per (layer, kv, segment) plane), then {@code synchronize()}. Mismatch reports name the
 * device block id and the mirror's byte. The overloads without a manager refuse a device pool.
 *
 * <p>It lives in core so that tools (the cli's demo and bench) verify without the testkit on their class path;
 * test code keeps using {@code dev.kvtransfer.testkit.KvPattern}, which is this class under the testkit's name.
 */
public class KvPattern {
    /** Multiplier of the request id. */
    public static final long C_R = 0x9E3779B97F4A7C15L;
    /** Multiplier of the global layer. */
    public static final long C_L = 0xBF58476D1CE4E5B9L;
    /** Multiplier of the kv index. */
    public static final long C_K = 0x94D049BB133111EBL;
    /** Multiplier of the global head. */
    public static final long C_H = 0x2545F4914F6CDD1DL;
    /** Multiplier of the absolute token position. */
    public static final long C_T = 0x632BE59BD9B4E019L;
    /** Multiplier of the dim index. */
    public static final long C_D = 0x85EBCA77C2B2AE63L;
    /** The kv index used in the key of indexer-K pool elements. */
    public static final int INDEXER_KV = 2;

    /** Static methods only; {@code dev.kvtransfer.testkit.KvPattern} names the same methods for test code. */
    protected KvPattern() {
    }

    /**
     * The key before mixing.
     *
     * @param requestId request id
     * @param layer     global layer
     * @param kv        0 = K, 1 = V, {@value #INDEXER_KV} = indexer K
     * @param head      global head
     * @param token     absolute token position
     * @param dim       element within the head
     * @return the key
     */
    public static long key(long requestId, int layer, int kv, int head, long token, int dim) {
        return requestId * C_R + layer * C_L + kv * C_K + head * C_H + token * C_T + dim * C_D;
    }

    /**
     * The SplitMix64 finalizer.
     *
     * @param z input
     * @return the mixed word
     */
    public static long mix(long z) {
        z = (z ^ (z >>> 30)) * 0xBF58476D1CE4E5B9L;
        z = (z ^ (z >>> 27)) * 0x94D049BB133111EBL;
        return z ^ (z >>> 31);
    }

    /**
     * The 64-bit word of one element; the element holds its low {@code dataType.bytes()} bytes little-endian.
     *
     * @param requestId request id
     * @param layer     global layer
     * @param kv        kv index
     * @param head      global head
     * @param token     absolute token position
     * @param dim       element within the head
     * @return the mixed word
     */
    public static long value(long requestId, int layer, int kv, int head, long token, int dim) {
        return mix(key(requestId, layer, kv, head, token, dim));
    }

    /**
     * Writes the pattern into a rank's blocks of a request, in whatever pool layout the cache has.
     *
     * @param cache       the rank's KV pool (its block layout must be {@code BlockLayout.of(state, rank)})
     * @param blockIds    the rank's blocks of the request, in order
     * @param state       the rank's instance cache state
     * @param rank        the rank index in its instance
     * @param requestId   the request id (the context side's)
     * @param totalBlocks blocks of the whole request (all CP ranks)
     */
    public static void fill(KvCacheView cache, int[] blockIds, CacheState state, int rank, long requestId,
                            int totalBlocks) {
        fill(cache, blockIds, state, rank, requestId, totalBlocks, 0, Integer.MAX_VALUE);
    }

    /**
     * Writes the pattern into the rank's blocks whose global block index is in {@code [fromGlobal, toGlobal)}
     * (e.g. the reused prefix of a request, or what follows it); the other blocks are not touched.
     *
     * @param cache       the rank's KV pool
     * @param blockIds    the rank's blocks of the request, in order
     * @param state       the rank's instance cache state
     * @param rank        the rank index in its instance
     * @param requestId   the request id whose pattern is written
     * @param totalBlocks blocks of the whole request (all CP ranks)
     * @param fromGlobal  first global block to write
     * @param toGlobal    global block after the last to write
     */
    public static void fill(KvCacheView cache, int[] blockIds, CacheState state, int rank, long requestId,
                            int totalBlocks, int fromGlobal, int toGlobal) {
        Objects.requireNonNull(cache, "cache");
        requireHost(cache);
        Walk w = Walk.main(cache, blockIds, state, rank, requestId, totalBlocks);
        w.run(cache, blockIds, blockIds, null, fromGlobal, toGlobal);
    }

    /**
     * Checks every element of a rank's blocks of a request.
     *
     * @param cache       the rank's KV pool
     * @param blockIds    the rank's blocks of the request, in order
     * @param state       the rank's instance cache state
     * @param rank        the rank index in its instance
     * @param requestId   the request id (the context side's)
     * @param totalBlocks blocks of the whole request (all CP ranks)
     * @return what was found
     */
    public static Result verify(KvCacheView cache, int[] blockIds, CacheState state, int rank, long requestId,
                                int totalBlocks) {
        return verify(cache, blockIds, state, rank, requestId, totalBlocks, 0, Integer.MAX_VALUE);
    }

    /**
     * Checks the rank's blocks whose global block index is in {@code [fromGlobal, toGlobal)}.
     *
     * @param cache       the rank's KV pool
     * @param blockIds    the rank's blocks of the request, in order
     * @param state       the rank's instance cache state
     * @param rank        the rank index in its instance
     * @param requestId   the request id whose pattern is expected
     * @param totalBlocks blocks of the whole request (all CP ranks)
     * @param fromGlobal  first global block to check
     * @param toGlobal    global block after the last to check
     * @return what was found
     */
    public static Result verify(KvCacheView cache, int[] blockIds, CacheState state, int rank, long requestId,
                                int totalBlocks, int fromGlobal, int toGlobal) {
        Objects.requireNonNull(cache, "cache");
        requireHost(cache);
        Walk w = Walk.main(cache, blockIds, state, rank, requestId, totalBlocks);
        Result r = new Result();
        w.run(cache, blockIds, blockIds, r, fromGlobal, toGlobal);
        return r;
    }

    /**
     * {@link #fill(KvCacheView, int[], CacheState, int, long, int)} for a pool in any memory: a device pool through
     * a host mirror and {@code copier} (see the class comment), host memory directly.
     *
     * @param cache       the rank's KV pool
     * @param copier      a manager that copies between the pool's memory and host memory (the rank's)
     * @param blockIds    the rank's blocks of the request, in order
     * @param state       the rank's instance cache state
     * @param rank        the rank index in its instance
     * @param requestId   the request id
     * @param totalBlocks blocks of the whole request (all CP ranks)
     */
    public static void fill(KvCacheView cache, BufferManager copier, int[] blockIds, CacheState state, int rank,
                            long requestId, int totalBlocks) {
        fill(cache, copier, blockIds, state, rank, requestId, totalBlocks, 0, Integer.MAX_VALUE);
    }

    /**
     * {@link #fill(KvCacheView, int[], CacheState, int, long, int, int, int)} for a pool in any memory; only the
     * blocks in {@code [fromGlobal, toGlobal)} are copied to the device.
     *
     * @param cache       the rank's KV pool
     * @param copier      a manager that copies between the pool's memory and host memory
     * @param blockIds    the rank's blocks of the request, in order
     * @param state       the rank's instance cache state
     * @param rank        the rank index in its instance
     * @param requestId   the request id whose pattern is written
     * @param totalBlocks blocks of the whole request (all CP ranks)
     * @param fromGlobal  first global block to write
     * @param toGlobal    global block after the last to write
     */
    public static void fill(KvCacheView cache, BufferManager copier, int[] blockIds, CacheState state, int rank,
                            long requestId, int totalBlocks, int fromGlobal, int toGlobal) {
        Objects.requireNonNull(cache, "cache");
        Objects.requireNonNull(copier, "copier");
        if (!onDevice(cache)) {
            fill(cache, blockIds, state, rank, requestId, totalBlocks, fromGlobal, toGlobal);
            return;
        }
        Walk w = Walk.main(cache, blockIds, state, rank, requestId, totalBlocks);
        mirrored(cache, copier, blockIds, w, null, fromGlobal, toGlobal);
    }

    /**
     * {@link #verify(KvCacheView, int[], CacheState, int, long, int)} for a pool in any memory.
     *
     * @param cache       the rank's KV pool
     * @param copier      a manager that copies between the pool's memory and host memory
     * @param blockIds    the rank's blocks of the request, in order
     * @param state       the rank's instance cache state
     * @param rank        the rank index in its instance
     * @param requestId   the request id
     * @param totalBlocks blocks of the whole request (all CP ranks)
     * @return what was found
     */
    public static Result verify(KvCacheView cache, BufferManager copier, int[] blockIds, CacheState state, int rank,
                                long requestId, int totalBlocks) {
        return verify(cache, copier, blockIds, state, rank, requestId, totalBlocks, 0, Integer.MAX_VALUE);
    }

    /**
     * {@link #verify(KvCacheView, int[], CacheState, int, long, int, int, int)} for a pool in any memory; only the
     * blocks in {@code [fromGlobal, toGlobal)} are copied from the device.
     *
     * @param cache       the rank's KV pool
     * @param copier      a manager that copies between the pool's memory and host memory
     * @param blockIds    the rank's blocks of the request, in order
     * @param state       the rank's instance cache state
     * @param rank        the rank index in its instance
     * @param requestId   the request id whose pattern is expected
     * @param totalBlocks blocks of the whole request (all CP ranks)
     * @param fromGlobal  first global block to check
     * @param toGlobal    global block after the last to check
     * @return what was found
     */
    public static Result verify(KvCacheView cache, BufferManager copier, int[] blockIds, CacheState state, int rank,
                                long requestId, int totalBlocks, int fromGlobal, int toGlobal) {
        Objects.requireNonNull(cache, "cache");
        Objects.requireNonNull(copier, "copier");
        if (!onDevice(cache)) {
            return verify(cache, blockIds, state, rank, requestId, totalBlocks, fromGlobal, toGlobal);
        }
        Walk w = Walk.main(cache, blockIds, state, rank, requestId, totalBlocks);
        Result r = new Result();
        mirrored(cache, copier, blockIds, w, r, fromGlobal, toGlobal);
        return r;
    }

    /** @return whether the pool's memory is on the device (the CPU must not touch it) */
    private static boolean onDevice(KvCacheView cache) {
        return cache.regionCount() > 0 && cache.region(0).kind() == MemoryKind.DEVICE;
    }

    private static void requireHost(KvCacheView cache) {
        if (onDevice(cache)) {
            throw new IllegalArgumentException("the pool " + cache + " is DEVICE memory, which the CPU cannot read"
                    + " or write: use the KvPattern overload that takes the pool's BufferManager (host mirror)");
        }
    }

    /**
     * Runs a walk on a host mirror of the blocks: device to mirror first when verifying, mirror to device after
     * filling; only the blocks of global index {@code [from, to)} travel.
     */
    private static void mirrored(KvCacheView device, BufferManager copier, int[] blockIds, Walk w, Result result,
                                 int from, int to) {
        int n = blockIds.length;
        boolean[] sel = new boolean[n];
        int selected = 0;
        for (int i = 0; i < n; i++) {
            Objects.checkIndex(blockIds[i], device.blockCount());
            int global = w.firstBlock + i;
            sel[i] = global >= from && global < to;
            selected += sel[i] ? 1 : 0;
        }
        if (selected == 0) {
            return;
        }
        int[] positions = new int[n];
        for (int i = 0; i < n; i++) {
            positions[i] = i;
        }
        try (HostBufferManager host = new HostBufferManager();
             PagedKvCache mirror = new PagedKvCache(host, device.layout(), device.poolLayout(), MemoryKind.HOST, n)) {
            if (result != null) {
                copyRuns(device, mirror, copier, blockIds, sel, false);
            }
            w.run(mirror, positions, blockIds, result, from, to);
            if (result == null) {
                copyRuns(device, mirror, copier, blockIds, sel, true);
            }
        }
    }

    /**
     * Copies the selected blocks between the device pool ({@code ids[i]}) and the mirror (block {@code i}): one copy
     * per run adjacent in both pools, per whole block (block pools) or per (layer, kv, segment) plane (layer pools).
     */
    private static void copyRuns(KvCacheView device, KvCacheView mirror, BufferManager copier, int[] ids,
                                 boolean[] sel, boolean toDevice) {
        PoolGeometry dg = device.geometry();
        PoolGeometry mg = mirror.geometry();
        BlockLayout l = device.layout();
        boolean layer = dg.layerKind();
        int layers = layer ? l.localLayers() : 1;
        int kvs = layer ? l.kvFactor() : 1;
        int segs = layer ? dg.segments() : 1;
        int n = ids.length;
        for (int layerIndex = 0; layerIndex < layers; layerIndex++) {
            for (int kv = 0; kv < kvs; kv++) {
                for (int s = 0; s < segs; s++) {
                    long unit = layer ? dg.segmentPlaneBytes(s) : l.blockBytes();
                    int i = 0;
                    while (i < n) {
                        if (!sel[i]) {
                            i++;
                            continue;
                        }
                        int j = i + 1;
                        while (j < n && sel[j] && dg.adjacent(ids[j - 1], ids[j]) && mg.adjacent(j - 1, j)) {
                            j++;
                        }
                        MemoryBuffer dr = device.region(dg.region(ids[i], layerIndex, kv, s));
                        long doff = dg.planeOffset(ids[i], layerIndex, kv, s);
                        MemoryBuffer mr = mirror.region(mg.region(i, layerIndex, kv, s));
                        long moff = mg.planeOffset(i, layerIndex, kv, s);
                        long bytes = unit * (j - i);
                        if (toDevice) {
                            copier.copy(mr, moff, dr, doff, bytes);
                        } else {
                            copier.copy(dr, doff, mr, moff, bytes);
                        }
                        i = j;
                    }
                }
            }
        }
        copier.synchronize();
    }

    /**
     * Writes the pattern into the indexer-K pool: {@code cache.indexerKCache()} when it has one, else
     * {@code cache} itself is taken to be the indexer pool.
     *
     * @param cache       the rank's KV pool or its indexer pool
     * @param blockIds    the rank's blocks of the request, in order
     * @param state       the rank's instance cache state
     * @param rank        the rank index in its instance
     * @param requestId   the request id
     * @param totalBlocks blocks of the whole request
     */
    public static void fillIndexer(KvCacheView cache, int[] blockIds, CacheState state, int rank, long requestId,
                                   int totalBlocks) {
        fillIndexer(cache, blockIds, state, rank, requestId, totalBlocks, 0, Integer.MAX_VALUE);
    }

    /**
     * Writes the indexer-K pattern into the blocks whose global index is in {@code [fromGlobal, toGlobal)}.
     *
     * @param cache       the rank's KV pool or its indexer pool
     * @param blockIds    the rank's blocks of the request, in order
     * @param state       the rank's instance cache state
     * @param rank        the rank index in its instance
     * @param requestId   the request id whose pattern is written
     * @param totalBlocks blocks of the whole request
     * @param fromGlobal  first global block to write
     * @param toGlobal    global block after the last to write
     */
    public static void fillIndexer(KvCacheView cache, int[] blockIds, CacheState state, int rank, long requestId,
                                   int totalBlocks, int fromGlobal, int toGlobal) {
        KvCacheView pool = indexerPool(cache);
        requireHost(pool);
        Walk.indexer(pool, blockIds, state, rank, requestId, totalBlocks).run(pool, blockIds, blockIds, null,
                fromGlobal, toGlobal);
    }

    /**
     * Checks the indexer-K pool (see {@link #fillIndexer}).
     *
     * @param cache       the rank's KV pool or its indexer pool
     * @param blockIds    the rank's blocks of the request, in order
     * @param state       the rank's instance cache state
     * @param rank        the rank index in its instance
     * @param requestId   the request id
     * @param totalBlocks blocks of the whole request
     * @return what was found
     */
    public static Result verifyIndexer(KvCacheView cache, int[] blockIds, CacheState state, int rank,
                                       long requestId, int totalBlocks) {
        KvCacheView pool = indexerPool(cache);
        requireHost(pool);
        Result r = new Result();
        Walk.indexer(pool, blockIds, state, rank, requestId, totalBlocks).run(pool, blockIds, blockIds, r, 0,
                Integer.MAX_VALUE);
        return r;
    }

    private static KvCacheView indexerPool(KvCacheView cache) {
        Objects.requireNonNull(cache, "cache");
        KvCacheView idx = cache.indexerKCache();
        return idx != null ? idx : cache;
    }

    /** The outcome of a {@link #verify}. */
    public static final class Result {
        private long checked;
        private long mismatches;
        private String first;

        Result() {
        }

        /** @return whether every checked element matched */
        public boolean ok() {
            return mismatches == 0;
        }

        /** @return elements that differed */
        public long mismatches() {
            return mismatches;
        }

        /** @return elements checked */
        public long checkedElements() {
            return checked;
        }

        /** @return the first mismatch with its coordinates, expected and actual bytes; {@code null} when ok */
        public String firstMismatch() {
            return first;
        }

        /**
         * Fails when anything differed.
         *
         * @return this result
         * @throws AssertionError naming the mismatch count and the first mismatch
         */
        public Result assertOk() {
            if (mismatches != 0) {
                throw new AssertionError(this.toString());
            }
            return this;
        }

        /**
         * Adds another result (e.g. of another rank) to this one.
         *
         * @param other the other result
         * @return this result
         */
        public Result merge(Result other) {
            checked += other.checked;
            mismatches += other.mismatches;
            if (first == null) {
                first = other.first;
            }
            return this;
        }

        /** @return a fresh empty result, to {@link #merge} others into */
        public static Result empty() {
            return new Result();
        }

        @Override
        public String toString() {
            return mismatches == 0 ? "KvPattern OK: " + checked + " elements"
                    : "KvPattern: " + mismatches + " of " + checked + " elements differ; first: " + first;
        }
    }

    /** One pass over a rank's blocks; state computed once per call. */
    private static final class Walk {
        final BlockLayout layout;
        final long requestId;
        final int firstLayer;
        final int firstHead;
        final int kvBase;
        final int firstBlock;
        final int rank;

        private Walk(BlockLayout layout, long requestId, int firstLayer, int firstHead, int kvBase, int firstBlock,
                     int rank) {
            this.layout = layout;
            this.requestId = requestId;
            this.firstLayer = firstLayer;
            this.firstHead = firstHead;
            this.kvBase = kvBase;
            this.firstBlock = firstBlock;
            this.rank = rank;
        }

        static Walk main(KvCacheView cache, int[] blockIds, CacheState state, int rank, long requestId,
                         int totalBlocks) {
            Objects.requireNonNull(state, "state");
            BlockLayout expected = BlockLayout.of(state, rank);
            if (!expected.equals(cache.layout())) {
                throw new IllegalArgumentException("cache layout " + cache.layout() + " is not rank " + rank
                        + "'s layout " + expected + " of " + state);
            }
            return create(cache.layout(), blockIds, state, rank, requestId, totalBlocks,
                    state.firstGlobalHead(state.tpRank(rank)), 0);
        }

        static Walk indexer(KvCacheView pool, int[] blockIds, CacheState state, int rank, long requestId,
                            int totalBlocks) {
            Objects.requireNonNull(state, "state");
            BlockLayout l = pool.layout();
            int layers = state.layerCount(state.ppRank(rank));
            if (l.localLayers() != layers || l.kvFactor() != 1) {
                throw new IllegalArgumentException("indexer-K layout " + l + " does not hold rank " + rank + "'s "
                        + layers + " layers with kvFactor 1");
            }
            return create(l, blockIds, state, rank, requestId, totalBlocks, 0, INDEXER_KV);
        }

        private static Walk create(BlockLayout layout, int[] blockIds, CacheState state, int rank, long requestId,
                                   int totalBlocks, int firstHead, int kvBase) {
            Objects.requireNonNull(blockIds, "blockIds");
            if (layout.elementBytes() > 8) {
                throw new IllegalArgumentException("KvPattern covers elements up to 8 bytes, not "
                        + layout.elementBytes());
            }
            int cp = state.contextParallelism();
            int cpRank = state.cpRank(rank);
            int firstBlock = BlockDistribution.firstGlobalBlock(totalBlocks, cp, cpRank);
            if (totalBlocks < 0 || firstBlock + blockIds.length > totalBlocks) {
                throw new IllegalArgumentException("rank " + rank + " (cp " + cpRank + "/" + cp + ") has "
                        + blockIds.length + " blocks from global block " + firstBlock + ", beyond the request's "
                        + totalBlocks);
            }
            return new Walk(layout, requestId, state.firstLayer(state.ppRank(rank)), firstHead, kvBase, firstBlock,
                    rank);
        }

        /**
         * Fills when {@code result} is null, else verifies into it; only global blocks in [from, to). Block
         * {@code blockIds[i]} of {@code cache} is reported as {@code names[i]} (a mirror's positions stand for the
         * device pool's ids).
         */
        void run(KvCacheView cache, int[] blockIds, int[] names, Result result, int from, int to) {
            if (cache.poolLayout().kind() == PoolLayout.Kind.BLOCK) {
                runBlocks(cache, blockIds, names, result, from, to);
            } else {
                runLayers(cache, blockIds, names, result, from, to);
            }
        }

        private void runBlocks(KvCacheView cache, int[] blockIds, int[] names, Result result, int from, int to) {
            int tpb = layout.tokensPerBlock();
            int dim = layout.sizePerHead();
            int eb = layout.elementBytes();
            int run = tpb * dim;
            long blockBytes = layout.blockBytes();
            long[] td = new long[run];
            long rPart = requestId * C_R;
            for (int i = 0; i < blockIds.length; i++) {
                int global = firstBlock + i;
                if (global < from || global >= to) {
                    continue;
                }
                MemoryBuffer block = cache.block(blockIds[i]);
                if (block.size() < blockBytes) {
                    // Raw stores below: never write past a buffer the cache handed out.
                    throw new IllegalArgumentException("block " + blockIds[i] + " has " + block.size()
                            + " bytes, its layout " + layout + " needs " + blockBytes);
                }
                long blockAddr = block.address();
                long token0 = (long) global * tpb;
                // td[t*dim + d] = t_abs*C_T + d*C_D: the part of the key that varies inside one head's run.
                int j = 0;
                for (int t = 0; t < tpb; t++) {
                    long tk = (token0 + t) * C_T;
                    for (int d = 0; d < dim; d++) {
                        td[j++] = tk + d * C_D;
                    }
                }
                for (int layer = 0; layer < layout.localLayers(); layer++) {
                    for (int kv = 0; kv < layout.kvFactor(); kv++) {
                        for (int head = 0; head < layout.localHeads(); head++) {
                            long base = rPart + (firstLayer + layer) * C_L + (kvBase + kv) * C_K
                                    + (firstHead + head) * C_H;
                            long off = layout.offset(layer, kv, head, 0, 0);
                            long addr = blockAddr + off;
                            if (result == null) {
                                fillRun(addr, base, td, eb);
                            } else {
                                result.checked += run;
                                if (verifyRun(addr, base, td, eb)) {
                                    report(result, addr, base, td, eb, null, names[i], i, layer, kv, head, -1,
                                            token0, 0, dim, "block pool, block byte " + off);
                                }
                            }
                        }
                    }
                }
            }
        }

        /**
         * Layer pools: per (block, layer, kv, segment), the block's slice of the plane segment in its region. The
         * contiguous runs are one head's {@code [token][w]} (layer-hnd) or one token's {@code [head][w]}
         * (layer-nhd); the varying part of the key is precomputed per run shape, as for block pools.
         */
        private void runLayers(KvCacheView cache, int[] blockIds, int[] names, Result result, int from, int to) {
            PoolGeometry g = cache.geometry();
            int tpb = layout.tokensPerBlock();
            int heads = layout.localHeads();
            int eb = layout.elementBytes();
            boolean nhd = g.tokensOuter();
            int segs = g.segments();
            long[][] tab = new long[segs][];
            for (int s = 0; s < segs; s++) {
                int w = g.segmentDims(s);
                tab[s] = new long[(nhd ? heads : tpb) * w];
                if (nhd) {
                    // hd[h*w + x] = h*C_H + (d0 + x)*C_D, the same for every block and token.
                    int j = 0;
                    for (int h = 0; h < heads; h++) {
                        for (int x = 0; x < w; x++) {
                            tab[s][j++] = h * C_H + (g.segmentFirstDim(s) + x) * C_D;
                        }
                    }
                }
            }
            long rPart = requestId * C_R;
            for (int i = 0; i < blockIds.length; i++) {
                int global = firstBlock + i;
                if (global < from || global >= to) {
                    continue;
                }
                int b = blockIds[i];
                Objects.checkIndex(b, cache.blockCount());
                long token0 = (long) global * tpb;
                if (!nhd) {
                    for (int s = 0; s < segs; s++) {
                        int w = g.segmentDims(s);
                        int d0 = g.segmentFirstDim(s);
                        int j = 0;
                        for (int t = 0; t < tpb; t++) {
                            long tk = (token0 + t) * C_T;
                            for (int x = 0; x < w; x++) {
                                tab[s][j++] = tk + (d0 + x) * C_D;
                            }
                        }
                    }
                }
                for (int layer = 0; layer < layout.localLayers(); layer++) {
                    for (int kv = 0; kv < layout.kvFactor(); kv++) {
                        long lk = rPart + (firstLayer + layer) * C_L + (kvBase + kv) * C_K;
                        for (int s = 0; s < segs; s++) {
                            int regionIndex = g.region(b, layer, kv, s);
                            MemoryBuffer region = cache.region(regionIndex);
                            long plane = g.planeOffset(b, layer, kv, s);
                            if (region.size() < plane + g.segmentPlaneBytes(s)) {
                                throw new IllegalArgumentException("region " + regionIndex + " of " + region.size()
                                        + " bytes ends before block " + b + "'s plane segment at " + plane + " ("
                                        + g + ")");
                            }
                            long addr0 = region.address() + plane;
                            int outer = nhd ? tpb : heads;
                            long stride = nhd ? g.tokenStride(s) : g.headStride(s);
                            int runLen = tab[s].length;
                            for (int o = 0; o < outer; o++) {
                                long base = nhd ? lk + (token0 + o) * C_T + firstHead * C_H
                                        : lk + (firstHead + o) * C_H;
                                long addr = addr0 + o * stride;
                                if (result == null) {
                                    fillRun(addr, base, tab[s], eb);
                                } else {
                                    result.checked += runLen;
                                    if (verifyRun(addr, base, tab[s], eb)) {
                                        report(result, addr, base, tab[s], eb, g, names[i], i, layer, kv, nhd ? -1 : o,
                                                nhd ? o : -1, token0, g.segmentFirstDim(s), g.segmentDims(s),
                                                g.poolLayout() + " pool, region " + regionIndex + " byte "
                                                        + (plane + o * stride));
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }

        /**
         * Elements per 64-bit word for a width: stores and loads go a word at a time (little-endian, so the
         * bytes are exactly those of element-wise stores).
         */
        private static int perWord(int eb) {
            return eb == 1 || eb == 2 || eb == 4 ? 8 / eb : 0;
        }

        /** The word holding elements {@code j .. j + 8/eb - 1} of a run. */
        private static long word(long base, long[] td, int j, int eb) {
            switch (eb) {
                case 1:
                    return (mix(base + td[j]) & 0xFF)
                            | (mix(base + td[j + 1]) & 0xFF) << 8
                            | (mix(base + td[j + 2]) & 0xFF) << 16
                            | (mix(base + td[j + 3]) & 0xFF) << 24
                            | (mix(base + td[j + 4]) & 0xFF) << 32
                            | (mix(base + td[j + 5]) & 0xFF) << 40
                            | (mix(base + td[j + 6]) & 0xFF) << 48
                            | mix(base + td[j + 7]) << 56;
                case 2:
                    return (mix(base + td[j]) & 0xFFFF)
                            | (mix(base + td[j + 1]) & 0xFFFF) << 16
                            | (mix(base + td[j + 2]) & 0xFFFF) << 32
                            | mix(base + td[j + 3]) << 48;
                default:
                    return (mix(base + td[j]) & 0xFFFF_FFFFL) | mix(base + td[j + 1]) << 32;
            }
        }

        private static void fillRun(long addr, long base, long[] td, int eb) {
            int n = td.length;
            int j = 0;
            int k = perWord(eb);
            if (eb == 8) {
                for (; j < n; j++) {
                    MemoryAccess.putLong(addr + 8L * j, mix(base + td[j]));
                }
                return;
            }
            if (k > 0) {
                for (; j + k <= n; j += k) {
                    MemoryAccess.putLong(addr + (long) eb * j, word(base, td, j, eb));
                }
            }
            for (; j < n; j++) {
                long v = mix(base + td[j]);
                long a = addr + (long) eb * j;
                for (int b = 0; b < eb; b++) {
                    MemoryAccess.putByte(a + b, (byte) (v >>> (8 * b)));
                }
            }
        }

        /** @return whether any element of the run differs (the slow path then counts and describes them) */
        private static boolean verifyRun(long addr, long base, long[] td, int eb) {
            int n = td.length;
            int j = 0;
            int k = perWord(eb);
            long diff = 0;
            if (eb == 8) {
                for (; j < n; j++) {
                    diff |= MemoryAccess.getLong(addr + 8L * j) ^ mix(base + td[j]);
                }
                return diff != 0;
            }
            if (k > 0) {
                for (; j + k <= n; j += k) {
                    diff |= MemoryAccess.getLong(addr + (long) eb * j) ^ word(base, td, j, eb);
                }
            }
            long mask = mask(eb);
            for (; j < n; j++) {
                diff |= readElement(addr + (long) eb * j, eb) ^ (mix(base + td[j]) & mask);
            }
            return diff != 0;
        }

        /**
         * Slow path, only for runs that differ: counts them and describes the first. A run is one head's
         * {@code [token][w]} ({@code fixedHead >= 0}) or one token's {@code [head][w]} ({@code fixedToken >= 0}),
         * {@code w} dims from {@code d0}; {@code where} names the pool layout, region and byte of the run.
         */
        private void report(Result r, long addr, long base, long[] tab, int eb, PoolGeometry g, int blockId,
                            int blockIndex, int layer, int kv, int fixedHead, int fixedToken, long token0, int d0,
                            int w, String where) {
            long mask = mask(eb);
            for (int j = 0; j < tab.length; j++) {
                long actual = readElement(addr + (long) eb * j, eb);
                long expected = mix(base + tab[j]) & mask;
                if (actual != expected) {
                    r.mismatches++;
                    if (r.first == null) {
                        int t = fixedToken >= 0 ? fixedToken : j / w;
                        int head = fixedHead >= 0 ? fixedHead : j / w;
                        int d = d0 + j % w;
                        r.first = "request " + requestId + " rank " + rank + " block " + blockId + " (#" + blockIndex
                                + " of the rank's, global block " + (firstBlock + blockIndex) + "): layer "
                                + (firstLayer + layer) + " (local " + layer + ") kv " + (kvBase + kv) + " head "
                                + (firstHead + head) + " (local " + head + ") token " + (token0 + t) + " (in block "
                                + t + ") dim " + d + " (" + where + " + " + (long) eb * j + "): expected 0x"
                                + hex(expected, eb) + ", found 0x" + hex(actual, eb);
                    }
                }
            }
        }

        private static long mask(int eb) {
            return eb >= 8 ? -1L : (1L << (8 * eb)) - 1;
        }

        private static long readElement(long a, int eb) {
            long v = 0;
            for (int b = 0; b < eb; b++) {
                v |= (MemoryAccess.getByte(a + b) & 0xFFL) << (8 * b);
            }
            return v;
        }

        private static String hex(long v, int eb) {
            String s = Long.toHexString(v);
            int width = 2 * Math.min(eb, 8);
            return s.length() >= width ? s : "0".repeat(width - s.length()) + s;
        }
    }
}
