package dev.kvtransfer.api.layout;

import dev.kvtransfer.api.TestStates;
import dev.kvtransfer.api.model.CacheState;
import org.junit.jupiter.api.Nested;
import org.junit.jupiter.api.Test;

import java.util.List;

import static dev.kvtransfer.api.TestStates.dp;
import static dev.kvtransfer.api.TestStates.split;
import static dev.kvtransfer.api.TestStates.state;
import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatIllegalArgumentException;
import static org.assertj.core.api.Assertions.assertThatNullPointerException;

/**
 * Hand-worked target-rank cases. Each expectation was computed by hand from reference §2 with layout B
 * ({@code rank = pp*(TP*CP) + tp*CP + cp}, peers enumerated CP -> TP -> PP).
 */
class RankMappingTest {

    private static TargetRanks t(CacheState peer, CacheState self, int selfIndex) {
        return RankMapping.targetRanks(peer, self, selfIndex);
    }

    private static void domains(TargetRanks r, int tp, int pp, int cp, int dup, int peerDup) {
        assertThat(List.of(r.domainTp(), r.domainPp(), r.domainCp(), r.dupHeadFactor(), r.peerDupHeadFactor()))
                .as("domainTp, domainPp, domainCp, dupHeadFactor, peerDupHeadFactor")
                .containsExactly(tp, pp, cp, dup, peerDup);
        assertThat(r.size()).isEqualTo(tp * pp * cp);
    }

    @Test
    void referenceWorkedExampleTp1Pp1ToTp2Pp2() {
        CacheState ctx = state(1, 1, 1, 4, 4);
        CacheState gen = state(2, 2, 1, 4, 4);
        TargetRanks c0 = t(gen, ctx, 0);
        // ctx output buffers in iRanks order: (heads 0-1, layers 0-1) g0, (heads 0-1, layers 2-3) g2,
        // (heads 2-3, layers 0-1) g1, (heads 2-3, layers 2-3) g3.
        assertThat(c0.peerRanks()).containsExactly(0, 2, 1, 3);
        domains(c0, 2, 2, 1, 1, 1);
        assertThat(c0.peerPpDomainLayers()).containsExactly(2, 2);
        assertThat(c0.peerLayers(1)).isEqualTo(2);
        for (int g = 0; g < 4; g++) {
            TargetRanks r = t(ctx, gen, g);
            assertThat(r.peerRanks()).as("gen rank %d", g).containsExactly(0);
            domains(r, 1, 1, 1, 1, 1);
            assertThat(r.peerPpDomainLayers()).containsExactly(2);
        }
    }

    @Nested
    class TensorParallel {
        @Test
        void equalTpIsOneToOne() {
            CacheState ctx = state(2, 1, 1, 4, 4);
            CacheState gen = state(2, 1, 1, 4, 4);
            assertThat(t(ctx, gen, 0).peerRanks()).containsExactly(0);
            assertThat(t(ctx, gen, 1).peerRanks()).containsExactly(1);
            assertThat(t(gen, ctx, 1).peerRanks()).containsExactly(1);
            domains(t(gen, ctx, 1), 1, 1, 1, 1, 1);
            assertThat(t(gen, ctx, 1).peerPpDomainLayers()).containsExactly(4);
        }

        @Test
        void smallerContextTpFansOut() {
            CacheState ctx = state(1, 1, 1, 4, 4);
            CacheState gen = state(2, 1, 1, 4, 4);
            assertThat(t(gen, ctx, 0).peerRanks()).containsExactly(0, 1);
            domains(t(gen, ctx, 0), 2, 1, 1, 1, 1);
            assertThat(t(ctx, gen, 1).peerRanks()).containsExactly(0);
            domains(t(ctx, gen, 1), 1, 1, 1, 1, 1);
        }

        @Test
        void largerContextTpFansIn() {
            CacheState ctx = state(4, 1, 1, 4, 8);
            CacheState gen = state(1, 1, 1, 4, 8);
            assertThat(t(ctx, gen, 0).peerRanks()).containsExactly(0, 1, 2, 3);
            domains(t(ctx, gen, 0), 4, 1, 1, 1, 1);
            for (int c = 0; c < 4; c++) {
                assertThat(t(gen, ctx, c).peerRanks()).containsExactly(0);
            }
        }

        @Test
        void tp4ToTp2PairsNeighbours() {
            CacheState ctx = state(4, 1, 1, 4, 8);
            CacheState gen = state(2, 1, 1, 4, 8);
            // ctx: sG 4 > pG 2, tpStart = t / 2
            assertThat(t(gen, ctx, 2).peerRanks()).containsExactly(1);
            assertThat(t(gen, ctx, 3).peerRanks()).containsExactly(1);
            // gen: domainTp 2, tpStart = t * 2
            assertThat(t(ctx, gen, 1).peerRanks()).containsExactly(2, 3);
        }
    }

    @Nested
    class Pipeline {
        @Test
        void unevenContextPpToOneGenerationStage() {
            CacheState ctx = state(1, 4, 1, 10, 8);   // [3, 3, 2, 2]
            CacheState gen = state(1, 1, 1, 10, 8);   // [10]
            TargetRanks g0 = t(ctx, gen, 0);
            assertThat(g0.peerRanks()).containsExactly(0, 1, 2, 3);
            assertThat(g0.peerPpDomainLayers()).containsExactly(3, 3, 2, 2);
            domains(g0, 1, 4, 1, 1, 1);
            TargetRanks c2 = t(gen, ctx, 2);
            assertThat(c2.peerRanks()).containsExactly(0);
            assertThat(c2.peerPpDomainLayers()).containsExactly(2);
        }

        @Test
        void unevenSplitsOnBothSidesOverlapPartially() {
            CacheState ctx = state(1, 4, 1, 10, 8);   // [0,3) [3,6) [6,8) [8,10)
            CacheState gen = state(1, 2, 1, 10, 8);   // [0,5) [5,10)
            assertThat(t(ctx, gen, 0).peerRanks()).containsExactly(0, 1);
            assertThat(t(ctx, gen, 0).peerPpDomainLayers()).containsExactly(3, 2);
            assertThat(t(ctx, gen, 1).peerRanks()).containsExactly(1, 2, 3);
            assertThat(t(ctx, gen, 1).peerPpDomainLayers()).containsExactly(1, 2, 2);
            assertThat(t(gen, ctx, 1).peerRanks()).containsExactly(0, 1);
            assertThat(t(gen, ctx, 1).peerPpDomainLayers()).containsExactly(2, 1);
            assertThat(t(gen, ctx, 3).peerRanks()).containsExactly(1);
        }

        @Test
        void ppWithTpEnumeratesPpInnermost() {
            CacheState ctx = state(2, 1, 1, 4, 4);
            CacheState gen = state(1, 2, 1, 4, 4);
            // gen rank 1 = pp 1: layers [2, 4), both ctx TP ranks
            assertThat(t(ctx, gen, 1).peerRanks()).containsExactly(0, 1);
            // ctx rank 1 = tp 1: gen pp 0 then pp 1
            assertThat(t(gen, ctx, 1).peerRanks()).containsExactly(0, 1);
            domains(t(gen, ctx, 1), 1, 2, 1, 1, 1);
        }

        @Test
        void zeroLayerSelfRankGetsTheEmptyResult() {
            CacheState ctx = split(1, List.of(4, 0), 8);
            CacheState gen = state(1, 1, 1, 4, 8);
            TargetRanks c1 = t(gen, ctx, 1);
            assertThat(c1).isEqualTo(TargetRanks.EMPTY);
            assertThat(c1.isEmpty()).isTrue();
            domains(c1, 0, 0, 0, 1, 1);
            assertThat(c1.peerPpDomainLayers()).isEmpty();
            assertThat(t(gen, ctx, 0).peerRanks()).containsExactly(0);
            // the generation side never lists the empty context stage
            assertThat(t(ctx, gen, 0).peerRanks()).containsExactly(0);
            assertThat(t(ctx, gen, 0).peerPpDomainLayers()).containsExactly(4);
        }

        @Test
        void zeroLayerGenerationStage() {
            CacheState ctx = state(2, 1, 1, 4, 8);
            CacheState gen = split(2, List.of(0, 4), 8); // gen ranks 0, 1 own nothing
            assertThat(t(ctx, gen, 0)).isEqualTo(TargetRanks.EMPTY);
            assertThat(t(ctx, gen, 1)).isEqualTo(TargetRanks.EMPTY);
            assertThat(t(ctx, gen, 3).peerRanks()).containsExactly(1);
            assertThat(t(gen, ctx, 0).peerRanks()).containsExactly(2);
            assertThat(t(gen, ctx, 0).peerPpDomainLayers()).containsExactly(4);
        }

        @Test
        void zeroLayerStageInTheMiddleIsSkipped() {
            CacheState ctx = split(2, List.of(2, 0, 2), 8); // ranks 2, 3 own nothing
            CacheState gen = state(1, 1, 1, 4, 8);
            TargetRanks g0 = t(ctx, gen, 0);
            // tp 0: pp 0 (rank 0), pp 2 (rank 4); tp 1: pp 0 (rank 1), pp 2 (rank 5)
            assertThat(g0.peerRanks()).containsExactly(0, 4, 1, 5);
            assertThat(g0.peerPpDomainLayers()).containsExactly(2, 2);
            domains(g0, 2, 2, 1, 1, 1);
            assertThat(t(gen, ctx, 2)).isEqualTo(TargetRanks.EMPTY);
            assertThat(t(gen, ctx, 5).peerRanks()).containsExactly(0);
        }
    }

    @Nested
    class ContextParallel {
        @Test
        void generationCp2FromContextCp1() {
            CacheState ctx = state(1, 1, 1, 4, 4);
            CacheState gen = state(1, 1, 2, 4, 4);
            assertThat(t(gen, ctx, 0).peerRanks()).containsExactly(0, 1);
            domains(t(gen, ctx, 0), 1, 1, 2, 1, 1);
            assertThat(t(ctx, gen, 0).peerRanks()).containsExactly(0);
            assertThat(t(ctx, gen, 1).peerRanks()).containsExactly(0);
            domains(t(ctx, gen, 1), 1, 1, 1, 1, 1);
        }

        @Test
        void generationCp4FromContextCp1() {
            CacheState ctx = state(1, 1, 1, 4, 4);
            CacheState gen = state(1, 1, 4, 4, 4);
            assertThat(t(gen, ctx, 0).peerRanks()).containsExactly(0, 1, 2, 3);
            domains(t(gen, ctx, 0), 1, 1, 4, 1, 1);
            for (int g = 0; g < 4; g++) {
                assertThat(t(ctx, gen, g).peerRanks()).containsExactly(0);
            }
        }

        @Test
        void contextCp2ToGenerationCp1() {
            CacheState ctx = state(1, 1, 2, 4, 4);
            CacheState gen = state(1, 1, 1, 4, 4);
            assertThat(t(ctx, gen, 0).peerRanks()).containsExactly(0, 1);
            domains(t(ctx, gen, 0), 1, 1, 2, 1, 1);
            assertThat(t(gen, ctx, 1).peerRanks()).containsExactly(0);
        }

        @Test
        void contextCp2ToGenerationCp4() {
            CacheState ctx = state(1, 1, 2, 4, 4);
            CacheState gen = state(1, 1, 4, 4, 4);
            assertThat(t(gen, ctx, 1).peerRanks()).containsExactly(2, 3);
            assertThat(t(ctx, gen, 3).peerRanks()).containsExactly(1);
            assertThat(t(ctx, gen, 2).peerRanks()).containsExactly(1);
        }

        @Test
        void cpWithTpUsesLayoutB() {
            CacheState ctx = state(2, 1, 1, 4, 4);
            CacheState gen = state(2, 1, 2, 4, 4); // rank = tp * 2 + cp
            assertThat(t(gen, ctx, 1).peerRanks()).containsExactly(2, 3);
            assertThat(t(ctx, gen, 3).peerRanks()).containsExactly(1);
            assertThat(t(ctx, gen, 2).peerRanks()).containsExactly(1);
        }

        @Test
        void enumerationIsCpThenTpThenPp() {
            CacheState ctx = state(1, 1, 1, 4, 4);
            CacheState gen = state(2, 2, 2, 4, 4); // rank = pp * 4 + tp * 2 + cp
            TargetRanks c0 = t(gen, ctx, 0);
            assertThat(c0.peerRanks()).containsExactly(0, 4, 2, 6, 1, 5, 3, 7);
            domains(c0, 2, 2, 2, 1, 1);
            for (int p = 0; p < c0.size(); p++) {
                assertThat(gen.ppRank(c0.peerRanks().get(p))).isEqualTo(p % c0.domainPp());
            }
        }
    }

    @Nested
    class AttentionDp {
        @Test
        void generationDpShiftsTheContextTargetsToTheServingRank() {
            CacheState ctx = state(2, 1, 1, 4, 4);
            for (int dpRank = 0; dpRank < 2; dpRank++) {
                CacheState gen = dp(2, 1, 4, 4, dpRank, 2);
                for (int c = 0; c < 2; c++) {
                    TargetRanks r = t(gen, ctx, c);
                    assertThat(r.peerRanks()).as("ctx %d, gen dpRank %d", c, dpRank).containsExactly(dpRank);
                    domains(r, 1, 1, 1, 1, 1);
                }
                TargetRanks g = t(ctx, gen, dpRank);
                assertThat(g.peerRanks()).containsExactly(0, 1);
                domains(g, 2, 1, 1, 1, 1);
            }
        }

        @Test
        void contextDpShiftsTheGenerationTargetsIntoTheServingGroup() {
            // ctx TP4 in 2 DP groups of 2 ranks, 4 heads: 2 heads per rank inside a group
            CacheState gen = state(1, 1, 1, 4, 4);
            CacheState ctx0 = dp(4, 1, 4, 4, 0, 2);
            CacheState ctx1 = dp(4, 1, 4, 4, 1, 2);
            assertThat(t(ctx0, gen, 0).peerRanks()).containsExactly(0, 1);
            assertThat(t(ctx1, gen, 0).peerRanks()).containsExactly(2, 3);
            domains(t(ctx1, gen, 0), 2, 1, 1, 1, 1);
            assertThat(t(gen, ctx1, 3).peerRanks()).containsExactly(0);
            assertThat(t(gen, ctx1, 2).peerRanks()).containsExactly(0);
        }

        @Test
        void dpOnBothSides() {
            for (int genDp = 0; genDp < 2; genDp++) {
                CacheState gen = dp(2, 1, 4, 4, genDp, 2);
                CacheState ctx = dp(4, 1, 4, 4, 3, 4);
                for (int c = 0; c < 4; c++) {
                    assertThat(t(gen, ctx, c).peerRanks()).containsExactly(genDp);
                }
                // gen rank 1 asks the ctx rank of the serving ctx DP group (3)
                assertThat(t(ctx, gen, 1).peerRanks()).containsExactly(3);
            }
        }

        @Test
        void dpWithDuplicatedContextHeads() {
            // gen TP2 DP2 holds both heads per rank; ctx TP4 holds heads 0,0,1,1
            CacheState gen = dp(2, 1, 4, 2, 1, 2);
            CacheState ctx = state(4, 1, 1, 4, 2);
            TargetRanks g1 = t(ctx, gen, 1);
            assertThat(g1.peerRanks()).containsExactly(0, 1, 2, 3);
            domains(g1, 4, 1, 1, 1, 2);
        }
    }

    @Nested
    class HeadDuplication {
        @Test
        void contextTpAboveHeads() {
            CacheState ctx = state(4, 1, 1, 4, 2); // heads 0,0,1,1
            CacheState gen = state(1, 1, 1, 4, 2);
            TargetRanks g0 = t(ctx, gen, 0);
            assertThat(g0.peerRanks()).containsExactly(0, 1, 2, 3);
            domains(g0, 4, 1, 1, 1, 2);
            for (int c = 0; c < 4; c++) {
                TargetRanks r = t(gen, ctx, c);
                assertThat(r.peerRanks()).containsExactly(0);
                domains(r, 1, 1, 1, 2, 1);
            }
        }

        @Test
        void generationTpAboveHeads() {
            CacheState ctx = state(2, 1, 1, 4, 2);
            CacheState gen = state(4, 1, 1, 4, 2); // heads 0,0,1,1
            TargetRanks g3 = t(ctx, gen, 3);
            assertThat(g3.peerRanks()).containsExactly(1);
            domains(g3, 1, 1, 1, 2, 1);
            TargetRanks c1 = t(gen, ctx, 1);
            assertThat(c1.peerRanks()).containsExactly(2, 3);
            domains(c1, 2, 1, 1, 1, 2);
        }

        @Test
        void tp8OverTwoHeads() {
            CacheState ctx = state(8, 1, 1, 4, 2); // heads 0,0,0,0,1,1,1,1
            CacheState gen = state(2, 1, 1, 4, 2);
            TargetRanks g1 = t(ctx, gen, 1);
            assertThat(g1.peerRanks()).containsExactly(4, 5, 6, 7);
            domains(g1, 4, 1, 1, 1, 4);
            assertThat(ctx.firstGlobalHead(4)).isOne();
        }

        @Test
        void mlaDuplicatesOnEveryTpRank() {
            CacheState ctx = TestStates.mla(4, 1, 1, 4);
            CacheState gen = TestStates.mla(1, 1, 1, 4);
            domains(t(ctx, gen, 0), 4, 1, 1, 1, 4);
            domains(t(gen, ctx, 2), 1, 1, 1, 4, 1);
        }
    }

    @Test
    void rejectsMismatchedModelsAndBadIndexes() {
        CacheState a = state(1, 1, 1, 4, 4);
        CacheState b = state(1, 1, 1, 8, 4);
        assertThatIllegalArgumentException().isThrownBy(() -> t(a, b, 0)).withMessageContaining("layer counts");
        assertThatIllegalArgumentException().isThrownBy(() -> t(a, a, 1)).withMessageContaining("selfIndex 1");
        assertThatIllegalArgumentException().isThrownBy(() -> t(a, a, -1)).withMessageContaining("selfIndex -1");
        assertThatNullPointerException().isThrownBy(() -> t(null, a, 0)).withMessageContaining("peer");
    }
}
