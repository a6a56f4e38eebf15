package dev.kvtransfer.core;

/** Where one request's transfer stands on one rank, as TensorRT-LLM's {@code LlmRequestState} disagg states. */
public enum RequestState {
    /** Context side: handed to {@link CacheTransceiver#respondAndSendAsync}, not finished. */
    CONTEXT_TRANS_IN_PROGRESS,
    /** Context side: every counterpart got its ready signal and its data. */
    CONTEXT_COMPLETE,
    /** Generation side: handed to {@link CacheTransceiver#requestAndReceiveAsync}, not finished. */
    GENERATION_TRANS_IN_PROGRESS,
    /** Generation side: this rank's blocks hold the request's cache. */
    GENERATION_TRANS_COMPLETE,
    /** The transfer failed; {@link TransferRequest#error()} says why. */
    TRANS_ERROR,
    /** The transfer was cancelled (by either side). */
    CANCELLED;

    /** @return whether no further change will happen */
    public boolean isTerminal() {
        return this != CONTEXT_TRANS_IN_PROGRESS && this != GENERATION_TRANS_IN_PROGRESS;
    }
}
