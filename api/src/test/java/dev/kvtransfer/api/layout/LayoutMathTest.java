package dev.kvtransfer.api.layout;

import dev.kvtransfer.api.TestStates;
import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.api.model.DataType;
import org.junit.jupiter.api.Test;

import java.util.List;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatExceptionOfType;
import static org.assertj.core.api.Assertions.assertThatIllegalArgumentException;

/** {@link BlockLayout} offsets and {@link BlockDistribution} over CP ranks, worked by hand. */
class LayoutMathTest {

    @Test
    void blockLayoutIsLayerKvHeadTokenDim() {
        // 2 layers, K+V, 3 heads, 4 tokens, 5 dims, 2-byte elements
        BlockLayout l = new BlockLayout(2, 2, 3, 4, 5, 2);
        assertThat(l.headBytes()).isEqualTo(4 * 5 * 2);
        assertThat(l.planeBytes()).isEqualTo(3 * 40);
        assertThat(l.layerBytes()).isEqualTo(2 * 120);
        assertThat(l.blockBytes()).isEqualTo(2 * 240);
        assertThat(l.offset(0, 0, 0, 0, 0)).isZero();
        assertThat(l.offset(0, 0, 0, 0, 1)).isEqualTo(2);
        assertThat(l.offset(0, 0, 0, 1, 0)).isEqualTo(10);
        assertThat(l.offset(0, 0, 1, 0, 0)).isEqualTo(40);
        assertThat(l.offset(0, 1, 0, 0, 0)).isEqualTo(120);
        assertThat(l.offset(1, 0, 0, 0, 0)).isEqualTo(240);
        assertThat(l.offset(1, 1, 2, 3, 4)).isEqualTo(l.blockBytes() - 2);
    }

    @Test
    void blockLayoutOfARank() {
        CacheState s = TestStates.base(4, 2, 1, 10, 8).dataType(DataType.FLOAT32)
                .attentionLayersPerPp(List.of(7, 3)).build();
        BlockLayout pp1 = BlockLayout.of(s, s.rankOf(1, 3, 0));
        assertThat(pp1).isEqualTo(new BlockLayout(3, 2, 2, 8, 4, 4));
        BlockLayout empty = BlockLayout.of(TestStates.split(1, List.of(4, 0), 8), 1);
        assertThat(empty.localLayers()).isZero();
        assertThat(empty.blockBytes()).isZero();
    }

    @Test
    void blockLayoutRejectsNonsense() {
        assertThatIllegalArgumentException().isThrownBy(() -> new BlockLayout(1, 3, 1, 1, 1, 1))
                .withMessageContaining("kv=3");
        assertThatIllegalArgumentException().isThrownBy(() -> new BlockLayout(-1, 2, 1, 1, 1, 1))
                .withMessageContaining("layers=-1");
    }

    @Test
    void offsetsDoNotOverflowInt() {
        BlockLayout big = new BlockLayout(64, 2, 128, 256, 256, 4);
        assertThat(big.blockBytes()).isEqualTo(64L * 2 * 128 * 256 * 256 * 4).isGreaterThan(Integer.MAX_VALUE);
        assertThat(big.offset(63, 1, 127, 255, 255)).isEqualTo(big.blockBytes() - 4);
    }

    @Test
    void contiguousCpDistributionGivesExtrasToTheLowestRanks() {
        int[] counts = new int[4];
        int[] firsts = new int[4];
        for (int r = 0; r < 4; r++) {
            counts[r] = BlockDistribution.count(10, 4, r);
            firsts[r] = BlockDistribution.firstGlobalBlock(10, 4, r);
        }
        assertThat(counts).containsExactly(3, 3, 2, 2);
        assertThat(firsts).containsExactly(0, 3, 6, 8);
        assertThat(BlockDistribution.count(1, 2, 1)).isZero();
        assertThat(BlockDistribution.firstGlobalBlock(1, 2, 1)).isEqualTo(1);
        assertThat(BlockDistribution.blocksFor(17, 8)).isEqualTo(3);
        assertThat(BlockDistribution.blocksFor(16, 8)).isEqualTo(2);
        assertThat(BlockDistribution.blocksFor(0, 8)).isZero();
    }

    @Test
    void emptyTargetsHaveNoPeerLayers() {
        assertThatExceptionOfType(IndexOutOfBoundsException.class)
                .isThrownBy(() -> TargetRanks.EMPTY.peerLayers(0));
    }
}
