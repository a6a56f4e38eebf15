package dev.kvtransfer.testkit;

import dev.kvtransfer.api.layout.BlockDistribution;
import dev.kvtransfer.api.layout.BlockLayout;
import dev.kvtransfer.api.layout.PoolGeometry;
import dev.kvtransfer.api.layout.PoolLayout;
import dev.kvtransfer.api.model.AttentionType;
import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.api.model.DataType;
import dev.kvtransfer.core.cache.PagedKvCache;
import dev.kvtransfer.core.memory.HostBufferManager;
import dev.kvtransfer.core.memory.MemoryAccess;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;

import java.math.BigInteger;
import java.util.List;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

class KvPatternTest {
    private static final BigInteger MOD = BigInteger.ONE.shiftLeft(64);
    private final HostBufferManager mm = new HostBufferManager();

    @AfterEach
    void noLeaks() {
        mm.close();
    }

    /** DESIGN §6 written out again with BigInteger, independent of KvPattern's long arithmetic. */
    private static long reference(long r, int l, int k, int h, long t, int d) {
        BigInteger key = big(r).multiply(new BigInteger("9E3779B97F4A7C15", 16))
                .add(big(l).multiply(new BigInteger("BF58476D1CE4E5B9", 16)))
                .add(big(k).multiply(new BigInteger("94D049BB133111EB", 16)))
                .add(big(h).multiply(new BigInteger("2545F4914F6CDD1D", 16)))
                .add(big(t).multiply(new BigInteger("632BE59BD9B4E019", 16)))
                .add(big(d).multiply(new BigInteger("85EBCA77C2B2AE63", 16))).mod(MOD);
        BigInteger z = key;
        z = z.xor(z.shiftRight(30)).multiply(new BigInteger("BF58476D1CE4E5B9", 16)).mod(MOD);
        z = z.xor(z.shiftRight(27)).multiply(new BigInteger("94D049BB133111EB", 16)).mod(MOD);
        z = z.xor(z.shiftRight(31));
        return z.longValue();
    }

    private static BigInteger big(long v) {
        return BigInteger.valueOf(v).mod(MOD);
    }

    @Test
    void valueMatchesTheFormulaForKnownKeys() {
        // Literals computed outside Java (Python, arbitrary precision masked to 64 bits).
        assertThat(KvPattern.value(1, 0, 0, 0, 0, 0)).isEqualTo(0xe220a8397b1dcdafL); // SplitMix64(0)'s first
        assertThat(KvPattern.value(42, 3, 1, 5, 1000, 7)).isEqualTo(0x024fe3f066e5bebaL);
        assertThat(KvPattern.value(7, 79, 0, 7, 131071, 127)).isEqualTo(0x53e872730eb3feabL);
        assertThat(KvPattern.value(Long.MAX_VALUE, 2, 2, 0, 5, 3)).isEqualTo(0xe4af1776c1d0efc2L);
        long[][] keys = {{0, 0, 0, 0, 0, 0}, {-5, 1, 1, 3, 77, 9}, {123456789, 60, 1, 63, 1 << 20, 255}};
        for (long[] k : keys) {
            assertThat(KvPattern.value(k[0], (int) k[1], (int) k[2], (int) k[3], k[4], (int) k[5]))
                    .isEqualTo(reference(k[0], (int) k[1], (int) k[2], (int) k[3], k[4], (int) k[5]));
        }
    }

    private static CacheState state(int tp, int pp, int cp, DataType dt, int layers, int heads) {
        return CacheState.builder().uniformKvHeads(layers, heads).sizePerHead(16).tokensPerBlock(8)
                .tensorParallelism(tp).pipelineParallelism(pp).contextParallelism(cp).dataType(dt).build();
    }

    @ParameterizedTest
    @EnumSource(DataType.class)
    void fillWritesTheFormulaAtEveryGlobalCoordinate(DataType dt) {
        CacheState s = state(2, 2, 2, dt, 5, 4); // PP split 3,2; 2 heads per rank; CP 2
        int totalBlocks = 5;
        long req = 991;
        for (int rank = 0; rank < s.worldSize(); rank++) {
            BlockLayout layout = BlockLayout.of(s, rank);
            int cpRank = s.cpRank(rank);
            int n = BlockDistribution.count(totalBlocks, 2, cpRank);
            try (PagedKvCache cache = new PagedKvCache(mm, layout, 8)) {
                cache.allocate(1, 1); // so the request's blocks are not 0..n-1
                int[] ids = cache.allocate(req, n);
                KvPattern.fill(cache, ids, s, rank, req, totalBlocks);
                int firstBlock = BlockDistribution.firstGlobalBlock(totalBlocks, 2, cpRank);
                int eb = dt.bytes();
                for (int i = 0; i < n; i++) {
                    for (int l = 0; l < layout.localLayers(); l++) {
                        for (int kv = 0; kv < 2; kv++) {
                            for (int h = 0; h < layout.localHeads(); h++) {
                                for (int t = 0; t < 8; t += 3) {
                                    for (int d = 0; d < 16; d += 5) {
                                        long expect = reference(req, s.firstLayer(s.ppRank(rank)) + l, kv,
                                                s.firstGlobalHead(s.tpRank(rank)) + h, (firstBlock + i) * 8L + t, d);
                                        long at = cache.block(ids[i]).address() + layout.offset(l, kv, h, t, d);
                                        for (int b = 0; b < eb; b++) {
                                            assertThat(MemoryAccess.getByte(at + b))
                                                    .isEqualTo((byte) (expect >>> (8 * b)));
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
                KvPattern.Result r = KvPattern.verify(cache, ids, s, rank, req, totalBlocks).assertOk();
                assertThat(r.checkedElements()).isEqualTo((long) n * layout.blockBytes() / eb);
                assertThat(r.firstMismatch()).isNull();
                // Another request id, or the right data in the wrong place, does not verify.
                assertThat(KvPattern.verify(cache, ids, s, rank, req + 1, totalBlocks).ok()).isFalse();
            }
        }
    }

    @Test
    void aFlippedByteIsFoundAndReportedWithItsCoordinates() {
        CacheState s = state(2, 1, 1, DataType.FLOAT16, 4, 4);
        int rank = 1; // TP rank 1: global heads 2, 3
        try (PagedKvCache cache = new PagedKvCache(mm, BlockLayout.of(s, rank), 4)) {
            int[] ids = cache.allocate(5, 3);
            KvPattern.fill(cache, ids, s, rank, 5, 3);
            BlockLayout layout = cache.layout();
            long at = cache.block(ids[2]).address() + layout.offset(3, 1, 1, 6, 9) + 1; // high byte
            MemoryAccess.putByte(at, (byte) ~MemoryAccess.getByte(at));
            KvPattern.Result r = KvPattern.verify(cache, ids, s, rank, 5, 3);
            assertThat(r.ok()).isFalse();
            assertThat(r.mismatches()).isEqualTo(1);
            assertThat(r.checkedElements()).isEqualTo(3 * layout.blockBytes() / 2);
            assertThat(r.firstMismatch()).contains("request 5", "rank 1", "block " + ids[2], "global block 2",
                    "layer 3", "kv 1", "head 3 (local 1)", "token 22 (in block 6)", "dim 9", "block pool");
            assertThatThrownBy(r::assertOk).isInstanceOf(AssertionError.class).hasMessageContaining("dim 9")
                    .hasMessageContaining("1 of " + r.checkedElements());
        }
    }

    @Test
    void mlaUsesHeadZeroAndLatentLayout() {
        CacheState s = CacheState.builder().uniformKvHeads(3, 1).sizePerHead(576).tokensPerBlock(4)
                .tensorParallelism(2).attentionType(AttentionType.MLA).kvFactor(1).dataType(DataType.BFLOAT16)
                .build();
        try (PagedKvCache cache = new PagedKvCache(mm, BlockLayout.of(s, 1), 2)) {
            int[] ids = cache.allocate(3, 2);
            KvPattern.fill(cache, ids, s, 1, 3, 2);
            long expect = reference(3, 2, 0, 0, 7, 100);
            long at = cache.block(ids[1]).address() + cache.layout().offset(2, 0, 0, 3, 100);
            assertThat(MemoryAccess.getShort(at)).isEqualTo((short) expect);
            KvPattern.verify(cache, ids, s, 1, 3, 2).assertOk();
        }
    }

    @Test
    void indexerPoolUsesKvIndexTwo() {
        CacheState s = CacheState.builder().uniformKvHeads(4, 1).sizePerHead(64).tokensPerBlock(4)
                .pipelineParallelism(2).attentionType(AttentionType.MLA).kvFactor(1).dataType(DataType.FP8)
                .build();
        int rank = 1; // PP rank 1: layers 2, 3
        BlockLayout idx = new BlockLayout(2, 1, 1, 4, 132, 1);
        try (PagedKvCache cache = new PagedKvCache(mm, BlockLayout.of(s, rank), idx, 3)) {
            int[] ids = cache.allocate(9, 3);
            KvPattern.fill(cache, ids, s, rank, 9, 3);
            KvPattern.fillIndexer(cache, ids, s, rank, 9, 3);
            long at = cache.indexerKCache().block(ids[1]).address() + idx.offset(1, 0, 0, 2, 131);
            assertThat(MemoryAccess.getByte(at)).isEqualTo((byte) reference(9, 3, 2, 0, 6, 131));
            KvPattern.verifyIndexer(cache, ids, s, rank, 9, 3).assertOk();
            KvPattern.verifyIndexer(cache.indexerKCache(), ids, s, rank, 9, 3).assertOk();
            KvPattern.verify(cache, ids, s, rank, 9, 3).assertOk(); // the pools do not overlap
            MemoryAccess.putByte(at, (byte) ~MemoryAccess.getByte(at));
            assertThat(KvPattern.verifyIndexer(cache, ids, s, rank, 9, 3).firstMismatch())
                    .contains("layer 3", "kv 2", "token 6", "dim 131");
        }
    }

    @Test
    void wrongLayoutOrTooManyBlocksIsRefused() {
        CacheState s = state(1, 1, 2, DataType.FLOAT32, 2, 2);
        try (PagedKvCache cache = new PagedKvCache(mm, new BlockLayout(2, 2, 1, 8, 16, 4), 4)) {
            assertThatThrownBy(() -> KvPattern.fill(cache, new int[] {0}, s, 0, 1, 1))
                    .isInstanceOf(IllegalArgumentException.class).hasMessageContaining("layout");
        }
        try (PagedKvCache cache = new PagedKvCache(mm, BlockLayout.of(s, 1), 4)) {
            // CP rank 1 of a 3-block request holds global block 2 only.
            assertThatThrownBy(() -> KvPattern.fill(cache, new int[] {0, 1}, s, 1, 1, 3))
                    .isInstanceOf(IllegalArgumentException.class).hasMessageContaining("global block 2");
        }
    }

    private static PoolLayout[] poolLayouts(boolean mla) {
        return mla ? new PoolLayout[] {PoolLayout.BLOCK, PoolLayout.LAYER_NHD, PoolLayout.LAYER_HND,
                new PoolLayout(PoolLayout.Kind.LAYER_NHD, 5), new PoolLayout(PoolLayout.Kind.LAYER_HND, 3)}
                : new PoolLayout[] {PoolLayout.BLOCK, PoolLayout.LAYER_NHD, PoolLayout.LAYER_HND};
    }

    @ParameterizedTest
    @EnumSource(DataType.class)
    void everyPoolLayoutHoldsTheFormulaAtEveryGlobalCoordinate(DataType dt) {
        for (boolean mla : new boolean[] {false, true}) {
            CacheState.Builder b = CacheState.builder().uniformKvHeads(5, mla ? 1 : 4).sizePerHead(16)
                    .tokensPerBlock(4).tensorParallelism(2).pipelineParallelism(2).contextParallelism(2).dataType(dt);
            if (mla) {
                b.attentionType(AttentionType.MLA).kvFactor(1);
            }
            for (PoolLayout pl : poolLayouts(mla)) {
                CacheState s = b.poolLayout(pl).build();
                int totalBlocks = 5;
                long req = 77;
                for (int rank : new int[] {0, 7}) {
                    BlockLayout layout = BlockLayout.of(s, rank);
                    int n = BlockDistribution.count(totalBlocks, 2, s.cpRank(rank));
                    int first = BlockDistribution.firstGlobalBlock(totalBlocks, 2, s.cpRank(rank));
                    try (PagedKvCache cache = PagedKvCache.of(mm, s, rank, 8)) {
                        cache.allocate(1, 2);
                        int[] ids = cache.allocate(req, n);
                        KvPattern.fill(cache, ids, s, rank, req, totalBlocks);
                        PoolGeometry g = cache.geometry();
                        int eb = dt.bytes();
                        for (int i = 0; i < n; i++) {
                            for (int l = 0; l < layout.localLayers(); l++) {
                                for (int kv = 0; kv < layout.kvFactor(); kv++) {
                                    for (int h = 0; h < layout.localHeads(); h++) {
                                        for (int t = 0; t < 4; t++) {
                                            for (int d = 0; d < 16; d++) {
                                                long at = cache.region(g.regionOfElement(ids[i], l, kv, d)).address()
                                                        + g.offset(ids[i], l, kv, h, t, d);
                                                long want = KvPattern.value(req, s.firstLayer(s.ppRank(rank)) + l, kv,
                                                        s.firstGlobalHead(s.tpRank(rank)) + h,
                                                        (long) (first + i) * 4 + t, d);
                                                for (int k = 0; k < eb; k++) {
                                                    assertThat(MemoryAccess.getByte(at + k)).as("%s %s byte %d", pl,
                                                            dt, k).isEqualTo((byte) (want >>> (8 * k)));
                                                }
                                            }
                                        }
                                    }
                                }
                            }
                        }
                        KvPattern.Result r = KvPattern.verify(cache, ids, s, rank, req, totalBlocks).assertOk();
                        assertThat(r.checkedElements()).isEqualTo((long) n * layout.blockBytes() / eb);
                        assertThat(KvPattern.verify(cache, ids, s, rank, req + 1, totalBlocks).ok()).isFalse();
                    }
                }
            }
        }
    }

    @Test
    void aFlippedByteInALayerPoolIsReportedWithItsRegionAndCoordinates() {
        CacheState s = state(2, 1, 1, DataType.FLOAT16, 4, 4).toBuilder().poolLayout(PoolLayout.LAYER_NHD).build();
        int rank = 1;
        try (PagedKvCache cache = PagedKvCache.of(mm, s, rank, 4)) {
            int[] ids = cache.allocate(5, 3);
            KvPattern.fill(cache, ids, s, rank, 5, 3);
            PoolGeometry g = cache.geometry();
            long at = cache.region(g.region(ids[2], 3, 1, 0)).address() + g.offset(ids[2], 3, 1, 1, 6, 9) + 1;
            MemoryAccess.putByte(at, (byte) ~MemoryAccess.getByte(at));
            KvPattern.Result r = KvPattern.verify(cache, ids, s, rank, 5, 3);
            assertThat(r.mismatches()).isEqualTo(1);
            assertThat(r.firstMismatch()).contains("request 5", "rank 1", "block " + ids[2], "global block 2",
                    "layer 3", "kv 1", "head 3 (local 1)", "token 22 (in block 6)", "dim 9", "layer-nhd pool",
                    "region " + g.region(ids[2], 3, 1, 0));
        }
    }

    @Test
    void aRangeOfGlobalBlocksCanBeFilledAndCheckedAlone() {
        CacheState s = state(1, 1, 1, DataType.FLOAT16, 2, 2).toBuilder().poolLayout(PoolLayout.LAYER_HND).build();
        try (PagedKvCache cache = PagedKvCache.of(mm, s, 0, 6)) {
            int[] ids = cache.allocate(3, 5);
            KvPattern.fill(cache, ids, s, 0, 99, 5); // another request's pattern everywhere
            KvPattern.fill(cache, ids, s, 0, 3, 5, 2, 5); // then request 3's in global blocks 2..4
            assertThat(KvPattern.verify(cache, ids, s, 0, 3, 5, 2, 5).ok()).isTrue();
            assertThat(KvPattern.verify(cache, ids, s, 0, 99, 5, 0, 2).ok()).isTrue();
            KvPattern.Result all = KvPattern.verify(cache, ids, s, 0, 3, 5);
            assertThat(all.mismatches()).isEqualTo(2L * 2 * 2 * 2 * 8 * 16);
        }
    }

    @Test
    void mergeAddsResults() {
        CacheState s = state(1, 1, 1, DataType.INT8, 1, 1);
        try (PagedKvCache cache = new PagedKvCache(mm, BlockLayout.of(s, 0), 2)) {
            int[] ids = cache.allocate(1, 2);
            KvPattern.fill(cache, ids, s, 0, 1, 2);
            KvPattern.Result all = KvPattern.Result.empty();
            all.merge(KvPattern.verify(cache, ids, s, 0, 1, 2)).merge(KvPattern.verify(cache, ids, s, 0, 1, 2));
            assertThat(all.checkedElements()).isEqualTo(2 * 2 * 2 * 8 * 16);
            assertThat(all.ok()).isTrue();
            assertThat(all.toString()).contains("OK");
        }
    }

    /**
     * Throughput on a 128 MiB cache of each pool kind (llama3-8b-like block: 32 layers x K,V x 8 heads x 32 tokens
     * x 128 fp16 = 4 MiB). Prints GB/s to the test's output file (see testkit/README.md).
     */
    @ParameterizedTest
    @EnumSource(PoolLayout.Kind.class)
    void throughputOn128MiB(PoolLayout.Kind kind) {
        CacheState s = CacheState.builder().uniformKvHeads(32, 8).sizePerHead(128).tokensPerBlock(32)
                .dataType(DataType.FLOAT16).poolLayout(PoolLayout.of(kind)).build();
        BlockLayout layout = BlockLayout.of(s, 0);
        int blocks = (int) ((128L << 20) / layout.blockBytes());
        try (PagedKvCache cache = PagedKvCache.of(mm, s, 0, blocks)) {
            int[] ids = cache.allocate(1, blocks);
            double bytes = (double) blocks * layout.blockBytes();
            // Thread CPU time, not wall time: the number stays meaningful on a loaded machine.
            java.lang.management.ThreadMXBean cpu = java.lang.management.ManagementFactory.getThreadMXBean();
            long bestFill = Long.MAX_VALUE;
            long bestVerify = Long.MAX_VALUE;
            for (int rep = 0; rep < 2; rep++) {
                long t0 = cpu.getCurrentThreadCpuTime();
                KvPattern.fill(cache, ids, s, 0, 1 + rep, blocks);
                long t1 = cpu.getCurrentThreadCpuTime();
                KvPattern.Result r = KvPattern.verify(cache, ids, s, 0, 1 + rep, blocks);
                long t2 = cpu.getCurrentThreadCpuTime();
                r.assertOk();
                bestFill = Math.min(bestFill, t1 - t0);
                bestVerify = Math.min(bestVerify, t2 - t1);
            }
            System.out.printf("KvPattern 128 MiB fp16 %s pool: fill %.2f GB/s, verify %.2f GB/s (best of 2, one"
                    + " thread, thread CPU time)%n", kind, bytes / bestFill, bytes / bestVerify);
            assertThat(bestFill).isPositive();
        }
    }

    @Test
    void parallelIndependentRanksCanUseThePatternConcurrently() throws Exception {
        CacheState s = state(2, 1, 1, DataType.FLOAT32, 2, 2);
        try (PagedKvCache c0 = new PagedKvCache(mm, BlockLayout.of(s, 0), 2);
             PagedKvCache c1 = new PagedKvCache(mm, BlockLayout.of(s, 1), 2)) {
            List<PagedKvCache> caches = List.of(c0, c1);
            Thread[] ts = new Thread[2];
            Throwable[] errors = new Throwable[2];
            for (int r = 0; r < 2; r++) {
                int rank = r;
                ts[r] = new Thread(() -> {
                    try {
                        int[] ids = caches.get(rank).allocate(4, 2);
                        KvPattern.fill(caches.get(rank), ids, s, rank, 4, 2);
                        KvPattern.verify(caches.get(rank), ids, s, rank, 4, 2).assertOk();
                    } catch (Throwable e) {
                        errors[rank] = e;
                    }
                });
                ts[r].start();
            }
            for (Thread t : ts) {
                t.join(30_000);
                assertThat(t.isAlive()).isFalse();
            }
            assertThat(errors).containsOnlyNulls();
        }
    }
}
