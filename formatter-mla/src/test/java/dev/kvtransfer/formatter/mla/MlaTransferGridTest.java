package dev.kvtransfer.formatter.mla;

import dev.kvtransfer.api.model.DataType;
import org.junit.jupiter.api.DynamicTest;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestFactory;

import java.util.ArrayList;
import java.util.List;
import java.util.stream.Stream;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * The MLA grid (every layout pair a DeepSeek-style deployment meets), end to end in one JVM ({@link MlaGridRunner}):
 * context TP {1,2,4} x PP {1,2,4}, with and without attention DP, to generation TP {1,2,4} x PP {1,2,4}, with and
 * without attention DP, x generation CP {1,2,4}, 5 layers (uneven over PP 2 and 4), with and without an indexer-K pool;
 * byte-exact with KvPattern. A second grid covers what the first does not: attention DP with more than one TP rank per
 * DP group on either side, PP splits with zero-layer ranks, and other element types.
 */
class MlaTransferGridTest {
    private static final int LAYERS = 5;
    private static final int INDEXER_DIM = 12;

    private static List<MlaPair.Side> sides(boolean withCp, boolean generalDp, boolean skewedLayers) {
        List<MlaPair.Side> out = new ArrayList<>();
        int[] cps = withCp ? new int[] {1, 2, 4} : new int[] {1};
        for (int tp : new int[] {1, 2, 4}) {
            List<Integer> dps = new ArrayList<>();
            if (generalDp) {
                // TP per DP group > 1: beyond upstream's "generation DP needs TP == dpSize".
                if (tp == 4) {
                    dps.add(2);
                    dps.add(1);
                }
                if (tp == 2) {
                    dps.add(1);
                }
            } else {
                dps.add(0);
                dps.add(tp);
            }
            for (int pp : new int[] {1, 2, 4}) {
                List<List<Integer>> splits = new ArrayList<>();
                if (skewedLayers) {
                    if (pp == 2) {
                        splits.add(List.of(1, 4));
                    } else if (pp == 4) {
                        splits.add(List.of(2, 0, 3, 0));
                        splits.add(List.of(2, 3, 0, 0));
                        splits.add(List.of(0, 1, 1, 3));
                    } else {
                        continue;
                    }
                } else {
                    splits.add(null);
                }
                for (int cp : cps) {
                    for (int dp : dps) {
                        for (List<Integer> split : splits) {
                            out.add(new MlaPair.Side(tp, pp, cp, dp, split));
                        }
                    }
                }
            }
        }
        return out;
    }

    @TestFactory
    Stream<DynamicTest> issueGrid() {
        List<MlaPair> pairs = new ArrayList<>();
        for (MlaPair.Side ctx : sides(false, false, false)) {
            for (MlaPair.Side gen : sides(true, false, false)) {
                for (int indexer : new int[] {0, INDEXER_DIM}) {
                    pairs.add(new MlaPair(ctx, gen, LAYERS, DataType.FLOAT16, indexer));
                }
            }
        }
        assertThat(pairs).hasSize(18 * 54 * 2);
        return pairs.stream().map(p -> DynamicTest.dynamicTest(p.toString(), () -> MlaGridRunner.run(p)));
    }

    @TestFactory
    Stream<DynamicTest> issueGridWithEveryRunMovedDirectly() {
        // Threshold 1 byte: every PP slot moves per block straight between the caches (the path large models
        // take), never staged.
        List<MlaPair> pairs = new ArrayList<>();
        int k = 0;
        for (MlaPair.Side ctx : sides(false, false, false)) {
            for (MlaPair.Side gen : sides(true, false, false)) {
                pairs.add(new MlaPair(ctx, gen, LAYERS, DataType.FLOAT16, k++ % 2 == 0 ? 0 : INDEXER_DIM));
            }
        }
        return pairs.stream().map(p -> DynamicTest.dynamicTest(p.toString(), () -> {
            MlaGridRunner.Stats s = MlaGridRunner.run(p, 1);
            assertThat(s.stagingCalls()).as("staging calls").isZero();
        }));
    }

    @TestFactory
    Stream<DynamicTest> generalDpAndSkewedLayers() {
        List<MlaPair> pairs = new ArrayList<>();
        List<MlaPair.Side> ctxSides = new ArrayList<>(sides(false, true, false));
        ctxSides.addAll(sides(false, false, true));
        List<MlaPair.Side> genSides = new ArrayList<>(sides(true, true, false));
        genSides.addAll(sides(true, false, true));
        DataType[] types = {DataType.FLOAT16, DataType.INT8, DataType.FLOAT32, DataType.BFLOAT16};
        int k = 0;
        for (MlaPair.Side ctx : ctxSides) {
            for (MlaPair.Side gen : genSides) {
                // Element type and indexer pool alternate instead of multiplying the grid: they do not
                // interact with the rank mapping.
                pairs.add(new MlaPair(ctx, gen, LAYERS, types[k % types.length], (k / types.length) % 2 == 0
                        ? 0 : INDEXER_DIM));
                k++;
            }
        }
        return pairs.stream().map(p -> DynamicTest.dynamicTest(p.toString(), () -> MlaGridRunner.run(p)));
    }

    @Test
    void nonDesignatedContextRanksSendNoPayload() {
        // Context TP4 -> generation TP1: only TP rank 0 of each request's group sends.
        MlaPair.Side ctx = new MlaPair.Side(4, 1, 1, 0, null);
        MlaPair.Side gen = new MlaPair.Side(1, 1, 1, 0, null);
        MlaGridRunner.Stats s = MlaGridRunner.run(new MlaPair(ctx, gen, LAYERS, DataType.FLOAT16, 0));
        assertThat(s.senders()).isEqualTo(s.requests());
        assertThat(s.silentCtxRanks()).isEqualTo(3 * s.requests());
    }

    @Test
    void identicalLayerRangesMoveWholeBlocksWithoutStaging() {
        // TP2PP2 -> TP1PP2 (gen CP 2): every pair of ranks holds the same layers, so nothing is staged and each
        // block travels as its own part.
        MlaPair.Side ctx = new MlaPair.Side(2, 2, 1, 0, null);
        MlaPair.Side gen = new MlaPair.Side(1, 2, 2, 0, null);
        MlaGridRunner.Stats s = MlaGridRunner.run(new MlaPair(ctx, gen, LAYERS, DataType.FLOAT16, INDEXER_DIM));
        assertThat(s.stagingCalls()).isZero();
        // Requests of 5 and 3 blocks, 2 PP stages, main and indexer pass: one part per block per pass.
        assertThat(s.parts()).isEqualTo((5 + 3) * 2 * 2);
    }

    @Test
    void runsFromTheThresholdUpMoveDirectlyTheRestIsStaged() {
        // TP1PP1 -> TP1PP2, 5 layers of 4 tokens x 6 x 2 B = 48 B: PP slot 0 shares 3 layers (144 B per block),
        // slot 1 shares 2 (96 B). With a 100 B threshold slot 0 goes per block, slot 1 is staged.
        MlaPair.Side ctx = new MlaPair.Side(1, 1, 1, 0, null);
        MlaPair.Side gen = new MlaPair.Side(1, 2, 1, 0, null);
        MlaGridRunner.Stats s = MlaGridRunner.run(new MlaPair(ctx, gen, LAYERS, DataType.FLOAT16, 0), 100);
        // Requests of 5 and 3 blocks: per request one part per block to PP rank 0 plus one staged part.
        assertThat(s.parts()).isEqualTo((5 + 1) + (3 + 1));
        // Per request: the context rank stages slot 1, generation PP rank 1 stages its input, PP rank 0 nothing.
        assertThat(s.stagingCalls()).isEqualTo(2 * 2);
    }

    @Test
    void differentLayerRangesAreStagedOnePartPerPeer() {
        // TP1PP1 -> TP1PP2: the context rank stages one output per generation PP rank.
        MlaPair.Side ctx = new MlaPair.Side(1, 1, 1, 0, null);
        MlaPair.Side gen = new MlaPair.Side(1, 2, 1, 0, null);
        MlaGridRunner.Stats s = MlaGridRunner.run(new MlaPair(ctx, gen, LAYERS, DataType.FLOAT16, 0));
        assertThat(s.parts()).isEqualTo(2 * 2);
        // Per request: one staging call on the context rank and one on each of the two generation ranks.
        assertThat(s.stagingCalls()).isEqualTo(2 * 3);
    }
}
