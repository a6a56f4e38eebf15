package dev.kvtransfer.api.model;

import dev.kvtransfer.api.layout.PoolLayout;

import static dev.kvtransfer.api.model.CacheState.MAX_DIM;
import static dev.kvtransfer.api.model.CacheState.MAX_LAYERS;
import static dev.kvtransfer.api.model.CacheState.MAX_PARALLELISM;
import static dev.kvtransfer.api.model.CacheState.MAX_WORLD_SIZE;

/** The parallel-layout rules of {@link CacheState.Builder#build()}, each naming the field and value it rejects. */
final class CacheStateChecks {
    private CacheStateChecks() {
    }

    static void parallelism(int tensorParallelism, int pipelineParallelism, int contextParallelism,
                            boolean attentionDpEnabled, int dpRank, int dpSize) {
        check(tensorParallelism >= 1 && tensorParallelism <= MAX_PARALLELISM, "tensorParallelism",
                tensorParallelism, "must be in [1, " + MAX_PARALLELISM + "]");
        check(pipelineParallelism >= 1 && pipelineParallelism <= MAX_PARALLELISM, "pipelineParallelism",
                pipelineParallelism, "must be in [1, " + MAX_PARALLELISM + "]");
        check(contextParallelism >= 1 && contextParallelism <= MAX_PARALLELISM, "contextParallelism",
                contextParallelism, "must be in [1, " + MAX_PARALLELISM + "]");
        long world = (long) tensorParallelism * pipelineParallelism * contextParallelism;
        check(world <= MAX_WORLD_SIZE, "tensorParallelism*pipelineParallelism*contextParallelism", world,
                "must be at most " + MAX_WORLD_SIZE + " ranks");
        check(isPowerOfTwo(contextParallelism), "contextParallelism", contextParallelism, "must be a power of two");
        if (attentionDpEnabled) {
            check(dpSize >= 1 && tensorParallelism % dpSize == 0, "dpSize", dpSize,
                    "tensorParallelism " + tensorParallelism + " must be divisible by it");
            check(dpRank >= 0 && dpRank < dpSize, "dpRank", dpRank, "must be in [0, dpSize=" + dpSize + ")");
        } else {
            check(dpRank == 0, "dpRank", dpRank, "must be 0 when attention DP is off");
            check(dpSize == 1, "dpSize", dpSize, "must be 1 when attention DP is off");
        }
    }

    static void shape(int layers, int sizePerHead, int tokensPerBlock) {
        check(layers >= 1 && layers <= MAX_LAYERS, "kvHeadsPerLayer.size", layers,
                "must be in [1, " + MAX_LAYERS + "]");
        check(sizePerHead >= 1 && sizePerHead <= MAX_DIM, "sizePerHead", sizePerHead, "must be in [1, " + MAX_DIM + "]");
        check(tokensPerBlock >= 1 && tokensPerBlock <= MAX_DIM, "tokensPerBlock", tokensPerBlock,
                "must be in [1, " + MAX_DIM + "]");
    }

    /** The kvFactor a state gets: the one set, else 1 for MLA and 2 otherwise. */
    static int kvFactor(Integer kvFactor, AttentionType attentionType) {
        int kvf = kvFactor != null ? kvFactor : (attentionType == AttentionType.MLA ? 1 : 2);
        check(kvf == 1 || kvf == 2, "kvFactor", kvf, "must be 1 or 2");
        if (attentionType == AttentionType.MLA) {
            check(kvf == 1, "kvFactor", kvf, "MLA stores K only: must be 1");
        }
        return kvf;
    }

    static void poolLayout(PoolLayout poolLayout, AttentionType attentionType, int sizePerHead) {
        if (poolLayout.splitLatent()) {
            check(attentionType == AttentionType.MLA, "poolLayout", poolLayout,
                    "a split latent (ropeDim > 0) needs MLA attention");
            check(poolLayout.ropeDim() < sizePerHead, "poolLayout.ropeDim", poolLayout.ropeDim(),
                    "must be below sizePerHead " + sizePerHead);
        }
    }

    static java.util.List<Integer> evenLayerSplit(int layers, int pp) {
        java.util.List<Integer> out = new java.util.ArrayList<>(pp);
        for (int p = 0; p < pp; p++) {
            out.add(layers / pp + (p < layers % pp ? 1 : 0));
        }
        return java.util.Collections.unmodifiableList(out);
    }

    static void indexer(int indexerDimPerHead, int indexerKCacheQuantBlockSize, boolean useFp4) {
        check(indexerDimPerHead > 0 || !useFp4, "indexerKCacheUseFp4", true,
                "needs an indexer-K pool (indexerDimPerHead > 0)");
        check(indexerDimPerHead >= 0 && indexerDimPerHead <= MAX_DIM, "indexerDimPerHead", indexerDimPerHead,
                "must be in [0, " + MAX_DIM + "]");
        check(indexerKCacheQuantBlockSize >= 0 && indexerKCacheQuantBlockSize <= MAX_DIM,
                "indexerKCacheQuantBlockSize", indexerKCacheQuantBlockSize, "must be in [0, " + MAX_DIM + "]");
        check(indexerDimPerHead > 0 || indexerKCacheQuantBlockSize == 0, "indexerKCacheQuantBlockSize",
                indexerKCacheQuantBlockSize, "must be 0 without an indexer-K pool (indexerDimPerHead 0)");
    }

    static void heads(java.util.List<Integer> kvHeadsPerLayer, AttentionType attentionType, int g) {
        for (int l = 0; l < kvHeadsPerLayer.size(); l++) {
            int h = kvHeadsPerLayer.get(l);
            check(h >= 1 && h <= MAX_DIM, "kvHeadsPerLayer[" + l + "]", h, "must be in [1, " + MAX_DIM + "]");
            if (attentionType == AttentionType.MLA) {
                check(h == 1, "kvHeadsPerLayer[" + l + "]", h, "MLA has one latent head per layer");
            } else {
                check(h % g == 0 || g % h == 0, "kvHeadsPerLayer[" + l + "]", h,
                        "must be divisible by the TP group size " + g + " or divide it");
            }
        }
    }

    static void layersPerPp(java.util.List<Integer> perPp, int pipelineParallelism, int layers) {
        check(perPp.size() == pipelineParallelism, "attentionLayersPerPp", perPp,
                "needs one entry per PP rank (" + pipelineParallelism + ")");
        long sum = 0;
        for (int p = 0; p < perPp.size(); p++) {
            int v = perPp.get(p);
            check(v >= 0, "attentionLayersPerPp[" + p + "]", v, "must not be negative");
            sum += v;
        }
        check(sum == layers, "attentionLayersPerPp", perPp, "sums to " + sum + " but the model has " + layers
                + " layers");
    }

    /** A window per attention layer, and only for MHA/GQA (the MLA formatter moves whole requests). */
    static void windows(WindowGroups w, int layers, AttentionType attentionType) {
        if (w == null) {
            return;
        }
        check(w.layers() == layers, "windowGroups.size", w.layers(), "needs one window per attention layer ("
                + layers + ")");
        check(attentionType == AttentionType.DEFAULT, "windowGroups", w.compact(),
                "sliding windows need DEFAULT attention, not " + attentionType);
    }

    /** A rank-like index inside {@code [0, size)}. */
    static void index(String what, int value, int size) {
        if (value < 0 || value >= size) {
            throw new IllegalArgumentException(what + " " + value + " outside [0, " + size + ")");
        }
    }

    static boolean isPowerOfTwo(int v) {
        return v > 0 && (v & (v - 1)) == 0;
    }

    static void check(boolean ok, String field, Object value, String rule) {
        if (!ok) {
            throw new IllegalArgumentException(field + " = " + value + ": " + rule);
        }
    }
}
