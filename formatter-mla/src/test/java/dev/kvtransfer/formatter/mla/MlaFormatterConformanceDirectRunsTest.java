package dev.kvtransfer.formatter.mla;

import dev.kvtransfer.api.format.FormatterProvider;
import dev.kvtransfer.api.model.AttentionType;
import dev.kvtransfer.api.model.DataType;
import dev.kvtransfer.testkit.FormatterConformanceTest;
import dev.kvtransfer.testkit.LayoutGrid;
import dev.kvtransfer.testkit.LayoutPair;
import dev.kvtransfer.testkit.LayoutGrid.Side;

/**
 * The conformance suite over a few MLA pairs with a realistic latent plane (8192 BF16 elements x 16 tokens =
 * 256 KiB per layer and block), so every run is at least {@link MlaCacheFormatter#DEFAULT_DIRECT_RUN_MIN_BYTES}
 * and moves per block straight between the caches, also where the layer ranges differ (PP re-sharding,
 * generation CP, DP); the small-shape grid of {@link MlaFormatterConformanceTest} takes the staged path.
 */
class MlaFormatterConformanceDirectRunsTest extends FormatterConformanceTest {
    @Override
    protected FormatterProvider provider() {
        return new MlaFormatterProvider();
    }

    @Override
    protected LayoutGrid grid() {
        LayoutGrid.Builder b = LayoutGrid.builder().attentionType(AttentionType.MLA).heads(1).kvFactor(null)
                .layers(4).sizePerHead(8192).tokensPerBlock(16).dataType(DataType.BFLOAT16)
                .promptLengths(30, 10, 50);
        b.pair(Side.of(1, 1), Side.of(1, 2));
        b.pair(Side.of(1, 2), Side.of(1, 1));
        b.pair(Side.of(2, 4).layers(1, 2, 1, 0), Side.of(1, 2).cp(2));
        b.pair(Side.of(4, 1), Side.of(2, 2).dp(2).cp(2));
        b.pair(Side.of(2, 2).dp(2), Side.of(1, 4));
        b.pair(Side.of(1, 1), Side.of(1, 1).cp(4));
        // Pool layouts in rotation (6 of the 25 combinations), and reuse of none, one and all blocks.
        return b.build().withPoolLayouts(LayoutGrid.mlaPoolLayouts(64)).withReuse(0, 1, LayoutPair.ALL_BLOCKS);
    }
}
