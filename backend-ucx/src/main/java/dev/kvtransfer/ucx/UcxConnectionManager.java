package dev.kvtransfer.ucx;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.memory.MemoryKind;
import dev.kvtransfer.api.transport.Connection;
import dev.kvtransfer.api.transport.ConnectionManager;
import dev.kvtransfer.api.transport.RegisteredRegion;
import dev.kvtransfer.api.transport.WriteBatch;
import dev.kvtransfer.api.transport.TransportClosedException;
import dev.kvtransfer.api.transport.TransportCapability;
import dev.kvtransfer.api.transport.TransportConfig;
import dev.kvtransfer.api.transport.TransportException;
import org.agrona.concurrent.AgentRunner;
import org.agrona.concurrent.AgentTerminationException;
import org.openucx.jucx.UcxException;
import org.openucx.jucx.ucp.UcpContext;
import org.openucx.jucx.ucp.UcpParams;
import org.openucx.jucx.ucp.UcpWorker;
import org.openucx.jucx.ucp.UcpWorkerParams;
import org.openucx.jucx.ucs.UcsConstants;

import java.io.IOException;
import java.net.InetSocketAddress;
import java.nio.ByteBuffer;
import java.nio.channels.Selector;
import java.nio.channels.ServerSocketChannel;
import java.time.Duration;
import java.util.Collection;
import java.util.Collections;
import java.util.IdentityHashMap;
import java.util.List;
import java.util.Objects;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;

/**
 * One rank's UCX endpoint: one {@link UcpContext} (tag matching, RMA, wakeup), one {@link UcpWorker}, our own
 * bootstrap listener on {@code host:port} (plain TCP, bound to that address only; no UCX listener exists), and the
 * agents that own them. The work is split as in Aeron's receiver: {@link UcxSettings} (every property, validated
 * once), {@link BootstrapAgent} (authenticated handshake, worker-address exchange, control connections and their
 * liveness), {@link TagMatcher} (endpoints, posting, completion, matching, peer failure), {@link ProgressAgent}
 * (an Agrona {@code Agent} under an {@link AgentRunner} that owns the worker and drains the command queue, with
 * {@link ProgressIdleStrategy}: a spin window after work, then epoll) and {@link ShutdownSequence}.
 *
 * <p><b>Threading.</b> No caller thread touches the worker: a call fills its thread's reusable {@link UcxOp},
 * queues it and waits on it with its deadline. All jucx callbacks run on the progress agent's thread; all
 * bootstrap sockets belong to the bootstrap agent's thread.
 *
 * <p><b>Properties</b>: see {@link UcxSettings}. Background errors (a refused or malformed handshake, a lost
 * control connection, a failed command) go to the configuration's error handler and are counted
 * ({@link #errorCount()}); refused handshakes also in {@link #refusedHandshakes()}.
 */
public final class UcxConnectionManager implements ConnectionManager {
    /** Why a poll's receive was cancelled: its wait ended with nothing matched (the caller gets null). */
    private static final UcxFailure POLL_EMPTY = UcxFailure.of(ErrorCode.TIMEOUT, "nothing arrived");

    private final UcxSettings settings;
    private final UcxErrors errors;
    private final String name;
    private final Duration defaultTimeout;
    private final long closeGraceNanos;
    private final long callerSpinNanos;
    private final long callerPollNanos;
    private final boolean cudaMemory;
    private final String localAddress;

    private final UcxLifecycle life = new UcxLifecycle();
    private final UcpContext context;
    private final ProgressAgent agent;
    private final AgentRunner runner;
    private final TagMatcher matcher;
    private final BootstrapAgent bootstrap;
    private final AgentRunner bootstrapRunner;
    private final ConcurrentHashMap<String, UcxConnection> connections = new ConcurrentHashMap<>();
    private final RmaRegions regions;
    private final BufferedSends buffered;
    private final RmaWriter writer;
    private final java.security.SecureRandom random = new java.security.SecureRandom();
    private final ThreadLocal<UcxOp> ops;
    private final PostedReceives posted;
    private final ThreadLocal<RmaWriter.Target[][]> targetScratch = ThreadLocal.withInitial(
            () -> new RmaWriter.Target[][] {new RmaWriter.Target[16]});
    private volatile Throwable agentFailure;
    /** One-sided writes over tagged messages ({@code ucx.oneSided=emulated}), else null (native RMA). */
    private final dev.kvtransfer.transport.support.EmulatedOneSided emulated;
    private volatile Set<TransportCapability> capabilities;

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
        this.callerSpinNanos = settings.callerSpinNanos();
        this.callerPollNanos = settings.callerPollNanos();
        // Starts nothing before the first register (only stores this manager).
        this.emulated = settings.emulatedOneSided() ? new dev.kvtransfer.transport.support.EmulatedOneSided(
                this, dev.kvtransfer.transport.support.ControlMemory.withAddresses("UCX",
                        org.openucx.jucx.UcxUtils::getAddress), e -> errors.report("one-sided", e), defaultTimeout,
                "ucx-" + name) : null;
        InetSocketAddress bind = new InetSocketAddress(config.host(), config.port());
        if (bind.isUnresolved()) {
            throw new TransportException(ErrorCode.NETWORK, "UCX manager '" + name + "': host '" + config.host()
                    + "' does not resolve");
        }
        UcpParams params = new UcpParams().requestTagFeature().requestRmaFeature().requestWakeupFeature();
        settings.ucxConfig().forEach(params::setConfig);
        if (!settings.sharedMemory() && !settings.ucxConfig().containsKey("NET_DEVICES")) {
            // UCX's TCP transport listens on every device it uses: keep it to the configured address's device.
            String dev = HostIdentity.deviceOf(bind.getAddress());
            if (dev != null) {
                params.setConfig("NET_DEVICES", dev);
            }
        }
        UcpContext ctx = null;
        UcpWorker w = null;
        ServerSocketChannel server = null;
        Selector selector = null;
        byte[] workerAddress;
        try {
            ctx = new UcpContext(params);
            this.cudaMemory = UcsConstants.MEMORY_TYPE.isMemTypeSupported(ctx.getMemoryTypesMask(),
                    UcsConstants.MEMORY_TYPE.UCS_MEMORY_TYPE_CUDA);
            w = ctx.newWorker(new UcpWorkerParams());
            ByteBuffer wa = w.getAddress();
            workerAddress = new byte[wa.remaining()];
            wa.get(workerAddress);
            selector = Selector.open();
            server = ServerSocketChannel.open();
            server.bind(bind, 128);
            server.configureBlocking(false);
            server.register(selector, java.nio.channels.SelectionKey.OP_ACCEPT, null);
            this.localAddress = UcxAddresses.format(config.host(),
                    ((InetSocketAddress) server.getLocalAddress()).getPort());
        } catch (UcxException | IllegalStateException | IOException e) {
            for (AutoCloseable c : new AutoCloseable[] {server, selector, w, ctx}) {
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
        EndpointCloser closer = new EndpointCloser(errors, !settings.sharedMemory());
        this.matcher = new TagMatcher(settings, errors, ctx, w, closer, localAddress);
        closer.wire(matcher);
        TagMatcher m = matcher;
        // While an abandoned send's exchange runs the agent polls too: its fallback deadline must be seen.
        this.agent = new ProgressAgent(name, w, life, errors, settings.spinNanos(),
                () -> m.sendsInFlight + m.abandoned.outgoingActive());
        agent.wire(closer, matcher.abandoned, new ShutdownSequence(this, agent, matcher, closer, life, errors, closeGraceNanos, w, ctx));
        BootstrapAgent.Identity me = new BootstrapAgent.Identity(nonZero(random.nextLong()), HostIdentity.id(),
                settings.sharedMemory() ? BootstrapFrames.MODE_SHM : BootstrapFrames.MODE_NET, workerAddress);
        this.bootstrap = new BootstrapAgent(this, settings, errors, life, new BootstrapAuth(config.authSecret(),
                settings.authMaxSkewMillis()), me, server, selector, agent, matcher);
        this.regions = new RmaRegions(this, ctx, errors, cudaMemory);
        this.writer = new RmaWriter(this);
        regions.wire(bootstrap);
        writer.wire(bootstrap);
        matcher.abandoned.wire(bootstrap, agent);
        bootstrap.control((c, type, body) -> {
            switch (type) {
                case BootstrapFrames.VALIDATE -> regions.onValidate(c, body);
                case BootstrapFrames.VALIDATED -> writer.onValidated(c, body);
                case BootstrapFrames.REVOKE -> writer.onRevoke(c, body);
                case BootstrapFrames.REVOKED -> regions.onRevoked(c, body);
                case BootstrapFrames.DISCARD, BootstrapFrames.DISCARD_END, BootstrapFrames.DISCARD_ENDED ->
                        matcher.abandoned.onFrame(c, type, body);
                default -> {
                    return false;
                }
            }
            return true;
        }, regions::onConnectionLost);
        matcher.hook(new TagMatcher.ConnectionHook() {
            @Override
            public void onReady(UcxConnection c) {
                // Sends flow from here on.
            }

            @Override
            public void onFailed(UcxConnection c) {
                writer.onConnectionLost(c, c.failure);
                bootstrap.execute(() -> bootstrap.closeSessions(c));
            }
        });
        this.ops = ThreadLocal.withInitial(() -> new UcxOp(matcher));
        this.posted = new PostedReceives(name, agent, matcher, errors);
        this.buffered = new BufferedSends(matcher, errors, settings.bufferedSendBytes(), settings.bufferedSendSlots());
        this.runner = new AgentRunner(agent.idleStrategy(), this::onAgentError, null, agent);
        this.bootstrapRunner = new AgentRunner(new SelectorIdleStrategy(bootstrap, life), this::onAgentError, null,
                bootstrap);
        AgentRunner.startOnThread(runner, DaemonThreads.named(agent.roleName()));
        AgentRunner.startOnThread(bootstrapRunner, DaemonThreads.named(bootstrap.roleName()));
    }

    private static long nonZero(long v) {
        return v == 0 ? 1 : v;
    }

    private void onAgentError(Throwable t) {
        if (t instanceof AgentTerminationException) {
            return; // the agent's way to stop when the manager closes
        }
        errors.report("agent", t);
        if (t instanceof Error) {
            agentFailure = t;
            life.beginClose(this::wakeAgents);
        }
    }

    private void wakeAgents() {
        agent.signalNow();
        bootstrap.selector().wakeup();
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

    /**
     * @return cross-process, peer-failure detection, one-sided writes; {@code NATIVE_ONE_SIDED_WRITE} when this manager
     *         writes by UCX RMA ({@link UcxSettings#oneSidedReason()}); {@code DEVICE_MEMORY} for CUDA memory
     */
    @Override
    public Set<TransportCapability> capabilities() {
        Set<TransportCapability> known = capabilities;
        if (known != null) {
            return known; // asked once per request by core: made once
        }
        java.util.EnumSet<TransportCapability> c = java.util.EnumSet.of(TransportCapability.CROSS_PROCESS,
                TransportCapability.PEER_FAILURE_DETECTION, TransportCapability.ONE_SIDED_WRITE,
                TransportCapability.AUTHENTICATED);
        if (emulated == null) {
            c.add(TransportCapability.NATIVE_ONE_SIDED_WRITE);
        }
        if (cudaMemory) {
            c.add(TransportCapability.DEVICE_MEMORY);
        }
        capabilities = Collections.unmodifiableSet(c);
        return capabilities;
    }

    /** Every peer of a shm-mode manager is of this host: see {@link UcxSettings#oneCopyWrites()}. */
    @Override
    public boolean oneCopyWritesFrom(String address) {
        return settings.oneCopyWrites();
    }

    /** @return background errors reported to the configuration's error handler so far */
    public long errorCount() {
        return errors.count();
    }

    /** @return the validated settings this manager runs with */
    public UcxSettings settings() {
        return settings;
    }

    /**
     * 0: the responder never reads an info itself over UCX. Measured with {@code kvtransfer bench --level control}
     * (commit 48f62af, core README): at 64 requests in flight, reading on the responder cost 19-30 % of the
     * requests/s over UCX, one JVM and two processes.
     */
    @Override
    public int preferredResponderInfoWaitMicros() {
        return 0;
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
        if (!life.running()) {
            throw closedException("connection to " + address);
        }
        UcxConnection c = connections.get(address);
        if (c != null && c.failure == null) {
            return c;
        }
        boolean[] created = {false};
        c = connections.compute(address, (a, old) -> {
            if (old != null && old.failure == null) {
                return old;
            }
            created[0] = true;
            return newConnection(a, reserveSenderId());
        });
        if (created[0]) {
            UcxConnection dial = c;
            bootstrap.execute(() -> bootstrap.dial(dial));
        }
        return c;
    }

    /** @return bootstrap sessions open now (handshakes in progress and control connections), read racily */
    int openControlSessions() {
        return bootstrap.openSessions();
    }

    /** @return incoming handshakes this manager refused so far (unauthenticated, forged, replayed, conflicting) */
    public long refusedHandshakes() {
        return bootstrap.refusedHandshakes();
    }

    @Override
    public RegisteredRegion register(MemoryBuffer memory) {
        Objects.requireNonNull(memory, "memory");
        if (!life.running()) {
            throw closedException("register at " + localAddress);
        }
        if (emulated != null) {
            return emulated.register(memory);
        }
        return regions.register(memory);
    }

    /** Emulated writes arrive on a connection, so the writer is known; native RMA cannot tell it (refused). */
    @Override
    public RegisteredRegion register(MemoryBuffer memory, java.util.Set<String> writers) {
        Objects.requireNonNull(memory, "memory");
        Objects.requireNonNull(writers, "writers");
        if (!life.running()) {
            throw closedException("register at " + localAddress);
        }
        if (emulated == null) {
            throw new UnsupportedOperationException("native UCX one-sided writes cannot be bound to their writers"
                    + " (any holder of the rkey writes) at " + localAddress);
        }
        return emulated.register(memory, writers);
    }

    @Override
    public boolean isRunning() {
        return life.running();
    }

    @Override
    public void close() {
        posted.close();
        if (emulated != null) {
            emulated.close(); // first: its agent receives through this manager
        }
        life.beginClose(this::wakeAgents);
        regions.closeAll();
        if (agent.onAgentThread() || Thread.currentThread() == bootstrapRunner.thread()) {
            return; // e.g. an error handler closing the manager: the agents end after this round
        }
        long bound = TimeUnit.NANOSECONDS.toMillis(closeGraceNanos) * 2 + 10_000;
        // The bootstrap first: peers hear BYE at once; then the worker's shutdown fails what is left.
        bootstrapRunner.close((int) Math.min(Integer.MAX_VALUE, bound), t -> errors.report("close",
                new TransportException(ErrorCode.INTERNAL, "UCX manager '" + name + "': bootstrap agent did not end "
                        + "within " + bound + " ms of close()")));
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
        if (length <= buffered.slotBytes() && c.established && c.failure == null && buffer.kind() != MemoryKind.DEVICE
                && life.running()) {
            Objects.checkFromIndexSize(offset, length, buffer.size());
            Objects.requireNonNull(timeout, "timeout");
            UcxOp op = buffered.take();
            if (op != null) {
                op.reset(UcxOp.SEND, c, tag, null, op.slotAddress, length,
                        UcsConstants.MEMORY_TYPE.UCS_MEMORY_TYPE_HOST);
                BufferedSends.copy(buffer.address() + offset, op, length);
                if (!agent.submit(op)) {
                    op.complete(closedFailure());
                    throw closedException(op.describe());
                }
                return; // the payload is ours now: the caller's buffer is free
            }
        }
        run(op(UcxOp.SEND, c, tag, buffer, offset, length), timeout);
    }

    void recv(UcxConnection c, int tag, MemoryBuffer buffer, long offset, long length, Duration timeout) {
        run(op(UcxOp.RECV, c, tag, buffer, offset, length), timeout);
    }

    /** A posted receive or send: a fresh op (this thread's reusable one is replaced: UCX and the callback own it). */
    void postAsync(int kind, UcxConnection c, int tag, MemoryBuffer buffer, long offset, long length, long[][] iov,
                   Duration timeout, dev.kvtransfer.api.transport.RecvCompletion done) {
        UcxOp op = op(kind, c, tag, buffer, offset, length).vector(iov);
        ops.set(new UcxOp(matcher));
        posted.post(op, Objects.requireNonNull(timeout, "timeout"), Objects.requireNonNull(done, "done"));
    }

    /** @return the live or failed connection to an address, or null (bootstrap agent) */
    UcxConnection existing(String address) {
        return connections.get(address);
    }

    /**
     * Creates the connection of an accepted peer (bootstrap agent, after its confirm).
     *
     * @return the new connection, or null when a live one appeared meanwhile or the sender id was taken
     */
    UcxConnection createConnection(String address, int senderId) {
        UcxConnection c = new UcxConnection(this, address, senderId);
        if (matcher.bySenderId.putIfAbsent(senderId, c) != null) {
            return null;
        }
        // A connection whose control the bootstrap already gave up (controlLost, read here on the bootstrap agent,
        // the only caller) is as dead as a failed one, though the progress agent has not failed it yet: replace it,
        // or a peer re-dialing in that window is refused.
        UcxConnection inMap = connections.compute(address,
                (a, old) -> old == null || old.failure != null || old.controlLost ? c : old);
        if (inMap != c) {
            matcher.bySenderId.remove(senderId, c);
            return null;
        }
        return c;
    }

    /** @return a random sender id no connection uses now (unguessable, so tags cannot be aimed at a peer) */
    int reserveSenderId() {
        while (true) {
            int id = random.nextInt() & UcxTags.MAX_SENDER_ID;
            if (id != 0 && !matcher.bySenderId.containsKey(id)) {
                return id;
            }
        }
    }

    /** Drops a failed connection from the map (the next {@link #connection} dials afresh). */
    void forget(UcxConnection c) {
        connections.remove(c.peer, c);
    }

    /** @return every connection the shutdown must close (agent thread) */
    Collection<UcxConnection> allConnections() {
        Set<UcxConnection> all = Collections.newSetFromMap(new IdentityHashMap<>());
        all.addAll(connections.values());
        all.addAll(matcher.bySenderId.values());
        return all;
    }

    // ---- one-sided writes ----

    void write(UcxConnection c, WriteBatch batch, Duration timeout) {
        Objects.requireNonNull(batch, "batch");
        Objects.requireNonNull(timeout, "timeout");
        if (!life.running()) { // a closed manager says so, whatever its connections went through
            throw closedException("write to " + c.peer);
        }
        if (c.failure != null) {
            throw c.failure.toException("write to " + c.peer);
        }
        if (emulated != null) {
            emulated.write(c, batch, timeout);
            return;
        }
        writer.write(c, batch, timeout);
    }

    void checkOpen(String what) {
        checkRunning(what);
    }

    /** Posts a validated batch as puts + flush and waits (caller thread). */
    void puts(UcxConnection c, WriteBatch batch, RmaWriter.Target[] targets, long deadlineNanos) {
        UcxOp op = ops.get();
        if (!op.reusable() && op.waiter != null) {
            op = new UcxOp(matcher);
            ops.set(op);
        }
        op.reset(UcxOp.PUTS, c, 0, null, 0, batch.totalBytes(), UcsConstants.MEMORY_TYPE.UCS_MEMORY_TYPE_HOST);
        op.batch = batch;
        op.targets = targets;
        runUntil(op, deadlineNanos, null);
    }

    /** @return the calling thread's reusable array for a batch's targets (at least {@code n} long) */
    RmaWriter.Target[] targetScratch(int n) {
        RmaWriter.Target[][] holder = targetScratch.get();
        if (holder[0].length < n) {
            holder[0] = new RmaWriter.Target[Math.max(n, holder[0].length * 2)];
        }
        return holder[0];
    }

    /** Destroys an unpacked remote key on the progress agent. */
    void releaseRemoteKey(RmaWriter.Target t) {
        agent.submitAlways(new UcxCommand() {
            @Override
            public void run() {
                matcher.releaseRemoteKey(t);
            }

            @Override
            public void abort(UcxFailure f) {
                // The worker goes with the manager.
            }
        });
    }

    /** Unmaps every region (shutdown, progress agent). */
    void unmapRegions() {
        regions.unmapAll();
    }

    /**
     * Runs a call on the progress agent and waits for it (at most the default timeout).
     *
     * @throws TransportClosedException when the manager closed first
     */
    <T> T callOnAgent(String what, java.util.function.Supplier<T> call) {
        java.util.concurrent.CompletableFuture<T> f = new java.util.concurrent.CompletableFuture<>();
        if (agent.onAgentThread()) {
            return call.get();
        }
        if (!agent.submit(new UcxCommand() {
            @Override
            public void run() {
                try {
                    f.complete(call.get());
                } catch (RuntimeException e) {
                    f.completeExceptionally(e);
                }
            }

            @Override
            public void abort(UcxFailure closing) {
                f.completeExceptionally(closing.toException(what));
            }
        })) {
            throw closedException(what);
        }
        try {
            return f.get(defaultTimeout.toMillis(), TimeUnit.MILLISECONDS);
        } catch (java.util.concurrent.ExecutionException e) {
            if (e.getCause() instanceof RuntimeException r) {
                if (r instanceof UcxException) {
                    throw new TransportException(ErrorCode.NETWORK, what + ": " + r.getMessage(), r);
                }
                throw r;
            }
            throw new TransportException(ErrorCode.INTERNAL, what + ": " + e.getCause(), e.getCause());
        } catch (java.util.concurrent.TimeoutException e) {
            throw new TransportException(ErrorCode.TIMEOUT, what + ": the progress agent did not answer within "
                    + defaultTimeout.toMillis() + " ms");
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new TransportException(ErrorCode.NETWORK, what + ": interrupted");
        }
    }

    UcxFailure closedFailure() {
        Throwable pf = agentFailure;
        return new UcxFailure(ErrorCode.NETWORK, "UCX manager '" + name + "' (" + localAddress + ") closed"
                + (pf != null ? " after its progress agent failed: " + pf : ""), true, pf);
    }

    int explicitRegistrations() {
        return matcher.explicitRegistrations();
    }

    private UcxConnection newConnection(String address, int senderId) {
        UcxConnection c = new UcxConnection(this, address, senderId);
        matcher.bySenderId.put(senderId, c); // before the peer can learn the id and send with it
        return c;
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

    /**
     * Waits for an operation: first progressing the worker itself ({@code ucx.callerPollMicros}: the agent's round
     * on this thread whenever no other thread holds the worker, so the completion runs here, with no hand-off to
     * the agent and back) until nothing happened for the poll time, the deadline, or an interrupt; then parked
     * as before ({@link UcxOp#await}).
     */
    private boolean awaitOp(UcxOp op, long deadline) {
        if (callerPollNanos > 0 && !op.done && !agent.onAgentThread()) {
            agent.callerPolling(true);
            try {
                long now = System.nanoTime();
                long idleSince = now;
                int spins = 0;
                while (!op.done && deadline - now > 0 && now - idleSince < callerPollNanos
                        && !Thread.currentThread().isInterrupted()) {
                    int work;
                    try {
                        work = agent.tryCallerRound();
                    } catch (Throwable t) {
                        onAgentError(t);
                        work = 0;
                    }
                    now = System.nanoTime();
                    if (work > 0) {
                        idleSince = now;
                        spins = 0;
                    } else if ((++spins & 7) == 0) {
                        Thread.yield();
                    } else {
                        Thread.onSpinWait();
                    }
                }
            } finally {
                agent.callerPolling(false);
            }
            if (op.done) {
                return true;
            }
        }
        return op.await(deadline, callerSpinNanos);
    }

    /** @return rounds with work that blocked callers ran on their own threads ({@code ucx.callerPollMicros}; tests) */
    long callerRounds() {
        return agent.callerRounds();
    }

    /** Submits an operation and waits for it: deadline, then cancellation, then the outcome. */
    private void run(UcxOp op, Duration timeout) {
        Objects.requireNonNull(timeout, "timeout");
        // A zero-wait poll still waits for the agent's answer: nothing (at once) or a matched message's bytes.
        long nanos = PostedReceives.saturatedNanos(op.pollOnce ? defaultTimeout : timeout);
        runUntil(op, System.nanoTime() + nanos, timeout);
    }

    /** Like {@link #run} with an absolute {@link System#nanoTime()} deadline ({@code timeout} only for messages). */
    private void runUntil(UcxOp op, long deadline, Duration timeout) {
        if (op.conn != null && op.conn.failure != null && life.running()) {
            UcxFailure f = op.conn.failure;
            op.complete(f);
            throw f.toException(op.describe());
        }
        if (!agent.submit(op)) {
            op.complete(closedFailure());
            throw closedException(op.describe());
        }
        UcxFailure cancelReason = null;
        if (!awaitOp(op, deadline)) {
            if (Thread.currentThread().isInterrupted()) {
                cancelReason = UcxFailure.of(ErrorCode.NETWORK, "interrupted");
            } else {
                cancelReason = op.poll && !op.pollOnce ? POLL_EMPTY : UcxFailure.of(ErrorCode.TIMEOUT,
                        "timed out" + (timeout == null ? "" : " after " + (op.pollOnce ? defaultTimeout : timeout)
                                .toMillis() + " ms"));
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

    /**
     * For tests: the abandoned-send state, read on the progress agent: messages discarded for peers, exchanges
     * that fell back to closing, exchanges and announcements in progress, discard receives outstanding, posted
     * operations, sends in flight.
     */
    long[] abandonedStateForTest() {
        return callOnAgent("abandoned-send state", () -> {
            AbandonedSends a = matcher.abandoned;
            return new long[] {a.discardedMessages(), a.fallbacks(), a.outgoingActive(), a.incomingActive(),
                a.receivesOutstanding(), matcher.posted.size(), matcher.sendsInFlight};
        });
    }

    /** For tests: ignore peers' announcements of abandoned sends, as a peer without the protocol would. */
    void ignoreAbandonedSendAnnouncementsForTest(boolean ignore) {
        matcher.abandoned.ignoreAnnouncements = ignore;
    }

    /** For tests: keep this side's DISCARD_ENDED answers (so a peer's sends of the tag stay held). */
    void withholdDiscardEndedForTest() {
        callOnAgent("withhold", () -> matcher.abandoned.withholdEnded = true);
    }

    /** For tests: send the withheld DISCARD_ENDED answers; returns how many. */
    int releaseDiscardEndedForTest() {
        return callOnAgent("release", matcher.abandoned::releaseWithheld);
    }

    /** For tests: the connections currently in the map. */
    List<UcxConnection> connectionsForTest() {
        return List.copyOf(connections.values());
    }
}
