package dev.kvtransfer.ucx;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.transport.TransportClosedException;
import dev.kvtransfer.api.transport.TransportException;

/**
 * Why an operation or connection failed; turned into an exception on the caller's thread (so its stack is the
 * caller's). Allocated only when something fails.
 *
 * @param code    error code
 * @param message what failed
 * @param closed  whether it is the manager closing ({@link TransportClosedException})
 * @param cause   underlying failure or {@code null}
 */
record UcxFailure(ErrorCode code, String message, boolean closed, Throwable cause) {
    static UcxFailure of(ErrorCode code, String message) {
        return new UcxFailure(code, message, false, null);
    }

    TransportException toException(String what) {
        if (closed) {
            TransportClosedException e = new TransportClosedException(what + ": " + message);
            if (cause != null) {
                e.initCause(cause);
            }
            return e;
        }
        return new TransportException(code, what + ": " + message, cause);
    }
}
