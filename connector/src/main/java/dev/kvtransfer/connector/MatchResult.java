package dev.kvtransfer.connector;

/**
 * What {@link SchedulerConnector#getNumNewMatchedTokens} answers (vLLM's {@code (num_external_tokens, load_kv_async)},
 * or its {@code (None, False)}: {@link #LATER}).
 *
 * @param numTokens tokens of the prompt the remote side provides beyond those this instance already holds (0: none)
 * @param loadAsync true: the request waits until its load is reported in
 *                  {@link ConnectorUpdate#finishedRecving()} (vLLM's {@code WAITING_FOR_REMOTE_KVS}); false: the
 *                  request runs in the step it is scheduled and the worker waits per layer
 *                  ({@link WorkerConnector#waitForLayerLoad})
 * @param later     true: the connector cannot tell yet (e.g. the remote params have not arrived): the engine must
 *                  not schedule the request in this step, and asks again in a later one (vLLM's {@code None});
 *                  {@code numTokens} is 0 then
 */
public record MatchResult(int numTokens, boolean loadAsync, boolean later) {
    /** Nothing to load. */
    public static final MatchResult NONE = new MatchResult(0, false);
    /** The connector cannot tell yet: skip the request this step and ask again (vLLM's {@code None}). */
    public static final MatchResult LATER = new MatchResult(0, false, true);

    /**
     * Validates.
     *
     * @param numTokens tokens provided
     * @param loadAsync asynchronous load
     * @param later     ask again later
     */
    public MatchResult {
        if (numTokens < 0) {
            throw new IllegalArgumentException("numTokens = " + numTokens + ": must be >= 0");
        }
        if (later && (numTokens != 0 || loadAsync)) {
            throw new IllegalArgumentException("an ask-again-later answer offers no tokens");
        }
    }

    /**
     * A definite answer.
     *
     * @param numTokens tokens provided
     * @param loadAsync asynchronous load
     */
    public MatchResult(int numTokens, boolean loadAsync) {
        this(numTokens, loadAsync, false);
    }
}
