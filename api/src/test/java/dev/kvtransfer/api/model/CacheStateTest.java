package dev.kvtransfer.api.model;

import dev.kvtransfer.api.TestStates;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

import java.util.List;
import java.util.function.UnaryOperator;

import static dev.kvtransfer.api.TestStates.base;
import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatIllegalArgumentException;

class CacheStateTest {

    private static void rejected(CacheState.Builder b, String... fragments) {
        assertThatIllegalArgumentException().isThrownBy(b::build).satisfies(e -> {
            for (String f : fragments) {
                assertThat(e.getMessage()).contains(f);
            }
        });
    }

    private static CacheState.Builder valid() {
        return base(2, 2, 1, 8, 8);
    }

    private static CacheState.Builder valid(UnaryOperator<CacheState.Builder> change) {
        return change.apply(valid());
    }

    @Test
    void aValidStateBuilds() {
        CacheState s = valid().build();
        assertThat(s.worldSize()).isEqualTo(4);
        assertThat(s.kvFactor()).isEqualTo(2);
        assertThat(s.dataType()).isEqualTo(DataType.FLOAT16);
        assertThat(s.attentionDpEnabled()).isFalse();
        assertThat(s.dpRank()).isZero();
        assertThat(s.dpSize()).isOne();
    }

    @ParameterizedTest(name = "TP = {0}")
    @CsvSource({"0", "-1", "-2147483648"})
    void tensorParallelismBelowOneIsRejected(int v) {
        rejected(valid(b -> b.tensorParallelism(v)), "tensorParallelism = " + v);
    }

    @ParameterizedTest(name = "PP = {0}")
    @CsvSource({"0", "-3"})
    void pipelineParallelismBelowOneIsRejected(int v) {
        rejected(valid(b -> b.pipelineParallelism(v).attentionLayersPerPp(null)), "pipelineParallelism = " + v);
    }

    @ParameterizedTest(name = "CP = {0}")
    @CsvSource({"0", "-4"})
    void contextParallelismBelowOneIsRejected(int v) {
        rejected(valid(b -> b.contextParallelism(v)), "contextParallelism = " + v);
    }

    @Test
    void parallelismAboveTheLimitIsRejected() {
        rejected(valid(b -> b.tensorParallelism(8192)), "tensorParallelism = 8192");
    }

    @ParameterizedTest(name = "CP = {0}")
    @CsvSource({"3", "6", "12"})
    void contextParallelismMustBeAPowerOfTwo(int v) {
        rejected(valid(b -> b.contextParallelism(v)), "contextParallelism = " + v, "power of two");
    }

    @Test
    void tensorParallelismMustBeAPowerOfTwoWithoutDp() {
        rejected(base(3, 1, 1, 4, 3), "tensorParallelism = 3", "power of two");
    }

    @Test
    void tpPerDpGroupMustBeAPowerOfTwo() {
        // TP 6 = 2 DP groups of 3 ranks.
        rejected(base(6, 1, 1, 4, 6).attentionDp(true, 0, 2), "tensorParallelism/dpSize = 3", "power of two");
        // TP 6 = 6 DP groups of 1 rank is fine: the group size is what has to be a power of two.
        assertThat(base(6, 1, 1, 4, 6).attentionDp(true, 5, 6).build().tpPerDpGroup()).isOne();
    }

    @Test
    void layersPerPpMustSumToTheLayerCount() {
        rejected(base(1, 2, 1, 10, 8).attentionLayersPerPp(List.of(3, 3)), "attentionLayersPerPp = [3, 3]",
                "sums to 6", "10 layers");
        rejected(base(1, 2, 1, 10, 8).attentionLayersPerPp(List.of(6, 5)), "attentionLayersPerPp = [6, 5]",
                "sums to 11");
    }

    @Test
    void layersPerPpNeedsOneEntryPerPpRank() {
        rejected(base(1, 2, 1, 10, 8).attentionLayersPerPp(List.of(10)), "attentionLayersPerPp = [10]",
                "one entry per PP rank (2)");
    }

    @Test
    void layersPerPpMustNotBeNegative() {
        rejected(base(1, 2, 1, 10, 8).attentionLayersPerPp(List.of(12, -2)), "attentionLayersPerPp[1] = -2");
    }

    @ParameterizedTest(name = "TP {0}, heads {1}")
    @CsvSource({"4, 6", "8, 3", "8, 12", "2, 3"})
    void headsMustDivideByTpOrTpByHeads(int tp, int heads) {
        rejected(base(tp, 1, 1, 4, heads), "kvHeadsPerLayer[0] = " + heads, "TP group size " + tp);
    }

    @Test
    void everyLayerIsCheckedForHeads() {
        rejected(base(4, 1, 1, 4, 8).kvHeadsPerLayer(List.of(8, 8, 6, 8)), "kvHeadsPerLayer[2] = 6");
    }

    @Test
    void headsBelowOneAreRejected() {
        rejected(base(1, 1, 1, 4, 0), "kvHeadsPerLayer[0] = 0");
    }

    @Test
    void aModelNeedsLayers() {
        rejected(CacheState.builder().kvHeadsPerLayer(List.of()).sizePerHead(4).tokensPerBlock(8),
                "kvHeadsPerLayer.size = 0");
        assertThatIllegalArgumentException().isThrownBy(() -> CacheState.builder().uniformKvHeads(0, 8))
                .withMessageContaining("layers").withMessageContaining("0");
    }

    @Test
    void sizePerHeadAndTokensPerBlockMustBePositive() {
        rejected(valid(b -> b.sizePerHead(0)), "sizePerHead = 0");
        rejected(valid(b -> b.tokensPerBlock(-8)), "tokensPerBlock = -8");
    }

    @ParameterizedTest(name = "TP {0}, dpSize {1}")
    @CsvSource({"4, 3", "2, 4", "4, 0", "4, -2"})
    void dpSizeMustDivideTp(int tp, int dpSize) {
        rejected(base(tp, 1, 1, 4, 8).attentionDp(true, 0, dpSize), "dpSize = " + dpSize);
    }

    @ParameterizedTest(name = "dpRank {0} of 4")
    @CsvSource({"4", "5", "-1"})
    void dpRankMustBeInsideDpSize(int dpRank) {
        rejected(base(4, 1, 1, 4, 8).attentionDp(true, dpRank, 4), "dpRank = " + dpRank, "dpSize=4");
    }

    @Test
    void dpFieldsMustBeNeutralWhenDpIsOff() {
        rejected(valid(b -> b.attentionDp(false, 1, 2)), "dpRank = 1", "attention DP is off");
        rejected(valid(b -> b.attentionDp(false, 0, 2)), "dpSize = 2", "attention DP is off");
    }

    @ParameterizedTest(name = "kvFactor {0}")
    @CsvSource({"0", "3", "-1"})
    void kvFactorMustBeOneOrTwo(int kvFactor) {
        rejected(valid(b -> b.kvFactor(kvFactor)), "kvFactor = " + kvFactor, "1 or 2");
    }

    @Test
    void mlaNeedsKvFactorOneAndOneHead() {
        rejected(base(2, 1, 1, 4, 1).attentionType(AttentionType.MLA).kvFactor(2), "kvFactor = 2", "MLA");
        rejected(base(2, 1, 1, 4, 2).attentionType(AttentionType.MLA), "kvHeadsPerLayer[0] = 2", "MLA");
        CacheState mla = TestStates.mla(2, 1, 1, 4);
        assertThat(mla.kvFactor()).as("MLA default kvFactor").isOne();
        assertThat(base(2, 1, 1, 4, 2).kvFactor(1).build().kvFactor()).as("K-only DEFAULT is allowed").isOne();
    }

    @Test
    void nullsAreRejectedAtTheBoundary() {
        org.assertj.core.api.Assertions.assertThatNullPointerException()
                .isThrownBy(() -> CacheState.builder().dataType(null)).withMessageContaining("dataType");
        org.assertj.core.api.Assertions.assertThatNullPointerException()
                .isThrownBy(() -> CacheState.builder().kvHeadsPerLayer(java.util.Arrays.asList(1, null)));
    }

    @Test
    void defaultLayerSplitGivesTheRemainderToTheFirstRanks() {
        assertThat(TestStates.state(1, 4, 1, 10, 8).attentionLayersPerPp()).containsExactly(3, 3, 2, 2);
        assertThat(TestStates.state(1, 4, 1, 5, 8).attentionLayersPerPp()).containsExactly(2, 1, 1, 1);
        assertThat(TestStates.state(1, 4, 1, 8, 8).attentionLayersPerPp()).containsExactly(2, 2, 2, 2);
        assertThat(TestStates.state(1, 1, 1, 7, 8).attentionLayersPerPp()).containsExactly(7);
        assertThat(TestStates.state(1, 4, 1, 2, 8).attentionLayersPerPp())
                .as("more PP ranks than layers leaves the last ranks empty").containsExactly(1, 1, 0, 0);
        assertThat(CacheState.evenLayerSplit(10, 4)).containsExactly(3, 3, 2, 2);
    }

    @Test
    void explicitSplitMayHoldAZeroLayerRank() {
        CacheState s = TestStates.split(1, List.of(4, 0), 8);
        assertThat(s.attentionLayersPerPp()).containsExactly(4, 0);
        assertThat(s.firstLayer(0)).isZero();
        assertThat(s.firstLayer(1)).isEqualTo(4);
        assertThat(s.layerCount(1)).isZero();
    }

    @Test
    void firstLayerIsThePrefixSum() {
        CacheState s = TestStates.state(1, 4, 1, 10, 8);
        assertThat(List.of(s.firstLayer(0), s.firstLayer(1), s.firstLayer(2), s.firstLayer(3)))
                .containsExactly(0, 3, 6, 8);
        assertThatIllegalArgumentException().isThrownBy(() -> s.firstLayer(4)).withMessageContaining("ppRank 4");
        assertThatIllegalArgumentException().isThrownBy(() -> s.layerCount(-1)).withMessageContaining("ppRank -1");
    }

    @Test
    void mlaHoldsOneHeadOnEveryRank() {
        CacheState s = TestStates.mla(4, 1, 1, 4);
        for (int tp = 0; tp < 4; tp++) {
            assertThat(s.firstGlobalHead(tp)).isZero();
        }
        assertThat(s.kvHeadsPerRank()).isOne();
        assertThat(s.headDuplication()).isEqualTo(4);
    }

    @Test
    void attentionDpWithOneRankPerGroupHoldsAllHeads() {
        CacheState s = TestStates.dp(4, 1, 4, 8, 2, 4);
        assertThat(s.tpPerDpGroup()).isOne();
        assertThat(s.kvHeadsPerRank()).isEqualTo(8);
        for (int tp = 0; tp < 4; tp++) {
            assertThat(s.firstGlobalHead(tp)).isZero();
        }
        assertThat(s.headDuplication()).isOne();
    }

    @Test
    void attentionDpWithLargerGroupsSplitsHeadsInsideTheGroup() {
        CacheState s = TestStates.dp(4, 1, 4, 8, 1, 2);
        assertThat(s.tpPerDpGroup()).isEqualTo(2);
        assertThat(s.kvHeadsPerRank()).isEqualTo(4);
        assertThat(List.of(s.firstGlobalHead(0), s.firstGlobalHead(1), s.firstGlobalHead(2), s.firstGlobalHead(3)))
                .containsExactly(0, 4, 0, 4);
    }

    @Test
    void tpNotAboveHeadsSplitsHeadsEvenly() {
        CacheState s = TestStates.state(4, 1, 1, 4, 8);
        assertThat(s.kvHeadsPerRank()).isEqualTo(2);
        assertThat(List.of(s.firstGlobalHead(0), s.firstGlobalHead(1), s.firstGlobalHead(2), s.firstGlobalHead(3)))
                .containsExactly(0, 2, 4, 6);
        assertThat(s.headDuplication()).isOne();
        assertThat(TestStates.state(8, 1, 1, 4, 8).kvHeadsPerRank()).as("TP == H").isOne();
    }

    @Test
    void tpAboveHeadsDuplicatesOneHead() {
        CacheState s = TestStates.state(8, 1, 1, 4, 2);
        assertThat(s.kvHeadsPerRank()).isOne();
        assertThat(s.headDuplication()).isEqualTo(4);
        int[] heads = new int[8];
        for (int tp = 0; tp < 8; tp++) {
            heads[tp] = s.firstGlobalHead(tp);
        }
        // rank tpRank holds head tpRank / (TP/H)
        assertThat(heads).containsExactly(0, 0, 0, 0, 1, 1, 1, 1);
        assertThatIllegalArgumentException().isThrownBy(() -> s.firstGlobalHead(8)).withMessageContaining("tpRank 8");
    }

    @Test
    void nonUniformHeadsAreKeptPerLayer() {
        CacheState s = base(2, 1, 1, 3, 8).kvHeadsPerLayer(List.of(8, 4, 2)).build();
        assertThat(s.uniformHeads()).isFalse();
        assertThat(s.kvHeadsPerRank(0)).isEqualTo(4);
        assertThat(s.kvHeadsPerRank(2)).isEqualTo(1);
        org.assertj.core.api.Assertions.assertThatIllegalStateException().isThrownBy(s::kvHeadsPerRank)
                .withMessageContaining("[8, 4, 2]");
    }

    @Test
    void rankLayoutIsCpFastestThenTpThenPp() {
        CacheState s = TestStates.state(2, 2, 2, 4, 4);
        // rank = pp * (TP*CP) + tp * CP + cp
        assertThat(s.rankOf(1, 0, 1)).isEqualTo(5);
        assertThat(s.ppRank(5)).isOne();
        assertThat(s.tpRank(5)).isZero();
        assertThat(s.cpRank(5)).isOne();
        for (int r = 0; r < s.worldSize(); r++) {
            assertThat(s.rankOf(s.ppRank(r), s.tpRank(r), s.cpRank(r))).isEqualTo(r);
            assertThat(r).isEqualTo(s.ppRank(r) * 4 + s.tpRank(r) * 2 + s.cpRank(r));
        }
        assertThatIllegalArgumentException().isThrownBy(() -> s.tpRank(8)).withMessageContaining("rank 8");
        assertThatIllegalArgumentException().isThrownBy(() -> s.rankOf(0, 2, 0)).withMessageContaining("tp=2");
    }

    @Test
    void toBuilderAndWithDpRankKeepEverythingElse() {
        CacheState s = base(4, 2, 2, 10, 8).attentionDp(true, 1, 2).dataType(DataType.BFLOAT16).blockReuse(true)
                .attentionLayersPerPp(List.of(7, 3)).build();
        assertThat(s.toBuilder().build()).isEqualTo(s).hasSameHashCodeAs(s);
        CacheState other = s.withDpRank(0);
        assertThat(other.dpRank()).isZero();
        assertThat(other).isNotEqualTo(s);
        assertThat(other.withDpRank(1)).isEqualTo(s);
        assertThat(s.toString()).contains("TP4", "PP2", "CP2", "DP1/2", "[7, 3]", "BFLOAT16", "reuse");
    }

    @Test
    void listsAreImmutableCopies() {
        java.util.List<Integer> heads = new java.util.ArrayList<>(List.of(8, 8));
        CacheState s = base(1, 1, 1, 2, 8).kvHeadsPerLayer(heads).build();
        heads.set(0, 4);
        assertThat(s.kvHeadsPerLayer()).containsExactly(8, 8);
        org.assertj.core.api.Assertions.assertThatThrownBy(() -> s.kvHeadsPerLayer().set(0, 1))
                .isInstanceOf(UnsupportedOperationException.class);
    }
}
