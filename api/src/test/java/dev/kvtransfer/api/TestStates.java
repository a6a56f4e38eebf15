package dev.kvtransfer.api;

import dev.kvtransfer.api.model.AttentionType;
import dev.kvtransfer.api.model.CacheState;

import java.util.List;

/** Short builders for the cache states the api tests use. */
public final class TestStates {
    private TestStates() {
    }

    /**
     * A DEFAULT-attention state with uniform heads and the even layer split.
     *
     * @param tp     tensor parallelism
     * @param pp     pipeline parallelism
     * @param cp     context parallelism
     * @param layers model layers
     * @param heads  global KV heads per layer
     * @return the state
     */
    public static CacheState state(int tp, int pp, int cp, int layers, int heads) {
        return base(tp, pp, cp, layers, heads).build();
    }

    /**
     * A builder with the given shape, D = 4, T = 8, the rest default.
     *
     * @param tp     tensor parallelism
     * @param pp     pipeline parallelism
     * @param cp     context parallelism
     * @param layers model layers
     * @param heads  global KV heads per layer
     * @return the builder
     */
    public static CacheState.Builder base(int tp, int pp, int cp, int layers, int heads) {
        return CacheState.builder()
                .uniformKvHeads(layers, heads)
                .sizePerHead(4)
                .tokensPerBlock(8)
                .tensorParallelism(tp)
                .pipelineParallelism(pp)
                .contextParallelism(cp);
    }

    /**
     * A state with an explicit layer split.
     *
     * @param tp          tensor parallelism
     * @param layersPerPp layers per PP rank (PP = its size)
     * @param heads       global KV heads per layer
     * @return the state
     */
    public static CacheState split(int tp, List<Integer> layersPerPp, int heads) {
        int layers = layersPerPp.stream().mapToInt(Integer::intValue).sum();
        return base(tp, layersPerPp.size(), 1, layers, heads).attentionLayersPerPp(layersPerPp).build();
    }

    /**
     * A state with attention DP.
     *
     * @param tp     tensor parallelism
     * @param pp     pipeline parallelism
     * @param layers model layers
     * @param heads  global KV heads per layer
     * @param dpRank the DP rank serving the request
     * @param dpSize the DP size
     * @return the state
     */
    public static CacheState dp(int tp, int pp, int layers, int heads, int dpRank, int dpSize) {
        return base(tp, pp, 1, layers, heads).attentionDp(true, dpRank, dpSize).build();
    }

    /**
     * An MLA state (one latent head, kvFactor 1).
     *
     * @param tp     tensor parallelism
     * @param pp     pipeline parallelism
     * @param cp     context parallelism
     * @param layers model layers
     * @return the state
     */
    public static CacheState mla(int tp, int pp, int cp, int layers) {
        return base(tp, pp, cp, layers, 1).attentionType(AttentionType.MLA).build();
    }
}
