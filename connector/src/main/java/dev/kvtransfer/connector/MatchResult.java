package dev.kvtransfer.connector;

/**
 * What {@link SchedulerConnector#getNumNewMatchedTokens} answers (vLLM's {@code (num_external_tokens, load_kv_async)}).
 *
 * @param numTokens tokens of the prompt the remote side provides beyond those this instance already holds (0: none)
 * @param loadAsync true: the request waits until its load is reported in
 *                  {@link ConnectorUpdate#finishedRecving()} (vLLM's {@code WAITING_FOR_REMOTE_KVS}); false: the
 *                  request runs in the step it is scheduled and the worker waits per layer
 *                  ({@link WorkerConnector#waitForLayerLoad})
 */
public record MatchResult(int numTokens, boolean loadAsync) {
    /** Nothing to load. */
    public static final MatchResult NONE = new MatchResult(0, false);

    /**
     * Validates.
     *
     * @param numTokens tokens provided
     * @param loadAsync asynchronous load
     */
    public MatchResult {
        if (numTokens < 0) {
            throw new IllegalArgumentException("numTokens = " + numTokens + ": must be >= 0");
        }
    }
}
