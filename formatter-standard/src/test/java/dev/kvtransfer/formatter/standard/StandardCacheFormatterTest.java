package dev.kvtransfer.formatter.standard;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.KvTransferException;
import dev.kvtransfer.api.format.Support;
import dev.kvtransfer.api.layout.BlockDistribution;
import dev.kvtransfer.api.layout.BlockLayout;
import dev.kvtransfer.api.layout.RankMapping;
import dev.kvtransfer.api.layout.TargetRanks;
import dev.kvtransfer.api.model.AttentionType;
import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.api.model.DataType;
import dev.kvtransfer.core.buffer.DefaultTransferBufferPool;
import dev.kvtransfer.core.cache.PagedKvCache;
import dev.kvtransfer.core.memory.HostBufferManager;
import dev.kvtransfer.testkit.KvPattern;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.List;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/** Unit tests of the split mapping, zero copy, duplicate-head designation and inquireSupport. */
class StandardCacheFormatterTest {
    private static final long REQUEST = 42;
    private final HostBufferManager memory = new HostBufferManager();
    private final List<AutoCloseable> open = new ArrayList<>();

    @AfterEach
    void closeAll() throws Exception {
        for (int i = open.size() - 1; i >= 0; i--) {
            open.get(i).close();
        }
        memory.close(); // fails when a test leaked a buffer
    }

    private static CacheState.Builder model(int layers, int heads) {
        return CacheState.builder().uniformKvHeads(layers, heads).sizePerHead(4).tokensPerBlock(4)
                .dataType(DataType.FLOAT32);
    }

    /** A rank: its cache with the request's blocks (filled when it is a context rank) and its formatter. */
    private final class Rank {
        final PagedKvCache cache;
        final int[] ids;
        final StandardCacheFormatter formatter;

        Rank(CacheState state, int rank, int totalBlocks, boolean fill) {
            int n = BlockDistribution.count(totalBlocks, state.contextParallelism(), state.cpRank(rank));
            cache = new PagedKvCache(memory, BlockLayout.of(state, rank), n + 1);
            open.add(cache);
            DefaultTransferBufferPool pool = new DefaultTransferBufferPool(memory, 0, 1, 1, true);
            open.add(pool);
            ids = n == 0 ? new int[0] : cache.allocate(REQUEST, n);
            if (fill) {
                KvPattern.fill(cache, ids, state, rank, REQUEST, totalBlocks);
            }
            formatter = new StandardCacheFormatter(cache, pool);
        }
    }

    private CapturingSession sender(Rank r, CacheState self, int index, CacheState peer, int totalBlocks) {
        CapturingSession s = new CapturingSession(REQUEST, true, self, index, peer, r.ids, totalBlocks, memory,
                null);
        open.add(s);
        return s;
    }

    @Test
    void workedExample_ctxTp1Pp1ToGenTp2Pp2_outputsInReferenceOrder() {
        CacheState ctx = model(4, 4).build();
        CacheState gen = model(4, 4).tensorParallelism(2).pipelineParallelism(2).build();
        int n = 3;
        TargetRanks t = RankMapping.targetRanks(gen, ctx, 0);
        assertThat(t.peerRanks()).containsExactly(0, 2, 1, 3); // [g0, g2, g1, g3]

        SplitPlan plan = SplitPlan.forSender(ctx, 0, gen, t, n, 0);
        assertThat(plan.parts).hasSize(4);
        int[][] expected = {{0, 0, 0}, {1, 0, 2}, {2, 2, 0}, {3, 2, 2}}; // {peer position, first head, first layer}
        long partBytes = (long) n * 2 * 2 * 2 * 4 * 4 * 4; // N * Lk * kv * Hd * T * D * bytes
        for (int i = 0; i < 4; i++) {
            SplitPlan.Part p = plan.parts.get(i);
            assertThat(p.peer).isEqualTo(expected[i][0]);
            assertThat(p.firstHead).isEqualTo(expected[i][1]);
            assertThat(p.peerFirstHead).as("each gen rank holds exactly the part's 2 heads").isZero();
            assertThat(p.headCount).isEqualTo(2);
            assertThat(p.firstLayer).isEqualTo(expected[i][2]);
            assertThat(p.peerFirstLayer).isZero();
            assertThat(p.layerCount).isEqualTo(2);
            assertThat(p.bytes).isEqualTo(partBytes);
        }

        // The bytes: element (b, l, kv, h, tok, d) sits in output (h / Hd) * domainPP + k at
        // ((b * Lk + lIn) * 2 + kv) * Hd*T*D + (h % Hd) * T*D + tok * D + d.
        Rank c = new Rank(ctx, 0, n, true);
        CapturingSession s = sender(c, ctx, 0, gen, n);
        c.formatter.format(s);
        int hd = 2;
        int lk = 2;
        int tpb = 4;
        int dim = 4;
        for (int out = 0; out < 4; out++) {
            // The generation ranks hold exactly the part's heads, so the part travels one block (row) per message
            // and they receive straight into their blocks.
            List<CapturingSession.Message> msgs = s.perPeer.get(out);
            assertThat(msgs).as("messages to position %d", out).hasSize(n);
            ByteBuffer bb = ByteBuffer.allocate((int) partBytes).order(java.nio.ByteOrder.LITTLE_ENDIAN);
            for (CapturingSession.Message m : msgs) {
                assertThat(m.length()).isEqualTo(partBytes / n);
                bb.put(m.copy().asByteBuffer());
            }
            int headGroup = out / 2;
            int k = out % 2;
            for (int b = 0; b < n; b++) {
                for (int lIn = 0; lIn < lk; lIn++) {
                    for (int kv = 0; kv < 2; kv++) {
                        for (int hIn = 0; hIn < hd; hIn++) {
                            for (int tok = 0; tok < tpb; tok++) {
                                for (int d = 0; d < dim; d++) {
                                    int idx = (((b * lk + lIn) * 2 + kv) * hd + hIn) * tpb * dim + tok * dim + d;
                                    int layer = k * lk + lIn;
                                    int head = headGroup * hd + hIn;
                                    int want = (int) KvPattern.value(REQUEST, layer, kv, head, (long) b * tpb + tok, d);
                                    assertThat(bb.getInt(idx * 4))
                                            .as("out %d b %d l %d kv %d h %d tok %d d %d", out, b, layer, kv, head, tok, d)
                                            .isEqualTo(want);
                                }
                            }
                        }
                    }
                }
            }
        }

        // And the generation ranks put the parts back where KvPattern expects them.
        for (int g = 0; g < 4; g++) {
            Rank gr = new Rank(gen, g, n, false);
            int pos = t.peerRanks().indexOf(g);
            List<List<CapturingSession.Message>> deliveries = List.of(s.perPeer.get(pos));
            CapturingSession rs = new CapturingSession(REQUEST, false, gen, g, ctx, gr.ids, n, memory, deliveries);
            open.add(rs);
            gr.formatter.unformat(rs);
            assertThat(rs.received(0)).isEqualTo(n);
            assertThat(rs.staging).as("gen receives straight into its blocks").isEmpty();
            KvPattern.verify(gr.cache, gr.ids, gen, g, REQUEST, n).assertOk();
        }
    }

    @Test
    void matchingLayouts_sendEveryBlockStraightFromTheCache_andReceiveStraightIntoIt() {
        CacheState state = model(4, 4).tensorParallelism(2).build();
        int n = 5;
        Rank c = new Rank(state, 1, n, true);
        CapturingSession s = sender(c, state, 1, state, n);
        c.formatter.format(s);
        assertThat(s.staging).as("staging used by a zero-copy send").isEmpty();
        List<CapturingSession.Message> sent = s.perPeer.get(0);
        assertThat(sent).hasSize(n);
        long blockBytes = c.cache.layout().blockBytes();
        for (int b = 0; b < n; b++) {
            assertThat(sent.get(b).source()).isSameAs(c.cache.region(0));
            assertThat(sent.get(b).offset()).isEqualTo(c.ids[b] * blockBytes);
            assertThat(sent.get(b).length()).isEqualTo(blockBytes);
        }

        Rank g = new Rank(state, 1, n, false);
        CapturingSession rs = new CapturingSession(REQUEST, false, state, 1, state, g.ids, n, memory, s.perPeer);
        open.add(rs);
        g.formatter.unformat(rs);
        assertThat(rs.staging).isEmpty();
        for (int b = 0; b < n; b++) {
            assertThat(rs.receivedInto.get(b)).isSameAs(g.cache.region(0));
            assertThat(rs.receivedAt.get(b)).isEqualTo(g.ids[b] * blockBytes);
        }
        KvPattern.verify(g.cache, g.ids, state, 1, REQUEST, n).assertOk();
    }

    @Test
    void tp2ToTp1_senderSendsWholeBlocksFromTheCache_receiverScattersHeadRuns() {
        CacheState ctx = model(4, 4).tensorParallelism(2).build();
        CacheState gen = model(4, 4).build();
        int n = 3;
        Rank c = new Rank(ctx, 1, n, true);
        CapturingSession s = sender(c, ctx, 1, gen, n);
        c.formatter.format(s);
        assertThat(s.staging).as("the sender's rows are its whole blocks").isEmpty();
        assertThat(s.perPeer.get(0)).hasSize(n);
        for (int b = 0; b < n; b++) {
            assertThat(s.perPeer.get(0).get(b).source()).isSameAs(c.cache.region(0));
            assertThat(s.perPeer.get(0).get(b).offset()).isEqualTo(c.ids[b] * c.cache.layout().blockBytes());
        }
        Rank c0 = new Rank(ctx, 0, n, true);
        CapturingSession s0 = sender(c0, ctx, 0, gen, n);
        c0.formatter.format(s0);

        Rank g = new Rank(gen, 0, n, false);
        CapturingSession rs = new CapturingSession(REQUEST, false, gen, 0, ctx, g.ids, n, memory,
                List.of(s0.perPeer.get(0), s.perPeer.get(0)));
        open.add(rs);
        g.formatter.unformat(rs);
        assertThat(rs.staging).as("two heads of four: the receiver scatters from staging").hasSize(2);
        KvPattern.verify(g.cache, g.ids, gen, 0, REQUEST, n).assertOk();
    }

    @Test
    void ppResharding_withEqualHeads_isZeroCopyOnBothSides() {
        CacheState ctx = model(4, 4).build();
        CacheState gen = model(4, 4).pipelineParallelism(2).attentionLayersPerPp(List.of(1, 3)).build();
        int n = 2;
        Rank c = new Rank(ctx, 0, n, true);
        CapturingSession s = sender(c, ctx, 0, gen, n);
        c.formatter.format(s);
        assertThat(s.staging).isEmpty();
        long layerBytes = c.cache.layout().layerBytes();
        assertThat(s.perPeer.get(1).get(0).offset()).as("layers 1..3 start one layer in").isEqualTo(layerBytes);
        assertThat(s.perPeer.get(1).get(0).length()).isEqualTo(3 * layerBytes);
        for (int pp = 0; pp < 2; pp++) {
            Rank g = new Rank(gen, pp, n, false);
            CapturingSession rs = new CapturingSession(REQUEST, false, gen, pp, ctx, g.ids, n, memory,
                    List.of(s.perPeer.get(pp)));
            open.add(rs);
            g.formatter.unformat(rs);
            assertThat(rs.staging).isEmpty();
            KvPattern.verify(g.cache, g.ids, gen, pp, REQUEST, n).assertOk();
        }
    }

    @Test
    void generationCp_splitsBlocksContiguouslyAndStaysZeroCopy() {
        CacheState ctx = model(4, 4).build();
        CacheState gen = model(4, 4).contextParallelism(4).build();
        int n = 10; // [3, 3, 2, 2]
        Rank c = new Rank(ctx, 0, n, true);
        CapturingSession s = sender(c, ctx, 0, gen, n);
        c.formatter.format(s);
        assertThat(s.staging).isEmpty();
        int[] counts = {3, 3, 2, 2};
        int first = 0;
        for (int cp = 0; cp < 4; cp++) {
            List<CapturingSession.Message> sent = s.perPeer.get(cp);
            assertThat(sent).as("blocks to CP rank %d", cp).hasSize(counts[cp]);
            for (int i = 0; i < counts[cp]; i++) {
                assertThat(sent.get(i).source()).isSameAs(c.cache.region(0));
                assertThat(sent.get(i).offset()).isEqualTo(c.ids[first + i] * c.cache.layout().blockBytes());
            }
            first += counts[cp];
            Rank g = new Rank(gen, cp, n, false);
            CapturingSession rs = new CapturingSession(REQUEST, false, gen, cp, ctx, g.ids, n, memory,
                    List.of(sent));
            open.add(rs);
            g.formatter.unformat(rs);
            KvPattern.verify(g.cache, g.ids, gen, cp, REQUEST, n).assertOk();
        }
    }

    @Test
    void duplicateHeads_onlyOneRankOfEachGroupSends_andTheReceiverPicksIt() {
        // TP4 over 2 KV heads: ranks {0,1} hold head 0, {2,3} head 1.
        CacheState ctx = model(4, 2).tensorParallelism(4).build();
        CacheState gen = model(4, 2).build();
        StandardCacheFormatter f = new Rank(gen, 0, 1, false).formatter;
        assertThat(List.of(0, 1, 2, 3).stream().map(r -> f.needSendCache(ctx, r, gen)).toList())
                .containsExactly(true, false, true, false);
        assertThat(f.counterparts(gen, 0, ctx)).containsExactly(0, 1, 2, 3);
        assertThat(f.pickRecvConnections(gen, 0, ctx)).containsExactly(0, 2);

        // With attention DP on the generation side, DP rank 1 is served by the other rank of each group.
        CacheState genDp = model(4, 2).tensorParallelism(2).attentionDp(true, 1, 2).build();
        assertThat(List.of(0, 1, 2, 3).stream().map(r -> f.needSendCache(ctx, r, genDp)).toList())
                .containsExactly(false, true, false, true);
        assertThat(f.pickRecvConnections(genDp, 1, ctx)).containsExactly(1, 3);

        // A non-designated rank's format sends nothing at all.
        int n = 2;
        Rank c1 = new Rank(ctx, 1, n, true);
        CapturingSession s = sender(c1, ctx, 1, gen, n);
        c1.formatter.format(s);
        assertThat(s.perPeer.get(0)).isEmpty();
        assertThat(s.staging).isEmpty();
    }

    @Test
    void zeroLayerRank_neitherSendsNorReceives() {
        CacheState ctx = model(4, 4).pipelineParallelism(2).attentionLayersPerPp(List.of(4, 0)).build();
        CacheState gen = model(4, 4).build();
        Rank c = new Rank(ctx, 1, 3, true);
        assertThat(c.formatter.counterparts(ctx, 1, gen)).isEmpty();
        assertThat(c.formatter.needSendCache(ctx, 1, gen)).isFalse();
        CapturingSession s = sender(c, ctx, 1, gen, 3);
        c.formatter.format(s);
        assertThat(s.perPeer).isEmpty();
        assertThat(s.staging).isEmpty();
        CapturingSession rs = new CapturingSession(REQUEST, false, ctx, 1, gen, c.ids, 3, memory, List.of());
        open.add(rs);
        c.formatter.unformat(rs);
        assertThat(rs.receivedInto).isEmpty();
    }

    @Test
    void inquireSupport_namesEveryMismatchedFieldWithBothValues() {
        StandardCacheFormatter f = new Rank(model(4, 4).build(), 0, 1, false).formatter;
        CacheState base = model(4, 4).build();
        assertThat(f.inquireSupport(base, model(4, 4).tensorParallelism(4).pipelineParallelism(2).build()))
                .isEqualTo(Support.yes());

        assertThat(f.inquireSupport(base, model(4, 4).dataType(DataType.FLOAT16).build()).reason())
                .contains("dataType: self FLOAT32, peer FLOAT16");
        assertThat(f.inquireSupport(base, model(4, 4).tokensPerBlock(8).build()).reason())
                .contains("tokensPerBlock: self 4, peer 8");
        assertThat(f.inquireSupport(base, model(4, 4).sizePerHead(8).build()).reason())
                .contains("sizePerHead: self 4, peer 8");
        assertThat(f.inquireSupport(base, model(4, 4).kvFactor(1).build()).reason())
                .contains("kvFactor: self 2, peer 1");
        assertThat(f.inquireSupport(base, model(6, 4).build()).reason())
                .contains("layer count").contains("self 4, peer 6");
        assertThat(f.inquireSupport(base, model(4, 8).build()).reason())
                .contains("kvHeadsPerLayer: self 4 KV heads, peer 8");
        CacheState nonUniform = model(4, 4).kvHeadsPerLayer(List.of(4, 4, 2, 2)).build();
        assertThat(f.inquireSupport(nonUniform, base).reason()).contains("non-uniform").contains("[4, 4, 2, 2]");
        CacheState mla = model(4, 1).attentionType(AttentionType.MLA).build();
        assertThat(f.inquireSupport(mla, mla).reason()).contains("attentionType: self MLA, peer MLA");

        // Several mismatches are all listed.
        Support many = f.inquireSupport(base, model(4, 4).dataType(DataType.INT8).tokensPerBlock(16).build());
        assertThat(many.supported()).isFalse();
        assertThat(many.reason()).contains("dataType").contains("tokensPerBlock");

        // CP: one side only, or the same on both.
        CacheState cp2 = model(4, 4).contextParallelism(2).build();
        CacheState cp4 = model(4, 4).contextParallelism(4).build();
        assertThat(f.inquireSupport(base, cp4).supported()).isTrue();
        assertThat(f.inquireSupport(cp4, base).supported()).isTrue();
        assertThat(f.inquireSupport(cp2, cp2).supported()).isTrue();
        assertThat(f.inquireSupport(cp2, cp4).reason()).contains("contextParallelism: self 2, peer 4");
    }

    @Test
    void format_refusesAnUnsupportedPairWithTheReason() {
        CacheState ctx = model(4, 4).build();
        CacheState gen = model(4, 4).dataType(DataType.FLOAT16).build();
        Rank c = new Rank(ctx, 0, 2, true);
        CapturingSession s = sender(c, ctx, 0, gen, 2);
        assertThatThrownBy(() -> c.formatter.format(s))
                .isInstanceOfSatisfying(KvTransferException.class, e -> {
                    assertThat(e.code()).isEqualTo(ErrorCode.UNSUPPORTED_LAYOUT);
                    assertThat(e.requestId()).isEqualTo(REQUEST);
                })
                .hasMessageContaining("dataType");
    }

    @Test
    void format_refusesABlockListThatDoesNotMatchTheRequest() {
        CacheState state = model(4, 4).build();
        Rank c = new Rank(state, 0, 3, true);
        CapturingSession s = sender(c, state, 0, state, 5);
        assertThatThrownBy(() -> c.formatter.format(s))
                .isInstanceOfSatisfying(KvTransferException.class,
                        e -> assertThat(e.code()).isEqualTo(ErrorCode.INTERNAL))
                .hasMessageContaining("has 3 blocks but holds 5");
    }

    @Test
    void providerIsFoundByServiceLoaderAndHandlesDefaultOnly() {
        List<String> names = new ArrayList<>();
        java.util.ServiceLoader.load(dev.kvtransfer.api.format.FormatterProvider.class)
                .forEach(p -> names.add(p.name()));
        assertThat(names).contains("standard");
        StandardFormatterProvider p = new StandardFormatterProvider();
        assertThat(p.handles(AttentionType.DEFAULT)).isTrue();
        assertThat(p.handles(AttentionType.MLA)).isFalse();
    }
}
