package dev.kvtransfer.connector;

import dev.kvtransfer.api.KvTransferException;
import dev.kvtransfer.core.RequestState;

import java.time.Duration;
import java.util.List;
import java.util.Objects;
import java.util.Optional;

/**
 * One rank's end of one request's transfer, as a {@link WorkerConnector} reports it.
 *
 * @param requestId          the engine's request id
 * @param contextRequestId   the context request id (equal to {@code requestId} on the prefill side)
 * @param state              the terminal state on this rank
 * @param bytes              payload bytes this rank moved (0 when it failed before moving any)
 * @param messages           payload messages (pull) or write entries (push) this rank used
 * @param duration           this rank's transfer time, when it started
 * @param error              why it failed, or null when it completed
 * @param invalidBlockIds    a failed load: this rank's blocks it was to write (the reused prefix excluded), else empty
 * @param firstInvalidBlock  a failed load: the global index of the first block of this rank it was to write (its
 *                           CP share's first loaded block), else -1
 */
public record FinishedTransfer(long requestId, long contextRequestId, RequestState state, long bytes, int messages,
                               Optional<Duration> duration, KvTransferException error, List<Integer> invalidBlockIds,
                               int firstInvalidBlock) {
    /**
     * Validates.
     *
     * @param requestId         id
     * @param contextRequestId  context id
     * @param state             state
     * @param bytes             bytes
     * @param messages          messages
     * @param duration          duration
     * @param error             error or null
     * @param invalidBlockIds   blocks a failed load was to write
     * @param firstInvalidBlock first global block a failed load was to write, or -1
     */
    public FinishedTransfer {
        Objects.requireNonNull(state, "state");
        Objects.requireNonNull(duration, "duration");
        invalidBlockIds = List.copyOf(Objects.requireNonNull(invalidBlockIds, "invalidBlockIds"));
        if (!state.isTerminal()) {
            throw new IllegalArgumentException("request " + requestId + ": state " + state + " is not terminal");
        }
        if (firstInvalidBlock < -1) {
            throw new IllegalArgumentException("request " + requestId + ": firstInvalidBlock = " + firstInvalidBlock);
        }
    }

    /**
     * An end without block detail (a save, or a load that completed).
     *
     * @param requestId        id
     * @param contextRequestId context id
     * @param state            state
     * @param bytes            bytes
     * @param messages         messages
     * @param duration         duration
     * @param error            error or null
     */
    public FinishedTransfer(long requestId, long contextRequestId, RequestState state, long bytes, int messages,
                            Optional<Duration> duration, KvTransferException error) {
        this(requestId, contextRequestId, state, bytes, messages, duration, error, List.of(), -1);
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
