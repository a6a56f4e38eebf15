package dev.kvtransfer.connector;

import dev.kvtransfer.api.model.ContextPhaseParams;

import java.util.Objects;
import java.util.Optional;

/**
 * What {@link SchedulerConnector#requestFinished} answers (vLLM's {@code (delay_free_blocks, kv_transfer_params)}).
 *
 * @param delayFree        true: the connector owns the request's blocks until the transfer ends — the engine must
 *                         not free or reuse them until the id is in {@link ConnectorUpdate#finishedSending()} (a save)
 *                         or {@link ConnectorUpdate#finishedRecving()} (a load); false: the engine may free them now
 * @param kvTransferParams the producer side's params for the decode instance (through the router), when the request
 *                         was saved for a remote decode
 */
public record FinishResult(boolean delayFree, Optional<ContextPhaseParams> kvTransferParams) {
    /** Nothing held, nothing to hand on. */
    public static final FinishResult FREE = new FinishResult(false, Optional.empty());

    /**
     * Validates.
     *
     * @param delayFree        whether the connector holds the blocks
     * @param kvTransferParams params, or empty
     */
    public FinishResult {
        Objects.requireNonNull(kvTransferParams, "kvTransferParams");
    }
}
