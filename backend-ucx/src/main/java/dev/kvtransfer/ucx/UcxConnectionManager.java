package dev.kvtransfer.ucx;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.memory.MemoryKind;
import dev.kvtransfer.api.model.CommState;
import dev.kvtransfer.api.transport.Connection;
import dev.kvtransfer.api.transport.ConnectionManager;
import dev.kvtransfer.api.transport.TransportClosedException;
import dev.kvtransfer.api.transport.TransportConfig;
import dev.kvtransfer.api.transport.TransportException;
import org.openucx.jucx.UcxCallback;
import org.openucx.jucx.UcxException;
import org.openucx.jucx.UcxUtils;
import org.openucx.jucx.ucp.UcpConnectionRequest;
import org.openucx.jucx.ucp.UcpContext;
import org.openucx.jucx.ucp.UcpEndpoint;
import org.openucx.jucx.ucp.UcpEndpointParams;
import org.openucx.jucx.ucp.UcpListener;
import org.openucx.jucx.ucp.UcpListenerParams;
import org.openucx.jucx.ucp.UcpMemMapParams;
import org.openucx.jucx.ucp.UcpMemory;
import org.openucx.jucx.ucp.UcpParams;
import org.openucx.jucx.ucp.UcpRequest;
import org.openucx.jucx.ucp.UcpTagMessage;
import org.openucx.jucx.ucp.UcpWorker;
import org.openucx.jucx.ucp.UcpWorkerParams;
import org.openucx.jucx.ucs.UcsConstants;

import java.net.InetSocketAddress;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.security.SecureRandom;
import java.time.Duration;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.IdentityHashMap;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.locks.ReentrantReadWriteLock;

/**
 * One rank's UCX endpoint: one {@link UcpContext} (tag matching + wakeup), one {@link UcpWorker}, a
 * {@link UcpListener} on {@code host:port}, and one progress thread that owns them.
 *
 * <p><b>Threading.</b> jucx workers are not thread-safe, so no caller thread touches the worker: callers put a
 * command on a queue, wake the progress thread with {@code ucp_worker_signal} (the one worker call UCX allows
 * from any thread) and wait on their operation with a deadline. The progress thread drains commands, calls
 * {@code progress()} while it does work, and otherwise sleeps in {@code ucp_worker_wait} (epoll on the
 * worker's event fd), so an idle manager costs no CPU. All jucx callbacks therefore run on this thread.
 *
 * <p><b>Connections.</b> A dialing side creates an endpoint to the peer's listener (error mode PEER) and sends a
 * hello (its listen address, its UCX client id, and the sender id it gave the peer); the accepting side finds
 * the endpoint it created for that client id, gives the dialer a sender id and answers on that endpoint. See
 * {@link UcxTags} for the tag layout.
 *
 * <p><b>Properties</b>: see {@link UcxSettings} (parsed and validated once, unknown {@code ucx.*} keys refused).
 * Background errors (a malformed hello, a failed handshake, a failed command) go to the configuration's
 * error handler and are counted ({@link #errorCount()}).
 */
public final class UcxConnectionManager implements ConnectionManager {
    static final int MAX_ADDRESS_BYTES = 1024;

    private static final int HELLO_MAGIC = 0x4855564B; // "KVUH" little-endian
    private static final int ACK_MAGIC = 0x4155564B;   // "KVUA"
    private static final int COMMANDS_PER_ROUND = 256;
    private static final int PROGRESS_PER_ROUND = 64;
    /** Why a poll's receive was cancelled: its wait ended with nothing matched (the caller gets null). */
    private static final Failure POLL_EMPTY = new Failure(ErrorCode.TIMEOUT, "nothing arrived", false, null);
    private static final int RUNNING = 0;
    private static final int CLOSING = 1;
    private static final int CLOSED = 2;

    private final UcxSettings settings;
    private final UcxErrors errors;
    private final String name;
    private final Duration defaultTimeout;
    private final long closeGraceNanos;
    private final long spinNanos;
    private final boolean explicitRegistration;
    private final String localAddress;
    private final long clientId;
    private final boolean cudaMemory;
    private final int hostMemType;
    private final int cudaMemType;

    private final UcpContext context;
    private final UcpWorker worker;
    private final UcpListener listener;
    private final Thread progressThread;

    /** Read: submitting (worker.signal()); write: leaving RUNNING. Keeps signal() off a destroyed worker. */
    private final ReentrantReadWriteLock lifecycle = new ReentrantReadWriteLock();
    private volatile int state = RUNNING;
    private final ConcurrentLinkedQueue<Command> commands = new ConcurrentLinkedQueue<>();
    private final ConcurrentHashMap<String, UcxConnection> connections = new ConcurrentHashMap<>();
    private final AtomicInteger nextSenderId = new AtomicInteger();
    private volatile Throwable progressFailure;

    // ---- progress thread only ----
    private final Map<Integer, UcxConnection> bySenderId = new HashMap<>();
    private final Map<Long, ArrayDeque<AcceptedEndpoint>> unclaimed = new HashMap<>();
    private final Set<Op> posted = Collections.newSetFromMap(new IdentityHashMap<>());
    private final Set<UcxConnection> everConnected = Collections.newSetFromMap(new IdentityHashMap<>());
    private final List<UcpRequest> closingEndpoints = new ArrayList<>();
    /** Endpoints to close once progress() has returned: closing inside a UCX callback trips UCX 1.13. */
    private final ArrayDeque<UcpEndpoint> toForceClose = new ArrayDeque<>();
    private final ArrayDeque<UcpEndpoint> toFlushClose = new ArrayDeque<>();
    private final List<Op> sendsAwaitingClose = new ArrayList<>();
    private final LinkedHashMap<Long, UcpMemory> registrations;
    private final ByteBuffer helloIn = ByteBuffer.allocateDirect(UcxConnection.HELLO_BYTES)
            .order(ByteOrder.LITTLE_ENDIAN);
    private final long helloInAddress = UcxUtils.getAddress(helloIn);
    private final HelloCallback helloCallback = new HelloCallback();
    private UcpRequest helloRecv;
    private boolean helloRecvDone = true;

    /**
     * Starts a manager: context, worker, listener and progress thread.
     *
     * @param config where to listen and how
     * @throws TransportException ({@code NETWORK}) if UCX cannot start or bind
     * @throws IllegalArgumentException naming a bad property
     */
    public UcxConnectionManager(TransportConfig config) {
        Objects.requireNonNull(config, "config");
        UcxSettings settings = UcxSettings.from(config);
        this.settings = settings;
        this.errors = new UcxErrors(config.errorHandler());
        this.name = settings.name();
        this.defaultTimeout = settings.defaultTimeout();
        this.closeGraceNanos = settings.closeGraceNanos();
        this.spinNanos = settings.spinNanos();
        this.explicitRegistration = settings.explicitRegistration();
        int maxRegs = settings.registrationMaxEntries();
        this.registrations = new LinkedHashMap<>(16, 0.75f, true) {
            private static final long serialVersionUID = 1L;

            @Override
            protected boolean removeEldestEntry(Map.Entry<Long, UcpMemory> eldest) {
                if (size() > maxRegs) {
                    deregister(eldest.getValue());
                    return true;
                }
                return false;
            }
        };
        this.clientId = new SecureRandom().nextLong() | 1L;

        UcpParams params = new UcpParams().requestTagFeature().requestWakeupFeature();
        settings.ucxConfig().forEach(params::setConfig);
        InetSocketAddress bind = new InetSocketAddress(config.host(), config.port());
        if (bind.isUnresolved()) {
            throw new TransportException(ErrorCode.NETWORK, "UCX manager '" + name + "': host '" + config.host()
                    + "' does not resolve");
        }
        UcpContext ctx = null;
        UcpWorker w = null;
        UcpListener l = null;
        try {
            ctx = new UcpContext(params);
            this.hostMemType = UcsConstants.MEMORY_TYPE.UCS_MEMORY_TYPE_HOST;
            this.cudaMemType = UcsConstants.MEMORY_TYPE.UCS_MEMORY_TYPE_CUDA;
            this.cudaMemory = UcsConstants.MEMORY_TYPE.isMemTypeSupported(ctx.getMemoryTypesMask(), cudaMemType);
            w = ctx.newWorker(new UcpWorkerParams().setClientId(clientId));
            final UcpWorker worker0 = w;
            l = w.newListener(new UcpListenerParams().setSockAddr(bind)
                    .setConnectionHandler(req -> onConnectionRequest(worker0, req)));
            this.localAddress = formatAddress(config.host(), l.getAddress().getPort());
        } catch (UcxException | IllegalStateException e) {
            closeQuietly(l, w, ctx);
            throw new TransportException(ErrorCode.NETWORK, "UCX manager '" + name + "' cannot start on "
                    + config.host() + ":" + config.port() + ": " + e.getMessage(), e);
        }
        this.context = ctx;
        this.worker = w;
        this.listener = l;
        postHelloRecv();
        this.progressThread = new Thread(this::progressLoop, "ucx-progress-" + name);
        progressThread.setDaemon(true);
        progressThread.start();
    }

    // ------------------------------------------------------------------ public API

    @Override
    public String localAddress() {
        return localAddress;
    }

    @Override
    public Duration defaultTimeout() {
        return defaultTimeout;
    }

    /** @return whether UCX here accepts CUDA memory (then DEVICE buffers are passed as UCS_MEMORY_TYPE_CUDA) */
    public boolean supportsDeviceMemory() {
        return cudaMemory;
    }

    @Override
    public Connection pollConnect(int tag, MemoryBuffer buffer, long offset, long length, Duration wait) {
        Objects.requireNonNull(wait, "wait");
        Op op = newOp(Op.RECV_ANY, null, tag, buffer, offset, length, wait);
        op.poll = true;
        op.pollOnce = wait.isZero() || wait.isNegative();
        run(op, wait);
        return op.sender;
    }

    /** @return background errors reported to the configuration's error handler so far */
    public long errorCount() {
        return errors.count();
    }

    @Override
    public Connection connection(String address) {
        Objects.requireNonNull(address, "address");
        checkRunning("connection to " + address);
        UcxConnection c = connections.get(address);
        if (c != null) {
            return c;
        }
        boolean[] created = {false};
        c = connections.computeIfAbsent(address, a -> {
            created[0] = true;
            return new UcxConnection(this, a, newSenderId());
        });
        if (created[0]) {
            UcxConnection dial = c;
            if (!submit(new Command() {
                @Override
                public void run() {
                    dial(dial);
                }

                @Override
                public void abort(Failure f) {
                    // Nothing waits on a dial; its connection's calls fail on their own.
                }
            })) {
                throw closedException("connection to " + address);
            }
        }
        return c;
    }

    @Override
    public boolean isRunning() {
        return state == RUNNING;
    }

    @Override
    public void close() {
        lifecycle.writeLock().lock();
        try {
            if (state == RUNNING) {
                state = CLOSING;
                worker.signal();
            }
        } finally {
            lifecycle.writeLock().unlock();
        }
        if (Thread.currentThread() == progressThread) {
            return;
        }
        long bound = TimeUnit.NANOSECONDS.toMillis(closeGraceNanos) * 2 + 10_000;
        try {
            progressThread.join(bound);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
        if (progressThread.isAlive()) {
            background("UCX manager '" + name + "': progress thread did not end within "
                    + bound + " ms of close()", null);
        }
    }

    @Override
    public String toString() {
        return "UcxConnectionManager{" + name + " " + localAddress + (isRunning() ? "" : " closed") + "}";
    }

    // ------------------------------------------------------------------ caller side

    void send(UcxConnection c, int tag, MemoryBuffer buffer, long offset, long length, Duration timeout) {
        run(newOp(Op.SEND, c, tag, buffer, offset, length, timeout), timeout);
    }

    void recv(UcxConnection c, int tag, MemoryBuffer buffer, long offset, long length, Duration timeout) {
        run(newOp(Op.RECV, c, tag, buffer, offset, length, timeout), timeout);
    }

    private Op newOp(int kind, UcxConnection c, int tag, MemoryBuffer buffer, long offset, long length,
                     Duration timeout) {
        Objects.requireNonNull(buffer, "buffer");
        Objects.requireNonNull(timeout, "timeout");
        Objects.checkFromIndexSize(offset, length, buffer.size());
        int memType = hostMemType;
        if (buffer.kind() == MemoryKind.DEVICE) {
            if (!cudaMemory) {
                throw new UnsupportedOperationException("UCX transport: DEVICE memory is not supported here: the"
                        + " loaded libucp reports no CUDA memory support (memory types mask 0x"
                        + Long.toHexString(contextMemTypesMask()) + ")");
            }
            memType = cudaMemType;
        }
        return new Op(kind, c, tag, buffer, buffer.address() + offset, length, memType);
    }

    private long contextMemTypesMask() {
        try {
            return context.getMemoryTypesMask();
        } catch (RuntimeException e) {
            return 0;
        }
    }

    /** Submits an operation and waits for it: deadline, then cancellation, then the outcome. */
    private void run(Op op, Duration timeout) {
        String what = op.describe();
        if (op.conn != null && op.conn.failure != null) {
            throw op.conn.failure.toException(what);
        }
        if (!submit(op)) {
            throw closedException(what);
        }
        long timeoutNanos = saturatedNanos(timeout);
        boolean interrupted = false;
        Failure cancelReason = null;
        try {
            if (!op.await(System.nanoTime() + timeoutNanos)) {
                cancelReason = op.poll ? POLL_EMPTY
                        : new Failure(ErrorCode.TIMEOUT, "timed out after " + timeout, false, null);
            }
        } catch (InterruptedException e) {
            interrupted = true;
            cancelReason = new Failure(ErrorCode.CANCELLED, "interrupted", false, null);
        }
        if (cancelReason != null) {
            Failure reason = cancelReason;
            submitAlways(new Command() {
                @Override
                public void run() {
                    cancel(op, reason);
                }

                @Override
                public void abort(Failure f) {
                    // Closing completes the operation itself.
                }
            });
            try {
                if (!op.awaitUninterruptibly(System.nanoTime() + closeGraceNanos)) {
                    throw new TransportException(cancelReason.code(), what + ": " + cancelReason.message()
                            + "; UCX did not give the request back within "
                            + TimeUnit.NANOSECONDS.toMillis(closeGraceNanos) + " ms, the buffer may still be in use");
                }
            } finally {
                if (interrupted) {
                    Thread.currentThread().interrupt();
                }
            }
        }
        Failure f = op.failure;
        if (f == POLL_EMPTY) {
            op.sender = null; // nothing arrived within the poll's wait: not an error
            return;
        }
        if (f != null) {
            throw f.toException(what);
        }
    }

    private static long saturatedNanos(Duration d) {
        try {
            return Math.max(0, d.toNanos());
        } catch (ArithmeticException e) {
            return d.isNegative() ? 0 : Long.MAX_VALUE / 4;
        }
    }

    private int newSenderId() {
        int id = nextSenderId.incrementAndGet();
        if (id <= 0 || id > UcxTags.MAX_SENDER_ID) {
            throw new TransportException(ErrorCode.INTERNAL, "UCX manager '" + name + "' ran out of sender ids");
        }
        return id;
    }

    private void checkRunning(String what) {
        if (state != RUNNING) {
            throw closedException(what);
        }
    }

    private TransportClosedException closedException(String what) {
        Throwable pf = progressFailure;
        TransportClosedException e = new TransportClosedException(what + ": UCX manager '" + name + "' ("
                + localAddress + ") is closed" + (pf != null ? " after its progress thread failed: " + pf : ""));
        if (pf != null) {
            e.initCause(pf);
        }
        return e;
    }

    /** Queues a command for the progress thread; false once closing. */
    private boolean submit(Command c) {
        lifecycle.readLock().lock();
        try {
            if (state != RUNNING) {
                return false;
            }
            commands.add(c);
            worker.signal();
            return true;
        } finally {
            lifecycle.readLock().unlock();
        }
    }

    /** Queues a command even while closing (the shutdown drains it); signals only while the worker lives. */
    private void submitAlways(Command c) {
        lifecycle.readLock().lock();
        try {
            commands.add(c);
            if (state == RUNNING) {
                worker.signal();
            }
        } finally {
            lifecycle.readLock().unlock();
        }
    }

    // ------------------------------------------------------------------ progress thread

    private void progressLoop() {
        try {
            // nanoTime's origin is arbitrary: start with the window already closed, so an idle start never spins.
            long lastWork = System.nanoTime() - spinNanos;
            while (state == RUNNING) {
                boolean worked = drainCommands();
                // Bounded, so a stream of incoming data cannot starve the command queue.
                for (int i = 0; i < PROGRESS_PER_ROUND && worker.progress() > 0; i++) {
                    worked = true;
                }
                worked |= closeQueuedEndpoints();
                if (worked) {
                    lastWork = System.nanoTime();
                } else if (spinNanos > 0 && System.nanoTime() - lastWork < spinNanos) {
                    Thread.onSpinWait(); // traffic just flowed: the next event is likely microseconds away
                    continue;
                }
                if (!worked && state == RUNNING && commands.isEmpty()) {
                    // Sleeps in epoll on the worker's event fd; network events and signal() wake it. An arm that
                    // finds a pending signal returns at once, so a command queued just before cannot be lost.
                    worker.waitForEvents();
                }
            }
        } catch (Throwable t) {
            progressFailure = t;
            background("UCX manager '" + name + "': progress thread failed; closing", t);
        } finally {
            shutdown();
        }
    }

    private boolean drainCommands() {
        int n = 0;
        Command c;
        while (n < COMMANDS_PER_ROUND && (c = commands.poll()) != null) {
            n++;
            try {
                c.run();
            } catch (RuntimeException e) {
                if (c instanceof Op op) {
                    finish(op, new Failure(ErrorCode.NETWORK, "UCX call failed: " + e.getMessage(), false, e));
                } else {
                    background("UCX manager '" + name + "': command failed", e);
                }
            }
        }
        return n > 0;
    }

    /** Runs an operation's posting on the progress thread. */
    private void post(Op op) {
        if (op.done) {
            return;
        }
        UcxConnection c = op.conn;
        if (c != null && c.failure != null) {
            finish(op, c.failure);
            return;
        }
        if (op.kind == Op.SEND) {
            if (!c.ready() || !c.waitingSends.isEmpty()) {
                c.waitingSends.add(op);
                return;
            }
            postSend(op);
        } else {
            postRecv(op);
        }
    }

    private void postSend(Op op) {
        UcxConnection c = op.conn;
        register(op);
        posted.add(op);
        c.pending.add(op);
        op.posted = true;
        try {
            op.request = c.sendEp.sendTaggedNonBlocking(op.address, op.length, UcxTags.data(c.outId, op.tag), op,
                    op.memType);
        } catch (UcxException e) {
            if (!op.done) {
                onOpError(op, e.getStatus(), e.getMessage());
            }
        }
    }

    private void postRecv(Op op) {
        long tag;
        long mask;
        if (op.kind == Op.RECV_ANY) {
            tag = UcxTags.anySender(op.tag);
            mask = UcxTags.ANY_SENDER_MASK;
        } else {
            tag = UcxTags.data(op.conn.inId, op.tag);
            mask = UcxTags.EXACT_MASK;
        }
        register(op);
        // A message already here is taken by its handle (probe + remove): its length and sender tag come from
        // the probe. (jucx 1.12.1 reports neither when a plain receive completes inside the posting call.) A
        // receive posted when nothing matched cannot complete before the next progress(), which reports both.
        UcpTagMessage m = worker.tagProbeNonBlocking(tag, mask, true);
        if (m == null && op.poll && op.pollOnce) {
            finish(op, null); // non-blocking poll, nothing here: sender stays null
            return;
        }
        if (m != null) {
            op.probed = true;
            op.probedLength = m.getRecvLength();
            op.probedSenderTag = m.getSenderTag();
        }
        posted.add(op);
        if (op.conn != null) {
            op.conn.pending.add(op);
        }
        op.posted = true;
        try {
            op.request = m != null
                    ? worker.recvTaggedMessageNonBlocking(op.address, op.length, m, op, op.memType)
                    : worker.recvTaggedNonBlocking(op.address, op.length, tag, mask, op, op.memType);
        } catch (UcxException e) {
            if (!op.done) {
                onOpError(op, e.getStatus(), e.getMessage());
            }
        }
    }

    private void onOpSuccess(Op op, UcpRequest r) {
        if (op.done) {
            return;
        }
        if (op.kind == Op.SEND) {
            finish(op, null);
            return;
        }
        long size = op.probed ? op.probedLength : r.getRecvSize();
        long senderTag = op.probed ? op.probedSenderTag : r.getSenderTag();
        UcxConnection from = op.conn;
        if (op.kind == Op.RECV_ANY) {
            from = bySenderId.get(UcxTags.senderId(senderTag));
            if (from == null) {
                finish(op, new Failure(ErrorCode.NETWORK, "message from unknown sender id "
                        + UcxTags.senderId(senderTag), false, null));
                return;
            }
        }
        if (size != op.length) {
            finish(op, new Failure(ErrorCode.MALFORMED, "received a message of " + size + " bytes from "
                    + from.peer + ", expected " + op.length, false, null));
            return;
        }
        op.sender = from;
        finish(op, null);
    }

    private void onOpError(Op op, int status, String message) {
        if (op.done) {
            return;
        }
        Failure f;
        if (op.cancelReason != null) {
            f = op.cancelReason;
        } else if (status == UcsConstants.STATUS.UCS_ERR_MESSAGE_TRUNCATED) {
            f = new Failure(ErrorCode.MALFORMED, "received a message longer than the expected " + op.length
                    + " bytes" + (op.probed ? " (" + op.probedLength + " bytes)" : "") + " (UCX: " + message + ")",
                    false, null);
        } else if (op.conn != null && op.conn.failure != null) {
            f = op.conn.failure;
        } else if (op.kind == Op.SEND && isPeerStatus(status)) {
            f = new Failure(ErrorCode.PEER_LOST, "peer " + op.conn.peer + " lost (UCX: " + message + ")", false,
                    null);
        } else {
            f = new Failure(ErrorCode.NETWORK, "UCX request failed: " + message + " (status " + status + ")", false,
                    null);
        }
        finish(op, f);
    }

    private static boolean isPeerStatus(int status) {
        return status == UcsConstants.STATUS.UCS_ERR_CONNECTION_RESET
                || status == UcsConstants.STATUS.UCS_ERR_ENDPOINT_TIMEOUT
                || status == UcsConstants.STATUS.UCS_ERR_UNREACHABLE
                || status == UcsConstants.STATUS.UCS_ERR_NOT_CONNECTED
                || status == UcsConstants.STATUS.UCS_ERR_REJECTED
                || status == UcsConstants.STATUS.UCS_ERR_IO_ERROR
                || status == UcsConstants.STATUS.UCS_ERR_CANCELED;
    }

    private void finish(Op op, Failure f) {
        posted.remove(op);
        if (op.conn != null) {
            op.conn.pending.remove(op);
        }
        op.complete(f);
    }

    /** A caller gave up on an operation (deadline or interrupt). */
    private void cancel(Op op, Failure reason) {
        if (op.done) {
            return;
        }
        op.cancelReason = reason;
        if (!op.posted) {
            if (op.conn != null) {
                op.conn.waitingSends.remove(op);
            }
            finish(op, reason);
            return;
        }
        if (op.kind != Op.SEND) {
            // Completes with UCS_ERR_CANCELED, or normally if the message matched meanwhile.
            cancelRecv(op);
            return;
        }
        // UCX cannot cancel a posted send and may read the buffer until it completes, so the only way to give
        // the buffer back by the deadline is to close the endpoint: the connection is broken after this.
        failConnection(op.conn, new Failure(ErrorCode.NETWORK, "connection to " + op.conn.peer + " was closed"
                + " because a send missed its deadline (UCX cannot cancel a posted send)", false, null));
    }

    private void cancelRecv(Op op) {
        if (op.done || op.request == null) {
            return;
        }
        try {
            worker.cancelRequest(op.request);
        } catch (RuntimeException e) {
            background("UCX manager '" + name + "': cancel failed", e);
        }
    }

    // ---- connection setup ----

    private void dial(UcxConnection c) {
        if (c.failure != null || c.sendEp != null) {
            return; // the peer dialed first: its accepted endpoint is already ours to send on
        }
        InetSocketAddress to;
        try {
            to = parseAddress(c.peer);
        } catch (IllegalArgumentException e) {
            failConnection(c, new Failure(ErrorCode.NETWORK, "bad UCX address '" + c.peer + "': " + e.getMessage(),
                    false, null));
            return;
        }
        bySenderId.put(c.inId, c);
        try {
            c.ackRecvDone = false;
            c.ackRecv = worker.recvTaggedNonBlocking(c.ackInAddress, UcxConnection.ACK_BYTES, UcxTags.ack(c.inId),
                    UcxTags.EXACT_MASK, new AckCallback(c), hostMemType);
            UcpEndpoint ep = worker.newEndpoint(new UcpEndpointParams().setSocketAddress(to)
                    .setPeerErrorHandlingMode().sendClientId().setName("kv-" + name + "->" + c.peer)
                    .setErrorHandler((e, status, msg) -> onEndpointError(c, e, status, msg)));
            c.endpoints.add(ep);
            c.sendEp = ep;
            byte[] addr = localAddress.getBytes(StandardCharsets.UTF_8);
            ByteBuffer h = c.helloOut;
            h.clear();
            h.putInt(HELLO_MAGIC).putLong(clientId).putInt(c.inId).putInt(addr.length).put(addr);
            ep.sendTaggedNonBlocking(c.helloOutAddress, h.position(), UcxTags.HELLO, new ControlSendCallback(c),
                    hostMemType);
        } catch (UcxException e) {
            failConnection(c, new Failure(ErrorCode.PEER_LOST, "cannot connect to " + c.peer + ": " + e.getMessage(),
                    false, e));
        }
    }

    /** Listener callback: a peer dialed; accept now, bind to its connection when its hello arrives. */
    private void onConnectionRequest(UcpWorker w, UcpConnectionRequest req) {
        if (state != RUNNING) {
            try {
                req.reject();
            } catch (RuntimeException e) {
                background("reject failed", e);
            }
            return;
        }
        AcceptedEndpoint a = new AcceptedEndpoint(req.getClientId());
        try {
            a.ep = w.newEndpoint(new UcpEndpointParams().setConnectionRequest(req).setPeerErrorHandlingMode()
                    .setName("kv-" + name + "<-" + req.getClientAddress())
                    .setErrorHandler((e, status, msg) -> onAcceptedEndpointError(a, e, status, msg)));
        } catch (UcxException e) {
            background("UCX manager '" + name + "': cannot accept "
                    + req.getClientAddress() + ": " + e.getMessage(), null);
            return;
        }
        unclaimed.computeIfAbsent(a.clientId, k -> new ArrayDeque<>()).add(a);
    }

    private void postHelloRecv() {
        helloIn.clear();
        helloRecvDone = false;
        helloRecv = worker.recvTaggedNonBlocking(helloInAddress, UcxConnection.HELLO_BYTES, UcxTags.HELLO,
                UcxTags.EXACT_MASK, helloCallback, hostMemType);
    }

    private void onHello() {
        ByteBuffer h = helloIn;
        h.clear();
        int magic = h.getInt();
        long peerClient = h.getLong();
        int idForUs = h.getInt();
        int len = h.getInt();
        String peerAddress = null;
        if (magic == HELLO_MAGIC && len > 0 && len <= MAX_ADDRESS_BYTES && idForUs > 0) {
            byte[] a = new byte[len];
            h.get(a);
            peerAddress = new String(a, StandardCharsets.UTF_8);
        }
        if (state == RUNNING) {
            postHelloRecv();
        }
        if (peerAddress == null) {
            background("UCX manager '" + name + "': malformed hello ignored", null);
            return;
        }
        ArrayDeque<AcceptedEndpoint> q = unclaimed.get(peerClient);
        AcceptedEndpoint a = q == null ? null : q.poll();
        if (q != null && q.isEmpty()) {
            unclaimed.remove(peerClient);
        }
        if (a == null) {
            background("UCX manager '" + name + "': hello from " + UcxErrors.quote(peerAddress)
                    + " without an accepted endpoint of client id " + Long.toHexString(peerClient) + "; ignored", null);
            return;
        }
        UcxConnection c = connections.get(peerAddress);
        if (c != null && c.peerClientId != 0 && c.peerClientId != peerClient) {
            failConnection(c, new Failure(ErrorCode.PEER_LOST, "peer " + peerAddress + " restarted", false, null));
            c = null;
        } else if (c != null && c.outId != 0 && c.outId != idForUs) {
            // The peer dropped its connection to us (e.g. a send deadline force-closed it) and dialed afresh:
            // ours is stale (its endpoints are dead on the far side), start over with the new one.
            failConnection(c, new Failure(ErrorCode.PEER_LOST, "peer " + peerAddress + " reconnected; its"
                    + " previous connection broke", false, null));
            c = null;
        }
        if (c == null) {
            c = connections.computeIfAbsent(peerAddress, k -> new UcxConnection(this, k, newSenderId()));
        }
        a.conn = c;
        c.endpoints.add(a.ep);
        if (c.failure != null) {
            closeEndpoints(c);
            return;
        }
        c.peerClientId = peerClient;
        bySenderId.put(c.inId, c);
        if (c.sendEp == null) {
            c.sendEp = a.ep; // replies go back on the endpoint the peer dialed
        }
        ByteBuffer ack = c.ackOut;
        ack.clear();
        ack.putInt(ACK_MAGIC).putLong(clientId).putInt(c.inId);
        try {
            a.ep.sendTaggedNonBlocking(c.ackOutAddress, UcxConnection.ACK_BYTES, UcxTags.ack(idForUs),
                    new ControlSendCallback(c), hostMemType);
        } catch (UcxException e) {
            failConnection(c, new Failure(ErrorCode.PEER_LOST, "cannot answer " + peerAddress + ": "
                    + e.getMessage(), false, e));
            return;
        }
        learnOutId(c, idForUs);
    }

    private void onAck(UcxConnection c) {
        ByteBuffer a = c.ackIn;
        a.clear();
        int magic = a.getInt();
        long peerClient = a.getLong();
        int id = a.getInt();
        if (magic != ACK_MAGIC || id <= 0) {
            failConnection(c, new Failure(ErrorCode.MALFORMED, "malformed handshake answer from " + c.peer, false,
                    null));
            return;
        }
        c.peerClientId = peerClient;
        learnOutId(c, id);
    }

    private void learnOutId(UcxConnection c, int id) {
        if (c.failure != null) {
            return;
        }
        if (c.outId == 0) {
            c.outId = id;
        } else if (c.outId != id) {
            background("UCX manager '" + name + "': " + c.peer + " gave sender id " + id
                    + " after " + c.outId + "; keeping the first", null);
        }
        if (c.ready()) {
            everConnected.add(c);
            while (!c.waitingSends.isEmpty() && c.failure == null) {
                Op op = c.waitingSends.poll();
                if (!op.done) {
                    postSend(op);
                }
            }
        }
    }

    // ---- failures ----

    private void onEndpointError(UcxConnection c, UcpEndpoint ep, int status, String msg) {
        failConnection(c, new Failure(ErrorCode.PEER_LOST, "peer " + c.peer + " lost (UCX: " + msg + ", status "
                + status + ")", false, null));
    }

    private void onAcceptedEndpointError(AcceptedEndpoint a, UcpEndpoint ep, int status, String msg) {
        if (a.conn != null) {
            onEndpointError(a.conn, ep, status, msg);
            return;
        }
        ArrayDeque<AcceptedEndpoint> q = unclaimed.get(a.clientId);
        if (q != null) {
            q.remove(a);
            if (q.isEmpty()) {
                unclaimed.remove(a.clientId);
            }
        }
        closeEndpoint(ep);
    }

    /** Marks a connection dead, fails everything on it, closes its endpoints (progress thread). */
    private void failConnection(UcxConnection c, Failure f) {
        if (c.failure != null) {
            return;
        }
        c.failure = f;
        connections.remove(c.peer, c);
        bySenderId.remove(c.inId, c);
        while (!c.waitingSends.isEmpty()) {
            finish(c.waitingSends.poll(), f);
        }
        if (c.ackRecv != null && !c.ackRecvDone) {
            c.ackRecvDone = true;
            try {
                worker.cancelRequest(c.ackRecv);
            } catch (RuntimeException e) {
                background("cancel of handshake receive failed", e);
            }
        }
        List<Op> ops = new ArrayList<>(c.pending);
        for (Op op : ops) {
            if (op.cancelReason == null) {
                op.cancelReason = f;
            }
            if (op.kind != Op.SEND) {
                cancelRecv(op);
            }
        }
        for (Op op : ops) {
            if (!op.done && op.kind != Op.SEND) {
                finish(op, op.cancelReason); // a receive whose message was matching: the peer is gone anyway
            }
        }
        // Force-closing purges the endpoints' outstanding sends (their callbacks run with an error status); the
        // close runs after this callback returns, and sends still open then are finished right after it.
        closeEndpoints(c);
        for (Op op : ops) {
            if (!op.done) {
                sendsAwaitingClose.add(op);
            }
        }
    }

    private void closeEndpoints(UcxConnection c) {
        // A graceful (flush) close tells the peer at once (it sees a reset); a forced one is silent, so flush
        // when nothing of ours is outstanding on the connection, force when a send must be torn out.
        boolean flush = c.pending.isEmpty();
        for (UcpEndpoint ep : c.endpoints) {
            (flush ? toFlushClose : toForceClose).add(ep);
        }
        c.endpoints.clear();
    }

    private void closeEndpoint(UcpEndpoint ep) {
        toForceClose.add(ep);
    }

    /** Closes the endpoints queued by callbacks; runs outside any UCX callback. */
    private boolean closeQueuedEndpoints() {
        boolean any = false;
        UcpEndpoint ep;
        while ((ep = toForceClose.poll()) != null) {
            any = true;
            startClose(ep, true);
        }
        while ((ep = toFlushClose.poll()) != null) {
            any = true;
            startClose(ep, false);
        }
        if (!sendsAwaitingClose.isEmpty()) {
            any = true;
            for (Op op : sendsAwaitingClose) {
                if (!op.done) {
                    finish(op, op.cancelReason);
                }
            }
            sendsAwaitingClose.clear();
        }
        return any;
    }

    private void startClose(UcpEndpoint ep, boolean force) {
        try {
            UcpRequest r = force ? ep.closeNonBlockingForce() : ep.closeNonBlockingFlush();
            if (r != null && !r.isCompleted()) {
                closingEndpoints.add(r);
            }
        } catch (RuntimeException e) {
            background("endpoint close failed", e);
        }
    }

    // ---- memory registration ----

    private void register(Op op) {
        if (!explicitRegistration || op.length == 0) {
            return;
        }
        MemoryBuffer b = op.buffer;
        long key = b.address();
        UcpMemory m = registrations.get(key);
        if (m != null && m.getLength() >= b.size()) {
            return;
        }
        if (m != null) {
            registrations.remove(key);
            deregister(m);
        }
        try {
            registrations.put(key, context.memoryMap(new UcpMemMapParams().setAddress(b.address())
                    .setLength(b.size()).setMemoryType(op.memType)));
        } catch (UcxException e) {
            // Registration is an optimisation; UCX registers on its own when sending.
            background("UCX manager '" + name + "': ucp_mem_map of " + b.size()
                    + " bytes failed: " + e.getMessage(), null);
        }
    }

    private void deregister(UcpMemory m) {
        try {
            m.deregister();
        } catch (RuntimeException e) {
            background("UCX manager '" + name + "': deregistration failed", e);
        }
    }

    /** @return regions currently registered explicitly (for tests) */
    int explicitRegistrations() {
        return registrations.size();
    }

    // ---- shutdown ----

    private void shutdown() {
        lifecycle.writeLock().lock();
        try {
            if (state == RUNNING) {
                state = CLOSING;
            }
        } finally {
            lifecycle.writeLock().unlock();
        }
        Throwable pf = progressFailure;
        Failure closed = new Failure(ErrorCode.NETWORK, "UCX manager '" + name + "' (" + localAddress + ") closed"
                + (pf != null ? " after its progress thread failed: " + pf : ""), true, pf);
        try {
            Command c;
            while ((c = commands.poll()) != null) {
                if (c instanceof Op op) {
                    finish(op, closed);
                } else {
                    c.abort(closed);
                }
            }
            Set<UcxConnection> all = new LinkedHashSet<>(connections.values());
            all.addAll(bySenderId.values());
            all.addAll(everConnected);
            for (UcxConnection conn : all) {
                failConnection(conn, closed);
            }
            for (Op op : new ArrayList<>(posted)) {
                if (op.cancelReason == null) {
                    op.cancelReason = closed;
                }
                if (op.kind != Op.SEND) {
                    cancelRecv(op);
                }
            }
            if (!helloRecvDone && helloRecv != null) {
                helloRecvDone = true;
                worker.cancelRequest(helloRecv);
            }
            for (ArrayDeque<AcceptedEndpoint> q : unclaimed.values()) {
                for (AcceptedEndpoint a : q) {
                    closeEndpoint(a.ep);
                }
            }
            unclaimed.clear();
            closeQueuedEndpoints();
            long deadline = System.nanoTime() + closeGraceNanos;
            while (System.nanoTime() < deadline && (!posted.isEmpty() || !closingDone())) {
                if (worker.progress() == 0 && !closeQueuedEndpoints()) {
                    Thread.onSpinWait();
                }
            }
            for (Op op : new ArrayList<>(posted)) {
                finish(op, op.cancelReason);
            }
            if (!closingDone()) {
                background("UCX manager '" + name + "': endpoints still closing after "
                        + TimeUnit.NANOSECONDS.toMillis(closeGraceNanos) + " ms; destroying the worker anyway", null);
            }
        } catch (Throwable t) {
            background("UCX manager '" + name + "': error while closing", t);
            for (Op op : new ArrayList<>(posted)) {
                op.complete(closed);
            }
        } finally {
            for (UcpMemory m : registrations.values()) {
                deregister(m);
            }
            registrations.clear();
            lifecycle.writeLock().lock();
            try {
                closeQuietly(listener, worker, context);
                state = CLOSED;
            } finally {
                lifecycle.writeLock().unlock();
            }
            // Calls that raced with close and queued after the drain.
            Command c;
            while ((c = commands.poll()) != null) {
                if (c instanceof Op op) {
                    op.complete(closed);
                } else {
                    c.abort(closed);
                }
            }
        }
    }

    private boolean closingDone() {
        for (Iterator<UcpRequest> it = closingEndpoints.iterator(); it.hasNext(); ) {
            if (it.next().isCompleted()) {
                it.remove();
            }
        }
        return closingEndpoints.isEmpty();
    }

    private void closeQuietly(AutoCloseable... all) {
        for (AutoCloseable c : all) {
            if (c == null) {
                continue;
            }
            try {
                c.close();
            } catch (Exception e) {
                background("closing " + c.getClass().getSimpleName() + " failed", e);
            }
        }
    }

    /** Counts a background error and hands it to the configured error handler (rate-limited per kind). */
    private void background(String message, Throwable cause) {
        errors.report(message.contains("hello") || message.contains("accept") ? "handshake" : "background",
                new TransportException(ErrorCode.NETWORK, message, cause));
    }

    // ---- addresses ----

    static String formatAddress(String host, int port) {
        return (host.indexOf(':') >= 0 && !host.startsWith("[") ? "[" + host + "]" : host) + ":" + port;
    }

    static InetSocketAddress parseAddress(String address) {
        int colon = address.lastIndexOf(':');
        if (colon <= 0 || colon == address.length() - 1) {
            throw new IllegalArgumentException("expected host:port");
        }
        String host = address.substring(0, colon);
        if (host.startsWith("[") && host.endsWith("]")) {
            host = host.substring(1, host.length() - 1);
        }
        int port;
        try {
            port = Integer.parseInt(address.substring(colon + 1));
        } catch (NumberFormatException e) {
            throw new IllegalArgumentException("port is not a number");
        }
        if (port <= 0 || port > 65535) {
            throw new IllegalArgumentException("port " + port + " out of range");
        }
        InetSocketAddress a = new InetSocketAddress(host, port);
        if (a.isUnresolved()) {
            throw new IllegalArgumentException("host '" + host + "' does not resolve");
        }
        return a;
    }

    // ------------------------------------------------------------------ types

    /** Work for the progress thread. */
    interface Command {
        /** Runs on the progress thread. */
        void run();

        /**
         * Called instead of {@link #run()} when the manager closed first.
         *
         * @param f the closing failure
         */
        void abort(Failure f);
    }

    /**
     * Why an operation or connection failed; turned into an exception on the caller's thread (so its stack is
     * the caller's).
     *
     * @param code    error code
     * @param message what failed
     * @param closed  whether it is the manager closing ({@link TransportClosedException})
     * @param cause   underlying failure or {@code null}
     */
    record Failure(ErrorCode code, String message, boolean closed, Throwable cause) {
        TransportException toException(String what) {
            if (closed) {
                TransportClosedException e = new TransportClosedException(what + ": " + message);
                if (cause != null) {
                    e.initCause(cause);
                }
                return e;
            }
            return new TransportException(code, what + ": " + message, cause);
        }
    }

    /** An endpoint this manager accepted, waiting for the hello that says which peer it is. */
    private static final class AcceptedEndpoint {
        final long clientId;
        UcpEndpoint ep;
        UcxConnection conn;

        AcceptedEndpoint(long clientId) {
            this.clientId = clientId;
        }
    }

    /** One send or receive: the command that posts it, the UCX callback, and what the caller waits on. */
    final class Op extends UcxCallback implements Command {
        static final int SEND = 0;
        static final int RECV = 1;
        static final int RECV_ANY = 2;

        final int kind;
        final UcxConnection conn;
        final int tag;
        final MemoryBuffer buffer;
        final long address;
        final long length;
        final int memType;

        // progress thread
        UcpRequest request;
        boolean posted;
        boolean probed;
        long probedLength;
        long probedSenderTag;
        Failure cancelReason;
        /** pollConnect: a wait that ends empty returns null; pollOnce: do not post, only look. */
        boolean poll;
        boolean pollOnce;

        // written under this monitor, read by the caller after done
        volatile boolean done;
        Failure failure;
        UcxConnection sender;

        Op(int kind, UcxConnection conn, int tag, MemoryBuffer buffer, long address, long length, int memType) {
            this.kind = kind;
            this.conn = conn;
            this.tag = tag;
            this.buffer = buffer;
            this.address = address;
            this.length = length;
            this.memType = memType;
        }

        String describe() {
            return switch (kind) {
                case SEND -> "UCX send of " + length + " bytes on tag " + tag + " to " + conn.peer;
                case RECV -> "UCX receive of " + length + " bytes on tag " + tag + " from " + conn.peer;
                default -> "UCX recvConnect of " + length + " bytes on tag " + tag + " at " + localAddress;
            };
        }

        @Override
        public void run() {
            post(this);
        }

        @Override
        public void abort(Failure f) {
            complete(f);
        }

        @Override
        public void onSuccess(UcpRequest r) {
            try {
                onOpSuccess(this, r);
            } catch (RuntimeException e) {
                finish(this, new Failure(ErrorCode.INTERNAL, "completion handling failed: " + e, false, e));
            }
        }

        @Override
        public void onError(int status, String message) {
            try {
                onOpError(this, status, message);
            } catch (RuntimeException e) {
                finish(this, new Failure(ErrorCode.INTERNAL, "error handling failed: " + e, false, e));
            }
        }

        synchronized void complete(Failure f) {
            if (done) {
                return;
            }
            failure = f;
            done = true;
            notifyAll();
        }

        synchronized boolean await(long deadlineNanos) throws InterruptedException {
            while (!done) {
                long left = deadlineNanos - System.nanoTime();
                if (left <= 0) {
                    return false;
                }
                TimeUnit.NANOSECONDS.timedWait(this, left);
            }
            return true;
        }

        boolean awaitUninterruptibly(long deadlineNanos) {
            boolean interrupted = false;
            try {
                while (true) {
                    try {
                        return await(deadlineNanos);
                    } catch (InterruptedException e) {
                        interrupted = true;
                    }
                }
            } finally {
                if (interrupted) {
                    Thread.currentThread().interrupt();
                }
            }
        }
    }

    /** Completion of the always-posted hello receive. */
    private final class HelloCallback extends UcxCallback {
        @Override
        public void onSuccess(UcpRequest r) {
            helloRecvDone = true;
            try {
                onHello();
            } catch (RuntimeException e) {
                background("UCX manager '" + name + "': hello handling failed", e);
            }
        }

        @Override
        public void onError(int status, String message) {
            helloRecvDone = true;
            if (state == RUNNING) {
                background("UCX manager '" + name + "': hello receive failed: " + message, null);
                postHelloRecv();
            }
        }
    }

    /** Completion of the dialing side's receive of the handshake answer. */
    private final class AckCallback extends UcxCallback {
        private final UcxConnection conn;

        AckCallback(UcxConnection conn) {
            this.conn = conn;
        }

        @Override
        public void onSuccess(UcpRequest r) {
            conn.ackRecvDone = true;
            try {
                onAck(conn);
            } catch (RuntimeException e) {
                background("UCX manager '" + name + "': handshake answer failed", e);
            }
        }

        @Override
        public void onError(int status, String message) {
            conn.ackRecvDone = true;
            // Cancelled when the connection failed or the manager closed; the failure is already recorded.
        }
    }

    /** Completion of a hello or ack send; a failure shows up in the endpoint's error handler too. */
    private final class ControlSendCallback extends UcxCallback {
        private final UcxConnection conn;

        ControlSendCallback(UcxConnection conn) {
            this.conn = conn;
        }

        @Override
        public void onError(int status, String message) {
            if (state == RUNNING && conn.failure == null) {
                failConnection(conn, new Failure(ErrorCode.PEER_LOST, "handshake with " + conn.peer
                        + " failed (UCX: " + message + ")", false, null));
            }
        }
    }
}
