package dev.kvtransfer.core;

import java.util.List;
import java.util.Objects;

/**
 * The result of a status check: the context request ids that the whole status group agreed are complete,
 * and those that failed on this rank (each failed request's {@link TransferRequest#error()} says why). A
 * request is reported once; the engine can then free (context) or use (generation) its blocks.
 *
 * @param completed request ids completed, in selection order
 * @param failed    request ids that ended in {@link RequestState#TRANS_ERROR} or {@link RequestState#CANCELLED}
 */
public record TransferStatus(List<Long> completed, List<Long> failed) {
    /** Nothing completed, nothing failed. */
    public static final TransferStatus EMPTY = new TransferStatus(List.of(), List.of());

    /**
     * Copies the lists.
     *
     * @param completed completed ids
     * @param failed    failed ids
     */
    public TransferStatus {
        completed = List.copyOf(Objects.requireNonNull(completed, "completed"));
        failed = List.copyOf(Objects.requireNonNull(failed, "failed"));
    }
}
