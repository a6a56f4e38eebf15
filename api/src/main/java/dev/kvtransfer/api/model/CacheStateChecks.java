package dev.kvtransfer.api.model;

import static dev.kvtransfer.api.model.CacheState.MAX_DIM;
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

    static void indexer(int indexerDimPerHead, int indexerKCacheQuantBlockSize) {
        check(indexerDimPerHead >= 0 && indexerDimPerHead <= MAX_DIM, "indexerDimPerHead", indexerDimPerHead,
                "must be in [0, " + MAX_DIM + "]");
        check(indexerKCacheQuantBlockSize >= 0 && indexerKCacheQuantBlockSize <= MAX_DIM,
                "indexerKCacheQuantBlockSize", indexerKCacheQuantBlockSize, "must be in [0, " + MAX_DIM + "]");
        check(indexerDimPerHead > 0 || indexerKCacheQuantBlockSize == 0, "indexerKCacheQuantBlockSize",
                indexerKCacheQuantBlockSize, "must be 0 without an indexer-K pool (indexerDimPerHead 0)");
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
