package dev.kvtransfer.core.cache;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.KvTransferException;
import dev.kvtransfer.api.cache.KvCacheView;
import dev.kvtransfer.api.layout.BlockLayout;
import dev.kvtransfer.api.layout.PoolGeometry;
import dev.kvtransfer.api.layout.PoolLayout;
import dev.kvtransfer.api.memory.BufferManager;
import dev.kvtransfer.api.memory.MemoryKind;
import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.api.model.DataType;
import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.core.memory.HostBufferManager;
import dev.kvtransfer.core.memory.MemoryAccess;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

class PagedKvCacheTest {
    private static final BlockLayout LAYOUT = new BlockLayout(2, 2, 4, 16, 32, 2); // 16 KiB blocks

    private final HostBufferManager mm = new HostBufferManager();

    @AfterEach
    void noLeaks() {
        mm.close(); // fails if the cache leaked a chunk
    }

    @Test
    void blocksAreDistinctFullSizeViews() {
        try (PagedKvCache cache = new PagedKvCache(mm, LAYOUT, 10)) {
            assertThat(cache.layout()).isEqualTo(LAYOUT);
            assertThat(cache.blockCount()).isEqualTo(10);
            assertThat(cache.indexerKCache()).isNull();
            Set<Long> addrs = new HashSet<>();
            for (int i = 0; i < 10; i++) {
                MemoryBuffer b = cache.block(i);
                assertThat(b.size()).isEqualTo(LAYOUT.blockBytes());
                assertThat(addrs.add(b.address())).isTrue();
                assertThat(cache.block(i)).isSameAs(b); // no garbage per call
            }
            assertThatThrownBy(() -> cache.block(10)).isInstanceOf(IndexOutOfBoundsException.class);
            assertThatThrownBy(() -> cache.block(-1)).isInstanceOf(IndexOutOfBoundsException.class);
        }
    }

    @Test
    void allocateFreeAndBlocksOf() {
        try (PagedKvCache cache = new PagedKvCache(mm, LAYOUT, 8)) {
            assertThat(cache.allocate(1, 3)).containsExactly(0, 1, 2);
            assertThat(cache.allocate(2, 2)).containsExactly(3, 4);
            assertThat(cache.freeBlocks()).isEqualTo(3);
            cache.free(1);
            assertThat(cache.freeBlocks()).isEqualTo(6);
            assertThat(cache.allocate(3, 4)).containsExactly(0, 1, 2, 5);
            assertThat(cache.allocate(2, 1)).containsExactly(6); // a request grows
            assertThat(cache.blocksOf(2)).containsExactly(3, 4, 6);
            assertThat(cache.blocksOf(3)).containsExactly(0, 1, 2, 5);
            assertThat(cache.allocate(4, 0)).isEmpty();
            assertThatThrownBy(() -> cache.blocksOf(1)).isInstanceOf(IllegalArgumentException.class)
                    .hasMessageContaining("request 1");
            cache.free(1); // idempotent
            int[] copy = cache.blocksOf(2);
            copy[0] = 99;
            assertThat(cache.blocksOf(2)).containsExactly(3, 4, 6);
        }
    }

    @Test
    void exhaustionNamesTheRequestAndFreeCountAndAllocatesNothing() {
        try (PagedKvCache cache = new PagedKvCache(mm, LAYOUT, 4)) {
            cache.allocate(7, 3);
            assertThatThrownBy(() -> cache.allocate(8, 2))
                    .isInstanceOfSatisfying(KvTransferException.class, e -> {
                        assertThat(e.code()).isEqualTo(ErrorCode.INTERNAL);
                        assertThat(e.requestId()).isEqualTo(8);
                    })
                    .hasMessageContaining("request 8").hasMessageContaining("needs 2")
                    .hasMessageContaining("1 of 4 are free");
            assertThat(cache.freeBlocks()).isEqualTo(1);
            assertThatThrownBy(() -> cache.blocksOf(8)).isInstanceOf(IllegalArgumentException.class);
        }
    }

    @Test
    void poolLargerThanTwoGibSpansChunksWithContiguousBlocks() {
        BlockLayout big = new BlockLayout(4, 2, 8, 64, 128, 2); // 1 MiB blocks
        long blockBytes = big.blockBytes();
        int n = (int) ((1L << 31) / blockBytes) + 1; // just over 2 GiB: three chunks
        try (PagedKvCache cache = new PagedKvCache(mm, big, n)) {
            assertThat((long) n * blockBytes).isGreaterThan(1L << 31);
            for (int i = 0; i < n; i++) {
                MemoryBuffer b = cache.block(i);
                MemoryAccess.putInt(b.address(), i);
                MemoryAccess.putInt(b.address() + blockBytes - 4, ~i);
            }
            for (int i = 0; i < n; i++) {
                MemoryBuffer b = cache.block(i);
                assertThat(MemoryAccess.getInt(b.address())).isEqualTo(i);
                assertThat(MemoryAccess.getInt(b.address() + blockBytes - 4)).isEqualTo(~i);
            }
            assertThat(mm.outstandingBuffers()).isEqualTo((int) ((n * blockBytes + PagedKvCache.MAX_CHUNK_BYTES - 1)
                    / PagedKvCache.MAX_CHUNK_BYTES));
        }
    }

    @Test
    void zeroLayerRanksHaveEmptyBlocks() {
        try (PagedKvCache cache = new PagedKvCache(mm, new BlockLayout(0, 2, 4, 16, 32, 2), 5)) {
            assertThat(cache.block(4).size()).isZero();
            assertThat(cache.allocate(1, 5)).hasSize(5);
        }
    }

    @Test
    void indexerPoolSharesBlockIds() {
        BlockLayout idx = new BlockLayout(2, 1, 1, 16, 132, 1);
        try (PagedKvCache cache = new PagedKvCache(mm, LAYOUT, idx, 6)) {
            KvCacheView ik = cache.indexerKCache();
            assertThat(ik.layout()).isEqualTo(idx);
            assertThat(ik.blockCount()).isEqualTo(6);
            assertThat(ik.indexerKCache()).isNull();
            int[] ids = cache.allocate(1, 2);
            for (int id : ids) {
                assertThat(ik.block(id).size()).isEqualTo(idx.blockBytes());
                assertThat(ik.block(id).address()).isNotEqualTo(cache.block(id).address());
            }
            assertThat(mm.outstandingBuffers()).isEqualTo(2);
        }
        assertThat(mm.outstandingBuffers()).isZero();
    }

    @Test
    void closeReleasesMemoryAndFurtherUseFails() {
        PagedKvCache cache = new PagedKvCache(mm, LAYOUT, 3);
        cache.allocate(1, 1);
        cache.close();
        cache.close();
        assertThat(mm.outstandingBuffers()).isZero();
        assertThatThrownBy(() -> cache.block(0)).isInstanceOf(IllegalStateException.class);
        assertThatThrownBy(() -> cache.allocate(2, 1)).isInstanceOf(IllegalStateException.class);
        assertThatThrownBy(() -> new PagedKvCache(mm, LAYOUT, 0)).isInstanceOf(IllegalArgumentException.class);
    }

    @Test
    void blockPoolRegionsAreItsChunksAndGeometryFindsEveryBlock() {
        try (PagedKvCache cache = new PagedKvCache(mm, LAYOUT, 5)) {
            assertThat(cache.poolLayout()).isEqualTo(PoolLayout.BLOCK);
            assertThat(cache.blocksPerRegion()).isEqualTo(5);
            assertThat(cache.regionCount()).isEqualTo(1);
            assertThat(cache.regions()).hasSize(1);
            assertThat(cache.region(0)).isSameAs(cache.region(0));
            PoolGeometry g = cache.geometry();
            for (int b = 0; b < 5; b++) {
                assertThat(cache.region(g.region(b, 1, 1, 0)).address() + g.planeOffset(b, 1, 1, 0))
                        .isEqualTo(cache.block(b).address() + LAYOUT.offset(1, 1, 0, 0, 0));
            }
            assertThat(cache.planeSegment(3, 1, 0, 0).address())
                    .isEqualTo(cache.block(3).address() + LAYOUT.offset(1, 0, 0, 0, 0));
            assertThat(cache.memoryKind()).isEqualTo(MemoryKind.HOST);
        }
    }

    @Test
    void layerPoolsHaveOneRegionPerLayerAndKvHoldingEveryBlock() {
        for (PoolLayout p : List.of(PoolLayout.LAYER_NHD, PoolLayout.LAYER_HND)) {
            try (PagedKvCache cache = new PagedKvCache(mm, LAYOUT, p, MemoryKind.HOST, 6)) {
                assertThat(cache.poolLayout()).isEqualTo(p);
                assertThat(cache.blocksPerRegion()).isEqualTo(6);
                assertThat(cache.regionCount()).isEqualTo(2 * 2);
                assertThat(mm.outstandingBuffers()).isEqualTo(4);
                for (MemoryBuffer r : cache.regions()) {
                    assertThat(r.size()).isEqualTo(6 * LAYOUT.planeBytes());
                }
                MemoryBuffer plane = cache.planeSegment(4, 1, 1, 0);
                assertThat(plane.address()).isEqualTo(cache.region(3).address() + 4 * LAYOUT.planeBytes());
                assertThat(plane.size()).isEqualTo(LAYOUT.planeBytes());
                assertThatThrownBy(() -> cache.block(0)).isInstanceOf(UnsupportedOperationException.class)
                        .hasMessageContaining(p.toString());
                assertThat(cache.allocate(1, 6)).containsExactly(0, 1, 2, 3, 4, 5);
            }
            assertThat(mm.outstandingBuffers()).isZero();
        }
    }

    @Test
    void splitLatentPoolHasNopeAndRopeRegionsPerLayer() {
        BlockLayout mla = new BlockLayout(3, 1, 1, 16, 576, 2);
        PoolLayout split = new PoolLayout(PoolLayout.Kind.LAYER_NHD, 64);
        try (PagedKvCache cache = new PagedKvCache(mm, mla, split, MemoryKind.HOST, 4)) {
            assertThat(cache.regionCount()).isEqualTo(3 * 2);
            assertThat(cache.region(0).size()).isEqualTo(4L * 16 * 512 * 2);
            assertThat(cache.region(1).size()).isEqualTo(4L * 16 * 64 * 2);
            assertThat(cache.planeSegment(2, 2, 0, 1).size()).isEqualTo(16 * 64 * 2);
        }
    }

    @Test
    void factoryTakesTheRanksBlockLayoutAndThePoolLayoutOfTheState() {
        CacheState s = CacheState.builder().uniformKvHeads(4, 4).sizePerHead(8).tokensPerBlock(16)
                .tensorParallelism(2).pipelineParallelism(2).dataType(DataType.FLOAT16)
                .poolLayout(PoolLayout.LAYER_HND).build();
        try (PagedKvCache cache = PagedKvCache.of(mm, s, 3, 5)) {
            assertThat(cache.layout()).isEqualTo(BlockLayout.of(s, 3));
            assertThat(cache.poolLayout()).isEqualTo(PoolLayout.LAYER_HND);
            assertThat(cache.regionCount()).isEqualTo(2 * 2);
        }
    }

    @Test
    void devicePoolsAreNeverTouchedByTheCpu() {
        List<Long> allocated = new ArrayList<>();
        BufferManager device = new BufferManager() {
            @Override
            public MemoryBuffer allocate(long bytes, MemoryKind kind) {
                assertThat(kind).isEqualTo(MemoryKind.DEVICE);
                allocated.add(bytes);
                MemoryBuffer host = mm.allocate(Math.max(1, bytes), MemoryKind.HOST);
                return new MemoryBuffer() {
                    @Override
                    public long address() {
                        throw new AssertionError("the CPU asked for a device address");
                    }

                    @Override
                    public long size() {
                        return bytes;
                    }

                    @Override
                    public MemoryKind kind() {
                        return MemoryKind.DEVICE;
                    }

                    @Override
                    public MemoryBuffer slice(long offset, long length) {
                        return this;
                    }

                    @Override
                    public java.nio.ByteBuffer asByteBuffer() {
                        throw new UnsupportedOperationException();
                    }

                    @Override
                    public void close() {
                        host.close();
                    }
                };
            }

            @Override
            public void copy(MemoryBuffer src, long so, MemoryBuffer dst, long d, long bytes) {
                throw new AssertionError("no copy expected");
            }

            @Override
            public void synchronize() {
            }

            @Override
            public void close() {
            }
        };
        try (PagedKvCache cache = new PagedKvCache(device, LAYOUT, PoolLayout.LAYER_NHD, MemoryKind.DEVICE, 3)) {
            assertThat(cache.memoryKind()).isEqualTo(MemoryKind.DEVICE);
            assertThat(allocated).hasSize(4).containsOnly(3 * LAYOUT.planeBytes());
            assertThat(cache.regions()).hasSize(4);
        }
        try (PagedKvCache cache = new PagedKvCache(device, LAYOUT, PoolLayout.BLOCK, MemoryKind.DEVICE, 3)) {
            assertThat(cache.region(0).kind()).isEqualTo(MemoryKind.DEVICE);
        }
    }

    @Test
    void zeroLayerLayerPoolsHaveNoRegions() {
        try (PagedKvCache cache = new PagedKvCache(mm, new BlockLayout(0, 2, 4, 16, 32, 2), PoolLayout.LAYER_NHD,
                MemoryKind.HOST, 5)) {
            assertThat(cache.regionCount()).isZero();
            assertThat(cache.allocate(1, 5)).hasSize(5);
        }
    }

    @Test
    void concurrentRequestsNeverShareBlocks() throws Exception {
        int threads = 8;
        try (PagedKvCache cache = new PagedKvCache(mm, LAYOUT, 64)) {
            ExecutorService ex = Executors.newFixedThreadPool(threads);
            Set<Integer> held = ConcurrentHashMap.newKeySet();
            try {
                List<Future<?>> fs = new ArrayList<>();
                for (int t = 0; t < threads; t++) {
                    long base = t * 1_000_000L;
                    fs.add(ex.submit(() -> {
                        for (int i = 0; i < 2000; i++) {
                            long req = base + i;
                            int[] ids = cache.allocate(req, 1 + i % 8); // 8 threads x 8 blocks <= 64
                            for (int id : ids) {
                                assertThat(held.add(id)).as("block %d given twice", id).isTrue();
                            }
                            assertThat(cache.blocksOf(req)).isEqualTo(ids);
                            for (int id : ids) {
                                held.remove(id);
                            }
                            cache.free(req);
                        }
                        return null;
                    }));
                }
                for (Future<?> f : fs) {
                    f.get(60, TimeUnit.SECONDS);
                }
            } finally {
                ex.shutdownNow();
                assertThat(ex.awaitTermination(10, TimeUnit.SECONDS)).isTrue();
            }
            assertThat(cache.freeBlocks()).isEqualTo(64);
            assertThat(cache.requestCount()).isZero();
            assertThat(Arrays.stream(cache.allocate(1, 64)).distinct().count()).isEqualTo(64);
        }
    }
}
