package dev.kvtransfer.testkit;

import dev.kvtransfer.api.model.CacheState;

import java.util.List;
import java.util.Objects;

/**
 * One context/generation layout combination of a {@link LayoutGrid}, with the prompt lengths to move and, for a
 * combination a formatter must refuse, the field its reason has to name.
 *
 * <p>With attention DP on a side, the states here describe DP rank 0; request {@code i} of a run is served by DP
 * rank {@code i % dpSize} of that side ({@link #ctxFor(int)}, {@link #genFor(int)}), as upstream's DP tests do.
 *
 * @param name          a readable name naming both layouts, used in failure messages
 * @param ctx           the context instance's cache state
 * @param gen           the generation instance's cache state
 * @param promptLengths the prompt length of each request to move, in tokens
 * @param rejectedField {@code null} for a supported pair; else a word the unsupported reason must contain (e.g.
 *                      {@code "dataType"})
 */
public record LayoutPair(String name, CacheState ctx, CacheState gen, List<Integer> promptLengths,
                         String rejectedField) {
    /**
     * Validates.
     *
     * @param name          name
     * @param ctx           context state
     * @param gen           generation state
     * @param promptLengths prompt lengths
     * @param rejectedField field named by the rejection, or null
     */
    public LayoutPair {
        Objects.requireNonNull(name, "name");
        Objects.requireNonNull(ctx, "ctx");
        Objects.requireNonNull(gen, "gen");
        promptLengths = List.copyOf(Objects.requireNonNull(promptLengths, "promptLengths"));
        for (int len : promptLengths) {
            if (len < 1) {
                throw new IllegalArgumentException("prompt length " + len + " in " + name + ": must be at least 1");
            }
        }
    }

    /** @return whether a formatter must accept and move this pair */
    public boolean supported() {
        return rejectedField == null;
    }

    /**
     * The context state serving request {@code i}: DP rank {@code i % dpSize} when attention DP is on.
     *
     * @param requestIndex index of the request in the run
     * @return the state
     */
    public CacheState ctxFor(int requestIndex) {
        return ctx.attentionDpEnabled() ? ctx.withDpRank(requestIndex % ctx.dpSize()) : ctx;
    }

    /**
     * The generation state serving request {@code i}: DP rank {@code i % dpSize} when attention DP is on.
     *
     * @param requestIndex index of the request in the run
     * @return the state
     */
    public CacheState genFor(int requestIndex) {
        return gen.attentionDpEnabled() ? gen.withDpRank(requestIndex % gen.dpSize()) : gen;
    }

    /**
     * Whether a rank of an instance takes part in a request served by the state's DP rank: with attention DP
     * only the ranks of that DP group; otherwise every rank.
     *
     * @param state the instance state for the request (its {@code dpRank} is the serving DP rank)
     * @param rank  the rank index
     * @return whether it holds the request
     */
    public static boolean serves(CacheState state, int rank) {
        return !state.attentionDpEnabled() || state.tpRank(rank) / state.tpPerDpGroup() == state.dpRank();
    }

    @Override
    public String toString() {
        return name;
    }
}
