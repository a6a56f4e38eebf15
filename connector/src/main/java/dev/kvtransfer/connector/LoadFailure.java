package dev.kvtransfer.connector;

import dev.kvtransfer.api.KvTransferException;

import java.util.Map;
import java.util.Objects;
import java.util.Set;
import java.util.TreeMap;

/**
 * A load that failed on at least one rank, as {@link ConnectorUpdate#loadFailures()} reports it once every rank
 * reported its end: which blocks hold no valid KV, and the valid prefix the engine keeps (vLLM RFC #19329).
 *
 * <p>A global block is valid when the engine already held it (the reused prefix) or when every rank holding a share
 * of it loaded its share; the valid prefix is the leading run of valid blocks. Without context parallelism every
 * rank holds a share of every block, so a rank that failed makes every loaded block invalid; with context
 * parallelism each CP rank holds its own blocks, so the blocks of the CP ranks that loaded fine before the first
 * failed one stay valid.
 *
 * @param requestId        the engine's request id
 * @param contextRequestId the context request id
 * @param error            the first error a rank reported
 * @param validBlocks      leading global blocks that hold the right KV (reused or loaded)
 * @param validTokens      prompt tokens those blocks hold ({@code min(promptTokens, validBlocks * tokensPerBlock)}):
 *                         under {@link LoadFailurePolicy#RECOMPUTE} the engine's new {@code num_computed_tokens}
 * @param invalidBlocks    per member index (the {@link BlockTable} row), exactly the block ids a failed share was to
 *                         write (ranks whose share loaded fine are absent)
 * @param recompute        the policy's answer: true, recompute the prompt from {@code validTokens}; false, fail it
 */
public record LoadFailure(long requestId, long contextRequestId, KvTransferException error, int validBlocks,
                          int validTokens, Map<Integer, Set<Integer>> invalidBlocks, boolean recompute) {
    /**
     * Validates and copies.
     *
     * @param requestId        id
     * @param contextRequestId context id
     * @param error            error
     * @param validBlocks      valid leading blocks
     * @param validTokens      valid leading tokens
     * @param invalidBlocks    invalid blocks per member
     * @param recompute        recompute or fail
     */
    public LoadFailure {
        Objects.requireNonNull(error, "error");
        if (validBlocks < 0 || validTokens < 0) {
            throw new IllegalArgumentException("request " + requestId + ": validBlocks = " + validBlocks
                    + ", validTokens = " + validTokens);
        }
        TreeMap<Integer, Set<Integer>> copy = new TreeMap<>();
        Objects.requireNonNull(invalidBlocks, "invalidBlocks").forEach((k, v) -> copy.put(k, Set.copyOf(v)));
        invalidBlocks = java.util.Collections.unmodifiableMap(copy);
    }
}
