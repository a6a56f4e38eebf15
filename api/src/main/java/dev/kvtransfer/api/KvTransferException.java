package dev.kvtransfer.api;

import java.util.Objects;

/**
 * The one unchecked exception of the kvtransfer control plane. It carries an {@link ErrorCode} and, when the
 * failure belongs to one request, that request's id ({@link #NO_REQUEST} otherwise).
 */
public class KvTransferException extends RuntimeException {
    private static final long serialVersionUID = 1L;

    /** The request id used when a failure does not belong to a single request. */
    public static final long NO_REQUEST = -1L;

    /** Why it failed. */
    private final ErrorCode code;
    /** The request the failure belongs to, or {@link #NO_REQUEST}. */
    private final long requestId;

    /**
     * Creates an exception that belongs to no single request.
     *
     * @param code    why it failed
     * @param message what failed, for a human
     */
    public KvTransferException(ErrorCode code, String message) {
        this(code, NO_REQUEST, message, null);
    }

    /**
     * Creates an exception for one request.
     *
     * @param code      why it failed
     * @param requestId the context request id, or {@link #NO_REQUEST}
     * @param message   what failed, for a human
     * @param cause     the underlying failure, may be {@code null}
     */
    public KvTransferException(ErrorCode code, long requestId, String message, Throwable cause) {
        super(format(code, requestId, message), cause);
        this.code = Objects.requireNonNull(code, "code");
        this.requestId = requestId;
    }

    private static String format(ErrorCode code, long requestId, String message) {
        return requestId == NO_REQUEST
                ? "[" + code + "] " + message
                : "[" + code + "] request " + requestId + ": " + message;
    }

    /**
     * Why it failed.
     *
     * @return the error code
     */
    public ErrorCode code() {
        return code;
    }

    /**
     * The request this failure belongs to.
     *
     * @return the context request id, or {@link #NO_REQUEST}
     */
    public long requestId() {
        return requestId;
    }
}
