package dev.kvtransfer.formatter.mla;

import dev.kvtransfer.api.model.AttentionType;
import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.api.model.DataType;

import java.util.List;

/**
 * One MLA layout pair of the test grid: a context and a generation side, the model's layer count, the element
 * type and whether both caches have an indexer-K pool.
 *
 * @param ctx        the context side
 * @param gen        the generation side
 * @param layers     layers of the model
 * @param dataType   element type of the latent cache
 * @param indexerDim bytes per token of the indexer-K pool, 0 for none
 */
record MlaPair(Side ctx, Side gen, int layers, DataType dataType, int indexerDim) {
    static final int TOKENS_PER_BLOCK = 4;
    static final int LATENT_DIM = 6;

    /**
     * One side's parallel layout.
     *
     * @param tp          tensor parallelism
     * @param pp          pipeline parallelism
     * @param cp          context parallelism
     * @param dpSize      attention-DP size, 0 when attention DP is off
     * @param layersPerPp layers per PP rank, {@code null} for the even split
     */
    record Side(int tp, int pp, int cp, int dpSize, List<Integer> layersPerPp) {
        CacheState state(int layers, DataType dataType) {
            return CacheState.builder()
                    .uniformKvHeads(layers, 1)
                    .sizePerHead(LATENT_DIM)
                    .tokensPerBlock(TOKENS_PER_BLOCK)
                    .tensorParallelism(tp)
                    .pipelineParallelism(pp)
                    .contextParallelism(cp)
                    .attentionDp(dpSize > 0, 0, dpSize > 0 ? dpSize : 1)
                    .attentionLayersPerPp(layersPerPp)
                    .dataType(dataType)
                    .attentionType(AttentionType.MLA)
                    .build();
        }

        @Override
        public String toString() {
            return "TP" + tp + "PP" + pp + (cp > 1 ? "CP" + cp : "") + (dpSize > 0 ? "DP" + dpSize : "")
                    + (layersPerPp != null ? layersPerPp.toString().replace(" ", "") : "");
        }
    }

    CacheState ctxState() {
        return ctx.state(layers, dataType).toBuilder().indexerKCache(indexerDim, 0).build();
    }

    CacheState genState() {
        return gen.state(layers, dataType).toBuilder().indexerKCache(indexerDim, 0).build();
    }

    @Override
    public String toString() {
        return ctx + " -> " + gen + " L" + layers + " " + dataType + (indexerDim > 0 ? " +indexerK" + indexerDim : "");
    }
}
