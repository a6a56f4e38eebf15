package dev.kvtransfer.api.transport;

/**
 * What a transport can do beyond the required two-sided, tagged, ordered messages. The testkit asserts that a
 * transport which does not declare a capability rejects the matching operation with
 * {@link UnsupportedOperationException}.
 */
public enum TransportCapability {
    /** Connects ranks in different OS processes (not only threads of one JVM). */
    CROSS_PROCESS,
    /** Notices a dead peer and fails the calls waiting on it with {@code PEER_LOST}. */
    PEER_FAILURE_DETECTION,
    /** Sends and receives {@code DEVICE} memory directly. */
    DEVICE_MEMORY,
    /**
     * {@link ConnectionManager#register} and {@link Connection#write} work: one-sided writes into a peer's
     * registered memory. Emulated (the owner's transport thread places incoming bytes) unless
     * {@link #NATIVE_ONE_SIDED_WRITE} is declared too.
     */
    ONE_SIDED_WRITE,
    /** One-sided writes are native RMA (e.g. UCX put): the owner's CPU takes no part in placing the bytes. */
    NATIVE_ONE_SIDED_WRITE,
    /**
     * Honours {@link TransportConfig#authSecret()}: every connection's handshake proves the secret, a peer that
     * cannot (another secret, or none) is refused, and the refused side's calls fail {@code UNAUTHORIZED}, never
     * {@code TIMEOUT}. A transport that does not declare it authenticates nothing: it relies on its deployment (one
     * JVM for loopback, one launcher-started job for MPI) and ignores the secret.
     */
    AUTHENTICATED
}
