package dev.kvtransfer.mpi;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.memory.MemoryKind;
import dev.kvtransfer.api.model.CommState;
import dev.kvtransfer.api.transport.Connection;
import dev.kvtransfer.api.transport.ConnectionManager;
import dev.kvtransfer.api.transport.TransportClosedException;
import dev.kvtransfer.api.transport.TransportConfig;
import dev.kvtransfer.api.transport.TransportException;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Objects;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;
import java.util.concurrent.locks.LockSupport;

/**
 * One rank's MPI endpoint. Its address is the {@code MPI_COMM_WORLD} rank; a connection is a peer rank.
 *
 * <p>Message framing: a message of {@code n} bytes travels as {@code n / C} MPI messages of exactly {@code C}
 * bytes followed by one final MPI message of {@code n mod C} bytes (possibly empty), all on the same MPI tag,
 * where {@code C} = {@value #MAX_MESSAGE_BYTES} (default 1 GiB, at most {@code 2^31-1}: MPI counts are
 * {@code int}). Below {@code C} that is one MPI message. A chunk shorter than {@code C} always ends a
 * message, so the receiver checks every chunk's size against what it expects (MALFORMED on mismatch) and can
 * drain the rest of a wrong-sized message exactly. Both sides must use the same {@code C}.
 *
 * <p>Every wait polls non-blocking requests ({@code MPI_Isend}, {@code MPI_Improbe} + {@code MPI_Imrecv},
 * {@code MPI_Test}) with a short spin, then a backoff, so each call honours its deadline and {@link #close()}
 * wakes it; the waiting thread then cancels its own request.
 *
 * <p>One open manager per process: MPI has one rank per process, and two managers would steal each other's
 * messages. A new one may be created after the previous one closed.
 */
public final class MpiConnectionManager implements ConnectionManager {
    /** Transport property: the chunk size {@code C} in bytes, in {@code [1, 2^31-1]}; same on every rank. */
    public static final String MAX_MESSAGE_BYTES = "mpi.maxMessageBytes";
    /** Default chunk size: 1 GiB. */
    public static final long DEFAULT_MAX_MESSAGE_BYTES = 1L << 30;
    /**
     * Transport property: sends of at most this many bytes are eager: copied into a private native buffer and
     * posted, and {@code send} returns at once, before the peer posts its receive (the protocol's control
     * messages rely on it; MPI's own eager limit, 4 KiB minus headers on vader, is too small to promise it).
     */
    public static final String EAGER_BYTES = "mpi.eagerBytes";
    /** Default eager limit: 8 KiB (the testkit's control-message rule uses 4 KiB). */
    public static final long DEFAULT_EAGER_BYTES = 8192;

    /** How long one native poll spins before Java checks close and deadline. */
    private static final long SPIN_NANOS = 20_000;
    /** Polls before the backoff starts parking. */
    private static final int SPIN_POLLS = 50;
    /** Longest park between polls. */
    private static final long MAX_PARK_NANOS = 200_000;
    /** How long a cancel may wait for MPI to complete a request before releasing it. */
    private static final long CANCEL_WAIT_NANOS = TimeUnit.MILLISECONDS.toNanos(200);
    /** How long close() waits for calls in flight to leave. */
    private static final long CLOSE_WAIT_NANOS = TimeUnit.SECONDS.toNanos(2);

    private static final AtomicReference<MpiConnectionManager> OPEN = new AtomicReference<>();
    private static final ThreadLocal<long[]> PROBE_OUT = ThreadLocal.withInitial(() -> new long[2]);

    private final MpiRuntime runtime;
    private final String name;
    private final Duration defaultTimeout;
    private final long chunkBytes;
    private final long eagerBytes;
    private final String localAddress;
    private final ConcurrentHashMap<Integer, MpiConnection> connections = new ConcurrentHashMap<>();
    private final TagLocks anySourceChunkLocks = new TagLocks();
    private final AtomicInteger inFlight = new AtomicInteger();
    /** Eager sends not yet complete (their copies are in flight); reaped on later sends, released at close. */
    private final Object eagerLock = new Object();
    private long[] eagerPending = new long[16];
    private int eagerCount;
    private volatile boolean closed;

    private MpiConnectionManager(MpiRuntime runtime, TransportConfig config, long chunkBytes, long eagerBytes) {
        this.runtime = runtime;
        this.name = config.name();
        this.defaultTimeout = config.defaultTimeout();
        this.chunkBytes = chunkBytes;
        this.eagerBytes = eagerBytes;
        this.localAddress = Integer.toString(runtime.worldRank());
    }

    static MpiConnectionManager open(TransportConfig config) {
        Objects.requireNonNull(config, "config");
        long chunk = config.longProperty(MAX_MESSAGE_BYTES, DEFAULT_MAX_MESSAGE_BYTES);
        if (chunk < 1 || chunk > Integer.MAX_VALUE) {
            throw new IllegalArgumentException("transport property " + MAX_MESSAGE_BYTES + " = " + chunk
                    + ": must be in [1, " + Integer.MAX_VALUE + "]");
        }
        long eager = config.longProperty(EAGER_BYTES, DEFAULT_EAGER_BYTES);
        if (eager < 0 || eager > Integer.MAX_VALUE) {
            throw new IllegalArgumentException("transport property " + EAGER_BYTES + " = " + eager
                    + ": must be in [0, " + Integer.MAX_VALUE + "]");
        }
        MpiRuntime rt = MpiRuntime.get();
        MpiConnectionManager manager = new MpiConnectionManager(rt, config, chunk, eager);
        if (!OPEN.compareAndSet(null, manager)) {
            throw new TransportException(ErrorCode.NETWORK, "an MPI connection manager (" + OPEN.get().name
                    + ") is already open in this process (rank " + rt.worldRank() + "); MPI has one endpoint"
                    + " per process: close it before creating '" + config.name() + "'");
        }
        rt.register(manager);
        return manager;
    }

    /** @return the chunk size {@code C} */
    public long maxMessageBytes() {
        return chunkBytes;
    }

    @Override
    public String localAddress() {
        return localAddress;
    }

    @Override
    public Connection pollConnect(int tag, MemoryBuffer buffer, long offset, long length, Duration wait) {
        // Interim bridge to the timed receive; the agent rewrite replaces it with a poll that throws nothing.
        try {
            return recvConnect(tag, buffer, offset, length, wait);
        } catch (TransportException e) {
            if (e.code() == ErrorCode.TIMEOUT && !(e instanceof TransportClosedException)) {
                return null;
            }
            throw e;
        }
    }

    @Override
    public Connection recvConnect(int tag, MemoryBuffer buffer, long offset, long length, Duration timeout) {
        checkRange(buffer, offset, length);
        long deadline = deadline(timeout);
        int source;
        if (length >= chunkBytes) {
            // A chunked receive from any source must not share its chunks with another one on the same tag.
            TagLocks.Entry lock = anySourceChunkLocks.acquire(tag, deadline, this, "recvConnect");
            try {
                source = receive(-1, tag, buffer.address() + offset, length, deadline, "recvConnect");
            } finally {
                anySourceChunkLocks.release(tag, lock);
            }
        } else {
            source = receive(-1, tag, buffer.address() + offset, length, deadline, "recvConnect");
        }
        return connectionTo(source);
    }

    @Override
    public List<Connection> getConnections(CommState peerInstance) {
        Objects.requireNonNull(peerInstance, "peerInstance");
        if (!MpiTransportProvider.NAME.equals(peerInstance.transport())) {
            throw new IllegalArgumentException("peer instance uses transport '" + peerInstance.transport()
                    + "', not '" + MpiTransportProvider.NAME + "'");
        }
        List<Connection> out = new ArrayList<>(peerInstance.size());
        for (String address : peerInstance.addresses()) {
            out.add(connection(address));
        }
        return out;
    }

    @Override
    public Connection connection(String address) {
        Objects.requireNonNull(address, "address");
        int rank;
        try {
            rank = Integer.parseInt(address.trim());
        } catch (NumberFormatException e) {
            throw new IllegalArgumentException("MPI address '" + address + "': not a rank number");
        }
        return connectionTo(rank);
    }

    private MpiConnection connectionTo(int rank) {
        ensureOpen("connection");
        if (rank < 0 || rank >= runtime.worldSize()) {
            throw new IllegalArgumentException("MPI rank " + rank + " is outside MPI_COMM_WORLD (size "
                    + runtime.worldSize() + ")");
        }
        return connections.computeIfAbsent(rank, r -> new MpiConnection(this, r));
    }

    @Override
    public boolean isRunning() {
        return !closed && !runtime.finalizing();
    }

    @Override
    public void close() {
        if (closed) {
            return;
        }
        closed = true;
        // Blocked calls see the flag within one poll (microseconds) and cancel their own requests.
        long deadline = System.nanoTime() + CLOSE_WAIT_NANOS;
        while (inFlight.get() > 0 && System.nanoTime() - deadline < 0) {
            LockSupport.parkNanos(50_000);
        }
        if (runtime.enter()) {
            try {
                synchronized (eagerLock) {
                    for (int i = 0; i < eagerCount; i++) {
                        MpiNative.requestFree(eagerPending[i]);
                    }
                    eagerCount = 0;
                }
            } finally {
                runtime.exit();
            }
        }
        runtime.unregister(this);
        OPEN.compareAndSet(this, null);
    }

    @Override
    public String toString() {
        return "MpiConnectionManager{" + name + " rank " + localAddress + "/" + runtime.worldSize()
                + (closed ? " closed" : "") + "}";
    }

    // ------------------------------------------------------------------ data path (used by MpiConnection)

    @Override
    public Duration defaultTimeout() {
        return defaultTimeout;
    }

    void send(MpiConnection conn, int tag, MemoryBuffer buffer, long offset, long length, Duration timeout) {
        checkRange(buffer, offset, length);
        long deadline = deadline(timeout);
        int comm = runtime.commFor(tag);
        int mpiTag = runtime.mpiTagFor(tag);
        long address = buffer.address() + offset;
        enter("send");
        try {
            if (length <= eagerBytes && length < chunkBytes) {
                sendEager(conn, tag, address, length, mpiTag, comm);
                return;
            }
            if (length < chunkBytes) {
                long request;
                // Posting order is message order on a (peer, tag); the lock keeps a chunked post atomic.
                synchronized (conn.postLock) {
                    request = MpiNative.isend(address, (int) length, conn.rank(), mpiTag, comm, false);
                }
                await(request, deadline, "send", conn.rank(), tag, length);
                return;
            }
            if (length / chunkBytes >= Integer.MAX_VALUE - 1) {
                throw new IllegalArgumentException(describe("send", conn.rank(), tag, length) + ": more than 2^31"
                        + " chunks of " + MAX_MESSAGE_BYTES + " = " + chunkBytes);
            }
            int chunks = (int) (length / chunkBytes) + 1;
            long[] requests = new long[chunks];
            int posted = 0;
            try {
                synchronized (conn.postLock) {
                    for (; posted < chunks; posted++) {
                        long pos = posted * chunkBytes;
                        int count = (int) Math.min(chunkBytes, length - pos);
                        requests[posted] = MpiNative.isend(address + pos, count, conn.rank(), mpiTag, comm,
                                false);
                    }
                }
                for (int i = 0; i < chunks; i++) {
                    long request = requests[i];
                    requests[i] = 0;
                    await(request, deadline, "send", conn.rank(), tag, length);
                }
            } finally {
                for (int i = 0; i < posted; i++) {
                    if (requests[i] != 0) {
                        MpiNative.cancel(requests[i], CANCEL_WAIT_NANOS);
                    }
                }
            }
        } catch (MpiNative.MpiCallException e) {
            throw new TransportException(ErrorCode.NETWORK, describe("send", conn.rank(), tag, length)
                    + " failed: " + e.getMessage(), e);
        } finally {
            exit();
        }
    }

    private void sendEager(MpiConnection conn, int tag, long address, long length, int mpiTag, int comm) {
        long request;
        synchronized (conn.postLock) {
            request = MpiNative.isend(address, (int) length, conn.rank(), mpiTag, comm, true);
        }
        if (MpiNative.test(request, 0) != 0) {
            return; // the common case: the BTL took it at once
        }
        synchronized (eagerLock) {
            String failed = reapEager();
            if (eagerCount == eagerPending.length) {
                eagerPending = java.util.Arrays.copyOf(eagerPending, eagerCount * 2);
            }
            eagerPending[eagerCount++] = request;
            if (failed != null) {
                throw new TransportException(ErrorCode.NETWORK, describe("send", conn.rank(), tag, length)
                        + ": posted, but an earlier eager send of this manager failed: " + failed);
            }
        }
    }

    /** Drops completed eager sends; caller holds eagerLock. @return an error of a failed one, else null */
    private String reapEager() {
        String failed = null;
        int kept = 0;
        for (int i = 0; i < eagerCount; i++) {
            long request = eagerPending[i];
            try {
                if (MpiNative.test(request, 0) == 0) {
                    eagerPending[kept++] = request;
                }
            } catch (MpiNative.MpiCallException e) {
                failed = e.getMessage(); // the request is gone; its failure goes to the next sender
            }
        }
        eagerCount = kept;
        return failed;
    }

    void recv(MpiConnection conn, int tag, MemoryBuffer buffer, long offset, long length, Duration timeout) {
        checkRange(buffer, offset, length);
        long deadline = deadline(timeout);
        if (length >= chunkBytes) {
            TagLocks.Entry lock = conn.chunkLocks.acquire(tag, deadline, this, "recv");
            try {
                receive(conn.rank(), tag, buffer.address() + offset, length, deadline, "recv");
            } finally {
                conn.chunkLocks.release(tag, lock);
            }
        } else {
            receive(conn.rank(), tag, buffer.address() + offset, length, deadline, "recv");
        }
    }

    /**
     * Receives one framed message (see the class comment) from {@code source} ({@code -1} = any).
     *
     * @return the sender's rank
     */
    private int receive(int source, int tag, long address, long length, long deadline, String op) {
        int comm = runtime.commFor(tag);
        int mpiTag = runtime.mpiTagFor(tag);
        long[] probe = PROBE_OUT.get();
        int from = source;
        enter(op);
        try {
            long pos = 0;
            long expected;
            do {
                expected = Math.min(chunkBytes, length - pos);
                long message = probe(from, mpiTag, comm, probe, deadline, op, tag, length);
                from = (int) probe[0];
                long count = probe[1];
                if (count != expected) {
                    discard(message, count, address, length, deadline, op, from, tag);
                    if (count == chunkBytes) {
                        drainRest(from, mpiTag, comm, probe, address, length, deadline, op, tag);
                    }
                    throw new TransportException(ErrorCode.MALFORMED, describe(op, from, tag, length)
                            + ": length mismatch: expected " + expected + " bytes at offset " + pos
                            + ", the peer sent " + (count == chunkBytes ? "at least " : "")
                            + (pos + count) + " bytes in total");
                }
                long request = MpiNative.imrecv(address + pos, (int) count, message);
                await(request, deadline, op, from, tag, length);
                pos += count;
            } while (expected == chunkBytes);
            return from;
        } catch (MpiNative.MpiCallException e) {
            throw new TransportException(ErrorCode.NETWORK, describe(op, from, tag, length) + " failed: "
                    + e.getMessage(), e);
        } finally {
            exit();
        }
    }

    private long probe(int source, int mpiTag, int comm, long[] out, long deadline, String op, int tag,
                       long length) {
        int idle = 0;
        for (;;) {
            long message = MpiNative.improbe(source, mpiTag, comm, out, SPIN_NANOS);
            if (message != 0) {
                return message;
            }
            checkWake(op, source, tag, length, deadline);
            idle = backoff(idle);
        }
    }

    /** Receives the remaining chunks of a wrong-sized message into nowhere, so the tag stays in step. */
    private void drainRest(int source, int mpiTag, int comm, long[] probe, long address, long length,
                           long deadline, String op, int tag) {
        long count;
        do {
            long message = probe(source, mpiTag, comm, probe, deadline, op, tag, length);
            count = probe[1];
            discard(message, count, address, length, deadline, op, source, tag);
        } while (count == chunkBytes);
    }

    /**
     * Receives a wrong-sized message into scratch memory so the tag stays in step: the caller's own range when
     * the message fits there (its content is undefined after MALFORMED anyway), else a temporary native block.
     * It is never received truncated: Open MPI's vader single-copy path writes the full message even into a
     * shorter (or null) buffer.
     */
    private void discard(long message, long count, long address, long length, long deadline, String op, int peer,
                         int tag) {
        if (count <= length) {
            await(MpiNative.imrecv(address, (int) count, message), deadline, op, peer, tag, length);
            return;
        }
        long scratch = MpiNative.allocate(count);
        try {
            await(MpiNative.imrecv(scratch, (int) count, message), deadline, op, peer, tag, length);
        } finally {
            MpiNative.release(scratch);
        }
    }

    private void await(long request, long deadline, String op, int peer, int tag, long length) {
        int idle = 0;
        for (;;) {
            int done = MpiNative.test(request, SPIN_NANOS);
            if (done == 1) {
                return;
            }
            if (done == 2) {
                // Cannot happen: every receive is posted with the probed size. Reported rather than ignored.
                throw new TransportException(ErrorCode.MALFORMED, describe(op, peer, tag, length)
                        + ": MPI reported a truncated message");
            }
            if (closed || runtime.finalizing()) {
                MpiNative.cancel(request, CANCEL_WAIT_NANOS);
                throw new TransportClosedException(describe(op, peer, tag, length) + " interrupted: " + this
                        + " closed");
            }
            if (System.nanoTime() - deadline >= 0) {
                MpiNative.cancel(request, CANCEL_WAIT_NANOS);
                throw new TransportException(ErrorCode.TIMEOUT, describe(op, peer, tag, length)
                        + " timed out");
            }
            idle = backoff(idle);
        }
    }

    private void checkWake(String op, int peer, int tag, long length, long deadline) {
        if (closed || runtime.finalizing()) {
            throw new TransportClosedException(describe(op, peer, tag, length) + " interrupted: " + this
                    + " closed");
        }
        if (System.nanoTime() - deadline >= 0) {
            throw new TransportException(ErrorCode.TIMEOUT, describe(op, peer, tag, length) + " timed out");
        }
    }

    /** Spin first (latency), then park for growing intervals (oversubscribed ranks need the core). */
    private static int backoff(int idle) {
        if (idle >= SPIN_POLLS) {
            LockSupport.parkNanos(Math.min(MAX_PARK_NANOS, 1_000L << Math.min(idle - SPIN_POLLS, 10)));
        } else {
            Thread.onSpinWait();
        }
        return idle + 1;
    }

    private void enter(String op) {
        ensureOpen(op);
        inFlight.incrementAndGet();
        if (closed || !runtime.enter()) {
            inFlight.decrementAndGet();
            throw new TransportClosedException(op + ": " + this + " is closed");
        }
    }

    private void exit() {
        runtime.exit();
        inFlight.decrementAndGet();
    }

    void ensureOpen(String op) {
        if (closed || runtime.finalizing()) {
            throw new TransportClosedException(op + ": " + this + " is closed");
        }
    }

    boolean closed() {
        return closed;
    }

    private static long deadline(Duration timeout) {
        Objects.requireNonNull(timeout, "timeout");
        long nanos;
        try {
            nanos = timeout.toNanos();
        } catch (ArithmeticException e) {
            nanos = Long.MAX_VALUE / 4;
        }
        return System.nanoTime() + Math.min(nanos, Long.MAX_VALUE / 4);
    }

    private static void checkRange(MemoryBuffer buffer, long offset, long length) {
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

    private String describe(String op, int peer, int tag, long length) {
        return "mpi " + op + " (rank " + localAddress + (peer >= 0 ? " <-> rank " + peer : " <- any rank")
                + ", tag " + tag + ", " + length + " bytes)";
    }
}
