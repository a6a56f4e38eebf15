package dev.kvtransfer.formatter.support;

import dev.kvtransfer.api.format.PeerPool;
import dev.kvtransfer.api.layout.BlockLayout;
import dev.kvtransfer.api.layout.PoolGeometry;
import dev.kvtransfer.api.layout.PoolLayout;
import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.api.model.DataType;
import dev.kvtransfer.api.transport.RegionDescriptor;
import dev.kvtransfer.api.transport.WriteBatch;
import org.junit.jupiter.api.Test;

import java.util.ArrayList;
import java.util.EnumMap;
import java.util.List;
import java.util.Random;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/**
 * {@link WritePlan}: written direct or staged, the entries put every element of the part exactly where it belongs in
 * the receiver's pool for any pair of pool layouts (split latents with different rope sizes, head and layer subsets,
 * block pools of several blocks per region, consecutive and broken id runs), write no byte twice and nothing outside
 * the part; runs contiguous in both pools coalesce. {@link PeerWriteSink} splits entries at grant boundaries and
 * refuses what was not granted.
 */
class WritePlanTest {
    private static final byte UNTOUCHED = 0x5A;

    /** A pool of some geometry in heap memory, with a write count per byte. */
    private static final class Pool {
        final PoolGeometry g;
        final HeapMemory.Buf[] regions;
        final int[][] writes;

        Pool(HeapMemory mem, PoolGeometry g, int blocks) {
            this.g = g;
            this.regions = new HeapMemory.Buf[g.regionCount(blocks)];
            this.writes = new int[regions.length][];
            for (int r = 0; r < regions.length; r++) {
                regions[r] = mem.allocate(g.regionBytes(r, blocks), null);
                java.util.Arrays.fill(regions[r].bytes, UNTOUCHED);
                writes[r] = new int[regions[r].size];
            }
        }

        byte get(int b, int l, int kv, int h, int t, int d, int k) {
            return regions[g.regionOfElement(b, l, kv, d)].get(g.offset(b, l, kv, h, t, d) + k);
        }

        void put(int b, int l, int kv, int h, int t, int d, int k, byte v) {
            regions[g.regionOfElement(b, l, kv, d)].put(g.offset(b, l, kv, h, t, d) + k, v);
        }
    }

    private static byte value(int block, int layer, int kv, int head, int token, int dim, int k) {
        long z = block * 0x9E3779B97F4A7C15L + layer * 0xBF58476D1CE4E5B9L + kv * 0x94D049BB133111EBL
                + head * 0x2545F4914F6CDD1DL + token * 0x632BE59BD9B4E019L + dim * 0x85EBCA77C2B2AE63L + k * 31L;
        z = (z ^ (z >>> 30)) * 0xBF58476D1CE4E5B9L;
        z = (z ^ (z >>> 27)) * 0x94D049BB133111EBL;
        byte v = (byte) (z ^ (z >>> 31));
        return v == UNTOUCHED ? 0 : v;
    }

    private record Case(PoolGeometry sg, PoolGeometry rg, int[] sIds, int[] rIds, int sFirst, int rFirst, int blocks,
                        int sL0, int rL0, int layers, int sH0, int rH0, int heads, long minDirect, long chunk) {
        WritePlan plan() {
            return WritePlan.builder().sender(sg, sIds, sFirst, sL0, sH0).receiver(rg, rIds, rFirst, rL0, rH0)
                    .shape(blocks, layers, heads).policy(minDirect, chunk).build();
        }
    }

    private static PoolLayout pool(Random rnd, boolean mla, int dims) {
        PoolLayout.Kind k = PoolLayout.Kind.values()[rnd.nextInt(3)];
        if (mla && k != PoolLayout.Kind.BLOCK && rnd.nextBoolean()) {
            return new PoolLayout(k, 1 + rnd.nextInt(dims - 1));
        }
        return PoolLayout.of(k);
    }

    /** Block ids with some consecutive runs, distinct, below the pool size. */
    private static int[] ids(Random rnd, int n, int poolBlocks) {
        List<Integer> free = new ArrayList<>();
        for (int i = 0; i < poolBlocks; i++) {
            free.add(i);
        }
        int[] out = new int[n];
        int i = 0;
        while (i < n) {
            int start = free.get(rnd.nextInt(free.size()));
            int len = 1 + rnd.nextInt(4);
            for (int j = 0; j < len && i < n && free.contains(start + j); j++) {
                out[i++] = start + j;
                free.remove(Integer.valueOf(start + j));
            }
        }
        return out;
    }

    private static Case randomCase(Random rnd) {
        boolean mla = rnd.nextInt(3) == 0;
        int dims = 2 + rnd.nextInt(5);
        int tokens = 1 + rnd.nextInt(4);
        int eb = new int[] {1, 2, 4}[rnd.nextInt(3)];
        int kvF = mla ? 1 : 1 + rnd.nextInt(2);
        int heads = mla ? 1 : 1 + rnd.nextInt(3);
        int sHs = mla ? 1 : heads * (1 + rnd.nextInt(2));
        int rHs = mla ? 1 : heads * (1 + rnd.nextInt(2));
        int layers = 1 + rnd.nextInt(3);
        int sLayers = layers + rnd.nextInt(2);
        int rLayers = layers + rnd.nextInt(2);
        int blocks = rnd.nextInt(6);
        int sBlocks = blocks + rnd.nextInt(2);
        int rBlocks = blocks + rnd.nextInt(2);
        int sPool = sBlocks + 1 + rnd.nextInt(8);
        int rPool = rBlocks + 1 + rnd.nextInt(8);
        PoolLayout sp = pool(rnd, mla, dims);
        PoolLayout rp = pool(rnd, mla, dims);
        BlockLayout sl = new BlockLayout(sLayers, kvF, sHs, tokens, dims, eb);
        BlockLayout rl = new BlockLayout(rLayers, kvF, rHs, tokens, dims, eb);
        PoolGeometry sg = PoolGeometry.of(sl, sp, sp.kind() == PoolLayout.Kind.BLOCK ? 1 + rnd.nextInt(3) : sPool);
        PoolGeometry rg = PoolGeometry.of(rl, rp, rp.kind() == PoolLayout.Kind.BLOCK ? 1 + rnd.nextInt(3) : rPool);
        long[] thresholds = {0, 64, Long.MAX_VALUE};
        long[] chunks = {1, 100, WritePlan.DEFAULT_STAGING_CHUNK};
        return new Case(sg, rg, ids(rnd, sBlocks, sPool), ids(rnd, rBlocks, rPool), sBlocks - blocks,
                rBlocks - blocks, blocks, rnd.nextInt(sLayers - layers + 1), rnd.nextInt(rLayers - layers + 1), layers,
                rnd.nextInt(sHs / heads) * heads, rnd.nextInt(rHs / heads) * heads, heads,
                thresholds[rnd.nextInt(3)], chunks[rnd.nextInt(3)]);
    }

    private static int poolBlocks(int[] ids) {
        int max = 0;
        for (int id : ids) {
            max = Math.max(max, id + 1);
        }
        return max;
    }

    @Test
    void everyPairOfLayoutsWritesEveryElementOfThePartOnceAndNothingElse() {
        Random rnd = new Random(13);
        EnumMap<WritePlan.Mode, Integer> modes = new EnumMap<>(WritePlan.Mode.class);
        for (int iter = 0; iter < 3000; iter++) {
            Case c = randomCase(rnd);
            run(c, modes, "case " + iter + " " + c);
        }
        assertThat(modes.keySet()).as("modes exercised").containsExactlyInAnyOrder(WritePlan.Mode.values());
    }

    /** Applies entries to the receiver pool, counting writes per byte; checks staged entries come from staging. */
    private static final class Applier implements WritePlan.Sink {
        final HeapMemory mem;
        final Pool dst;
        final MemoryBuffer staging;
        final boolean staged;
        int entries;
        int flushes;
        long bytes;

        Applier(HeapMemory mem, Pool dst, MemoryBuffer staging, boolean staged) {
            this.mem = mem;
            this.dst = dst;
            this.staging = staging;
            this.staged = staged;
        }

        @Override
        public void entry(MemoryBuffer source, long sourceOffset, int region, long regionOffset, long length) {
            assertThat(length).isPositive();
            if (staged) {
                assertThat(source).isSameAs(staging);
            }
            mem.copy(source, sourceOffset, dst.regions[region], regionOffset, length);
            for (long i = regionOffset; i < regionOffset + length; i++) {
                dst.writes[region][(int) i]++;
            }
            entries++;
            bytes += length;
        }

        @Override
        public void flush() {
            flushes++;
        }
    }

    private static void run(Case c, java.util.Map<WritePlan.Mode, Integer> modes, String what) {
        HeapMemory mem = new HeapMemory();
        Pool src = new Pool(mem, c.sg, poolBlocks(c.sIds) + 1);
        Pool dst = new Pool(mem, c.rg, poolBlocks(c.rIds) + 1);
        BlockLayout sl = c.sg.blockLayout();
        for (int i = 0; i < c.sIds.length; i++) {
            for (int l = 0; l < sl.localLayers(); l++) {
                for (int kv = 0; kv < sl.kvFactor(); kv++) {
                    for (int h = 0; h < sl.localHeads(); h++) {
                        for (int t = 0; t < sl.tokensPerBlock(); t++) {
                            for (int d = 0; d < sl.sizePerHead(); d++) {
                                for (int k = 0; k < sl.elementBytes(); k++) {
                                    int pi = i - c.sFirst;
                                    int pl = l - c.sL0;
                                    int ph = h - c.sH0;
                                    boolean in = pi >= 0 && pi < c.blocks && pl >= 0 && pl < c.layers && ph >= 0
                                            && ph < c.heads;
                                    src.put(c.sIds[i], l, kv, h, t, d, k, in ? value(pi, pl, kv, ph, t, d, k)
                                            : value(-1 - i, l, kv, h, t, d, k));
                                }
                            }
                        }
                    }
                }
            }
        }
        WritePlan p = c.plan();
        modes.merge(p.mode(), 1, Integer::sum);
        assertThat(p.bytes()).isEqualTo((long) c.blocks * c.layers * sl.kvFactor() * c.heads * sl.tokensPerBlock()
                * sl.sizePerHead() * sl.elementBytes());
        HeapMemory.Buf staging = p.staged() ? mem.allocate(p.stagingBytes(), null) : null;
        Applier a = new Applier(mem, dst, staging, p.staged());
        p.write(mem, i -> src.regions[i], staging, a);
        assertThat(a.entries).as(what + " " + p).isEqualTo(p.entries());
        assertThat(a.bytes).as(what).isEqualTo(p.bytes());
        if (c.minDirect == 0) {
            assertThat(p.mode()).as(what).isIn(WritePlan.Mode.DIRECT, WritePlan.Mode.EMPTY);
        }
        BlockLayout rl = c.rg.blockLayout();
        for (int i = 0; i < c.rIds.length; i++) {
            for (int l = 0; l < rl.localLayers(); l++) {
                for (int kv = 0; kv < rl.kvFactor(); kv++) {
                    for (int h = 0; h < rl.localHeads(); h++) {
                        for (int t = 0; t < rl.tokensPerBlock(); t++) {
                            for (int d = 0; d < rl.sizePerHead(); d++) {
                                for (int k = 0; k < rl.elementBytes(); k++) {
                                    int pi = i - c.rFirst;
                                    int pl = l - c.rL0;
                                    int ph = h - c.rH0;
                                    boolean in = pi >= 0 && pi < c.blocks && pl >= 0 && pl < c.layers && ph >= 0
                                            && ph < c.heads;
                                    byte got = dst.get(c.rIds[i], l, kv, h, t, d, k);
                                    byte want = in ? value(pi, pl, kv, ph, t, d, k) : UNTOUCHED;
                                    if (got != want) {
                                        throw new AssertionError(what + " " + p + ": receiver block #" + i + " layer "
                                                + l + " kv " + kv + " head " + h + " token " + t + " dim " + d
                                                + " byte " + k + (in ? " (in the part)" : " (outside)") + ": got "
                                                + got + ", want " + want);
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
        for (int r = 0; r < dst.writes.length; r++) {
            for (int i = 0; i < dst.writes[r].length; i++) {
                if (dst.writes[r][i] > 1) {
                    throw new AssertionError(what + " " + p + ": byte " + i + " of region " + r + " written "
                            + dst.writes[r][i] + " times");
                }
            }
        }
    }

    private static PoolGeometry g(BlockLayout l, PoolLayout p, int bpr) {
        return PoolGeometry.of(l, p, bpr);
    }

    private static int[] range(int from, int n) {
        int[] a = new int[n];
        for (int i = 0; i < n; i++) {
            a[i] = from + i;
        }
        return a;
    }

    private static final BlockLayout LLAMA = new BlockLayout(32, 2, 8, 16, 128, 2);
    private static final BlockLayout LLAMA_HALF = new BlockLayout(32, 2, 4, 16, 128, 2);

    @Test
    void matchingShardsGoPoolToPoolCoalescingRunsConsecutiveInBothPools() {
        // Layer pools on both sides: one entry per (layer, kv) and run of blocks consecutive on both sides.
        int[] s = range(10, 8);
        int[] r = {3, 4, 5, 6, 20, 21, 22, 23};
        WritePlan p = WritePlan.builder().sender(g(LLAMA, PoolLayout.LAYER_NHD, 64), s, 0, 0, 0)
                .receiver(g(LLAMA, PoolLayout.LAYER_NHD, 64), r, 0, 0, 0).shape(8, 32, 8)
                .policy(64 * 1024, WritePlan.DEFAULT_STAGING_CHUNK).build();
        assertThat(p.mode()).isEqualTo(WritePlan.Mode.DIRECT);
        assertThat(p.entries()).isEqualTo(32 * 2 * 2);
        // Block pools holding all blocks in one region each: one entry per run of blocks (all layers at once).
        WritePlan b = WritePlan.builder().sender(g(LLAMA, PoolLayout.BLOCK, 64), s, 0, 0, 0)
                .receiver(g(LLAMA, PoolLayout.BLOCK, 64), r, 0, 0, 0).shape(8, 32, 8)
                .policy(64 * 1024, WritePlan.DEFAULT_STAGING_CHUNK).build();
        assertThat(b.entries()).isEqualTo(2);
        // One block per region on the receiver: one entry per block.
        WritePlan one = WritePlan.builder().sender(g(LLAMA, PoolLayout.BLOCK, 64), s, 0, 0, 0)
                .receiver(g(LLAMA, PoolLayout.BLOCK, 1), r, 0, 0, 0).shape(8, 32, 8)
                .policy(64 * 1024, WritePlan.DEFAULT_STAGING_CHUNK).build();
        assertThat(one.entries()).isEqualTo(8);
    }

    @Test
    void aHeadShareOfABlockPoolIsOneRunPerLayerAndKvAtItsOffset() {
        // TP2 -> TP1 block pools (Mooncake's head ratio 2): each rank's 4 heads are contiguous in every (layer, kv)
        // plane of the destination block.
        WritePlan p = WritePlan.builder().sender(g(LLAMA_HALF, PoolLayout.BLOCK, 64), range(0, 4), 0, 0, 0)
                .receiver(g(LLAMA, PoolLayout.BLOCK, 64), range(0, 4), 0, 0, 4).shape(4, 32, 4)
                .policy(64 * 1024, WritePlan.DEFAULT_STAGING_CHUNK).build();
        assertThat(p.mode()).isEqualTo(WritePlan.Mode.DIRECT);
        assertThat(p.entries()).isEqualTo(4 * 32 * 2);
    }

    @Test
    void aHeadShareOfAnNhdRowIsWrittenPerTokenAndAStridedSourceIsStagedFirst() {
        // TP2 -> TP1 layer-nhd: the destination row of a token holds 8 heads; this rank's 4 are one run per token.
        WritePlan p = WritePlan.builder().sender(g(LLAMA_HALF, PoolLayout.LAYER_NHD, 64), range(0, 4), 0, 0, 0)
                .receiver(g(LLAMA, PoolLayout.LAYER_NHD, 64), range(0, 4), 0, 0, 4).shape(4, 32, 4)
                .policy(64 * 1024, WritePlan.DEFAULT_STAGING_CHUNK).build();
        assertThat(p.mode()).as("staging cannot join the per-token runs").isEqualTo(WritePlan.Mode.DIRECT);
        assertThat(p.entries()).isEqualTo(4 * 32 * 2 * 16);
        // TP1 -> TP2 layer-nhd: the source heads are strided per token, the destination plane is contiguous: staged,
        // one entry per (layer, kv) and run of blocks.
        WritePlan q = WritePlan.builder().sender(g(LLAMA, PoolLayout.LAYER_NHD, 64), range(0, 4), 0, 0, 4)
                .receiver(g(LLAMA_HALF, PoolLayout.LAYER_NHD, 64), range(8, 4), 0, 0, 0).shape(4, 32, 4)
                .policy(64 * 1024, WritePlan.DEFAULT_STAGING_CHUNK).build();
        assertThat(q.mode()).isEqualTo(WritePlan.Mode.STAGED);
        assertThat(q.entries()).isEqualTo(32 * 2);
        WritePlan forced = WritePlan.builder().sender(g(LLAMA, PoolLayout.LAYER_NHD, 64), range(0, 4), 0, 0, 4)
                .receiver(g(LLAMA_HALF, PoolLayout.LAYER_NHD, 64), range(8, 4), 0, 0, 0).shape(4, 32, 4)
                .policy(0, WritePlan.DEFAULT_STAGING_CHUNK).build();
        assertThat(forced.mode()).isEqualTo(WritePlan.Mode.DIRECT);
        assertThat(forced.entries()).isEqualTo(4 * 32 * 2 * 16);
    }

    @Test
    void stagedChunksAreFlushedBeforeTheBufferIsRefilled() {
        HeapMemory mem = new HeapMemory();
        BlockLayout l = new BlockLayout(2, 2, 4, 4, 8, 2);
        BlockLayout half = new BlockLayout(2, 2, 2, 4, 8, 2);
        PoolGeometry sg = g(l, PoolLayout.LAYER_NHD, 8);
        PoolGeometry rg = g(half, PoolLayout.LAYER_NHD, 8);
        long unit = 2L * 4 * 8 * 2;
        WritePlan p = WritePlan.builder().sender(sg, range(0, 4), 0, 0, 2).receiver(rg, range(0, 4), 0, 0, 0)
                .shape(4, 2, 2).policy(Long.MAX_VALUE, 3 * unit).build();
        assertThat(p.mode()).isEqualTo(WritePlan.Mode.STAGED);
        assertThat(p.stagingBytes()).isEqualTo(3 * unit);
        Pool src = new Pool(mem, sg, 8);
        Pool dst = new Pool(mem, rg, 8);
        HeapMemory.Buf staging = mem.allocate(p.stagingBytes(), null);
        List<String> log = new ArrayList<>();
        p.write(mem, i -> src.regions[i], staging, new WritePlan.Sink() {
            @Override
            public void entry(MemoryBuffer source, long sourceOffset, int region, long regionOffset, long length) {
                log.add("e" + sourceOffset + "+" + length);
                mem.copy(source, sourceOffset, dst.regions[region], regionOffset, length);
            }

            @Override
            public void flush() {
                log.add("flush");
            }
        });
        // 16 units (4 blocks x 2 layers x K,V) in chunks of 3: each chunk's runs coalesce where the destination
        // blocks are consecutive inside the chunk, then a flush; the last chunk is left to the caller.
        assertThat(log.stream().filter("flush"::equals).count()).isEqualTo(5);
        assertThat(log.get(log.size() - 1)).isNotEqualTo("flush");
        assertThat(staging.size()).isEqualTo(3 * unit);
        assertThatThrownBy(() -> p.write(mem, i -> src.regions[i], mem.allocate(unit, null), new WritePlan.Sink() {
            @Override
            public void entry(MemoryBuffer s, long so, int r, long ro, long n) {
            }

            @Override
            public void flush() {
            }
        })).isInstanceOf(IllegalArgumentException.class).hasMessageContaining("staging buffer");
    }

    @Test
    void emptyPartsHaveNoEntries() {
        WritePlan p = WritePlan.builder().sender(g(LLAMA, PoolLayout.LAYER_NHD, 64), range(0, 6), 6, 0, 0)
                .receiver(g(LLAMA, PoolLayout.BLOCK, 6), range(0, 6), 6, 0, 0).shape(0, 2, 8).build();
        assertThat(p.mode()).isEqualTo(WritePlan.Mode.EMPTY);
        assertThat(p.entries()).isZero();
        assertThat(p.bytes()).isZero();
    }

    private static RegionDescriptor descriptor(long id, long length) {
        return new RegionDescriptor("test://peer", id, 0x1000 * id, length, new byte[16]);
    }

    @Test
    void peerWriteSinkSplitsEntriesAtGrantBoundariesAndRefusesUngrantedBytes() {
        CacheState s = CacheState.builder().uniformKvHeads(1, 1).sizePerHead(4).tokensPerBlock(4)
                .dataType(DataType.INT8).build();
        // Block pool of 4 blocks of 32 bytes in one region; blocks 1 and 2 granted separately, block 3 not at all.
        PeerPool pool = new PeerPool(s, 0, new int[] {1, 2, 3}, 4, List.of(
                new PeerPool.Grant(0, 64, descriptor(8, 32)), new PeerPool.Grant(0, 32, descriptor(7, 32))));
        HeapMemory mem = new HeapMemory();
        MemoryBuffer src = mem.allocate(256, null);
        WriteBatch batch = new WriteBatch(2);
        List<String> writes = new ArrayList<>();
        PeerWriteSink sink = new PeerWriteSink(pool, batch, 3, b -> {
            for (int i = 0; i < b.size(); i++) {
                writes.add(b.target(i).regionId() + "@" + b.targetOffset(i) + "+" + b.length(i));
            }
            writes.add("|");
        });
        sink.entry(src, 0, 0, 40, 40); // [40, 80): block 1 from 8, block 2 up to 16
        sink.entry(src, 100, 0, 32, 4);
        sink.entry(src, 120, 0, 80, 8);
        assertThat(writes).containsExactly("7@8+24", "8@0+16", "7@0+4", "|");
        sink.flush();
        assertThat(writes).containsExactly("7@8+24", "8@0+16", "7@0+4", "|", "8@16+8", "|");
        assertThat(sink.bytes()).isEqualTo(52);
        assertThat(sink.entries()).isEqualTo(4);
        assertThat(sink.writes()).isEqualTo(2);
        assertThatThrownBy(() -> sink.entry(src, 0, 0, 96, 8)).isInstanceOf(IndexOutOfBoundsException.class)
                .hasMessageContaining("granted no write");
        assertThatThrownBy(() -> sink.entry(src, 0, 0, 88, 16)).isInstanceOf(IndexOutOfBoundsException.class)
                .hasMessageContaining("granted no write");
    }
}
