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
 * <p>The transport contract in full (what every backend keeps and the testkit's {@code TransportConformanceTest}
 * checks, rule by rule):
 * <ul>
 *   <li><b>Eager sends.</b> A send of at most {@link #EAGER_LIMIT} bytes returns before the peer posts the
 *       matching receive (the protocol's control messages rely on it); larger sends may wait for it
 *       (rendezvous), bounded by their deadline.</li>
 *   <li><b>Deadlines.</b> Every call without a timeout uses {@link #defaultTimeout()}; a timed call fails with
 *       {@code TIMEOUT} no earlier than its deadline and promptly after it; a later message of the tag is still
 *       delivered to a later receive.</li>
 *   <li><b>Peer loss.</b> A transport declaring {@link TransportCapability#PEER_FAILURE_DETECTION} fails calls
 *       waiting on a dead or closed peer with {@code PEER_LOST} within its documented bound, including on a
 *       connection that has never exchanged a byte. Messages a peer sent before it closed are still
 *       delivered.</li>
 *   <li><b>Interrupts.</b> Core never interrupts a thread blocked in a transport call (it closes the manager
 *       instead); a transport that sees an interrupt ends the call with {@code NETWORK} "interrupted" and keeps
 *       the thread's interrupt flag.</li>
 *   <li><b>Tags.</b> Any {@code int} is a valid tag, including values near {@link Integer#MAX_VALUE}: transports
 *       never truncate them.</li>
 *   <li><b>Device memory.</b> A transport without {@link TransportCapability#DEVICE_MEMORY} refuses
 *       {@code DEVICE} buffers with {@link UnsupportedOperationException}.</li>
 *   <li><b>One-sided writes.</b> {@link #write} works exactly when the provider declares
 *       {@link TransportCapability#ONE_SIDED_WRITE}; otherwise it throws {@link UnsupportedOperationException}.</li>
 * </ul>
 *
 * <p>Thread-safe: different threads may send and receive on different tags concurrently; concurrent sends on
 * the same tag are ordered by whoever enters first.
 */
public interface Connection {
    /** Largest send that must complete without a posted receive: 64 KiB. */
    long EAGER_LIMIT = 64 * 1024;

    /** @return the deadline of the calls that take none (the manager's configured default) */
    Duration defaultTimeout();

    /**
     * Sends one message with {@link #defaultTimeout()}.
     *
     * @param tag    message tag
     * @param buffer source memory
     * @param offset first byte in the buffer
     * @param length byte count (0 allowed)
     */
    default void send(int tag, MemoryBuffer buffer, long offset, long length) {
        send(tag, buffer, offset, length, defaultTimeout());
    }

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
     * Receives the next message of a tag with {@link #defaultTimeout()}.
     *
     * @param tag    message tag
     * @param buffer destination memory
     * @param offset first byte in the buffer
     * @param length expected message length
     */
    default void recv(int tag, MemoryBuffer buffer, long offset, long length) {
        recv(tag, buffer, offset, length, defaultTimeout());
    }

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

    /**
     * Posts a receive of the next message of a tag and returns without waiting for it: the transport calls
     * {@code done} exactly once, when the whole message is in the buffer ({@code null}) or when the receive failed
     * (see {@link RecvCompletion#completed}). The rules of {@link #recv} hold: the length must equal the message's,
     * the deadline is the receive's own ({@code TIMEOUT} no earlier than it and promptly after it, with nothing
     * consumed: a message sent later goes to a later receive), peer loss fails it {@code PEER_LOST}, closing the
     * manager fails it with {@link TransportClosedException}. Posted and blocking receives of one (connection, tag)
     * take its messages in the order they were posted. The buffer range belongs to the transport until
     * {@code done} is called.
     *
     * <p>{@code done} runs on a transport thread, or on the calling thread before this method returns when the
     * message was already there; it must not block. A manager already closed throws
     * {@link TransportClosedException} here (nothing is posted, {@code done} is never called).
     *
     * <p>Optional: the default returns {@code false} ("not supported, use {@link #recv}") and posts nothing, so a
     * transport that does not implement it keeps working with callers that fall back to a blocking receive.
     *
     * @param tag     message tag
     * @param buffer  destination memory
     * @param offset  first byte in the buffer
     * @param length  expected message length
     * @param timeout deadline of the receive
     * @param done    called once when the receive ends
     * @return true when posted ({@code done} will be called); false when the transport does not support posted
     *         receives (nothing posted, {@code done} never called)
     */
    default boolean recvAsync(int tag, MemoryBuffer buffer, long offset, long length, Duration timeout,
                              RecvCompletion done) {
        return false;
    }

    /**
     * Posts a send of one message and returns without waiting for it: the transport calls {@code done} exactly
     * once, when the buffer range may be reused ({@code null}, as a blocking {@link #send} would return) or when
     * the send failed (see {@link SendCompletion#sent}). The rules of {@link #send} hold: eager sizes complete
     * without a posted receive, larger ones may wait for it; the deadline is the send's own; peer loss fails it
     * {@code PEER_LOST}; closing the manager fails it with {@link TransportClosedException}. Posted and blocking
     * sends of one (connection, tag) deliver their messages in the order they were posted. The buffer range
     * belongs to the transport until {@code done} is called. So a caller can have many sends of one tag in flight
     * (a batch of bulk messages) without a thread per send and without a wake-up between two of them.
     *
     * <p>{@code done} runs on a transport thread, or on the calling thread before this method returns when the
     * send completed at once; it must not block. A manager already closed throws {@link TransportClosedException}
     * here (nothing is sent, {@code done} is never called).
     *
     * <p>Optional: the default returns {@code false} ("not supported, use {@link #send}") and sends nothing.
     *
     * @param tag     message tag
     * @param buffer  source memory
     * @param offset  first byte in the buffer
     * @param length  byte count (0 allowed)
     * @param timeout deadline of the send
     * @param done    called once when the send ends
     * @return true when posted ({@code done} will be called); false when the transport does not post sends
     *         (nothing sent, {@code done} never called)
     */
    default boolean sendAsync(int tag, MemoryBuffer buffer, long offset, long length, Duration timeout,
                              SendCompletion done) {
        return false;
    }

    /**
     * Writes a batch into memory the peer registered ({@link ConnectionManager#register}) and returns once every
     * entry is in the peer's memory (remote completion): a message sent on this connection after {@code write}
     * returned can never overtake the written bytes. All entries must target regions owned by this
     * connection's peer. Entries are checked against their descriptors before anything moves; the owner checks
     * them again and refuses: an entry outside its region ({@code MALFORMED}), an unknown region or a wrong key
     * ({@code UNAUTHORIZED}), a region deregistered since ({@code CANCELLED}). A refused batch writes nothing
     * outside registered regions; entries before a refused one may have been written.
     *
     * @param batch   the entries
     * @param timeout deadline for the whole batch
     * @throws UnsupportedOperationException when the transport does not declare
     *                                       {@link TransportCapability#ONE_SIDED_WRITE}
     */
    default void write(WriteBatch batch, Duration timeout) {
        throw new UnsupportedOperationException("this transport does not declare ONE_SIDED_WRITE: no one-sided "
                + "writes to " + peer());
    }

    /**
     * As {@link #write}, and sums what it writes: puts the CRC32C of entry {@code i}'s bytes into {@code crc32c[i]}
     * (those of its source, which a correct write placed unchanged). A transport that copies on the CPU sums each
     * piece of an entry right behind its copy, while the piece is in the cache, so the sum costs no pass over memory
     * of its own (a part checksum otherwise reads every written byte again after the write).
     *
     * <p>Optional: the default returns {@code false} and writes nothing, as does a transport that cannot sum this
     * batch (a source in device memory); the caller then calls {@link #write} and sums the sources itself. The
     * errors and the completion are those of {@link #write}.
     *
     * @param batch   the entries
     * @param timeout deadline for the whole batch
     * @param crc32c  receives one CRC32C per entry, at least {@code batch.size()} long
     * @return whether the batch was written and summed
     * @throws IllegalArgumentException when {@code crc32c} is shorter than the batch
     */
    default boolean writeSummed(WriteBatch batch, Duration timeout, int[] crc32c) {
        if (crc32c.length < batch.size()) {
            throw new IllegalArgumentException("crc32c has " + crc32c.length + " slots for " + batch.size()
                    + " entries");
        }
        return false;
    }

    /** @return the peer's address, as its manager's {@link ConnectionManager#localAddress()} reports it */
    String peer();

    /** {@link #copiesPerByte} and {@link #writeCopiesPerByte} of a transport that cannot tell. */
    int COPIES_UNKNOWN = -1;

    /**
     * The copy ledger's transport column: how many passes the transport makes over each byte of a message of
     * {@code length} bytes on its way from the sender's memory into the receiving buffer of a posted receive.
     * Every copy counts, in user space (the transport's own, its library's, a media driver's) and in the kernel (a
     * socket write and a socket read are two; a {@code process_vm_readv} is one). What the caller does with the
     * bytes (a formatter's gather or scatter, a checksum) does not. A message that arrives before its receive is
     * posted may cost one more pass (staged); the figure is for the path the transport takes when the receive
     * waits, which is how the transceiver receives its payload.
     *
     * @param length message bytes
     * @return passes per byte, or {@link #COPIES_UNKNOWN} (the default)
     */
    default int copiesPerByte(long length) {
        return COPIES_UNKNOWN;
    }

    /**
     * As {@link #copiesPerByte}, for an entry of {@code length} bytes of a one-sided {@link #write}: passes from the
     * writer's memory into the peer's registered memory.
     *
     * @param length entry bytes
     * @return passes per byte, or {@link #COPIES_UNKNOWN} (the default, and what a transport without
     *         {@link TransportCapability#ONE_SIDED_WRITE} returns)
     */
    default int writeCopiesPerByte(long length) {
        return COPIES_UNKNOWN;
    }
}
