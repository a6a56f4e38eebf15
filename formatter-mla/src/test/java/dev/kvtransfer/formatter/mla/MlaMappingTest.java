package dev.kvtransfer.formatter.mla;

import dev.kvtransfer.api.layout.RankMapping;
import dev.kvtransfer.api.layout.TargetRanks;
import dev.kvtransfer.api.model.AttentionType;
import dev.kvtransfer.api.model.CacheState;
import org.junit.jupiter.api.Test;

import java.util.ArrayList;
import java.util.List;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/** The MLA rank arithmetic against the values of reference §3 / §7, computed by hand. */
class MlaMappingTest {
    private static CacheState mla(int tp, int pp, int cp, int dpSize, int dpRank, List<Integer> layersPerPp) {
        return CacheState.builder()
                .uniformKvHeads(layersPerPp == null ? 4 : layersPerPp.stream().mapToInt(Integer::intValue).sum(), 1)
                .sizePerHead(8).tokensPerBlock(4)
                .tensorParallelism(tp).pipelineParallelism(pp).contextParallelism(cp)
                .attentionDp(dpSize > 0, dpRank, dpSize > 0 ? dpSize : 1)
                .attentionLayersPerPp(layersPerPp)
                .attentionType(AttentionType.MLA)
                .build();
    }

    private static CacheState mla(int tp, int pp) {
        return mla(tp, pp, 1, 0, 0, null);
    }

    private static List<Boolean> senders(CacheState ctx, CacheState gen) {
        List<Boolean> out = new ArrayList<>();
        for (int r = 0; r < ctx.worldSize(); r++) {
            out.add(MlaMapping.needSendCache(ctx, r, gen));
        }
        return out;
    }

    @Test
    void needSendCacheWithoutDp() {
        assertThat(senders(mla(4, 1), mla(1, 1))).containsExactly(true, false, false, false);
        assertThat(senders(mla(4, 1), mla(2, 1))).containsExactly(true, false, true, false);
        assertThat(senders(mla(2, 1), mla(4, 1))).containsExactly(true, true);
        assertThat(senders(mla(1, 1), mla(4, 2))).containsExactly(true);
        // TP2 PP2: ranks 0..3 are (pp0,tp0) (pp0,tp1) (pp1,tp0) (pp1,tp1); tp0 of each stage sends.
        assertThat(senders(mla(2, 2), mla(1, 1))).containsExactly(true, false, true, false);
        // Generation CP does not change who sends: the domain is TP.
        assertThat(senders(mla(2, 1), mla(1, 1, 4, 0, 0, null))).containsExactly(true, false);
    }

    @Test
    void needSendCacheWithGenerationDp() {
        // Generation TP4 DP4 (one TP rank per DP group): of context TP4 only TP rank == gen dpRank sends.
        for (int d = 0; d < 4; d++) {
            List<Boolean> expected = new ArrayList<>(List.of(false, false, false, false));
            expected.set(d, true);
            assertThat(senders(mla(4, 1), mla(4, 1, 1, 4, d, null))).as("gen dpRank %d", d)
                    .containsExactlyElementsOf(expected);
        }
        // Generation TP4 DP2 (two TP ranks per group, dG=2): context TP4 ranks r with r % 2 == d % 2.
        assertThat(senders(mla(4, 1), mla(4, 1, 1, 2, 0, null))).containsExactly(true, false, true, false);
        assertThat(senders(mla(4, 1), mla(4, 1, 1, 2, 1, null))).containsExactly(false, true, false, true);
    }

    @Test
    void needSendCacheWithContextDp() {
        // Context TP4 DP4: every group has one TP rank, sG=1 <= dG: every rank of the serving group sends.
        assertThat(senders(mla(4, 1, 1, 4, 2, null), mla(1, 1))).containsExactly(true, true, true, true);
        // Context TP4 DP2 (sG=2) -> generation TP1: the first TP rank of each group.
        assertThat(senders(mla(4, 1, 1, 2, 0, null), mla(1, 1))).containsExactly(true, false, true, false);
        // ... -> generation TP4 DP4 (dG=1): (r % 2) % 2 == dpRank % 2.
        assertThat(senders(mla(4, 1, 1, 2, 0, null), mla(4, 1, 1, 4, 1, null)))
                .containsExactly(false, true, false, true);
        assertThat(senders(mla(4, 1, 1, 2, 0, null), mla(4, 1, 1, 4, 2, null)))
                .containsExactly(true, false, true, false);
    }

    @Test
    void aRankWithoutLayersSendsNothing() {
        CacheState ctx = mla(1, 2, 1, 0, 0, List.of(4, 0));
        assertThat(senders(ctx, mla(1, 1))).containsExactly(true, false);
        assertThat(RankMapping.targetRanks(mla(1, 1), ctx, 1).isEmpty()).isTrue();
    }

    @Test
    void pickListsFollowTheGenerationDpRank() {
        // gen TP1 <- ctx TP4: 4 ranks hold the same bytes, pick the first.
        assertThat(MlaMapping.pickRecvConnections(mla(1, 1), 0, mla(4, 1))).containsExactly(0);
        // gen TP1 PP1 <- ctx TP2 PP2: counterparts [0, 2, 1, 3] (TP then PP); pick TP slot 0 of each stage.
        CacheState gen = mla(1, 1);
        assertThat(RankMapping.targetRanks(mla(2, 2), gen, 0).peerRanks()).containsExactly(0, 2, 1, 3);
        assertThat(MlaMapping.pickRecvConnections(gen, 0, mla(2, 2))).containsExactly(0, 1);
        // gen TP4 DP4 dpRank 2 (rank 2) <- ctx TP4 PP2: TP slot 2 -> positions [4, 5] = ctx ranks 2 and 6.
        CacheState genDp = mla(4, 1, 1, 4, 2, null);
        List<Integer> cps = RankMapping.targetRanks(mla(4, 2), genDp, 2).peerRanks();
        List<Integer> pick = MlaMapping.pickRecvConnections(genDp, 2, mla(4, 2));
        assertThat(pick).containsExactly(4, 5);
        assertThat(List.of(cps.get(pick.get(0)), cps.get(pick.get(1)))).containsExactly(2, 6);
        // gen TP4 DP2 dpRank 1, rank 3 (TP3, slot 1 in its group) <- ctx TP4: domain [2, 3], TP slot 1 -> ctx 3.
        CacheState genDp2 = mla(4, 1, 1, 2, 1, null);
        List<Integer> cps2 = RankMapping.targetRanks(mla(4, 1), genDp2, 3).peerRanks();
        assertThat(cps2).containsExactly(2, 3);
        assertThat(MlaMapping.pickRecvConnections(genDp2, 3, mla(4, 1))).containsExactly(1);
        // gen TP2 <- ctx TP2 DP2 serving dpRank 1: the only counterpart is ctx rank 1.
        assertThat(MlaMapping.pickRecvConnections(mla(2, 1), 0, mla(2, 1, 1, 2, 1, null))).containsExactly(0);
        assertThat(RankMapping.targetRanks(mla(2, 1, 1, 2, 1, null), mla(2, 1), 0).peerRanks()).containsExactly(1);
        // gen CP4 rank 3 <- ctx TP1: one counterpart.
        assertThat(MlaMapping.pickRecvConnections(mla(1, 1, 4, 0, 0, null), 3, mla(1, 1))).containsExactly(0);
        // A generation rank without layers picks nothing.
        assertThat(MlaMapping.pickRecvConnections(mla(1, 2, 1, 0, 0, List.of(0, 4)), 0, mla(1, 1))).isEmpty();
    }

    @Test
    void pickingAcrossContextCpRanksIsRefused() {
        CacheState ctx = mla(1, 1, 2, 0, 0, null);
        CacheState gen = mla(1, 1);
        TargetRanks t = RankMapping.targetRanks(ctx, gen, 0);
        assertThat(t.domainCp()).isEqualTo(2);
        assertThatThrownBy(() -> MlaMapping.pickRecv(t, gen)).isInstanceOf(IllegalArgumentException.class)
                .hasMessageContaining("domainCp=2");
    }

    @Test
    void cpSplitIsContiguousWithExtrasOnLowRanks() {
        int[] counts = new int[4];
        int[] firsts = new int[4];
        for (int r = 0; r < 4; r++) {
            counts[r] = MlaMapping.blocksOfCpRank(10, 4, r);
            firsts[r] = MlaMapping.firstBlockOfCpRank(10, 4, r);
        }
        assertThat(counts).containsExactly(3, 3, 2, 2);
        assertThat(firsts).containsExactly(0, 3, 6, 8);
        // Fewer blocks than CP ranks: the high ranks get none.
        assertThat(MlaMapping.blocksOfCpRank(1, 4, 0)).isEqualTo(1);
        assertThat(MlaMapping.blocksOfCpRank(1, 4, 3)).isZero();
    }

    @Test
    void outputIndexIsCpSlotTimesDomainPpPlusPpSlot() {
        // ctx TP1 -> gen TP2 PP2 CP2: peers CP-major, then TP, then PP: 8 peers, 4 outputs.
        CacheState ctx = mla(1, 1);
        CacheState gen = mla(2, 2, 2, 0, 0, null);
        TargetRanks t = RankMapping.targetRanks(gen, ctx, 0);
        assertThat(t.domainTp()).isEqualTo(2);
        assertThat(t.domainPp()).isEqualTo(2);
        assertThat(t.domainCp()).isEqualTo(2);
        assertThat(MlaMapping.outputCount(t)).isEqualTo(4);
        int[] out = new int[t.size()];
        for (int p = 0; p < t.size(); p++) {
            out[p] = MlaMapping.outputIndex(t, p);
            int peer = t.peerRanks().get(p);
            assertThat(out[p]).isEqualTo(gen.cpRank(peer) * t.domainPp() + gen.ppRank(peer));
        }
        assertThat(out).containsExactly(0, 1, 0, 1, 2, 3, 2, 3);
        // Upstream's p % (domainPp * domainCp) would give [0,1,2,3,0,1,2,3] here: right only for its TP-major
        // enumeration. With domainTp == 1 both agree.
        TargetRanks t1 = RankMapping.targetRanks(mla(1, 2, 4, 0, 0, null), ctx, 0);
        assertThat(t1.domainTp()).isEqualTo(1);
        for (int p = 0; p < t1.size(); p++) {
            assertThat(MlaMapping.outputIndex(t1, p)).isEqualTo(p % (t1.domainPp() * t1.domainCp()));
        }
    }

    @Test
    void sameLayerRangeComparesFirstLayerAndCount() {
        CacheState a = mla(1, 2, 1, 0, 0, List.of(2, 2));
        CacheState b = mla(2, 2, 1, 0, 0, List.of(2, 2));
        CacheState c = mla(1, 2, 1, 0, 0, List.of(1, 3));
        assertThat(MlaMapping.sameLayerRange(a, 1, b, 3)).isTrue();
        assertThat(MlaMapping.sameLayerRange(a, 0, c, 0)).isFalse();
        assertThat(MlaMapping.sameLayerRange(a, 0, mla(1, 1), 0)).isFalse();
    }
}
