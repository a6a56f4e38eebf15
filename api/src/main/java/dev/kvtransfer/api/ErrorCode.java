package dev.kvtransfer.api;

/**
 * Why a transfer (or a control-plane call) failed. Every {@link KvTransferException} carries one.
 */
public enum ErrorCode {
    /** A transport-level failure: a send or receive could not complete. */
    NETWORK,
    /** A deadline passed before the operation completed. */
    TIMEOUT,
    /** The two sides' cache layouts cannot be converted into each other by the chosen formatter. */
    UNSUPPORTED_LAYOUT,
    /** Bytes received from a peer did not decode: wrong magic, version, length or value. */
    MALFORMED,
    /** The request was cancelled by either side. */
    CANCELLED,
    /** The peer process or rank went away while the operation was in flight. */
    PEER_LOST,
    /** A bug or an unexpected state inside kvtransfer. */
    INTERNAL,
    /**
     * A control message (or a peer) failed authentication: missing, forged or replayed MAC, an unknown session,
     * a request token that does not match, a write with a forged region key.
     */
    UNAUTHORIZED
}
