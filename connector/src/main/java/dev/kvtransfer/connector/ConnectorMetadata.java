package dev.kvtransfer.connector;

import dev.kvtransfer.api.model.ContextPhaseParams;

import java.util.List;
import java.util.Objects;
import java.util.Set;

/**
 * What the scheduler tells every worker for one step (vLLM's {@code KVConnectorMetadata}), built by
 * {@link SchedulerConnector#buildConnectorMeta()} and bound on each rank with
 * {@link WorkerConnector#bindConnectorMetadata}: the loads to start, the saves of requests computed in this step,
 * the transfers the engine aborted and the requests it preempted. Immutable. It serializes
 * ({@link #toBytes()} / {@link #fromBytes(byte[])}, a versioned, bounds-checked format), so workers in other
 * processes get it as bytes from the scheduler's process.
 *
 * @param step      the scheduler's step number (from 1)
 * @param loads     requests whose KV the workers load
 * @param saves     requests whose KV the workers save, layer by layer, while the step computes them
 * @param cancels   request ids whose transfers the engine aborted
 * @param preempted request ids the engine preempted (vLLM's {@code preempted_req_ids}): the workers stop using their
 *                  blocks before the step ({@link WorkerConnector#handlePreemptions})
 */
public record ConnectorMetadata(long step, List<LoadSpec> loads, List<SaveSpec> saves, Set<Long> cancels,
                                Set<Long> preempted) {
    /**
     * Copies.
     *
     * @param step      step number
     * @param loads     loads
     * @param saves     saves
     * @param cancels   cancels
     * @param preempted preempted requests
     */
    public ConnectorMetadata {
        loads = List.copyOf(Objects.requireNonNull(loads, "loads"));
        saves = List.copyOf(Objects.requireNonNull(saves, "saves"));
        cancels = java.util.Collections.unmodifiableSet(new java.util.LinkedHashSet<>(
                Objects.requireNonNull(cancels, "cancels")));
        preempted = java.util.Collections.unmodifiableSet(new java.util.LinkedHashSet<>(
                Objects.requireNonNull(preempted, "preempted")));
    }

    /**
     * Metadata without preemptions.
     *
     * @param step    step number
     * @param loads   loads
     * @param saves   saves
     * @param cancels cancels
     */
    public ConnectorMetadata(long step, List<LoadSpec> loads, List<SaveSpec> saves, Set<Long> cancels) {
        this(step, loads, saves, cancels, Set.of());
    }

    /** @return whether there is nothing to do */
    public boolean isEmpty() {
        return loads.isEmpty() && saves.isEmpty() && cancels.isEmpty() && preempted.isEmpty();
    }

    /**
     * Encodes for a worker in another process (see {@link MetadataCodec} for the format).
     *
     * @return the bytes
     */
    public byte[] toBytes() {
        return MetadataCodec.encode(this);
    }

    /**
     * Decodes what {@link #toBytes()} wrote, checking every count and bound.
     *
     * @param bytes the bytes
     * @return the metadata
     * @throws dev.kvtransfer.api.wire.MalformedMessageException on any bad byte (naming what and where)
     */
    public static ConnectorMetadata fromBytes(byte[] bytes) {
        return MetadataCodec.decode(bytes);
    }

    /**
     * One load.
     *
     * @param requestId    the engine's request id
     * @param params       where to load from (holds the context request id)
     * @param promptTokens prompt length
     * @param blocks       the request's blocks on every rank, reused ones included
     * @param reusedBlocks leading global blocks this instance already holds (not loaded)
     * @param reusedHashes prefix-cache keys of the reused blocks
     * @param async        whether the load is asynchronous (else the worker waits per layer in this step)
     * @param lastBlockKey the key of the prompt's last block (may be empty)
     */
    public record LoadSpec(long requestId, ContextPhaseParams params, int promptTokens, BlockTable blocks,
                           int reusedBlocks, long[] reusedHashes, boolean async, long[] lastBlockKey) {
        /**
         * Validates and copies.
         *
         * @param requestId    id
         * @param params       params
         * @param promptTokens prompt length
         * @param blocks       blocks
         * @param reusedBlocks reused blocks
         * @param reusedHashes their hashes
         * @param async        asynchronous
         * @param lastBlockKey last block key
         */
        public LoadSpec {
            Objects.requireNonNull(params, "params");
            Objects.requireNonNull(blocks, "blocks");
            reusedHashes = Objects.requireNonNull(reusedHashes, "reusedHashes").clone();
            lastBlockKey = Objects.requireNonNull(lastBlockKey, "lastBlockKey").clone();
            if (reusedHashes.length != reusedBlocks) {
                throw new IllegalArgumentException("request " + requestId + ": " + reusedHashes.length
                        + " hashes for " + reusedBlocks + " reused blocks");
            }
        }

        /**
         * A load without a last block key.
         *
         * @param requestId    id
         * @param params       params
         * @param promptTokens prompt length
         * @param blocks       blocks
         * @param reusedBlocks reused blocks
         * @param reusedHashes their hashes
         * @param async        asynchronous
         */
        public LoadSpec(long requestId, ContextPhaseParams params, int promptTokens, BlockTable blocks,
                        int reusedBlocks, long[] reusedHashes, boolean async) {
            this(requestId, params, promptTokens, blocks, reusedBlocks, reusedHashes, async, new long[0]);
        }

        @Override
        public long[] reusedHashes() {
            return reusedHashes.clone();
        }

        @Override
        public long[] lastBlockKey() {
            return lastBlockKey.clone();
        }

        @Override
        public boolean equals(Object o) {
            return o instanceof LoadSpec l && requestId == l.requestId && promptTokens == l.promptTokens
                    && reusedBlocks == l.reusedBlocks && async == l.async && params.equals(l.params)
                    && blocks.equals(l.blocks) && java.util.Arrays.equals(reusedHashes, l.reusedHashes)
                    && java.util.Arrays.equals(lastBlockKey, l.lastBlockKey);
        }

        @Override
        public int hashCode() {
            return Objects.hash(requestId, promptTokens, blocks, reusedBlocks, async) * 31
                    + java.util.Arrays.hashCode(reusedHashes) * 17 + java.util.Arrays.hashCode(lastBlockKey);
        }
    }

    /**
     * One save.
     *
     * @param requestId    the request id (the context request id the decode side names)
     * @param promptTokens prompt length
     * @param blocks       the request's blocks on every rank
     * @param blockHashes  prefix-cache keys of the prompt's full blocks (may be empty)
     * @param lastBlockKey the key of the prompt's last block (may be empty)
     */
    public record SaveSpec(long requestId, int promptTokens, BlockTable blocks, long[] blockHashes,
                           long[] lastBlockKey) {
        /**
         * Validates and copies.
         *
         * @param requestId    id
         * @param promptTokens prompt length
         * @param blocks       blocks
         * @param blockHashes  hashes
         * @param lastBlockKey last block key
         */
        public SaveSpec {
            Objects.requireNonNull(blocks, "blocks");
            blockHashes = Objects.requireNonNull(blockHashes, "blockHashes").clone();
            lastBlockKey = Objects.requireNonNull(lastBlockKey, "lastBlockKey").clone();
        }

        /**
         * A save without a last block key.
         *
         * @param requestId    id
         * @param promptTokens prompt length
         * @param blocks       blocks
         * @param blockHashes  hashes
         */
        public SaveSpec(long requestId, int promptTokens, BlockTable blocks, long[] blockHashes) {
            this(requestId, promptTokens, blocks, blockHashes, new long[0]);
        }

        @Override
        public long[] blockHashes() {
            return blockHashes.clone();
        }

        @Override
        public long[] lastBlockKey() {
            return lastBlockKey.clone();
        }

        @Override
        public boolean equals(Object o) {
            return o instanceof SaveSpec x && requestId == x.requestId && promptTokens == x.promptTokens
                    && blocks.equals(x.blocks) && java.util.Arrays.equals(blockHashes, x.blockHashes)
                    && java.util.Arrays.equals(lastBlockKey, x.lastBlockKey);
        }

        @Override
        public int hashCode() {
            return (Objects.hash(requestId, promptTokens, blocks) * 31 + java.util.Arrays.hashCode(blockHashes)) * 17
                    + java.util.Arrays.hashCode(lastBlockKey);
        }
    }
}
