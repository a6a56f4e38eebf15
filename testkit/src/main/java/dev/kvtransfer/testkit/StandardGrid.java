package dev.kvtransfer.testkit;

import dev.kvtransfer.api.model.DataType;
import dev.kvtransfer.testkit.LayoutGrid.Builder;
import dev.kvtransfer.testkit.LayoutGrid.Side;

/** The body of {@link LayoutGrid#standardFull()}, kept apart so that the grid class stays short. */
final class StandardGrid {
    private StandardGrid() {
    }

    static LayoutGrid full() {
        Builder b = LayoutGrid.builder();
        int[] v = {1, 2, 4};
        b.dataTypes(DataType.FP8, DataType.FLOAT16, DataType.FLOAT32);
        for (int ctp : v) {
            for (int cpp : v) {
                for (int gtp : v) {
                    for (int gpp : v) {
                        b.pair(Side.of(ctp, cpp), Side.of(gtp, gpp));
                    }
                }
            }
        }
        b.dataTypes(DataType.FLOAT16, DataType.INT8, DataType.FLOAT32);

        // Uneven PP (upstream's EvenLayer tests use 10 layers over 4 stages: [3,3,2,2]).
        b.layers(10);
        b.pair(Side.of(1, 4).layers(3, 3, 2, 2), Side.of(1, 1));
        b.pair(Side.of(1, 4).layers(3, 3, 2, 2), Side.of(1, 2).layers(5, 5));
        b.pair(Side.of(1, 4).layers(3, 3, 2, 2), Side.of(2, 4).layers(2, 3, 3, 2));
        b.pair(Side.of(4, 1), Side.of(1, 4).layers(3, 3, 2, 2));
        b.pair(Side.of(2, 2).layers(6, 4), Side.of(1, 4).layers(1, 4, 4, 1));
        b.pair(Side.of(1, 2).layers(7, 3), Side.of(4, 2).layers(2, 8));
        b.layers(5);
        b.pair(Side.of(1, 4), Side.of(4, 1)); // [2,1,1,1]

        // Zero-layer PP ranks: they neither send nor receive.
        b.layers(4);
        b.pair(Side.of(1, 2).layers(4, 0), Side.of(1, 2));
        b.pair(Side.of(2, 2).layers(0, 4), Side.of(1, 1));
        b.pair(Side.of(1, 1), Side.of(1, 4).layers(2, 0, 1, 1));
        b.pair(Side.of(1, 2), Side.of(2, 4).layers(0, 2, 2, 0));
        b.pair(Side.of(2, 4).layers(1, 0, 3, 0), Side.of(2, 2).layers(1, 3));

        // TP larger than the KV head count: duplicated heads, one sender per duplicate group.
        b.heads(2);
        b.pair(Side.of(4, 1), Side.of(1, 1));
        b.pair(Side.of(4, 1), Side.of(2, 1));
        b.pair(Side.of(4, 1), Side.of(4, 1));
        b.pair(Side.of(1, 1), Side.of(4, 1));
        b.pair(Side.of(2, 2), Side.of(4, 1));
        b.pair(Side.of(4, 1), Side.of(2, 2));
        b.pair(Side.of(4, 2), Side.of(1, 4));
        b.heads(1);
        b.pair(Side.of(2, 1), Side.of(2, 2));
        b.pair(Side.of(1, 2), Side.of(2, 1));
        b.pair(Side.of(4, 1), Side.of(1, 2));
        b.pair(Side.of(4, 1), Side.of(2, 1));
        b.heads(4);

        // Generation CP (our extension): blocks split contiguously over the CP ranks.
        b.pair(Side.of(1, 1), Side.of(1, 1).cp(2));
        b.pair(Side.of(1, 1), Side.of(1, 1).cp(4));
        b.pair(Side.of(2, 2), Side.of(1, 2).cp(2));
        b.pair(Side.of(1, 2), Side.of(2, 1).cp(4));
        b.pair(Side.of(4, 1), Side.of(2, 1).cp(2));
        b.pair(Side.of(2, 1), Side.of(4, 2).cp(2));
        b.heads(2);
        b.pair(Side.of(4, 1), Side.of(1, 1).cp(2));
        b.heads(4);

        // Attention DP on either and both sides (request i is served by DP rank i % dpSize).
        b.pair(Side.of(2, 1).dp(2), Side.of(2, 1));
        b.pair(Side.of(2, 1), Side.of(2, 1).dp(2));
        b.pair(Side.of(2, 1).dp(2), Side.of(2, 1).dp(2));
        b.pair(Side.of(4, 1).dp(2), Side.of(1, 1));
        b.pair(Side.of(1, 1), Side.of(4, 1).dp(4));
        b.pair(Side.of(2, 2).dp(2), Side.of(1, 4));
        b.pair(Side.of(4, 2).dp(4), Side.of(2, 2).dp(2));
        b.pair(Side.of(2, 1).dp(2), Side.of(1, 1).cp(2));
        b.heads(2);
        b.pair(Side.of(2, 1).dp(2), Side.of(4, 1));
        b.pair(Side.of(4, 1), Side.of(2, 1).dp(2));
        b.pair(Side.of(1, 4).layers(2, 1, 1, 0), Side.of(4, 1).dp(2));
        b.heads(4);

        // kvFactor 1 with DEFAULT attention (K only), and 8-byte elements.
        b.kvFactor(1);
        b.pair(Side.of(1, 1), Side.of(1, 1));
        b.pair(Side.of(2, 1), Side.of(1, 2));
        b.pair(Side.of(1, 2), Side.of(2, 1).cp(2));
        b.kvFactor(null);
        b.dataTypes(DataType.FLOAT64, DataType.BFLOAT16);
        b.pair(Side.of(1, 1), Side.of(1, 1));
        b.pair(Side.of(2, 2), Side.of(4, 1));

        LayoutGrid.addStandardRejections(b);
        return b.build();
    }
}
