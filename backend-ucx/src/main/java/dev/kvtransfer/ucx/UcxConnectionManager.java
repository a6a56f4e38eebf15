package dev.kvtransfer.ucx;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.memory.MemoryKind;
import dev.kvtransfer.api.transport.Connection;
import dev.kvtransfer.api.transport.ConnectionManager;
import dev.kvtransfer.api.transport.TransportClosedException;
import dev.kvtransfer.api.transport.TransportConfig;
import dev.kvtransfer.api.transport.TransportException;
import org.agrona.concurrent.AgentRunner;
import org.agrona.concurrent.AgentTerminationException;
import org.openucx.jucx.UcxException;
import org.openucx.jucx.ucp.UcpContext;
import org.openucx.jucx.ucp.UcpListener;
import org.openucx.jucx.ucp.UcpListenerParams;
import org.openucx.jucx.ucp.UcpParams;
import org.openucx.jucx.ucp.UcpWorker;
import org.openucx.jucx.ucp.UcpWorkerParams;
import org.openucx.jucx.ucs.UcsConstants;

import java.net.InetSocketAddress;
import java.security.SecureRandom;
import java.time.Duration;
import java.util.Collection;
import java.util.Collections;
import java.util.IdentityHashMap;
import java.util.List;
import java.util.Objects;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * One rank's UCX endpoint: one {@link UcpContext} (tag matching + wakeup), one {@link UcpWorker}, a
 * {@link UcpListener} on {@code host:port}, and the agents that own them. The work is split as in Aeron's
 * receiver: {@link UcxSettings} (every property, validated once), {@link SockaddrHandshake} (connection set-up),
 * {@link TagMatcher} (posting, completion, matching, peer failure), {@link ProgressAgent} (an Agrona
 * {@code Agent} under an {@link AgentRunner} that owns the worker and drains the command queue, with
 * {@link ProgressIdleStrategy}: a spin window after work, then epoll) and {@link ShutdownSequence}.
 *
 * <p><b>Threading.</b> No caller thread touches the worker: a call fills its thread's reusable {@link UcxOp},
 * queues it and waits on it with its deadline (spinning briefly, then parking). All jucx callbacks run on the
 * agent's thread.
 *
 * <p><b>Properties</b>: see {@link UcxSettings}. Background errors (a malformed hello, a failed handshake, a
 * failed command) go to the configuration's error handler and are counted ({@link #errorCount()}).
 */
public final class UcxConnectionManager implements ConnectionManager {
    /** Why a poll's receive was cancelled: its wait ended with nothing matched (the caller gets null). */
    private static final UcxFailure POLL_EMPTY = UcxFailure.of(ErrorCode.TIMEOUT, "nothing arrived");

    private final UcxSettings settings;
    private final UcxErrors errors;
    private final String name;
    private final Duration defaultTimeout;
    private final long closeGraceNanos;
    private final boolean cudaMemory;
    private final String localAddress;

    private final UcxLifecycle life = new UcxLifecycle();
    private final UcpContext context;
    private final ProgressAgent agent;
    private final AgentRunner runner;
    private final TagMatcher matcher;
    private final SockaddrHandshake handshake;
    private final ConcurrentHashMap<String, UcxConnection> connections = new ConcurrentHashMap<>();
    /** Connections that ever completed a handshake (closed with the manager even after leaving the map). */
    private final Set<UcxConnection> everConnected = Collections.newSetFromMap(new IdentityHashMap<>());
    private final AtomicInteger nextSenderId = new AtomicInteger();
    private final ThreadLocal<UcxOp> ops;
    private volatile Throwable agentFailure;

    /**
     * Starts a manager: context, worker, listener and progress agent.
     *
     * @param config where to listen and how
     * @throws TransportException ({@code NETWORK}) if UCX cannot start or bind
     * @throws IllegalArgumentException naming an unknown {@code ucx.*} property or a bad value
     */
    public UcxConnectionManager(TransportConfig config) {
        Objects.requireNonNull(config, "config");
        this.settings = UcxSettings.from(config);
        this.errors = new UcxErrors(config.errorHandler());
        this.name = settings.name();
        this.defaultTimeout = settings.defaultTimeout();
        this.closeGraceNanos = settings.closeGraceNanos();
        long clientId = new SecureRandom().nextLong() | 1L;
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
        SockaddrHandshake hs;
        try {
            ctx = new UcpContext(params);
            this.cudaMemory = UcsConstants.MEMORY_TYPE.isMemTypeSupported(ctx.getMemoryTypesMask(),
                    UcsConstants.MEMORY_TYPE.UCS_MEMORY_TYPE_CUDA);
            w = ctx.newWorker(new UcpWorkerParams().setClientId(clientId));
            hs = new SockaddrHandshake(this, errors, w, clientId);
            SockaddrHandshake h = hs;
            l = w.newListener(new UcpListenerParams().setSockAddr(bind).setConnectionHandler(h::onConnectionRequest));
            this.localAddress = UcxAddresses.format(config.host(), l.getAddress().getPort());
        } catch (UcxException | IllegalStateException e) {
            for (AutoCloseable c : new AutoCloseable[] {l, w, ctx}) {
                try {
                    if (c != null) {
                        c.close();
                    }
                } catch (Exception suppressed) {
                    e.addSuppressed(suppressed);
                }
            }
            throw new TransportException(ErrorCode.NETWORK, "UCX manager '" + name + "' cannot start on "
                    + config.host() + ":" + config.port() + ": " + e.getMessage(), e);
        }
        this.context = ctx;
        this.handshake = hs;
        EndpointCloser closer = new EndpointCloser(errors);
        this.matcher = new TagMatcher(settings, errors, ctx, w, closer, localAddress);
        closer.wire(matcher);
        hs.wire(matcher, closer);
        this.agent = new ProgressAgent(name, w, life, errors, settings.spinNanos());
        agent.wire(closer, new ShutdownSequence(this, agent, matcher, closer, hs, life, errors, closeGraceNanos, l, w,
                ctx));
        this.ops = ThreadLocal.withInitial(() -> new UcxOp(matcher));
        hs.start();
        this.runner = new AgentRunner(agent.idleStrategy(), this::onAgentError, null, agent);
        AgentRunner.startOnThread(runner, r -> {
            Thread t = new Thread(r, agent.roleName());
            t.setDaemon(true);
            return t;
        });
    }

    private void onAgentError(Throwable t) {
        if (t instanceof AgentTerminationException) {
            return; // the agent's way to stop when the manager closes
        }
        errors.report("agent", t);
        if (t instanceof Error) {
            agentFailure = t;
            life.beginClose(agent::signalNow);
        }
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

    /** @return background errors reported to the configuration's error handler so far */
    public long errorCount() {
        return errors.count();
    }

    /** @return the validated settings this manager runs with */
    public UcxSettings settings() {
        return settings;
    }

    @Override
    public Connection pollConnect(int tag, MemoryBuffer buffer, long offset, long length, Duration wait) {
        Objects.requireNonNull(wait, "wait");
        UcxOp op = op(UcxOp.RECV_ANY, null, tag, buffer, offset, length);
        op.poll = true;
        op.pollOnce = wait.isZero() || wait.isNegative();
        run(op, wait);
        return op.sender;
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
            return newConnection(a);
        });
        if (created[0]) {
            UcxConnection dial = c;
            if (!agent.submit(new UcxCommand() {
                @Override
                public void run() {
                    handshake.dial(dial);
                }

                @Override
                public void abort(UcxFailure f) {
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
        return life.running();
    }

    @Override
    public void close() {
        life.beginClose(agent::signalNow);
        if (agent.onAgentThread()) {
            return; // e.g. an error handler closing the manager: the agent ends after this round
        }
        long bound = TimeUnit.NANOSECONDS.toMillis(closeGraceNanos) * 2 + 10_000;
        runner.close((int) Math.min(Integer.MAX_VALUE, bound), t -> errors.report("close",
                new TransportException(ErrorCode.INTERNAL, "UCX manager '" + name + "': progress agent did not end "
                        + "within " + bound + " ms of close()")));
    }

    @Override
    public String toString() {
        return "UcxConnectionManager{" + name + " " + localAddress + (isRunning() ? "" : " closed") + "}";
    }

    // ------------------------------------------------------------------ for the connection and its parts

    String name() {
        return name;
    }

    void send(UcxConnection c, int tag, MemoryBuffer buffer, long offset, long length, Duration timeout) {
        run(op(UcxOp.SEND, c, tag, buffer, offset, length), timeout);
    }

    void recv(UcxConnection c, int tag, MemoryBuffer buffer, long offset, long length, Duration timeout) {
        run(op(UcxOp.RECV, c, tag, buffer, offset, length), timeout);
    }

    /** @return the connection to an address, created (and its sender id registered) if absent */
    UcxConnection connectionFor(String address) {
        return connections.computeIfAbsent(address, this::newConnection);
    }

    /** @return the connection to an address, or null */
    UcxConnection existing(String address) {
        return connections.get(address);
    }

    /** Drops a failed connection from the map (the next {@link #connection} dials afresh). */
    void forget(UcxConnection c) {
        connections.remove(c.peer, c);
    }

    void everConnected(UcxConnection c) {
        everConnected.add(c); // agent thread only
    }

    /** @return every connection the shutdown must close (agent thread) */
    Collection<UcxConnection> allConnections() {
        Set<UcxConnection> all = Collections.newSetFromMap(new IdentityHashMap<>());
        all.addAll(connections.values());
        all.addAll(everConnected);
        return all;
    }

    UcxFailure closedFailure() {
        Throwable pf = agentFailure;
        return new UcxFailure(ErrorCode.NETWORK, "UCX manager '" + name + "' (" + localAddress + ") closed"
                + (pf != null ? " after its progress agent failed: " + pf : ""), true, pf);
    }

    int explicitRegistrations() {
        return matcher.explicitRegistrations();
    }

    private UcxConnection newConnection(String address) {
        UcxConnection c = new UcxConnection(this, address, newSenderId());
        matcher.bySenderId.put(c.inId, c); // before the peer can learn the id and send with it
        return c;
    }

    private int newSenderId() {
        int id = nextSenderId.incrementAndGet();
        if (id <= 0 || id > UcxTags.MAX_SENDER_ID) {
            throw new TransportException(ErrorCode.INTERNAL, "UCX manager '" + name + "' ran out of sender ids");
        }
        return id;
    }

    // ------------------------------------------------------------------ caller side

    private UcxOp op(int kind, UcxConnection c, int tag, MemoryBuffer buffer, long offset, long length) {
        Objects.requireNonNull(buffer, "buffer");
        Objects.checkFromIndexSize(offset, length, buffer.size());
        int memType = UcsConstants.MEMORY_TYPE.UCS_MEMORY_TYPE_HOST;
        if (buffer.kind() == MemoryKind.DEVICE) {
            if (!cudaMemory) {
                throw new UnsupportedOperationException("UCX transport: DEVICE memory is not supported here: the"
                        + " loaded libucp reports no CUDA memory support (memory types mask 0x"
                        + Long.toHexString(memTypesMask()) + ")");
            }
            memType = UcsConstants.MEMORY_TYPE.UCS_MEMORY_TYPE_CUDA;
        }
        UcxOp op = ops.get();
        if (!op.reusable() && op.waiter != null) {
            op = new UcxOp(matcher); // UCX may still call the old one back: never reuse it
            ops.set(op);
        }
        op.reset(kind, c, tag, buffer, buffer.address() + offset, length, memType);
        return op;
    }

    private long memTypesMask() {
        try {
            return context.getMemoryTypesMask();
        } catch (RuntimeException e) {
            return 0;
        }
    }

    /** Submits an operation and waits for it: deadline, then cancellation, then the outcome. */
    private void run(UcxOp op, Duration timeout) {
        Objects.requireNonNull(timeout, "timeout");
        if (op.conn != null && op.conn.failure != null) {
            UcxFailure f = op.conn.failure;
            op.complete(f);
            throw f.toException(op.describe());
        }
        if (!agent.submit(op)) {
            op.complete(closedFailure());
            throw closedException(op.describe());
        }
        // A zero-wait poll still waits for the agent's answer: nothing (at once) or a matched message's bytes.
        long deadline = System.nanoTime() + saturatedNanos(op.pollOnce ? defaultTimeout : timeout);
        UcxFailure cancelReason = null;
        if (!op.await(deadline, 0)) {
            if (Thread.currentThread().isInterrupted()) {
                cancelReason = UcxFailure.of(ErrorCode.NETWORK, "interrupted");
            } else {
                cancelReason = op.poll && !op.pollOnce ? POLL_EMPTY : UcxFailure.of(ErrorCode.TIMEOUT,
                        "timed out after " + (op.pollOnce ? defaultTimeout : timeout).toMillis() + " ms");
            }
        }
        if (cancelReason != null) {
            UcxFailure reason = cancelReason;
            int generation = op.generation;
            agent.submitAlways(new UcxCommand() {
                @Override
                public void run() {
                    matcher.cancel(op, generation, reason);
                }

                @Override
                public void abort(UcxFailure f) {
                    // Closing completes the operation itself.
                }
            });
            if (!op.awaitUninterruptibly(System.nanoTime() + closeGraceNanos)) {
                throw new TransportException(reason.code(), op.describe() + ": " + reason.message()
                        + "; UCX did not give the request back within "
                        + TimeUnit.NANOSECONDS.toMillis(closeGraceNanos) + " ms, the buffer may still be in use");
            }
        }
        UcxFailure f = op.failure;
        if (f == POLL_EMPTY) {
            op.sender = null; // nothing arrived within the poll's wait: not an error
            return;
        }
        if (f != null) {
            throw f.toException(op.describe());
        }
    }

    private static long saturatedNanos(Duration d) {
        try {
            return Math.max(0, d.toNanos());
        } catch (ArithmeticException e) {
            return d.isNegative() ? 0 : Long.MAX_VALUE / 4;
        }
    }

    private void checkRunning(String what) {
        if (!life.running()) {
            throw closedException(what);
        }
    }

    private TransportClosedException closedException(String what) {
        Throwable pf = agentFailure;
        TransportClosedException e = new TransportClosedException(what + ": UCX manager '" + name + "' ("
                + localAddress + ") is closed" + (pf != null ? " after its progress agent failed: " + pf : ""));
        if (pf != null) {
            e.initCause(pf);
        }
        return e;
    }

    /** For tests: the connections currently in the map. */
    List<UcxConnection> connectionsForTest() {
        return List.copyOf(connections.values());
    }
}
