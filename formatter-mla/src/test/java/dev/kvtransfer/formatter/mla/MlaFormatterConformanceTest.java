package dev.kvtransfer.formatter.mla;

import dev.kvtransfer.api.format.FormatterProvider;
import dev.kvtransfer.api.layout.PoolLayout;
import dev.kvtransfer.api.model.AttentionType;
import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.api.model.DataType;
import dev.kvtransfer.testkit.FormatterConformanceTest;
import dev.kvtransfer.testkit.LayoutGrid;
import dev.kvtransfer.testkit.LayoutPair;
import dev.kvtransfer.testkit.LayoutGrid.Side;

import java.util.List;

/**
 * The testkit's formatter conformance suite over the MLA grid (every layout pair a DeepSeek-style deployment
 * meets): context TP {1,2,4} x PP {1,2,4}, with
 * and without attention DP (dpSize = TP), to generation TP {1,2,4} x PP {1,2,4}, with and without attention DP,
 * x generation CP {1,2,4}, 5 layers (uneven over PP 2 and 4); plus attention DP with several TP ranks per DP
 * group, zero-layer PP ranks, upstream's 10-layer [3,3,2,2] pairs, and one refused pair per field
 * {@code inquireSupport} checks. The (context, generation) pool layouts rotate over block, layer-nhd, layer-hnd and
 * both layer kinds with a split nope/rope latent (25 combinations, each on about 40 pairs), and the requests reuse
 * none, all, one and three of their leading blocks. On top, every pool-layout pair (5 x 5, split latents with
 * different rope sizes on the two sides included) on four shapes. Every pair moves 4 concurrent requests through
 * the loopback transport and core's session and is checked byte for byte with KvPattern (head index 0). The
 * indexer-K pass is covered by {@link MlaFormatterIndexerConformanceTest} and {@link MlaTransferGridTest}. The push
 * and layer-wise rules run over every 41st pair of the rotated grid (every pool-layout combination in turn, reuse
 * none / all / some) plus every pool-layout pair on two of the four shapes (TP2 to TP1 CP2, PP2 to TP2 DP2).
 */
class MlaFormatterConformanceTest extends FormatterConformanceTest {
    @Override
    protected FormatterProvider provider() {
        return new MlaFormatterProvider();
    }

    @Override
    protected LayoutGrid grid() {
        return mlaGrid().withPoolLayouts(LayoutGrid.mlaPoolLayouts(1)).withReuse(0, LayoutPair.ALL_BLOCKS, 1, 3)
                .plus(poolShapes().everyPoolLayoutPair(mixedRopePoolLayouts()).withReuse(1, 0, 2,
                        LayoutPair.ALL_BLOCKS));
    }

    @Override
    protected LayoutGrid pushGrid() {
        List<LayoutPair> shapes = poolShapes().supported();
        return mlaGrid().withPoolLayouts(LayoutGrid.mlaPoolLayouts(1)).withReuse(0, LayoutPair.ALL_BLOCKS, 1, 3)
                .sample(41)
                .plus(LayoutGrid.of(List.of(shapes.get(2), shapes.get(3))).everyPoolLayoutPair(mixedRopePoolLayouts())
                        .withReuse(1, 0, 2, LayoutPair.ALL_BLOCKS));
    }

    /** Block, both layer kinds, and both layer kinds split with different rope sizes (1 and 3 of 4 dims). */
    static List<PoolLayout> mixedRopePoolLayouts() {
        return List.of(PoolLayout.BLOCK, PoolLayout.LAYER_NHD, PoolLayout.LAYER_HND,
                new PoolLayout(PoolLayout.Kind.LAYER_NHD, 1), new PoolLayout(PoolLayout.Kind.LAYER_HND, 3));
    }

    /** Four shapes for every pool-layout pair: same layout, PP re-sharding, generation CP with TP, DP and PP. */
    static LayoutGrid poolShapes() {
        LayoutGrid.Builder b = LayoutGrid.builder().attentionType(AttentionType.MLA).heads(1).kvFactor(null)
                .layers(5).dataTypes(DataType.FLOAT16, DataType.INT8, DataType.FLOAT32);
        b.pair(Side.of(1, 1), Side.of(1, 1));
        b.pair(Side.of(1, 1), Side.of(1, 2));
        b.pair(Side.of(2, 1), Side.of(1, 1).cp(2));
        b.pair(Side.of(1, 2), Side.of(2, 1).dp(2));
        return b.build();
    }

    static LayoutGrid mlaGrid() {
        LayoutGrid.Builder b = LayoutGrid.builder().attentionType(AttentionType.MLA).heads(1).kvFactor(null)
                .layers(5).dataTypes(DataType.FLOAT16, DataType.INT8, DataType.FLOAT32);
        int[] v = {1, 2, 4};
        for (int ctp : v) {
            for (int cpp : v) {
                for (int cdp : new int[] {0, ctp}) {
                    for (int gtp : v) {
                        for (int gpp : v) {
                            for (int gdp : new int[] {0, gtp}) {
                                for (int gcp : v) {
                                    b.pair(side(ctp, cpp, cdp), side(gtp, gpp, gdp).cp(gcp));
                                }
                            }
                        }
                    }
                }
            }
        }
        // Attention DP with more than one TP rank per DP group, on either side (upstream refuses a DP
        // generation side unless TP == dpSize).
        b.pair(Side.of(4, 1), Side.of(4, 1).dp(2));
        b.pair(Side.of(4, 2), Side.of(4, 1).dp(2).cp(2));
        b.pair(Side.of(4, 1).dp(2), Side.of(4, 2).dp(2));
        b.pair(Side.of(4, 1).dp(2), Side.of(2, 1).dp(1));
        b.pair(Side.of(2, 2).dp(1), Side.of(4, 1).dp(4).cp(4));
        b.pair(Side.of(1, 1), Side.of(4, 4).dp(2));
        // Zero-layer PP ranks on either side.
        b.pair(Side.of(1, 4).layers(2, 3, 0, 0), Side.of(2, 2));
        b.pair(Side.of(2, 4).layers(0, 1, 1, 3), Side.of(1, 4).dp(1).cp(2));
        b.pair(Side.of(1, 2), Side.of(4, 4).layers(0, 2, 3, 0).dp(4));
        b.pair(Side.of(2, 2).layers(5, 0), Side.of(1, 1).cp(4));
        // A zero-layer rank between two ranks that overlap the peer's range (a gap in the PP domain).
        b.pair(Side.of(1, 4).layers(2, 0, 3, 0), Side.of(1, 1));
        b.pair(Side.of(2, 4).layers(2, 0, 3, 0), Side.of(1, 2).layers(1, 4).cp(2));
        b.pair(Side.of(1, 1), Side.of(2, 4).layers(1, 0, 4, 0).dp(2));
        // Upstream's EvenLayer MLA pairs: 10 layers over 4 stages [3,3,2,2], generation DP off and on.
        b.layers(10);
        b.pair(Side.of(1, 4), Side.of(4, 1));
        b.pair(Side.of(1, 4), Side.of(4, 1).dp(4));
        b.pair(Side.of(4, 1), Side.of(1, 4));
        b.pair(Side.of(4, 1).dp(4), Side.of(1, 4));
        b.layers(5);
        addRejections(b);
        return b.build();
    }

    private static Side side(int tp, int pp, int dpSize) {
        return dpSize > 0 ? Side.of(tp, pp).dp(dpSize) : Side.of(tp, pp);
    }

    /** One refused pair per rule of {@link MlaSupport} that a valid MLA {@link CacheState} can break. */
    private static void addRejections(LayoutGrid.Builder b) {
        b.dataType(DataType.FLOAT16);
        CacheState base = b.state(Side.of(1, 1));
        b.unsupported("dataType", base, b.copy().dataType(DataType.BFLOAT16).state(Side.of(2, 1)));
        b.unsupported("tokensPerBlock", base, b.copy().tokensPerBlock(32).state(Side.of(1, 1)));
        b.unsupported("sizePerHead", base, b.copy().sizePerHead(8).state(Side.of(1, 2)));
        b.unsupported("layers", base, b.copy().layers(6).state(Side.of(1, 1)));
        b.unsupported("attentionType", base, b.copy().attentionType(AttentionType.DEFAULT).heads(4)
                .state(Side.of(1, 1)));
        b.unsupported("contextParallelism", b.state(Side.of(1, 1).cp(2)), b.state(Side.of(2, 1).cp(4)));
    }
}
