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
 * @param reuse         prefix reuse: request {@code i} finds the first {@code reuse.get(i % reuse.size())} blocks
 *                      already on the generation side ({@link #ALL_BLOCKS} = every block; capped at the request's
 *                      blocks); empty = no reuse
 */
public record LayoutPair(String name, CacheState ctx, CacheState gen, List<Integer> promptLengths,
                         String rejectedField, List<Integer> reuse) {
    /** In {@link #reuse()}: the generation side already holds every block of the request. */
    public static final int ALL_BLOCKS = -1;

    /**
     * Validates.
     *
     * @param name          name
     * @param ctx           context state
     * @param gen           generation state
     * @param promptLengths prompt lengths
     * @param rejectedField field named by the rejection, or null
     * @param reuse         reused blocks per request index, in rotation
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
        reuse = List.copyOf(Objects.requireNonNull(reuse, "reuse"));
        for (int r : reuse) {
            if (r < ALL_BLOCKS) {
                throw new IllegalArgumentException("reuse " + r + " in " + name + ": blocks >= 0 or ALL_BLOCKS");
            }
        }
    }

    /**
     * A pair without prefix reuse.
     *
     * @param name          name
     * @param ctx           context state
     * @param gen           generation state
     * @param promptLengths prompt lengths
     * @param rejectedField field named by the rejection, or null
     */
    public LayoutPair(String name, CacheState ctx, CacheState gen, List<Integer> promptLengths,
                      String rejectedField) {
        this(name, ctx, gen, promptLengths, rejectedField, List.of());
    }

    /**
     * Leading blocks of request {@code i} the generation side already holds.
     *
     * @param requestIndex index of the request in the run
     * @param totalBlocks  blocks of the request
     * @return reused blocks in {@code [0, totalBlocks]}
     */
    public int reusedBlocks(int requestIndex, int totalBlocks) {
        if (reuse.isEmpty()) {
            return 0;
        }
        int r = reuse.get(requestIndex % reuse.size());
        return r == ALL_BLOCKS ? totalBlocks : Math.min(r, totalBlocks);
    }

    /**
     * This pair with other states (e.g. other pool layouts) and a new name.
     *
     * @param newName name
     * @param newCtx  context state
     * @param newGen  generation state
     * @return the copy
     */
    public LayoutPair with(String newName, CacheState newCtx, CacheState newGen) {
        return new LayoutPair(newName, newCtx, newGen, promptLengths, rejectedField, reuse);
    }

    /**
     * This pair with prefix reuse.
     *
     * @param perRequest reused blocks per request index, in rotation ({@link #ALL_BLOCKS} = all)
     * @return the copy
     */
    public LayoutPair withReuse(List<Integer> perRequest) {
        String suffix = perRequest.isEmpty() ? "" : " | reuse " + perRequest.toString().replace("-1", "all");
        return new LayoutPair(name + suffix, ctx, gen, promptLengths, rejectedField, perRequest);
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
