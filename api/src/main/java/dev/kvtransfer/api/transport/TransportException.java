package dev.kvtransfer.api.transport;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.KvTransferException;

/**
 * A transport call failed: {@code NETWORK} (the send/receive failed), {@code TIMEOUT} (its deadline passed),
 * {@code PEER_LOST} (the peer went away) or {@code MALFORMED} (a message of the wrong length arrived).
 */
public class TransportException extends KvTransferException {
    private static final long serialVersionUID = 1L;

    /**
     * Creates the exception.
     *
     * @param code    the error code
     * @param message what failed
     */
    public TransportException(ErrorCode code, String message) {
        super(code, NO_REQUEST, message, null);
    }

    /**
     * Creates the exception with a cause.
     *
     * @param code    the error code
     * @param message what failed
     * @param cause   the underlying failure
     */
    public TransportException(ErrorCode code, String message, Throwable cause) {
        super(code, NO_REQUEST, message, cause);
    }
}
