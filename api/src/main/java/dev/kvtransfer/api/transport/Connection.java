package dev.kvtransfer.api.transport;

import dev.kvtransfer.api.memory.MemoryBuffer;

import java.time.Duration;

/**
 * A bidirectional, tagged message channel to one peer rank.
 *
 * <p>Messages on one (connection, tag) arrive in order and whole; different tags never mix. A receive takes
 * the next message of its tag and its length must equal the message's length (else {@code MALFORMED}). Both
 * calls block until the buffer range may be reused (send) or holds the message (receive), the deadline passes
 * ({@code TIMEOUT}), the peer is lost ({@code PEER_LOST}) or the manager closes
 * ({@link TransportClosedException}). Payload goes straight from/to the buffer's memory, no heap copy.
 *
 * <p>Thread-safe: different threads may send and receive on different tags concurrently; concurrent sends on
 * the same tag are ordered by whoever enters first.
 */
public interface Connection {
    /**
     * Sends one message with the manager's default timeout.
     *
     * @param tag    message tag
     * @param buffer source memory
     * @param offset first byte in the buffer
     * @param length byte count (0 allowed)
     */
    void send(int tag, MemoryBuffer buffer, long offset, long length);

    /**
     * Sends one message.
     *
     * @param tag     message tag
     * @param buffer  source memory
     * @param offset  first byte in the buffer
     * @param length  byte count (0 allowed)
     * @param timeout deadline for the whole call
     */
    void send(int tag, MemoryBuffer buffer, long offset, long length, Duration timeout);

    /**
     * Receives the next message of a tag with the manager's default timeout.
     *
     * @param tag    message tag
     * @param buffer destination memory
     * @param offset first byte in the buffer
     * @param length expected message length
     */
    void recv(int tag, MemoryBuffer buffer, long offset, long length);

    /**
     * Receives the next message of a tag.
     *
     * @param tag     message tag
     * @param buffer  destination memory
     * @param offset  first byte in the buffer
     * @param length  expected message length
     * @param timeout deadline for the whole call
     */
    void recv(int tag, MemoryBuffer buffer, long offset, long length, Duration timeout);

    /** @return the peer's address, as its manager's {@link ConnectionManager#localAddress()} reports it */
    String peer();
}
