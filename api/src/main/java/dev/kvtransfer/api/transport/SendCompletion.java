package dev.kvtransfer.api.transport;

/**
 * How a posted send ({@link Connection#sendAsync}) ends. Called exactly once per posted send, on a thread of the
 * transport or, when the send completed at once, on the thread that posted it before {@code sendAsync} returns.
 *
 * <p>Must not block and should be short: it runs on the thread that moves every other message of the transport.
 * An exception it throws is reported by the transport and otherwise ignored.
 */
@FunctionalInterface
public interface SendCompletion {
    /**
     * The send ended: the buffer range is the caller's again.
     *
     * @param failure null when the message left the buffer (as a blocking {@link Connection#send} returns); else
     *                why it ended: {@code TIMEOUT} (its deadline passed), {@code PEER_LOST}, or a
     *                {@link TransportClosedException} (the manager closed)
     */
    void sent(TransportException failure);
}
