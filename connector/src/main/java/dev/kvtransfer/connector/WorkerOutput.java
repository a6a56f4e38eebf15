package dev.kvtransfer.connector;

import java.util.LinkedHashSet;
import java.util.List;
import java.util.Objects;
import java.util.Set;

/**
 * What one rank's {@link WorkerConnector#getFinished()} returns for a step (vLLM's {@code KVConnectorOutput}), to
 * be handed to {@link SchedulerConnector#updateConnectorOutput}.
 *
 * @param rank            the rank
 * @param sent            saves that ended on this rank, agreed by its status group
 * @param received        loads that ended on this rank, agreed by its status group
 * @param invalidBlockIds this rank's blocks of the failed loads in {@code received} (reused blocks excluded)
 */
public record WorkerOutput(int rank, List<FinishedTransfer> sent, List<FinishedTransfer> received,
                           Set<Integer> invalidBlockIds) {
    /**
     * Copies.
     *
     * @param rank            rank
     * @param sent            ended saves
     * @param received        ended loads
     * @param invalidBlockIds failed blocks
     */
    public WorkerOutput {
        sent = List.copyOf(Objects.requireNonNull(sent, "sent"));
        received = List.copyOf(Objects.requireNonNull(received, "received"));
        invalidBlockIds = Set.copyOf(Objects.requireNonNull(invalidBlockIds, "invalidBlockIds"));
    }

    /** @return ids of the ended saves (vLLM's {@code finished_sending}) */
    public Set<Long> finishedSending() {
        Set<Long> s = new LinkedHashSet<>();
        sent.forEach(f -> s.add(f.requestId()));
        return s;
    }

    /** @return ids of the ended loads (vLLM's {@code finished_recving}) */
    public Set<Long> finishedRecving() {
        Set<Long> s = new LinkedHashSet<>();
        received.forEach(f -> s.add(f.requestId()));
        return s;
    }

    /** @return whether nothing ended */
    public boolean isEmpty() {
        return sent.isEmpty() && received.isEmpty();
    }
}
