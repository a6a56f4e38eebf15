/**
 * The engine-facing KV connector: what a serving engine's scheduler and model workers call, in the shape of
 * vLLM's {@code KVConnectorBase_V1} (scheduler side / worker side), on top of
 * {@link dev.kvtransfer.core.CacheTransceiver}.
 *
 * <ul>
 *   <li>{@link dev.kvtransfer.connector.SchedulerConnector} — one per instance (with attention DP, one per DP
 *       rank), in the scheduler: how many tokens the remote side provides (or "ask again later"), blocks allocated
 *       (again per chunk with chunked prefill), request finished (who owns the blocks), preemptions, per-step
 *       {@link dev.kvtransfer.connector.ConnectorMetadata} (which serializes for workers in other processes), the
 *       aggregation of the workers' outputs with the {@link dev.kvtransfer.connector.LoadFailure} of a failed load,
 *       events, shutdown.</li>
 *   <li>{@link dev.kvtransfer.connector.WorkerConnector} — one per rank, in the model worker: start loading, wait
 *       for a layer's load, save a layer, wait for saves, finished sends / receives, blocks whose load failed,
 *       preemptions, shutdown.</li>
 * </ul>
 */
package dev.kvtransfer.connector;
