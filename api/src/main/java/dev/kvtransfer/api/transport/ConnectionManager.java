package dev.kvtransfer.api.transport;

import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.model.CommState;

import java.time.Duration;
import java.util.List;

/**
 * One rank's endpoint of a transport: it listens at {@link #localAddress()}, hands out {@link Connection}s to
 * peers, and accepts the first message of a tag from any peer ({@link #recvConnect}).
 *
 * <p>Thread-safe. {@link #close()} is idempotent; it wakes every blocked call (on the manager and its
 * connections) with {@link TransportClosedException} and releases every resource (threads, sockets, files).
 */
public interface ConnectionManager extends AutoCloseable {
    /** @return this rank's address, to be put in a {@link CommState} */
    String localAddress();

    /**
     * Waits (until close) for the next message of a tag from any peer, receives it, and returns the connection
     * to the peer that sent it.
     *
     * @param tag    message tag
     * @param buffer destination memory
     * @param offset first byte in the buffer
     * @param length expected message length
     * @return the connection to the sender
     */
    Connection recvConnect(int tag, MemoryBuffer buffer, long offset, long length);

    /**
     * Like {@link #recvConnect(int, MemoryBuffer, long, long)} with a deadline.
     *
     * @param tag     message tag
     * @param buffer  destination memory
     * @param offset  first byte in the buffer
     * @param length  expected message length
     * @param timeout how long to wait
     * @return the connection to the sender
     * @throws TransportException with {@code TIMEOUT} when nothing arrived in time
     */
    Connection recvConnect(int tag, MemoryBuffer buffer, long offset, long length, Duration timeout);

    /**
     * Connections to every rank of a peer instance, in rank order (connecting lazily or eagerly).
     *
     * @param peerInstance the peer instance's addresses
     * @return one connection per peer rank, index = rank
     */
    List<Connection> getConnections(CommState peerInstance);

    /**
     * The connection to one address.
     *
     * @param address a peer's {@link #localAddress()}
     * @return the connection, created on first use and reused after
     */
    Connection connection(String address);

    /** @return false once closed */
    boolean isRunning();

    /** Closes; see the class comment. */
    @Override
    void close();
}
