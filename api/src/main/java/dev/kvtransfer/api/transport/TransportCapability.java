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
    DEVICE_MEMORY
}
