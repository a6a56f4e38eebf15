package dev.kvtransfer.connector;

import dev.kvtransfer.api.KvTransferException;
import dev.kvtransfer.core.RequestState;

import java.time.Duration;
import java.util.Objects;
import java.util.Optional;

/**
 * One rank's end of one request's transfer, as a {@link WorkerConnector} reports it.
 *
 * @param requestId        the engine's request id
 * @param contextRequestId the context request id (equal to {@code requestId} on the prefill side)
 * @param state            the terminal state on this rank
 * @param bytes            payload bytes this rank moved (0 when it failed before moving any)
 * @param messages         payload messages (pull) or write entries (push) this rank used
 * @param duration         this rank's transfer time, when it started
 * @param error            why it failed, or null when it completed
 */
public record FinishedTransfer(long requestId, long contextRequestId, RequestState state, long bytes, int messages,
                               Optional<Duration> duration, KvTransferException error) {
    /**
     * Validates.
     *
     * @param requestId        id
     * @param contextRequestId context id
     * @param state            state
     * @param bytes            bytes
     * @param messages         messages
     * @param duration         duration
     * @param error            error or null
     */
    public FinishedTransfer {
        Objects.requireNonNull(state, "state");
        Objects.requireNonNull(duration, "duration");
        if (!state.isTerminal()) {
            throw new IllegalArgumentException("request " + requestId + ": state " + state + " is not terminal");
        }
    }

    /** @return whether the transfer completed */
    public boolean ok() {
        return error == null;
    }

    /** @return the error, when it failed */
    public Optional<KvTransferException> failure() {
        return Optional.ofNullable(error);
    }
}
