package dev.kvtransfer.core.pattern;

import dev.kvtransfer.api.cache.KvCacheView;
import dev.kvtransfer.api.layout.BlockDistribution;
import dev.kvtransfer.api.layout.BlockLayout;
import dev.kvtransfer.api.layout.PoolGeometry;
import dev.kvtransfer.api.layout.PoolLayout;
import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.core.memory.MemoryAccess;

import java.util.Objects;

import static dev.kvtransfer.core.pattern.KvPattern.C_D;
import static dev.kvtransfer.core.pattern.KvPattern.C_H;
import static dev.kvtransfer.core.pattern.KvPattern.C_K;
import static dev.kvtransfer.core.pattern.KvPattern.C_L;
import static dev.kvtransfer.core.pattern.KvPattern.C_R;
import static dev.kvtransfer.core.pattern.KvPattern.C_T;
import static dev.kvtransfer.core.pattern.KvPattern.INDEXER_KV;
import static dev.kvtransfer.core.pattern.KvPattern.mix;

/** One pass of {@link KvPattern} over a rank's blocks (fill or verify); state computed once per call. */
final class PatternWalk {
    final BlockLayout layout;
    final long requestId;
    final int firstLayer;
    final int firstHead;
    final int kvBase;
    final int firstBlock;
    final int rank;
    /** Global layers walked: {@code [layerFrom, layerTo)} (all by default). */
    private int layerFrom = 0;
    private int layerTo = Integer.MAX_VALUE;

    /**
     * Restricts the walk to global layers {@code [from, to)} (a sliding window's run of layers).
     *
     * @return this walk
     */
    PatternWalk layers(int from, int to) {
        this.layerFrom = from;
        this.layerTo = to;
        return this;
    }

    private boolean skipLayer(int layer) {
        int g = firstLayer + layer;
        return g < layerFrom || g >= layerTo;
    }

    private PatternWalk(BlockLayout layout, long requestId, int firstLayer, int firstHead, int kvBase, int firstBlock,
                 int rank) {
        this.layout = layout;
        this.requestId = requestId;
        this.firstLayer = firstLayer;
        this.firstHead = firstHead;
        this.kvBase = kvBase;
        this.firstBlock = firstBlock;
        this.rank = rank;
    }

    static PatternWalk main(KvCacheView cache, int[] blockIds, CacheState state, int rank, long requestId,
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

    static PatternWalk indexer(KvCacheView pool, int[] blockIds, CacheState state, int rank, long requestId,
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

    private static PatternWalk create(BlockLayout layout, int[] blockIds, CacheState state, int rank, long requestId,
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
        return new PatternWalk(layout, requestId, state.firstLayer(state.ppRank(rank)), firstHead, kvBase, firstBlock,
                rank);
    }

    /**
     * Fills when {@code result} is null, else verifies into it; only global blocks in [from, to). Block
     * {@code blockIds[i]} of {@code cache} is reported as {@code names[i]} (a mirror's positions stand for the
     * device pool's ids).
     */
    void run(KvCacheView cache, int[] blockIds, int[] names, KvPattern.Result result, int from, int to) {
        if (cache.poolLayout().kind() == PoolLayout.Kind.BLOCK) {
            runBlocks(cache, blockIds, names, result, from, to);
        } else {
            runLayers(cache, blockIds, names, result, from, to);
        }
    }

    private void runBlocks(KvCacheView cache, int[] blockIds, int[] names, KvPattern.Result result, int from, int to) {
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
                if (skipLayer(layer)) {
                    continue;
                }
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
    private void runLayers(KvCacheView cache, int[] blockIds, int[] names, KvPattern.Result result, int from, int to) {
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
                if (skipLayer(layer)) {
                    continue;
                }
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
    private void report(KvPattern.Result r, long addr, long base, long[] tab, int eb, PoolGeometry g, int blockId,
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
