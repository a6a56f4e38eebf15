package dev.kvtransfer.core.transfer;

import dev.kvtransfer.api.KvTransferException;
import dev.kvtransfer.api.model.ContextPhaseParams;

import java.util.concurrent.CompletableFuture;

/**
 * Internal: what the sender and receiver see of an engine's request and how they report its outcome.
 * Implemented by {@link dev.kvtransfer.core.TransferRequest}; not an API for engines.
 */
public interface TransferHandle {
    /** @return the context request id */
    long requestId();

    /** @return prompt length in tokens */
    int promptLength();

    /** @return this rank's block ids of the request, in order */
    int[] blockIds();

    /** @return the context phase params (generation side), or null */
    ContextPhaseParams contextPhaseParams();

    /**
     * Records the moment this rank starts the transfer (context: a sender thread took it; generation: its
     * infos are about to go out).
     *
     * @param epochNanos wall-clock time in nanoseconds since the epoch
     */
    void started(long epochNanos);

    /**
     * @return context side: every prompt block's hash (may be empty); generation side: the reused blocks'
     *         hashes
     */
    long[] blockHashes();

    /** @return generation side: leading global blocks already held; 0 on the context side */
    int reusedBlocks();

    /** @return the key of the prompt's last block (the caller must not modify it; empty when unset) */
    default long[] lastBlockKey() {
        return new long[0];
    }

    /** @return generation side: tokens of block {@link #reusedBlocks()} already held (partial reuse); 0 = none */
    default int partialReuseTokens() {
        return 0;
    }

    /**
     * Records the messages (descriptors) the transfer used and how it moved, before it completes.
     *
     * @param n      payload messages or write entries
     * @param pushed whether the context side wrote one-sided into the generation pool (else it sent)
     */
    void recordMessages(int n, boolean pushed);

    /**
     * Records this rank's copy ledger of the transfer, before it completes.
     *
     * @param ledger what the session counted
     */
    void recordLedger(dev.kvtransfer.core.CopyLedger ledger);

    /**
     * @param otherwise returned when the transfer has not started
     * @return when this rank's transfer started (epoch nanoseconds, {@link dev.kvtransfer.core.timing.EpochClock})
     */
    long startedEpochNanos(long otherwise);

    /** @return context side: whether the engine marks this request's layers ready one by one */
    boolean layerWise();

    /** Context side: the engine will mark layers ready one by one. */
    void markLayerWise();

    /**
     * Context side, layer-wise: waits until local layers {@code [0, count)} are ready, bounded.
     *
     * @param count         layers needed
     * @param deadlineNanos {@code System.nanoTime()} deadline
     * @return true when they are ready; false on the deadline or when the request ended
     */
    boolean awaitLayersReady(int count, long deadlineNanos);

    /** @return context side: how many leading local layers are ready */
    int layersReady();

    /**
     * Context side, layer-wise, without a waiting thread: when local layers {@code [0, count)} are ready or the
     * request ended, returns true at once; else keeps {@code action} (replacing one kept before) and runs it once,
     * on the thread that marks the layer or ends the request, when either happens. The action must be short (hand
     * the work to a pool).
     *
     * @param count  layers needed
     * @param action what to run later
     * @return true when nothing needs waiting for ({@code action} is not kept)
     */
    boolean whenLayersReady(int count, Runnable action);

    /**
     * Generation side: a local layer has arrived (wakes {@code awaitLayer} waiters).
     *
     * @param localLayer the rank-local layer
     */
    void layerArrived(int localLayer);

    /**
     * Completes the request successfully.
     *
     * @param kvCacheSize bytes this rank moved
     * @param epochNanos  wall-clock end time in nanoseconds since the epoch
     * @return false if it had already ended
     */
    boolean succeed(long kvCacheSize, long epochNanos);

    /**
     * Like {@link #succeed(long, long)}, running {@code beforeNotify} after the state changed and before anyone
     * waiting on the request is woken (so metrics and timing are visible to whoever sees the completion).
     *
     * @param kvCacheSize  bytes moved
     * @param epochNanos   end time
     * @param beforeNotify runs only when this call ended the request
     * @return whether this call ended the request
     */
    boolean succeed(long kvCacheSize, long epochNanos, Runnable beforeNotify);

    /**
     * Ends the request with an error ({@code CANCELLED} code = cancelled state).
     *
     * @param error why
     * @return false if it had already ended
     */
    boolean fail(KvTransferException error);

    /**
     * Like {@link #fail(KvTransferException)}, running {@code beforeNotify} before waiters are woken.
     *
     * @param error        what went wrong
     * @param beforeNotify runs only when this call ended the request
     * @return whether this call ended the request
     */
    boolean fail(KvTransferException error, Runnable beforeNotify);

    /** @return completes when the request ends, successfully or not (never exceptionally) */
    CompletableFuture<Void> done();
}
