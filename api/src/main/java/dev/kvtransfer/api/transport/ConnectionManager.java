package dev.kvtransfer.api.transport;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.model.CommState;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Objects;

/**
 * One rank's endpoint of a transport: it listens at {@link #localAddress()}, hands out {@link Connection}s to
 * peers, and accepts the first message of a tag from any peer ({@link #pollConnect}, {@link #recvConnect}).
 * See {@link Connection} for the message contract.
 *
 * <p>A backend implements {@link #pollConnect}, {@link #connection}, {@link #localAddress},
 * {@link #defaultTimeout}, {@link #isRunning} and {@link #close}; the waiting overloads of {@code recvConnect}
 * and {@link #getConnections} are defined here once, so every backend behaves the same.
 *
 * <p>Thread-safe. {@link #close()} is idempotent; it wakes every blocked call (on the manager and its
 * connections) with {@link TransportClosedException} and releases every resource (threads, sockets, files,
 * registrations).
 */
public interface ConnectionManager extends AutoCloseable {
    /** How long one wait of the untimed {@link #recvConnect(int, MemoryBuffer, long, long)} lasts before it waits
     *  again: it only bounds a single {@link #pollConnect}, not the call. */
    Duration UNTIMED_SLICE = Duration.ofHours(1);

    /** @return this rank's address, to be put in a {@link CommState} */
    String localAddress();

    /** @return the deadline of calls that take none (the configured {@link TransportConfig#defaultTimeout()}) */
    Duration defaultTimeout();

    /**
     * Receives the next message of a tag from any peer if one arrives within {@code wait}, and returns the
     * connection to its sender; returns {@code null} when none arrived (no exception: this is the
     * non-blocking poll of an agent loop, as Aeron's {@code offer}/{@code poll} return codes are).
     * {@code wait} may be {@link Duration#ZERO} (do not block) or very long (a backend handles any duration
     * without overflow).
     *
     * @param tag    message tag
     * @param buffer destination memory
     * @param offset first byte in the buffer
     * @param length expected message length (a message of another length fails with {@code MALFORMED})
     * @param wait   how long to wait at most
     * @return the connection to the sender, or {@code null} when nothing arrived in time
     * @throws TransportClosedException when the manager is (or becomes) closed
     */
    Connection pollConnect(int tag, MemoryBuffer buffer, long offset, long length, Duration wait);

    /**
     * Waits until the next message of a tag arrives from any peer or the manager closes (then
     * {@link TransportClosedException}); never times out.
     *
     * @param tag    message tag
     * @param buffer destination memory
     * @param offset first byte in the buffer
     * @param length expected message length
     * @return the connection to the sender
     */
    default Connection recvConnect(int tag, MemoryBuffer buffer, long offset, long length) {
        while (true) {
            Connection c = pollConnect(tag, buffer, offset, length, UNTIMED_SLICE);
            if (c != null) {
                return c;
            }
        }
    }

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
    default Connection recvConnect(int tag, MemoryBuffer buffer, long offset, long length, Duration timeout) {
        Objects.requireNonNull(timeout, "timeout");
        Connection c = pollConnect(tag, buffer, offset, length, timeout);
        if (c == null) {
            throw new TransportException(ErrorCode.TIMEOUT, "recvConnect tag " + tag + " at " + localAddress()
                    + ": nothing arrived within " + timeout.toMillis() + " ms");
        }
        return c;
    }

    /**
     * Connections to every rank of a peer instance, in rank order ({@link #connection} of each address).
     *
     * @param peerInstance the peer instance's addresses
     * @return one connection per peer rank, index = rank
     */
    default List<Connection> getConnections(CommState peerInstance) {
        Objects.requireNonNull(peerInstance, "peerInstance");
        List<Connection> out = new ArrayList<>(peerInstance.addresses().size());
        for (String a : peerInstance.addresses()) {
            out.add(connection(a));
        }
        return out;
    }

    /**
     * The connection to one address.
     *
     * @param address a peer's {@link #localAddress()}
     * @return the connection, created on first use and reused after
     * @throws TransportClosedException when the manager is closed
     */
    Connection connection(String address);

    /**
     * Registers memory that peers may write into with {@link Connection#write}. The returned region's
     * {@link RegisteredRegion#descriptor()} travels to the writers (it is what a writer needs and nothing
     * else); {@link RegisteredRegion#close()} revokes it.
     *
     * @param memory the memory peers may write
     * @return the registration
     * @throws UnsupportedOperationException when the transport does not declare
     *                                       {@link TransportCapability#ONE_SIDED_WRITE}
     */
    default RegisteredRegion register(MemoryBuffer memory) {
        throw new UnsupportedOperationException("this transport does not declare ONE_SIDED_WRITE: memory cannot be "
                + "registered for one-sided writes at " + localAddress());
    }

    /**
     * Registers memory that only the named peers may write into: a write arriving from any other peer is refused
     * with {@code UNAUTHORIZED} and touches nothing, even when it carries the genuine descriptor (whose key travels
     * in the request info). Core binds a request's push grants to the request's counterparts this way.
     *
     * @param memory  the memory the writers may write
     * @param writers the {@link #localAddress()} of every peer allowed to write
     * @return the registration
     * @throws UnsupportedOperationException when the transport cannot tell a write's sender (native RMA), or does
     *                                       not declare {@link TransportCapability#ONE_SIDED_WRITE}; the default.
     *                                       Core then registers with {@link #register(MemoryBuffer)}: the key alone
     *                                       guards the region
     */
    default RegisteredRegion register(MemoryBuffer memory, java.util.Set<String> writers) {
        throw new UnsupportedOperationException("this transport cannot bind a registration to its writers at "
                + localAddress());
    }

    /**
     * Whether a peer at {@code address} would write into memory this manager registers in one pass, straight into
     * it (shared memory between processes of one host), as far as this manager can tell before a write: it is
     * configured for it, authenticates its peers, and the address names a peer of its host. Core then moves a pull
     * request as one-sided writes when every rank of both instances answers true. A hint only: a write whose
     * one-copy path turns out unavailable still lands, by the transport's other path.
     *
     * @param address a peer's {@link #localAddress()}
     * @return true when one copy is expected; the default is false
     */
    default boolean oneCopyWritesFrom(String address) {
        return false;
    }

    /**
     * What this manager can do as configured: a subset of its provider's {@link TransportProvider#capabilities()}
     * (e.g. {@link TransportCapability#DEVICE_MEMORY} only where the native library found here supports it). Core
     * asks it per request whether the formatter may hand {@code DEVICE} buffers to the connections.
     *
     * @return the capabilities; the default declares none (device pools are then staged through host memory)
     */
    default java.util.Set<TransportCapability> capabilities() {
        return java.util.Set.of();
    }

    /** @return false once closed (or once the transport found itself unable to serve: then an error was reported) */
    boolean isRunning();

    /** Closes; see the class comment. */
    @Override
    void close();

    /**
     * How long, in microseconds, a context rank's responder should wait for the request info that follows a header
     * on an otherwise idle connection and read it itself, instead of handing it to an info reader (one thread
     * hand-off fewer per lone request). A transport whose progress runs on its own thread and whose short receives
     * are cheap profits; one whose receives on the responder cost more than the hand-off saves returns 0. Used when
     * {@code kvtransfer.responderInfoWaitMicros} is not set, and only over connections that do not post receives
     * ({@link Connection#recvAsync} returns false): where they post, the responder never waits for an info.
     *
     * @return microseconds, 0 to 100,000; the default is 200
     */
    default int preferredResponderInfoWaitMicros() {
        return 200;
    }

    /**
     * How long, in microseconds, an idle thread of the transceiver's request pools (generation request threads,
     * context info threads) should spin for its next task before it parks, while its side is lightly loaded. A
     * transport whose own threads spin after work (a request/response exchange then finds them awake) profits the
     * same way: the hand-off from its completion to the pool reaches a running thread instead of waking a parked one.
     * One whose progress thread needs the cores a spinning thread would take returns 0. Used when
     * {@code kvtransfer.poolSpinMicros} is not set.
     *
     * @return microseconds, 0 to 100,000; the default is 0 (never spin)
     */
    default int preferredPoolSpinMicros() {
        return 0;
    }
}
