package dev.kvtransfer.core.pattern;

import dev.kvtransfer.api.cache.KvCacheView;
import dev.kvtransfer.api.cache.RecurrentStateView;
import dev.kvtransfer.api.layout.BlockDistribution;
import dev.kvtransfer.api.layout.BlockLayout;
import dev.kvtransfer.api.layout.PoolGeometry;
import dev.kvtransfer.api.memory.BufferManager;
import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.memory.MemoryKind;
import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.core.cache.PagedKvCache;
import dev.kvtransfer.core.memory.HostBufferManager;

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
 * <p>The recurrent states of a hybrid model ({@link #fillRecurrent}, {@link #verifyRecurrent}) use the same formula
 * with the global recurrent layer as {@code l}: conv element {@code (channel c, entry w)} is
 * {@code (l, }{@value #CONV_KV}{@code , global channel, w, 0)}, SSM element {@code (head h, row p, column n)} is
 * {@code (l, }{@value #SSM_KV}{@code , global head, p, n)}; global channel / head = TP rank × per-rank count + local.
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
    /** The kv index in the key of conv-state elements of a recurrent layer. */
    public static final int CONV_KV = 3;
    /** The kv index in the key of SSM-state elements of a recurrent layer. */
    public static final int SSM_KV = 4;

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
        PatternWalk w = PatternWalk.main(cache, blockIds, state, rank, requestId, totalBlocks);
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
        PatternWalk w = PatternWalk.main(cache, blockIds, state, rank, requestId, totalBlocks);
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
        PatternWalk w = PatternWalk.main(cache, blockIds, state, rank, requestId, totalBlocks);
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
        PatternWalk w = PatternWalk.main(cache, blockIds, state, rank, requestId, totalBlocks);
        Result r = new Result();
        mirrored(cache, copier, blockIds, w, r, fromGlobal, toGlobal);
        return r;
    }

    /** @return whether the pool's memory is on the device (the CPU must not touch it) */
    static boolean onDevice(KvCacheView cache) {
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
    static void mirrored(KvCacheView device, BufferManager copier, int[] blockIds, PatternWalk w, Result result,
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
        PatternWalk.indexer(pool, blockIds, state, rank, requestId, totalBlocks).run(pool, blockIds, blockIds, null,
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
        PatternWalk.indexer(pool, blockIds, state, rank, requestId, totalBlocks).run(pool, blockIds, blockIds, r, 0,
                Integer.MAX_VALUE);
        return r;
    }

    /**
     * Writes the pattern into a rank's recurrent states of a request (host memory).
     *
     * @param states    the rank's recurrent states
     * @param state     the rank's instance cache state (declares the recurrent state)
     * @param rank      the rank index in its instance
     * @param requestId the context request id whose pattern is written
     */
    public static void fillRecurrent(RecurrentStateView states, CacheState state, int rank, long requestId) {
        fillRecurrent(states, state, rank, requestId, requestId);
    }

    /**
     * Writes another request's pattern (a poison) into a rank's recurrent states of a request.
     *
     * @param states    the rank's recurrent states
     * @param state     the rank's instance cache state
     * @param rank      the rank index in its instance
     * @param requestId the context request id whose states are written
     * @param patternId the request id whose pattern is written
     */
    public static void fillRecurrent(RecurrentStateView states, CacheState state, int rank, long requestId,
                                     long patternId) {
        RecurrentPattern.walk(states, state, rank, requestId, patternId, null);
    }

    /**
     * Checks every element of a rank's recurrent states of a request (see {@link #fillRecurrent}).
     *
     * @param states    the rank's recurrent states
     * @param state     the rank's instance cache state
     * @param rank      the rank index in its instance
     * @param requestId the context request id
     * @return what was found
     */
    public static Result verifyRecurrent(RecurrentStateView states, CacheState state, int rank, long requestId) {
        return verifyRecurrent(states, state, rank, requestId, requestId);
    }

    /**
     * Checks that a rank's recurrent states of a request hold another request's pattern (e.g. a poison nothing
     * may have overwritten).
     *
     * @param states    the rank's recurrent states
     * @param state     the rank's instance cache state
     * @param rank      the rank index in its instance
     * @param requestId the context request id whose states are read
     * @param patternId the request id whose pattern is expected
     * @return what was found
     */
    public static Result verifyRecurrent(RecurrentStateView states, CacheState state, int rank, long requestId,
                                         long patternId) {
        Result r = new Result();
        RecurrentPattern.walk(states, state, rank, requestId, patternId, r);
        return r;
    }

    /**
     * Writes the pattern into a rank's recurrent states of a request, in host or device memory (device states are
     * written through a host mirror with {@code copier}).
     *
     * @param states    the rank's recurrent states
     * @param copier    copies between host and the states' memory
     * @param state     the rank's instance cache state
     * @param rank      the rank index in its instance
     * @param requestId the context request id
     */
    public static void fillRecurrent(RecurrentStateView states, BufferManager copier, CacheState state, int rank,
                                     long requestId) {
        RecurrentPattern.walk(states, Objects.requireNonNull(copier, "copier"), state, rank, requestId, requestId,
                null);
    }

    /**
     * Checks every element of a rank's recurrent states of a request, in host or device memory (device states are
     * read through a host mirror with {@code copier}).
     *
     * @param states    the rank's recurrent states
     * @param copier    copies between host and the states' memory
     * @param state     the rank's instance cache state
     * @param rank      the rank index in its instance
     * @param requestId the context request id
     * @return what was found
     */
    public static Result verifyRecurrent(RecurrentStateView states, BufferManager copier, CacheState state, int rank,
                                         long requestId) {
        Result r = new Result();
        RecurrentPattern.walk(states, Objects.requireNonNull(copier, "copier"), state, rank, requestId, requestId, r);
        return r;
    }

    private static KvCacheView indexerPool(KvCacheView cache) {
        Objects.requireNonNull(cache, "cache");
        KvCacheView idx = cache.indexerKCache();
        return idx != null ? idx : cache;
    }

    /** The outcome of a {@link #verify}. */
    public static final class Result {
        // Package-private: PatternWalk counts into them.
        long checked;
        long mismatches;
        String first;

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
}
