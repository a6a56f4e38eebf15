package dev.kvtransfer.connector;

/**
 * What the engine does with a request whose load failed (vLLM's {@code kv_load_failure_policy}). The connector
 * reports the failure the same way under both ({@link LoadFailure}: the error, exactly which blocks are invalid, and
 * the valid prefix); the policy says which of the two answers the engine gets in {@link LoadFailure#recompute()}.
 */
public enum LoadFailurePolicy {
    /**
     * Keep the valid prefix (the leading blocks that hold the right KV: a reused prefix and the blocks every rank
     * loaded) and recompute the rest of the prompt locally (vLLM's {@code "recompute"}, the default; RFC #19329).
     */
    RECOMPUTE,
    /** Fail the request (vLLM's {@code "fail"}): the engine frees its blocks and reports the error to the client. */
    FAIL
}
