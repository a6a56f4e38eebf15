/**
 * The engine-facing KV connector: what a serving engine's scheduler and model workers call, in the shape of
 * vLLM's {@code KVConnectorBase_V1} (scheduler side / worker side), on top of
 * {@link dev.kvtransfer.core.CacheTransceiver}.
 *
 * <ul>
 *   <li>{@link dev.kvtransfer.connector.SchedulerConnector} — one per instance, in the scheduler: how many tokens
 *       the remote side provides, blocks allocated, request finished (who owns the blocks), per-step
 *       {@link dev.kvtransfer.connector.ConnectorMetadata}, and the aggregation of the workers' outputs.</li>
 *   <li>{@link dev.kvtransfer.connector.WorkerConnector} — one per rank, in the model worker: start loading, wait
 *       for a layer's load, save a layer, wait for saves, finished sends / receives, blocks whose load failed.</li>
 * </ul>
 */
package dev.kvtransfer.connector;
