package dev.kvtransfer.mpi;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.ErrorHandler;
import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.memory.MemoryKind;
import dev.kvtransfer.api.transport.Connection;
import dev.kvtransfer.api.transport.ConnectionManager;
import dev.kvtransfer.api.transport.TransportClosedException;
import dev.kvtransfer.api.transport.TransportConfig;
import dev.kvtransfer.api.transport.RegisteredRegion;
import dev.kvtransfer.api.transport.TransportException;
import dev.kvtransfer.api.transport.WriteBatch;
import dev.kvtransfer.transport.support.EmulatedOneSided;

import java.time.Duration;
import java.util.Objects;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.locks.LockSupport;

/**
 * One endpoint of this process: address {@code "<world rank>/<endpoint>"} ({@link MpiAddress}); a connection is
 * a peer endpoint, in this process or another rank. A process may hold any number of managers at once (the
 * conformance rules and {@code LocalInstance} create several per JVM): their messages are multiplexed on the
 * runtime's communicators by destination endpoint (envelope MPI tag) and matched by the endpoint's inbox
 * ({@link MpiEndpoint}); traffic between endpoints of one process is real MPI traffic over Open MPI's self
 * transport, between ranks over vader (shared memory).
 *
 * <p>Receiving waits in the endpoint's inbox, fed by the process's progress agent ({@link MpiProgressAgent});
 * {@link #pollConnect} returns {@code null} when nothing arrived in time and never throws a timeout. Sending,
 * and the payload of a large receive, are driven by the calling thread ({@link MpiDataPath}). Background errors
 * (a late eager send that failed, a dropped message) go to {@link TransportConfig#errorHandler()} and
 * {@link #errorCount()}.
 */
public final class MpiConnectionManager implements ConnectionManager {
    /** How long close() waits for calls in flight to leave. */
    private static final long CLOSE_WAIT_NANOS = TimeUnit.SECONDS.toNanos(2);
    private static final ThreadLocal<MpiEndpoint.Waiter> WAITER = ThreadLocal.withInitial(MpiEndpoint.Waiter::new);

    private final MpiRuntime runtime;
    private final MpiSettings settings;
    private final ErrorHandler errorHandler;
    private final AtomicLong errors = new AtomicLong();
    private final MpiEndpoint endpoint;
    private final int endpointId;
    private final String localAddress;
    private final MpiDataPath data;
    private final ConcurrentHashMap<Key, MpiConnection> connections = new ConcurrentHashMap<>();
    /** Native one-sided writes (MPI-3 RMA), or null when this manager emulates them or RMA is unavailable. */
    private final MpiOneSided nativeOneSided;
    private final Object emulatedLock = new Object();
    private EmulatedOneSided emulated;
    private final AtomicInteger inFlight = new AtomicInteger();
    private volatile boolean closing;
    private volatile boolean closed;

    /**
     * The copy ledger's transport column for a message to {@code c} (see {@link MpiConnection#copiesPerByte}).
     *
     * @return passes per byte, or {@link Connection#COPIES_UNKNOWN}
     */
    int copiesPerByte(MpiConnection c, long length) {
        if (c.link().index() != 0 || c.rank() == runtime.worldRank()) {
            return Connection.COPIES_UNKNOWN; // another job (the TCP BTL) or this process (the self BTL)
        }
        if (length > settings.eagerBytes()) {
            return 1; // header-only envelope; the payload isend / imrecv, vader's single copy
        }
        return length <= 4096 ? 5 : 3;
    }

    /** @return passes per byte of a one-sided write entry to {@code c} */
    int writeCopiesPerByte(MpiConnection c, long length) {
        if (nativeOneSided == null) {
            return copiesPerByte(c, length); // emulated: a message received into place
        }
        return c.link().index() == 0 && c.rank() != runtime.worldRank() ? 1 : Connection.COPIES_UNKNOWN;
    }

    private MpiConnectionManager(MpiRuntime runtime, MpiSettings settings, ErrorHandler errorHandler) {
        this.runtime = runtime;
        this.settings = settings;
        this.errorHandler = errorHandler;
        this.data = new MpiDataPath(this, runtime, settings);
        this.endpoint = runtime.openEndpoint(this, settings);
        this.endpointId = endpoint.id;
        this.localAddress = runtime.address(runtime.worldRank(), endpointId);
        this.nativeOneSided = settings.oneSided() == MpiSettings.OneSided.NATIVE && runtime.rmaFailure() == null
                ? new MpiOneSided(this, runtime) : null;
        if (settings.oneSided() == MpiSettings.OneSided.NATIVE && runtime.rmaFailure() != null) {
            backgroundError(new TransportException(ErrorCode.NETWORK, this + ": native one-sided writes unavailable ("
                    + runtime.rmaFailure() + "); this manager emulates them"));
        }
    }

    static MpiConnectionManager open(TransportConfig config) {
        Objects.requireNonNull(config, "config");
        MpiSettings settings = MpiSettings.conclude(config);
        return new MpiConnectionManager(MpiRuntime.get(), settings, config.errorHandler());
    }

    /** @return the settings this manager was created with */
    MpiSettings settings() {
        return settings;
    }

    MpiEndpoint endpoint() {
        return endpoint;
    }

    int endpointId() {
        return endpointId;
    }

    MpiRuntime runtime() {
        return runtime;
    }

    /** @return the chunk size {@code C} of payloads */
    public long maxMessageBytes() {
        return settings.chunkBytes();
    }

    /** @return background errors reported to the error handler so far */
    public long errorCount() {
        return errors.get();
    }

    /** Reports a background error to the configured handler and counts it; never throws. */
    void backgroundError(Throwable e) {
        errors.incrementAndGet();
        runtime.counters().backgroundErrors.increment();
        try {
            errorHandler.onError(e);
        } catch (RuntimeException ignored) {
            // the handler must not throw; a broken one must not stop the agent
        }
    }

    @Override
    public String localAddress() {
        return localAddress;
    }

    @Override
    public Duration defaultTimeout() {
        return settings.defaultTimeout();
    }

    @Override
    public Connection pollConnect(int tag, MemoryBuffer buffer, long offset, long length, Duration wait) {
        checkRange(buffer, offset, length);
        Objects.requireNonNull(wait, "wait");
        long start = System.nanoTime();
        long deadline = start + nanos(wait);
        enter("pollConnect");
        try {
            MpiEndpoint.Waiter w = awaitEnvelope(tag, 0, -1, -1, buffer.address() + offset, length, deadline,
                    !wait.isZero() && !wait.isNegative(), "pollConnect");
            if (w == null) {
                return null;
            }
            // Something arrived: receive all of it, given at least the default timeout from now.
            finish(w, tag, buffer.address() + offset, length, Math.max(deadline, System.nanoTime()
                    + nanos(settings.defaultTimeout())), "pollConnect");
            return connectionTo(runtime.links().get(w.fromLink), w.fromRank, w.fromEndpoint);
        } finally {
            exit();
        }
    }

    @Override
    public Connection connection(String address) {
        Objects.requireNonNull(address, "address");
        ensureOpen("connection");
        MpiAddress a = MpiAddress.parse(address, runtime.worldSize(), runtime.worldId());
        if (a.world() == null) {
            return connectionTo(runtime.links().get(0), a.rank(), a.endpoint());
        }
        MpiLinks.Link link = runtime.links().find(a.world(), a.rank());
        if (link == null && a.port() == null) {
            // Another MPI world that does not listen: every call fails with NETWORK, saying why.
            return new UnreachableConnection(MpiAddress.shorten(address), "the endpoint is in MPI world " + a.world()
                    + ", this process is in world " + runtime.worldId() + ", and that process accepts no connections"
                    + " (a process outside the mpirun job listens only when Open MPI's ompi-server is configured:"
                    + " mpirun --ompi-server file:URI, OMPI_MCA_pmix_server_uri)", settings.defaultTimeout());
        }
        if (link == null) {
            try {
                link = runtime.links().connect(a.world(), a.rank(), a.port(), nanos(settings.defaultTimeout()));
            } catch (TransportException e) {
                return new UnreachableConnection(MpiAddress.shorten(address), e.getMessage(),
                        settings.defaultTimeout());
            }
        }
        return connectionTo(link, 0, a.endpoint());
    }

    /** A connection to an endpoint of another MPI world: nothing reaches it. */
    private record UnreachableConnection(String peer, String why, Duration defaultTimeout) implements Connection {
        @Override
        public void send(int tag, MemoryBuffer buffer, long offset, long length, Duration timeout) {
            throw new TransportException(ErrorCode.NETWORK, "mpi send to " + peer + ", tag " + tag + ": " + why);
        }

        @Override
        public void recv(int tag, MemoryBuffer buffer, long offset, long length, Duration timeout) {
            throw new TransportException(ErrorCode.NETWORK, "mpi recv from " + peer + ", tag " + tag + ": " + why);
        }
    }

    private MpiConnection connectionTo(MpiLinks.Link link, int rank, int ep) {
        ensureOpen("connection");
        Key key = new Key(link.index(), rank, ep);
        MpiConnection c = connections.get(key);
        if (c != null) {
            return c;
        }
        String peer = link.index() == 0 ? runtime.address(rank, ep)
                : MpiAddress.format(link.worldRank(), ep, link.world(), null);
        return connections.computeIfAbsent(key, k -> new MpiConnection(this, link, rank, ep, peer));
    }

    /** A connection's identity: link, MPI rank on it, endpoint. */
    private record Key(int link, int rank, int endpoint) {
    }

    /** @return the native one-sided part (the agent serves its requests), or null */
    MpiOneSided nativeOneSided() {
        return nativeOneSided;
    }

    private EmulatedOneSided emulated() {
        synchronized (emulatedLock) {
            if (emulated == null) {
                emulated = new EmulatedOneSided(this, new MpiHostMemory(), this::backgroundError,
                        settings.defaultTimeout(), settings.name() + "-" + localAddress);
            }
            return emulated;
        }
    }

    /**
     * Registers memory for one-sided writes: attached to the process's MPI window (native), or served by
     * {@code EmulatedOneSided} when {@code mpi.oneSided=emulated} or the window could not be created.
     */
    @Override
    public RegisteredRegion register(MemoryBuffer memory) {
        Objects.requireNonNull(memory, "memory");
        ensureOpen("register");
        return nativeOneSided != null ? nativeOneSided.register(memory) : emulated().register(memory);
    }

    /** Emulated writes arrive on a connection, so the writer is known; MPI windows cannot tell it (refused). */
    @Override
    public RegisteredRegion register(MemoryBuffer memory, java.util.Set<String> writers) {
        Objects.requireNonNull(memory, "memory");
        Objects.requireNonNull(writers, "writers");
        ensureOpen("register");
        if (nativeOneSided != null) {
            throw new UnsupportedOperationException("MPI one-sided windows cannot be bound to their writers at "
                    + localAddress());
        }
        return emulated().register(memory, writers);
    }

    void write(MpiConnection conn, WriteBatch batch, Duration timeout) {
        Objects.requireNonNull(batch, "batch");
        Objects.requireNonNull(timeout, "timeout");
        ensureOpen("write");
        enter("write");
        try {
            if (nativeOneSided != null) {
                nativeOneSided.write(conn, batch, timeout);
            } else {
                emulated().write(conn, batch, timeout);
            }
        } finally {
            exit();
        }
    }

    @Override
    public boolean isRunning() {
        return !closing && !runtime.finalizing() && runtime.agentRunning();
    }

    @Override
    public void close() {
        synchronized (this) {
            if (closing) {
                return;
            }
            closing = true;
        }
        try {
            // Regions first: each waits (bounded) until no granted write lands in it any more.
            if (nativeOneSided != null) {
                nativeOneSided.close();
            }
            EmulatedOneSided e;
            synchronized (emulatedLock) {
                e = emulated;
            }
            if (e != null) {
                e.close();
            }
        } finally {
            // Waiters in the inbox wake at once; calls in MPI see the flag within one poll and cancel their requests.
            int orphaned = endpoint.close();
            long deadline = System.nanoTime() + CLOSE_WAIT_NANOS;
            while (inFlight.get() > 0 && System.nanoTime() - deadline < 0) {
                LockSupport.parkNanos(50_000);
            }
            closed = true;
            runtime.closeEndpoint(this, endpointId);
            if (nativeOneSided != null) {
                nativeOneSided.release();
            }
            if (orphaned > 0) {
                backgroundError(new TransportException(ErrorCode.CANCELLED, this + " closed with " + orphaned
                        + " large message(s) announced but never received; their senders time out"));
            }
        }
    }

    @Override
    public String toString() {
        return "MpiConnectionManager{" + settings.name() + " " + localAddress + " of " + runtime.worldSize()
                + " ranks" + (closing ? " closed" : "") + "}";
    }

    // ------------------------------------------------------------------ data path (used by MpiConnection)

    void send(MpiConnection conn, int tag, MemoryBuffer buffer, long offset, long length, Duration timeout) {
        checkRange(buffer, offset, length);
        long deadline = System.nanoTime() + nanos(Objects.requireNonNull(timeout, "timeout"));
        enter("send");
        try {
            data.send(conn, tag, buffer.address() + offset, length, deadline);
        } catch (MpiNative.MpiCallException e) {
            throw new TransportException(ErrorCode.NETWORK, data.describe("send", conn, tag, length) + " failed: "
                    + e.getMessage(), e);
        } finally {
            exit();
        }
    }

    void recv(MpiConnection conn, int tag, MemoryBuffer buffer, long offset, long length, Duration timeout) {
        checkRange(buffer, offset, length);
        long deadline = System.nanoTime() + nanos(Objects.requireNonNull(timeout, "timeout"));
        enter("recv");
        try {
            MpiEndpoint.Waiter w = awaitEnvelope(tag, conn.link().index(), conn.rank(), conn.endpoint(),
                    buffer.address() + offset, length, deadline, true, "recv");
            if (w == null) {
                throw new TransportException(ErrorCode.TIMEOUT, data.describe("recv", conn, tag, length)
                        + " timed out after " + timeout.toMillis() + " ms");
            }
            finish(w, tag, buffer.address() + offset, length, deadline, "recv");
        } finally {
            exit();
        }
    }

    /**
     * Takes the first matching envelope, waiting for one until the deadline when {@code block}.
     *
     * @return the waiter with the outcome, or null when nothing arrived in time
     */
    private MpiEndpoint.Waiter awaitEnvelope(int tag, int link, int rank, int ep, long address, long length,
                                             long deadline, boolean block, String op) {
        MpiEndpoint.Waiter w = WAITER.get().prepare(tag, link, rank, ep, address, length);
        endpoint.take(w, block);
        if (w.state == MpiEndpoint.NOTHING) {
            return null;
        }
        if (w.state == MpiEndpoint.WAITING) {
            runtime.receiveWaiting(true);
            try {
                while (w.state == MpiEndpoint.WAITING) {
                    long left = deadline - System.nanoTime();
                    if (left <= 0) {
                        if (endpoint.withdraw(w)) {
                            return null;
                        }
                        break;
                    }
                    if (Thread.currentThread().isInterrupted() && endpoint.withdraw(w)) {
                        throw new TransportException(ErrorCode.NETWORK, data.describe(op, rank, ep, tag, length)
                                + " interrupted (the thread's interrupt flag is kept)");
                    }
                    LockSupport.parkNanos(this, Math.min(left, TimeUnit.MILLISECONDS.toNanos(50)));
                }
            } finally {
                runtime.receiveWaiting(false);
            }
        }
        return w;
    }

    /** Completes a matched receive: the inline copy is done, a large payload is received now. */
    private void finish(MpiEndpoint.Waiter w, int tag, long address, long length, long deadline, String op) {
        switch (w.state) {
            case MpiEndpoint.INLINE_DONE -> {
                return;
            }
            case MpiEndpoint.INLINE_MISMATCH -> throw data.mismatch(op, w, tag, length);
            case MpiEndpoint.CLOSED -> throw new TransportClosedException(data.describe(op, w.rank, w.endpoint, tag,
                    length) + " interrupted: " + this + " closed");
            case MpiEndpoint.LARGE -> {
                try {
                    data.receivePayload(w, tag, address, length, deadline, op);
                } catch (MpiNative.MpiCallException e) {
                    throw new TransportException(ErrorCode.NETWORK, data.describe(op, w.fromRank, w.fromEndpoint, tag,
                            length) + " failed: " + e.getMessage(), e);
                }
            }
            default -> throw new IllegalStateException("waiter state " + w.state);
        }
    }

    private void enter(String op) {
        ensureOpen(op);
        inFlight.incrementAndGet();
        if (closing || !runtime.enter()) {
            inFlight.decrementAndGet();
            throw new TransportClosedException(op + ": " + this + " is closed");
        }
    }

    private void exit() {
        runtime.exit();
        inFlight.decrementAndGet();
    }

    void ensureOpen(String op) {
        if (closing || runtime.finalizing()) {
            throw new TransportClosedException(op + ": " + this + " is closed");
        }
    }

    /** @return true once close() started: calls in progress end with TransportClosedException */
    boolean closing() {
        return closing;
    }

    static long nanos(Duration d) {
        try {
            return Math.min(Math.max(0, d.toNanos()), Long.MAX_VALUE / 4);
        } catch (ArithmeticException e) {
            return d.isNegative() ? 0 : Long.MAX_VALUE / 4;
        }
    }

    static void checkRange(MemoryBuffer buffer, long offset, long length) {
        Objects.requireNonNull(buffer, "buffer");
        if (buffer.kind() == MemoryKind.DEVICE) {
            throw new UnsupportedOperationException("the mpi transport does not declare DEVICE_MEMORY: "
                    + "it sends host memory only");
        }
        if (offset < 0 || length < 0 || offset > buffer.size() - length) {
            throw new IndexOutOfBoundsException("range [" + offset + ", +" + length + ") outside a buffer of "
                    + buffer.size() + " bytes");
        }
    }
}
