package dev.kvtransfer.connector;

import java.util.Objects;

/**
 * Something the connector did that the engine's KV-cache event stream reports (vLLM's {@code take_events}): taken
 * with {@link SchedulerConnector#takeEvents()}, in the order it happened. A {@link Kind#LOADED} event names the
 * prefix-cache keys of the blocks that now hold KV loaded from the remote side, so the engine's prefix cache (and a
 * KV-aware router listening to its events) can count them as stored.
 *
 * @param kind             what happened
 * @param requestId        the engine's request id
 * @param contextRequestId the context request id
 * @param blockHashes      for {@link Kind#LOADED}: the keys of the blocks loaded (the reused prefix excluded; only
 *                         full blocks whose key the request carries); for {@link Kind#LOAD_FAILED}: the keys of the
 *                         valid prefix kept; else empty
 * @param bytes            payload bytes every rank moved together
 */
public record ConnectorEvent(Kind kind, long requestId, long contextRequestId, long[] blockHashes, long bytes) {
    /** What happened. */
    public enum Kind {
        /** A load ended on every rank and its blocks hold the prompt's KV. */
        LOADED,
        /** A load ended and failed on at least one rank ({@link ConnectorUpdate#loadFailures()} says what is kept). */
        LOAD_FAILED,
        /** A save ended on every rank and every rank completed it. */
        SAVED,
        /** A save ended and failed on at least one rank. */
        SAVE_FAILED,
        /** The engine preempted the request ({@link SchedulerConnector#handlePreemptions}). */
        PREEMPTED
    }

    /**
     * Validates and copies.
     *
     * @param kind             kind
     * @param requestId        id
     * @param contextRequestId context id
     * @param blockHashes      block keys
     * @param bytes            bytes
     */
    public ConnectorEvent {
        Objects.requireNonNull(kind, "kind");
        blockHashes = Objects.requireNonNull(blockHashes, "blockHashes").clone();
    }

    @Override
    public long[] blockHashes() {
        return blockHashes.clone();
    }

    @Override
    public boolean equals(Object o) {
        return o instanceof ConnectorEvent e && kind == e.kind && requestId == e.requestId
                && contextRequestId == e.contextRequestId && bytes == e.bytes
                && java.util.Arrays.equals(blockHashes, e.blockHashes);
    }

    @Override
    public int hashCode() {
        return Objects.hash(kind, requestId, contextRequestId, bytes) * 31 + java.util.Arrays.hashCode(blockHashes);
    }

    @Override
    public String toString() {
        return kind + "{" + requestId + " ctx " + contextRequestId + ", " + blockHashes.length + " blocks, " + bytes
                + " B}";
    }
}
