package dev.kvtransfer.api;

/**
 * Receives errors of background threads (responder, senders, request workers) that do not belong to a call
 * the engine is waiting on, e.g. a malformed request info from a peer. Agrona style: errors never go to
 * nowhere. Called from background threads; must not throw.
 */
@FunctionalInterface
public interface ErrorHandler {
    /**
     * Handles one error.
     *
     * @param error what went wrong (usually a {@link dev.kvtransfer.api.KvTransferException} with its code)
     */
    void onError(Throwable error);
}
