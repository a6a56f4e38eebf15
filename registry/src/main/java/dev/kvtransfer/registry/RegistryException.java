package dev.kvtransfer.registry;

/**
 * A registry operation failed: the message is one line naming the instance or the registry and the cause (the
 * registry unreachable, a duplicate id, a refused signature, ...). {@link #kind()} lets callers tell them apart.
 */
public class RegistryException extends RuntimeException {
    private static final long serialVersionUID = 1L;

    /** Why an operation failed. */
    public enum Kind {
        /** The registry could not be reached or did not answer in time. */
        UNAVAILABLE,
        /** The registry refused the caller's signature (wrong or missing deployment secret). */
        UNAUTHORIZED,
        /** Another live instance holds the id. */
        DUPLICATE,
        /** The instance is not (or no longer) registered: its lease ran out, or it never registered. */
        UNKNOWN_INSTANCE,
        /** The request itself was wrong (bad record, role mismatch, unknown URL scheme). */
        BAD_REQUEST
    }

    private final Kind kind;

    /**
     * @param kind    why
     * @param message one line
     */
    public RegistryException(Kind kind, String message) {
        super(message);
        this.kind = kind;
    }

    /**
     * @param kind    why
     * @param message one line
     * @param cause   the underlying failure
     */
    public RegistryException(Kind kind, String message, Throwable cause) {
        super(message, cause);
        this.kind = kind;
    }

    /** @return why it failed */
    public Kind kind() {
        return kind;
    }
}
