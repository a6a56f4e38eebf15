package dev.kvtransfer.cli;

import dev.kvtransfer.api.model.ContextPhaseParams;

import java.util.concurrent.CompletableFuture;

/**
 * The generation instance as the demo drives it: in this JVM ({@link GenRunner}) or in a child JVM
 * ({@link ChildProcessGen}). A request is first prepared (blocks allocated, a reused prefix filled; untimed,
 * {@link #prepare}), then transferred ({@link #submit}), then, after the timed part of the run, checked with
 * KvPattern, dumped and released ({@link #check}).
 */
interface GenSide extends AutoCloseable {
    /**
     * Allocates the blocks of a request on every generation rank that serves it and, with
     * {@code --gen-reuse-blocks}, writes the reused prefix as a prefix cache would hold it.
     *
     * @param index     request index in the run (selects the DP rank with attention DP)
     * @param requestId the context request id
     * @param isl       prompt length in tokens
     * @return empty, or why the request cannot be received (the pool is full, ...)
     */
    String prepare(int index, long requestId, int isl);

    /**
     * Starts receiving a prepared request on every generation rank that serves it.
     *
     * @param index     request index in the run
     * @param requestId the context request id
     * @param isl       prompt length in tokens
     * @param params    what the context side handed over
     * @return completes when every serving rank has finished (successfully or not)
     */
    CompletableFuture<GenTransfer> submit(int index, long requestId, int isl, ContextPhaseParams params);

    /**
     * Verifies, dumps (when configured) and frees a transferred request.
     *
     * @param requestId the context request id
     * @return the verification result
     */
    GenCheck check(long requestId);

    @Override
    void close();

    /**
     * Outcome of one request's transfer on the generation side.
     *
     * @param requestId    context request id
     * @param ok           whether every serving rank completed it
     * @param bytes        bytes the serving ranks received (or had written into their pools) for it
     * @param submitNanos  {@code System.nanoTime()} (CLOCK_MONOTONIC) when the receive was requested
     * @param doneNanos    {@code System.nanoTime()} when the last serving rank finished
     * @param messages     payload messages (pull) or write entries (push) of all serving ranks
     * @param reusedBlocks leading blocks the generation side already held and did not ask for
     * @param skippedBytes bytes of those blocks on the serving ranks
     * @param pushed       whether the context ranks wrote one-sided into the pools (else they sent)
     * @param error        the first error, or empty
     */
    record GenTransfer(long requestId, boolean ok, long bytes, long submitNanos, long doneNanos, long messages,
                       int reusedBlocks, long skippedBytes, boolean pushed, String error) {
        static GenTransfer failed(long requestId, long submitNanos, String error) {
            return new GenTransfer(requestId, false, 0, submitNanos, System.nanoTime(), 0, 0, 0, false, error);
        }
    }

    /**
     * Outcome of verifying one request.
     *
     * @param requestId     context request id
     * @param checked       elements checked
     * @param mismatches    elements that differed from KvPattern
     * @param firstMismatch description of the first difference, or empty
     */
    record GenCheck(long requestId, long checked, long mismatches, String firstMismatch) {
    }
}
