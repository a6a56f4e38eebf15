package dev.kvtransfer.api.transport;

/**
 * How a posted receive ({@link Connection#recvAsync}) ends. Called exactly once per posted receive, on a thread of
 * the transport (its agent or progress thread, a sender's thread on an in-process transport) or, when the message
 * was already there, on the thread that posted it before {@code recvAsync} returns.
 *
 * <p>Must not block and should be short: it runs on the thread that moves every other message of the transport.
 * An exception it throws is reported by the transport and otherwise ignored.
 */
@FunctionalInterface
public interface RecvCompletion {
    /**
     * The receive ended.
     *
     * @param failure null when the whole message is in the buffer; else why it ended: {@code TIMEOUT} (its deadline
     *                passed and nothing was consumed), {@code PEER_LOST}, {@code MALFORMED} (a message of another
     *                length), or a {@link TransportClosedException} (the manager closed)
     */
    void completed(TransportException failure);
}
