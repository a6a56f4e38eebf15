package dev.kvtransfer.formatter.mla;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.KvTransferException;
import dev.kvtransfer.api.format.CacheFormatter;
import dev.kvtransfer.api.format.FormatterProvider;
import dev.kvtransfer.api.layout.BlockLayout;
import dev.kvtransfer.api.model.AttentionType;
import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.api.model.CommState;
import dev.kvtransfer.api.model.DataType;
import dev.kvtransfer.api.model.TransceiverState;
import dev.kvtransfer.core.cache.PagedKvCache;
import dev.kvtransfer.core.memory.HostBufferManager;
import dev.kvtransfer.testkit.KvPattern;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

import java.util.List;
import java.util.ServiceLoader;
import java.util.stream.Collectors;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/** Plugin registration, construction checks and the errors format / unformat raise. */
class MlaCacheFormatterTest {
    private final HostBufferManager memory = new HostBufferManager();
    private final DynamicBufferPool pool = new DynamicBufferPool(memory);

    @AfterEach
    void noLeaks() {
        memory.close();
    }

    private static CacheState mla(int tp, int cp) {
        return CacheState.builder().uniformKvHeads(4, 1).sizePerHead(8).tokensPerBlock(4)
                .tensorParallelism(tp).contextParallelism(cp).dataType(DataType.FLOAT16)
                .attentionType(AttentionType.MLA).build();
    }

    private static TransceiverState ts(CacheState s, int index) {
        List<String> addresses = java.util.stream.IntStream.range(0, s.worldSize()).mapToObj(i -> "r" + i)
                .collect(Collectors.toList());
        return new TransceiverState(s, new CommState("local", addresses, index));
    }

    @Test
    void isFoundByServiceLoaderAsMla() {
        List<FormatterProvider> found = ServiceLoader.load(FormatterProvider.class).stream()
                .map(ServiceLoader.Provider::get).collect(Collectors.toList());
        assertThat(found).extracting(FormatterProvider::name).containsExactly("mla");
        FormatterProvider p = found.get(0);
        assertThat(p.handles(AttentionType.MLA)).isTrue();
        assertThat(p.handles(AttentionType.DEFAULT)).isFalse();
        assertThatThrownBy(() -> p.create(null, pool)).isInstanceOf(NullPointerException.class)
                .hasMessage("cache");
    }

    @Test
    void refusesAnIndexerPoolThatDoesNotMatchTheMainPool() {
        CacheState s = mla(1, 1);
        BlockLayout main = BlockLayout.of(s, 0);
        BlockLayout wrongLayers = new BlockLayout(3, 1, 1, 4, 16, 1);
        BlockLayout wrongElement = new BlockLayout(4, 1, 1, 4, 16, 2);
        for (BlockLayout bad : List.of(wrongLayers, wrongElement)) {
            try (PagedKvCache cache = new PagedKvCache(memory, main, bad, 2)) {
                assertThatThrownBy(() -> new MlaCacheFormatter(cache, pool))
                        .isInstanceOf(IllegalArgumentException.class).hasMessageContaining("indexer-K pool layout");
            }
        }
        try (PagedKvCache cache = new PagedKvCache(memory, main, new BlockLayout(4, 1, 1, 4, 16, 1), 2)) {
            assertThat(new MlaCacheFormatter(cache, pool).hasIndexerKCache()).isTrue();
        }
    }

    @Test
    void declaresPushOnlyWithoutAnIndexerPool() {
        CacheState s = mla(1, 1);
        BlockLayout main = BlockLayout.of(s, 0);
        try (PagedKvCache plain = new PagedKvCache(memory, main, 2);
             PagedKvCache withIndexer = new PagedKvCache(memory, main, new BlockLayout(4, 1, 1, 4, 16, 1), 2)) {
            assertThat(new MlaCacheFormatter(plain, pool).capabilities()).containsExactlyInAnyOrder(
                    dev.kvtransfer.api.format.FormatterCapability.LAYER_RANGES,
                    dev.kvtransfer.api.format.FormatterCapability.PUSH);
            MlaCacheFormatter f = new MlaCacheFormatter(withIndexer, pool);
            assertThat(f.capabilities()).containsExactly(dev.kvtransfer.api.format.FormatterCapability.LAYER_RANGES);
            assertThatThrownBy(() -> f.push(new dev.kvtransfer.api.format.TransferSession() {
                @Override
                public long requestId() {
                    return 9;
                }

                @Override
                public boolean isSender() {
                    return true;
                }

                @Override
                public TransceiverState selfState() {
                    return ts(s, 0);
                }

                @Override
                public CacheState peerCacheState() {
                    return s;
                }

                @Override
                public dev.kvtransfer.api.layout.TargetRanks targets() {
                    return dev.kvtransfer.api.layout.RankMapping.targetRanks(s, s, 0);
                }

                @Override
                public int[] blockIds() {
                    return new int[] {0};
                }

                @Override
                public int totalBlocks() {
                    return 1;
                }

                @Override
                public dev.kvtransfer.api.memory.MemoryBuffer[] stagingBuffers(long[] sizes) {
                    throw new AssertionError("no staging expected");
                }

                @Override
                public dev.kvtransfer.api.memory.BufferManager bufferManager() {
                    return memory;
                }

                @Override
                public void send(int p, dev.kvtransfer.api.memory.MemoryBuffer b, long o, long l) {
                    throw new AssertionError("no send expected");
                }

                @Override
                public void recv(int p, dev.kvtransfer.api.memory.MemoryBuffer b, long o, long l) {
                    throw new AssertionError("no receive expected");
                }

                @Override
                public void forEachPeer(int[] peers, java.util.function.IntConsumer action) {
                    throw new AssertionError("no peer action expected");
                }

                @Override
                public void recordMeasure(int p, long start, long end, long bytes) {
                }
            }, 0, 4)).isInstanceOf(UnsupportedOperationException.class).hasMessageContaining("request 9")
                    .hasMessageContaining("indexer-K");
        }
    }

    @Test
    void formatRefusesContextCpWithTheReason() {
        CacheState ctx = mla(1, 2);
        CacheState gen = mla(1, 1);
        LocalFabric fabric = new LocalFabric(memory, 100);
        try (PagedKvCache cache = new PagedKvCache(memory, BlockLayout.of(ctx, 0), 4)) {
            int[] ids = cache.allocate(7, 2);
            try (LocalSession s = new LocalSession(7, true, ts(ctx, 0), gen, ids, 4, memory, pool, fabric)) {
                assertThatThrownBy(() -> new MlaCacheFormatter(cache, pool).format(s))
                        .isInstanceOfSatisfying(KvTransferException.class, e -> {
                            assertThat(e.code()).isEqualTo(ErrorCode.UNSUPPORTED_LAYOUT);
                            assertThat(e.requestId()).isEqualTo(7);
                        })
                        .hasMessageContaining("context contextParallelism=2");
            }
        }
        assertThat(fabric.undelivered()).isZero();
    }

    @Test
    void unformatRefusesABlockCountThatIsNotTheCpShare() {
        CacheState ctx = mla(1, 1);
        CacheState gen = mla(1, 4);
        LocalFabric fabric = new LocalFabric(memory, 100);
        try (PagedKvCache cache = new PagedKvCache(memory, BlockLayout.of(gen, 1), 8)) {
            int[] ids = cache.allocate(9, 3); // CP rank 1 of 4 holds 3 of 10 blocks... but of 9 it holds 2
            try (LocalSession s = new LocalSession(9, false, ts(gen, 1), ctx, ids, 9, memory, pool, fabric)) {
                assertThatThrownBy(() -> new MlaCacheFormatter(cache, pool).unformat(s))
                        .isInstanceOfSatisfying(KvTransferException.class,
                                e -> assertThat(e.code()).isEqualTo(ErrorCode.INTERNAL))
                        .hasMessageContaining("share of 9 blocks is 2");
            }
        }
    }

    @Test
    void formatRefusesACacheViewWhoseLayoutIsNotTheStates() {
        CacheState ctx = mla(1, 1);
        CacheState gen = mla(1, 1);
        BlockLayout wrong = new BlockLayout(4, 1, 1, 4, 16, 2);
        LocalFabric fabric = new LocalFabric(memory, 100);
        try (PagedKvCache cache = new PagedKvCache(memory, wrong, 4)) {
            int[] ids = cache.allocate(3, 2);
            try (LocalSession s = new LocalSession(3, true, ts(ctx, 0), gen, ids, 2, memory, pool, fabric)) {
                assertThatThrownBy(() -> new MlaCacheFormatter(cache, pool).format(s))
                        .isInstanceOfSatisfying(KvTransferException.class,
                                e -> assertThat(e.code()).isEqualTo(ErrorCode.INTERNAL))
                        .hasMessageContaining("does not match its CacheState");
            }
        }
    }

    @Test
    void anIndexerPoolOnOneSideOnlyIsRefusedNamingBothSidesBeforeAByteMoves() {
        // Each side declares its indexer-K pool in its CacheState: a pair that differs is refused by
        // inquireSupport and by format / unformat, naming both declarations; nothing is sent or written.
        CacheState plain = mla(1, 1);
        CacheState withIndexer = plain.toBuilder().indexerKCache(16, 0).build();
        var refused = dev.kvtransfer.formatter.mla.MlaSupport.inquire(withIndexer, plain);
        assertThat(refused.supported()).isFalse();
        assertThat(refused.reason()).contains("indexer-K", "self indexerK=16 B/token, quantBlockSize=0",
                "peer indexerK=none");
        assertThat(dev.kvtransfer.formatter.mla.MlaSupport.inquire(withIndexer,
                withIndexer.toBuilder().indexerKCache(16, 128).build()).reason()).contains("quantBlockSize=128");
        assertThat(dev.kvtransfer.formatter.mla.MlaSupport.inquire(withIndexer, withIndexer).supported()).isTrue();

        BlockLayout main = BlockLayout.of(plain, 0);
        BlockLayout idx = new BlockLayout(4, 1, 1, 4, 16, 1);
        LocalFabric fabric = new LocalFabric(memory, 200);
        try (PagedKvCache ctxCache = new PagedKvCache(memory, main, 4);
             PagedKvCache genCache = new PagedKvCache(memory, main, idx, 4)) {
            int[] ctxIds = ctxCache.allocate(5, 2);
            int[] genIds = genCache.allocate(5, 2);
            KvPattern.fill(ctxCache, ctxIds, plain, 0, 5, 2);
            KvPattern.fill(genCache, genIds, plain, 0, 6, 2); // another request's pattern: "not written" is exact
            CacheFormatter sender = new MlaCacheFormatter(ctxCache, pool);
            CacheFormatter receiver = new MlaCacheFormatter(genCache, pool);
            // The peers declare different pools: refused on both sides with both declarations named.
            try (LocalSession tx = new LocalSession(5, true, ts(plain, 0), withIndexer, ctxIds, 2, memory, pool,
                    fabric);
                 LocalSession rx = new LocalSession(5, false, ts(withIndexer, 0), plain, genIds, 2, memory, pool,
                    fabric)) {
                assertThatThrownBy(() -> sender.format(tx)).isInstanceOfSatisfying(KvTransferException.class, e -> {
                    assertThat(e.code()).isEqualTo(ErrorCode.UNSUPPORTED_LAYOUT);
                    assertThat(e.requestId()).isEqualTo(5);
                    assertThat(e.getMessage()).contains("indexerK=none", "indexerK=16 B/token");
                });
                assertThatThrownBy(() -> receiver.unformat(rx)).isInstanceOfSatisfying(KvTransferException.class,
                        e -> assertThat(e.code()).isEqualTo(ErrorCode.UNSUPPORTED_LAYOUT));
            }
            // A cache whose pool its own state does not declare is refused too (it would plan a pass the peer
            // does not expect).
            try (LocalSession rx = new LocalSession(5, false, ts(plain, 0), plain, genIds, 2, memory, pool,
                    fabric)) {
                assertThatThrownBy(() -> receiver.unformat(rx)).isInstanceOfSatisfying(KvTransferException.class,
                        e -> {
                            assertThat(e.code()).isEqualTo(ErrorCode.UNSUPPORTED_LAYOUT);
                            assertThat(e.getMessage()).contains("has an indexer-K pool of 16 B/token",
                                    "declares indexerK=none");
                        });
            }
            KvPattern.verify(genCache, genIds, plain, 0, 6, 2).assertOk();
        } finally {
            fabric.drain();
        }
    }

    @Test
    void anFp4IndexerCacheOnOneSideOnlyIsRefusedNamingBothSidesBeforeAByteMoves() {
        // The two sides' indexer-K pools have the same size but one stores FP4 values: moving its bytes into the
        // other would decode them as another format. Refused by inquireSupport and by format / unformat, naming
        // both declarations; nothing is sent or written.
        CacheState plain = mla(1, 1).toBuilder().indexerKCache(16, 32).build();
        CacheState fp4 = plain.toBuilder().indexerKCache(16, 32, true).build();
        var refused = MlaSupport.inquire(fp4, plain);
        assertThat(refused.supported()).isFalse();
        assertThat(refused.reason()).contains("indexer-K",
                "self indexerK=16 B/token, quantBlockSize=32, fp4=true",
                "peer indexerK=16 B/token, quantBlockSize=32, fp4=false");
        assertThat(MlaSupport.check(plain, fp4).reason()).contains("context indexerK=16 B/token, "
                + "quantBlockSize=32, fp4=false", "generation indexerK=16 B/token, quantBlockSize=32, fp4=true");
        assertThat(MlaSupport.inquire(fp4, fp4).supported()).isTrue();
        assertThat(MlaSupport.inquire(plain, plain).supported()).isTrue();

        BlockLayout main = BlockLayout.of(plain, 0);
        BlockLayout idx = new BlockLayout(4, 1, 1, 4, 16, 1);
        LocalFabric fabric = new LocalFabric(memory, 200);
        try (PagedKvCache ctxCache = new PagedKvCache(memory, main, idx, 4);
             PagedKvCache genCache = new PagedKvCache(memory, main, idx, 4)) {
            int[] ctxIds = ctxCache.allocate(5, 2);
            int[] genIds = genCache.allocate(5, 2);
            KvPattern.fill(ctxCache, ctxIds, plain, 0, 5, 2);
            KvPattern.fill(genCache, genIds, plain, 0, 6, 2); // another request's pattern: "not written" is exact
            CacheFormatter sender = new MlaCacheFormatter(ctxCache, pool);
            CacheFormatter receiver = new MlaCacheFormatter(genCache, pool);
            try (LocalSession tx = new LocalSession(5, true, ts(plain, 0), fp4, ctxIds, 2, memory, pool, fabric);
                 LocalSession rx = new LocalSession(5, false, ts(fp4, 0), plain, genIds, 2, memory, pool,
                    fabric)) {
                assertThatThrownBy(() -> sender.format(tx)).isInstanceOfSatisfying(KvTransferException.class, e -> {
                    assertThat(e.code()).isEqualTo(ErrorCode.UNSUPPORTED_LAYOUT);
                    assertThat(e.requestId()).isEqualTo(5);
                    assertThat(e.getMessage()).contains("fp4=false", "fp4=true");
                });
                assertThatThrownBy(() -> receiver.unformat(rx)).isInstanceOfSatisfying(KvTransferException.class,
                        e -> {
                            assertThat(e.code()).isEqualTo(ErrorCode.UNSUPPORTED_LAYOUT);
                            assertThat(e.requestId()).isEqualTo(5);
                            assertThat(e.getMessage()).contains("fp4=false", "fp4=true");
                        });
            }
            KvPattern.verify(genCache, genIds, plain, 0, 6, 2).assertOk();
            KvPattern.verify(ctxCache, ctxIds, plain, 0, 5, 2).assertOk();
        } finally {
            fabric.drain();
        }
    }
}
