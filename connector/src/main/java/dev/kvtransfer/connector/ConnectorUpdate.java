package dev.kvtransfer.connector;

import dev.kvtransfer.api.KvTransferException;

import java.util.Map;
import java.util.Objects;
import java.util.Set;

/**
 * The scheduler's view after the workers' outputs of a step ({@link SchedulerConnector#updateConnectorOutput}):
 * transfers that ended on <em>every</em> rank of the connector.
 *
 * @param finishedSending saves that ended (completed or failed) for requests the connector held: free their blocks now
 * @param finishedRecving loads that ended: the request's blocks hold its prompt KV unless it is in {@code failedLoads}
 * @param failedLoads     the loads among {@code finishedRecving} that failed, with the first error seen (recompute or
 *                        fail the request; its blocks are in {@code invalidBlockIds})
 * @param failedSends     the saves among {@code finishedSending} that failed, with the first error seen
 * @param invalidBlockIds blocks of failed loads, union over the ranks (vLLM's {@code invalid_block_ids}; with per-rank
 *                        block tables the ids of different ranks mix here: use {@code loadFailures} then)
 * @param loadFailures    per failed load: exactly which blocks of which rank are invalid, the valid prefix kept and
 *                        what the {@link LoadFailurePolicy} asks (same keys as {@code failedLoads})
 */
public record ConnectorUpdate(Set<Long> finishedSending, Set<Long> finishedRecving,
                              Map<Long, KvTransferException> failedLoads, Map<Long, KvTransferException> failedSends,
                              Set<Integer> invalidBlockIds, Map<Long, LoadFailure> loadFailures) {
    /** Nothing ended. */
    public static final ConnectorUpdate EMPTY = new ConnectorUpdate(Set.of(), Set.of(), Map.of(), Map.of(), Set.of(),
            Map.of());

    /**
     * Copies.
     *
     * @param finishedSending ended saves
     * @param finishedRecving ended loads
     * @param failedLoads     failed loads
     * @param failedSends     failed saves
     * @param invalidBlockIds failed blocks
     * @param loadFailures    failed loads in detail
     */
    public ConnectorUpdate {
        finishedSending = Set.copyOf(Objects.requireNonNull(finishedSending, "finishedSending"));
        finishedRecving = Set.copyOf(Objects.requireNonNull(finishedRecving, "finishedRecving"));
        failedLoads = Map.copyOf(Objects.requireNonNull(failedLoads, "failedLoads"));
        failedSends = Map.copyOf(Objects.requireNonNull(failedSends, "failedSends"));
        invalidBlockIds = Set.copyOf(Objects.requireNonNull(invalidBlockIds, "invalidBlockIds"));
        loadFailures = Map.copyOf(Objects.requireNonNull(loadFailures, "loadFailures"));
    }

    /**
     * An update without load-failure detail.
     *
     * @param finishedSending ended saves
     * @param finishedRecving ended loads
     * @param failedLoads     failed loads
     * @param failedSends     failed saves
     * @param invalidBlockIds failed blocks
     */
    public ConnectorUpdate(Set<Long> finishedSending, Set<Long> finishedRecving,
                           Map<Long, KvTransferException> failedLoads, Map<Long, KvTransferException> failedSends,
                           Set<Integer> invalidBlockIds) {
        this(finishedSending, finishedRecving, failedLoads, failedSends, invalidBlockIds, Map.of());
    }
}
