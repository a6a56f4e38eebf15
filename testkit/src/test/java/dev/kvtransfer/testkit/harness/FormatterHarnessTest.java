package dev.kvtransfer.testkit.harness;

import dev.kvtransfer.api.cache.KvCacheView;
import dev.kvtransfer.api.format.CacheFormatter;
import dev.kvtransfer.api.format.FormatterCapability;
import dev.kvtransfer.api.format.FormatterProvider;
import dev.kvtransfer.api.format.PeerPool;
import dev.kvtransfer.api.format.Support;
import dev.kvtransfer.api.format.TransferBufferPool;
import dev.kvtransfer.api.format.TransferSession;
import dev.kvtransfer.api.layout.BlockDistribution;
import dev.kvtransfer.api.layout.RankMapping;
import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.model.AttentionType;
import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.api.model.DataType;
import dev.kvtransfer.api.layout.PoolGeometry;
import dev.kvtransfer.api.transport.WriteBatch;
import dev.kvtransfer.testkit.LayoutPair;
import org.junit.jupiter.api.Test;

import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicInteger;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * The harness catches what a formatter must not do: a formatter that moves whole blocks (block pools, identical
 * layouts on both sides) passes without reuse, and is caught writing the reused prefix (poison) and receiving more
 * than the blocks after it; the harness's sessions are core's (one staging slot re-carved per call).
 */
class FormatterHarnessTest {
    /** Sends every block of the request, one message each, ignoring reuse; or only the fresh ones. */
    private static class WholeBlocks implements CacheFormatter {
        private final KvCacheView cache;
        private final boolean honoursReuse;
        private final AtomicInteger stagingCalls;
        private boolean discard;

        WholeBlocks(KvCacheView cache, boolean honoursReuse, AtomicInteger stagingCalls) {
            this.cache = cache;
            this.honoursReuse = honoursReuse;
            this.stagingCalls = stagingCalls;
        }

        private boolean pushes;
        private boolean writeTwice;

        WholeBlocks discarding() {
            this.discard = true;
            return this;
        }

        WholeBlocks pushing(boolean twice) {
            this.pushes = true;
            this.writeTwice = twice;
            return this;
        }

        @Override
        public Set<FormatterCapability> capabilities() {
            return pushes ? Set.of(FormatterCapability.PUSH) : Set.of();
        }

        /** Writes every fresh block whole into the same block of the peer's pool (block pools, identical layouts). */
        @Override
        public void push(TransferSession s, int firstLayer, int layers) {
            if (!pushes) {
                CacheFormatter.super.push(s, firstLayer, layers);
                return;
            }
            int[] ids = s.blockIds();
            PeerPool pool = s.peerPool(0);
            PoolGeometry g = pool.geometry();
            long bytes = cache.layout().blockBytes();
            WriteBatch batch = new WriteBatch();
            for (int i = first(s); i < ids.length; i++) {
                int peer = pool.blockId(i);
                pool.add(batch, cache.block(ids[i]), 0, g.region(peer, 0, 0, 0), g.planeOffset(peer, 0, 0, 0), bytes);
                if (writeTwice && i == first(s)) {
                    pool.add(batch, cache.block(ids[i]), 0, g.region(peer, 0, 0, 0), g.planeOffset(peer, 0, 0, 0),
                            bytes);
                }
            }
            s.write(0, batch);
            s.recordMeasure(0, 0, 1, batch.totalBytes());
        }

        private int first(TransferSession s) {
            return honoursReuse ? s.reusedBlocks() : 0;
        }

        @Override
        public void format(TransferSession s) {
            int[] ids = s.blockIds();
            // Two staging calls: core's session carves both from one slot, offset 0.
            MemoryBuffer a = s.stagingBuffers(new long[] {64})[0];
            MemoryBuffer b = s.stagingBuffers(new long[] {64})[0];
            stagingCalls.addAndGet(a.address() == b.address() ? 2 : 1000);
            for (int i = first(s); i < ids.length; i++) {
                s.send(0, cache.block(ids[i]), 0, cache.layout().blockBytes());
            }
            s.recordMeasure(0, 0, 1, (ids.length - first(s)) * cache.layout().blockBytes());
        }

        @Override
        public void unformat(TransferSession s) {
            int[] ids = s.blockIds();
            long bytes = cache.layout().blockBytes();
            MemoryBuffer scratch = discard ? s.stagingBuffers(new long[] {bytes})[0] : null;
            for (int i = first(s); i < ids.length; i++) {
                s.recv(0, discard ? scratch : cache.block(ids[i]), 0, bytes);
            }
            s.recordMeasure(0, 0, 1, (ids.length - first(s)) * cache.layout().blockBytes());
        }

        @Override
        public Support inquireSupport(CacheState self, CacheState peer) {
            return Support.yes();
        }

        @Override
        public List<Integer> counterparts(CacheState self, int selfIndex, CacheState peer) {
            return RankMapping.targetRanks(peer, self, selfIndex).peerRanks();
        }

        @Override
        public List<Integer> pickRecvConnections(CacheState self, int selfIndex, CacheState peer) {
            return List.of(0);
        }

        @Override
        public boolean needSendCache(CacheState self, int selfIndex, CacheState peer) {
            return true;
        }
    }

    private static FormatterProvider provider(boolean honoursReuse, AtomicInteger stagingCalls) {
        return provider(honoursReuse, stagingCalls, false);
    }

    private static FormatterProvider provider(boolean honoursReuse, AtomicInteger stagingCalls, boolean discard) {
        return new FormatterProvider() {
            @Override
            public String name() {
                return "whole-blocks";
            }

            @Override
            public boolean handles(AttentionType type) {
                return true;
            }

            @Override
            public CacheFormatter create(KvCacheView cache, TransferBufferPool buffers) {
                WholeBlocks f = new WholeBlocks(cache, honoursReuse, stagingCalls);
                return discard ? f.discarding() : f;
            }
        };
    }

    private static FormatterProvider pusher(boolean twice) {
        return new FormatterProvider() {
            @Override
            public String name() {
                return "whole-block-pusher";
            }

            @Override
            public boolean handles(AttentionType type) {
                return true;
            }

            @Override
            public CacheFormatter create(KvCacheView cache, TransferBufferPool buffers) {
                return new WholeBlocks(cache, true, new AtomicInteger()).pushing(twice);
            }
        };
    }

    @Test
    void aPushIsCheckedAsCoresReceiverChecksIt() {
        HarnessOptions push = HarnessOptions.defaults().withMode(HarnessOptions.Mode.PUSH);
        PairReport ok = FormatterHarness.run(pusher(false), pair(List.of(1, 0, LayoutPair.ALL_BLOCKS)), push);
        assertThat(ok.failure()).isNull();
        assertThat(ok.refusedUndeclared()).isFalse();
        for (PairReport.RequestReport q : ok.requests()) {
            assertThat(q.verify().ok()).as("%s", q.verify()).isTrue();
            assertThat(q.writeViolations()).isEmpty();
            assertThat(q.genReceivedBytes()[0]).isEqualTo(q.genExpectedBytes()[0]);
            assertThat(q.messagesSent()).isEqualTo(q.totalBlocks() - q.reusedBlocks());
        }
        // Writing the first fresh block twice: the content is right, but core would refuse the overlap and the bytes.
        PairReport twice = FormatterHarness.run(pusher(true), pair(List.of(1, 0, 0)), push);
        assertThat(twice.failure()).isNull();
        assertThat(twice.requests()).allSatisfy(q -> {
            assertThat(q.verify().ok()).isTrue();
            assertThat(q.writeViolations()).anySatisfy(v -> assertThat(v).contains("a byte written twice"))
                    .anySatisfy(v -> assertThat(v).contains("partial or doubled push"));
        });
    }

    @Test
    void aModeTheFormatterDoesNotDeclareMustBeRefused() {
        for (HarnessOptions.Mode m : new HarnessOptions.Mode[] {HarnessOptions.Mode.PUSH,
                HarnessOptions.Mode.PUSH_LAYERS, HarnessOptions.Mode.PULL_LAYERS}) {
            PairReport r = FormatterHarness.run(provider(true, new AtomicInteger()), pair(List.of()),
                    HarnessOptions.defaults().withMode(m));
            assertThat(r.failure()).as("%s: the default methods throw UnsupportedOperationException", m).isNull();
            assertThat(r.refusedUndeclared()).isTrue();
            assertThat(r.requests()).allSatisfy(q -> assertThat(q.messagesSent()).isZero());
        }
        // A formatter that declares PUSH is not refused, and one that declares nothing but pushes anyway fails.
        assertThat(FormatterHarness.run(pusher(false), pair(List.of()), HarnessOptions.defaults()
                .withMode(HarnessOptions.Mode.PUSH)).refusedUndeclared()).isFalse();
        FormatterProvider liar = new FormatterProvider() {
            @Override
            public String name() {
                return "undeclared-pusher";
            }

            @Override
            public boolean handles(AttentionType type) {
                return true;
            }

            @Override
            public CacheFormatter create(KvCacheView cache, TransferBufferPool buffers) {
                WholeBlocks w = new WholeBlocks(cache, true, new AtomicInteger()).pushing(false);
                return new WholeBlocks(cache, true, new AtomicInteger()) {
                    @Override
                    public void push(TransferSession s, int firstLayer, int layers) {
                        w.push(s, firstLayer, layers);
                    }
                };
            }
        };
        PairReport r = FormatterHarness.run(liar, pair(List.of()), HarnessOptions.defaults()
                .withMode(HarnessOptions.Mode.PUSH));
        assertThat(r.failure()).isInstanceOf(AssertionError.class)
                .hasMessageContaining("does not declare PUSH").hasMessageContaining("did not throw");
    }

    private static LayoutPair pair(List<Integer> reuse) {
        CacheState s = CacheState.builder().uniformKvHeads(2, 2).sizePerHead(4).tokensPerBlock(4)
                .dataType(DataType.FLOAT16).build();
        return new LayoutPair("TP1 -> TP1", s, s, List.of(9, 17, 3), null, reuse);
    }

    @Test
    void aFormatterThatMovesEveryBlockPassesWithoutReuse() {
        AtomicInteger staging = new AtomicInteger();
        PairReport r = FormatterHarness.run(provider(false, staging), pair(List.of()), HarnessOptions.defaults());
        assertThat(r.failure()).isNull();
        for (PairReport.RequestReport q : r.requests()) {
            assertThat(q.verify().ok()).as("%s", q.verify()).isTrue();
            assertThat(q.verify().checkedElements()).isEqualTo(q.totalBlocks() * 2L * 2 * 2 * 4 * 4);
            assertThat(q.messagesSent()).isEqualTo(q.totalBlocks());
            assertThat(q.messagesReceived()).isEqualTo(q.totalBlocks());
            assertThat(q.genReceivedBytes()[0]).isEqualTo(q.genExpectedBytes()[0]);
            assertThat(q.ctxMeasuredBytes()[0]).isEqualTo(q.ctxSentBytes()[0]);
        }
        assertThat(staging.get()).as("every staging call carved from one slot").isEqualTo(2 * 3);
    }

    @Test
    void writingTheReusedPrefixIsCaughtByTheContentAndTheByteCount() {
        PairReport r = FormatterHarness.run(provider(false, new AtomicInteger()), pair(List.of(1, 2, 0)),
                HarnessOptions.defaults());
        assertThat(r.failure()).isNull();
        PairReport.RequestReport reused = r.requests().get(0);
        assertThat(reused.reusedBlocks()).isEqualTo(1);
        // The context side's prefix holds poison: moving it overwrites the generation side's reused block.
        assertThat(reused.verify().ok()).isFalse();
        assertThat(reused.verify().mismatches()).isEqualTo(2L * 2 * 2 * 4 * 4);
        assertThat(reused.genReceivedBytes()[0]).isGreaterThan(reused.genExpectedBytes()[0]);
        assertThat(r.requests().get(2).verify().ok()).as("the request without reuse").isTrue();
    }

    @Test
    void receivingWithoutWritingTheBlocksIsCaught() {
        PairReport r = FormatterHarness.run(provider(true, new AtomicInteger(), true), pair(List.of(1, 0, 0)),
                HarnessOptions.defaults());
        assertThat(r.failure()).isNull();
        for (PairReport.RequestReport q : r.requests()) {
            // The generation blocks after the prefix still hold their poison.
            assertThat(q.verify().mismatches()).isEqualTo((q.totalBlocks() - q.reusedBlocks()) * 2L * 2 * 2 * 4 * 4);
            assertThat(q.verify().firstMismatch()).contains("request " + q.requestId());
        }
    }

    @Test
    void aFormatterThatHonoursReuseMovesOnlyTheFreshBlocksAndNothingWhenAllAreReused() {
        PairReport ok = FormatterHarness.run(provider(true, new AtomicInteger()), pair(List.of(1, LayoutPair.ALL_BLOCKS,
                0)), HarnessOptions.defaults());
        assertThat(ok.failure()).isNull();
        assertThat(ok.requests()).allSatisfy(q -> assertThat(q.verify().ok()).as("%s", q.verify()).isTrue());
        PairReport.RequestReport all = ok.requests().get(1);
        assertThat(all.reusedBlocks()).isEqualTo(all.totalBlocks());
        assertThat(all.messagesSent()).isZero();
        assertThat(all.genExpectedBytes()[0]).isZero();
    }

    @Test
    void fragmentedIdsHaveHolesAtDifferentPlacesOnTheTwoSides() {
        AtomicInteger staging = new AtomicInteger();
        ConcurrentHashMap<Boolean, List<int[]>> seen = new ConcurrentHashMap<>();
        FormatterProvider spy = new FormatterProvider() {
            @Override
            public String name() {
                return "spy";
            }

            @Override
            public boolean handles(AttentionType type) {
                return true;
            }

            @Override
            public CacheFormatter create(KvCacheView cache, TransferBufferPool buffers) {
                WholeBlocks inner = new WholeBlocks(cache, true, staging);
                return new CacheFormatter() {
                    @Override
                    public void format(TransferSession s) {
                        seen.computeIfAbsent(true, k -> new ArrayList<>()).add(s.blockIds());
                        assertThat(s.peerBlockIds(0)).isNotNull();
                        inner.format(s);
                    }

                    @Override
                    public void unformat(TransferSession s) {
                        seen.computeIfAbsent(false, k -> new ArrayList<>()).add(s.blockIds());
                        inner.unformat(s);
                    }

                    @Override
                    public Support inquireSupport(CacheState self, CacheState peer) {
                        return inner.inquireSupport(self, peer);
                    }

                    @Override
                    public List<Integer> counterparts(CacheState self, int selfIndex, CacheState peer) {
                        return inner.counterparts(self, selfIndex, peer);
                    }

                    @Override
                    public List<Integer> pickRecvConnections(CacheState self, int selfIndex, CacheState peer) {
                        return inner.pickRecvConnections(self, selfIndex, peer);
                    }

                    @Override
                    public boolean needSendCache(CacheState self, int selfIndex, CacheState peer) {
                        return true;
                    }
                };
            }
        };
        PairReport r = FormatterHarness.run(spy, pair(List.of()), HarnessOptions.defaults());
        assertThat(r.failure()).isNull();
        int blocks = BlockDistribution.blocksFor(17, 4);
        int[] ctx = seen.get(true).stream().filter(a -> a.length == blocks).findFirst().orElseThrow();
        int[] gen = seen.get(false).stream().filter(a -> a.length == blocks).findFirst().orElseThrow();
        assertThat(gaps(ctx)).isPositive();
        assertThat(gaps(gen)).isPositive();
        assertThat(ctx).isNotEqualTo(gen);
    }

    private static int gaps(int[] ids) {
        int g = 0;
        for (int i = 1; i < ids.length; i++) {
            g += ids[i] != ids[i - 1] + 1 ? 1 : 0;
        }
        return g;
    }
}
