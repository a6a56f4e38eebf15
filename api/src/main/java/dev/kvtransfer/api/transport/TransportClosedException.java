package dev.kvtransfer.api.transport;

import dev.kvtransfer.api.ErrorCode;

/** Thrown by every blocked or later call once its {@link ConnectionManager} is closed ({@code NETWORK}). */
public class TransportClosedException extends TransportException {
    private static final long serialVersionUID = 1L;

    /**
     * Creates the exception.
     *
     * @param message what was interrupted
     */
    public TransportClosedException(String message) {
        super(ErrorCode.NETWORK, message);
    }
}
