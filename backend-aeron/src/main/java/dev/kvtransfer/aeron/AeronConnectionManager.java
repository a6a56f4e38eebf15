package dev.kvtransfer.aeron;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.memory.MemoryKind;
import dev.kvtransfer.api.transport.Connection;
import dev.kvtransfer.api.transport.ConnectionManager;
import dev.kvtransfer.api.transport.RegisteredRegion;
import dev.kvtransfer.api.transport.RecvCompletion;
import dev.kvtransfer.api.transport.TransportClosedException;
import dev.kvtransfer.api.transport.TransportConfig;
import dev.kvtransfer.api.transport.TransportException;
import dev.kvtransfer.transport.support.EmulatedOneSided;
import io.aeron.Aeron;
import io.aeron.Subscription;
import org.agrona.CloseHelper;

import java.security.SecureRandom;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.locks.LockSupport;

/**
 * One rank's Aeron endpoint (the public face; see {@link TransportAgent} for the loop behind it): a UDP
 * subscription on {@code host:port}, an IPC subscription for peers on the same media driver (its address says
 * which driver: {@link Address}), one exclusive publication per peer it talks to, and an agent that owns every
 * piece of transfer state — matching, early messages, large receives in progress, handshakes, liveness. Callers
 * hand it operations through a lock-free command queue and park until the agent completes them; payload goes
 * from the caller's memory into Aeron's term buffer (send) and from the term buffer into the receive's memory
 * (agent), never through the heap. One-sided writes are emulated ({@link EmulatedOneSided}).
 *
 * <p>Thread-safe. See the module README for the protocol, the settings and the numbers.
 */
public final class AeronConnectionManager implements ConnectionManager {
    /** Blocked callers re-check close, peer loss and their deadline at least this often. */
    private static final long WAIT_SLICE_NS = TimeUnit.MILLISECONDS.toNanos(50);
    private static final long CANCEL_ACK_NS = TimeUnit.SECONDS.toNanos(10);
    /** Longest {@link #seeOnce} waits for another thread's duty cycle to take an op (a descheduled one). */
    private static final long SEE_ONCE_NS = TimeUnit.MILLISECONDS.toNanos(10);
    private static final ThreadLocal<Op> OPS = new ThreadLocal<>();
    private static final SecureRandom RANDOM = new SecureRandom();
    private static final Map<Integer, Boolean> IPC_STREAMS = new ConcurrentHashMap<>();

    final AeronSettings settings;
    final String name;
    private final Duration defaultTimeout;
    final ErrorReporter reporter;
    final Handshake handshake;
    final long incarnation;
    final AeronRuntime runtime;
    final ManagerCounters counters;
    private final String host;
    private final int port;
    private final int ipcStream;
    private final String localAddress;
    private final Address self;
    /** Peers by {@code host:port}: callers create them ({@link #connection}), the agent too (HELLO). */
    final ConcurrentHashMap<String, Peer> peers = new ConcurrentHashMap<>();
    private final TransportAgent agent;
    private final AgentGroup group;
    private final OneSidedWrites oneSided;
    private final AtomicBoolean closed = new AtomicBoolean();
    volatile boolean closing;
    private volatile String failure;
    private volatile Subscription udpSubscription;
    private volatile Subscription ipcSubscription;

    /**
     * Starts a manager: joins (or starts) this process's runtime for the configured driver, subscribes on
     * {@code host:port} (and on IPC), and starts running its agent.
     *
     * @param config where to listen and the {@code aeron.*} properties
     * @throws TransportException ({@code NETWORK}) if Aeron cannot start or bind
     * @throws IllegalArgumentException for a bad or unknown {@code aeron.*} property
     */
    public AeronConnectionManager(TransportConfig config) {
        Objects.requireNonNull(config, "config");
        this.settings = AeronSettings.from(config);
        this.name = config.name();
        this.defaultTimeout = config.defaultTimeout();
        this.reporter = new ErrorReporter(name, config.errorHandler());
        this.handshake = new Handshake(config.authSecret(), settings.authWindowMs);
        this.incarnation = handshake.newIncarnation();
        this.host = config.host();
        AeronRuntime rt = null;
        ManagerCounters cs = null;
        int stream = 0;
        Subscription udp = null;
        Subscription ipc = null;
        TransportAgent a;
        try {
            rt = AeronRuntime.acquire(settings);
            cs = new ManagerCounters(rt, name);
            a = new TransportAgent(this, rt.generation());
            TransportAgent ag = a;
            Aeron client = rt.client();
            String channel = "aeron:udp?endpoint=" + host + ":" + config.port() + "|so-rcvbuf=" + settings.socketBuffer
                    + "|rcv-wnd=" + settings.receiverWindow() + "|cc=" + settings.congestionControl;
            udp = client.addSubscription(channel, AeronSettings.STREAM_ID, image -> ag.onAvailable(image, false),
                    image -> ag.onUnavailable(image, false));
            this.port = resolvePort(udp, config.port());
            if (settings.ipc) {
                stream = reserveIpcStream();
                ipc = client.addSubscription(AeronSettings.IPC_CHANNEL, stream, image -> ag.onAvailable(image, true),
                        image -> ag.onUnavailable(image, true));
            }
        } catch (RuntimeException | Error e) {
            CloseHelper.quietCloseAll(ipc, udp);
            if (stream != 0) {
                IPC_STREAMS.remove(stream);
            }
            if (cs != null) {
                cs.close();
            }
            if (rt != null) {
                rt.release();
            }
            if (e instanceof IllegalArgumentException) {
                throw e;
            }
            throw new TransportException(ErrorCode.NETWORK, "aeron transport " + name + ": cannot start on "
                    + config.host() + ":" + config.port() + " (" + settings + "): " + e, e);
        }
        this.runtime = rt;
        this.counters = cs;
        this.ipcStream = stream;
        this.udpSubscription = udp;
        this.ipcSubscription = ipc;
        this.localAddress = Address.format(host, port, incarnation, stream != 0 ? rt.driverId() : null,
                stream);
        this.self = Address.parse(localAddress);
        this.agent = a;
        this.oneSided = OneSidedWrites.of(this, settings, handshake.authenticates(), reporter::report, defaultTimeout);
        this.group = rt.join(a);
        if (stream != 0 && group.doorbell() != null) {
            group.doorbell().register(stream); // peers of this host ring it (Doorbell); without it the agent parks
        }
    }

    private static int reserveIpcStream() {
        while (true) {
            int s = RANDOM.nextInt(Integer.MAX_VALUE - 0x10000) + 0x10000;
            if (s != AeronSettings.STREAM_ID && IPC_STREAMS.putIfAbsent(s, Boolean.TRUE) == null) {
                return s;
            }
        }
    }

    private static int resolvePort(Subscription sub, int configured) {
        if (configured != 0) {
            return configured;
        }
        // Aeron binds port 0 to a free port; the bound address appears once the driver has opened the socket.
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
        while (System.nanoTime() - deadline < 0) {
            List<String> bound = sub.localSocketAddresses();
            if (!bound.isEmpty()) {
                String s = bound.get(0);
                return Integer.parseInt(s.substring(s.lastIndexOf(':') + 1));
            }
            LockSupport.parkNanos(TimeUnit.MILLISECONDS.toNanos(1));
        }
        throw new IllegalStateException("the media driver did not report the bound port within 10 s");
    }

    @Override
    public String localAddress() {
        return localAddress;
    }

    @Override
    public int preferredPoolSpinMicros() {
        // As long as this transport's agents spin after work: a hop's completion on an agent then reaches a
        // request thread that is awake too. Two processes, one request in flight: p50 about halved (docs/benchmarks.md,
        // "Hand-offs to request pools"); UCX, whose progress thread needs the cores, keeps 0.
        return (int) TimeUnit.NANOSECONDS.toMicros(settings.spinNs);
    }

    @Override
    public Duration defaultTimeout() {
        return defaultTimeout;
    }

    @Override
    public Connection pollConnect(int tag, MemoryBuffer buffer, long offset, long length, Duration wait) {
        Objects.requireNonNull(wait, "wait");
        Peer p = receive(null, tag, buffer, offset, length, wait, true);
        return p == null ? null : p.connection;
    }

    @Override
    public Connection connection(String address) {
        Objects.requireNonNull(address, "address");
        Address a = parsed(address);
        ensureOpen();
        return peerFor(a).connection;
    }

    /**
     * One copy from a peer of this host: {@code aeron.sharedMemoryWrites} on with authenticated peers, and the peer
     * on this manager's driver or listening on this manager's host. The writer still proves the host per grant.
     */
    @Override
    public boolean oneCopyWritesFrom(String address) {
        Address a = parsed(Objects.requireNonNull(address, "address"));
        return oneSided.sharesMemory() && (ipcStreamTo(a) != 0 || a.host().equals(self.host()));
    }

    private Address parsed(String address) {
        Address a = parsedAddresses.get(address);
        if (a == null) {
            a = Address.parse(address); // throws on a bad address: nothing is remembered then
            if (parsedAddresses.size() >= MAX_PARSED_ADDRESSES) {
                parsedAddresses.clear();
            }
            parsedAddresses.put(address, a);
        }
        return a;
    }

    /** Most parsed peer addresses remembered (then forgotten all at once): a bound, not a working-set size. */
    private static final int MAX_PARSED_ADDRESSES = 4096;
    /**
     * Peer addresses as parsed ({@link Address} is immutable and parsing is a pure function of the text): the
     * control plane looks up its counterparts' connections per request, and parsing allocated ~70 B each time.
     */
    private final java.util.concurrent.ConcurrentHashMap<String, Address> parsedAddresses =
            new java.util.concurrent.ConcurrentHashMap<>();

    /** The live peer for an address, created when there is none (callers and the agent). */
    Peer peerFor(Address a) {
        while (true) {
            Peer p = peers.get(a.hostPort());
            if (p == null) {
                Peer created = new Peer(a.text(), this);
                p = peers.putIfAbsent(a.hostPort(), created);
                if (p == null) {
                    p = created; // its publication opens on first use, not now: a rank that looks up every
                                 // rank of the peer instance (getConnections) must not cost N^2 streams
                }
            }
            if (!p.lost) {
                return p;
            }
            peers.remove(a.hostPort(), p); // lost between our get and now
        }
    }

    @Override
    public RegisteredRegion register(MemoryBuffer memory) {
        Objects.requireNonNull(memory, "memory");
        ensureOpen();
        return oneSided.register(memory);
    }

    @Override
    public RegisteredRegion register(MemoryBuffer memory, java.util.Set<String> writers) {
        Objects.requireNonNull(memory, "memory");
        Objects.requireNonNull(writers, "writers");
        ensureOpen();
        return oneSided.register(memory, writers);
    }

    OneSidedWrites oneSided() {
        return oneSided;
    }

    @Override
    public boolean isRunning() {
        return !closed.get() && failure == null;
    }

    /** @return errors reported by background work so far (each also went to the configured error handler) */
    public long errorCount() {
        return reporter.count();
    }

    /** @return this manager's counters (monotonic counts and the early-buffer gauge), by name */
    public Map<String, Long> counters() {
        Map<String, Long> m = counters.snapshot(reporter);
        ManagerCounters.driverErrors(m, runtime.driverErrors());
        Doorbell bell = group.doorbell();
        if (bell != null) {
            m.put("doorbellWakes", bell.wakes.get()); // the agent group's, shared by its managers
            m.put("doorbellLocalWakes", bell.localWakes.get());
            m.put("doorbellTimeouts", bell.timeouts.get());
        }
        return m;
    }

    /** @return bytes of early messages held right now, their bookkeeping included (agent's last tick) */
    public long earlyBufferedBytes() {
        return counters.earlyBytes.get();
    }

    /** @return the effective settings */
    public AeronSettings settings() {
        return settings;
    }

    @Override
    public String toString() {
        return "AeronConnectionManager{" + name + " " + localAddress + (closed.get() ? " closed" : "") + "}";
    }

    // ------------------------------------------------------------------------------------------------------
    // Receiving (caller threads)

    Peer receive(Peer peer, int tag, MemoryBuffer buffer, long offset, long length, Duration timeout) {
        return receive(peer, tag, buffer, offset, length, timeout, false);
    }

    /**
     * Receives the next message of a tag from one peer, or from any peer when {@code peer} is null.
     *
     * @param poll true for {@link #pollConnect}: when nothing matched by the deadline, null instead of TIMEOUT; a
     *             message that matched but did not complete within the default timeout then fails with NETWORK
     * @return the peer that sent it, or null (poll only)
     */
    private Peer receive(Peer peer, int tag, MemoryBuffer buffer, long offset, long length, Duration timeout,
            boolean poll) {
        checkBuffer(buffer, offset, length);
        Objects.requireNonNull(timeout, "timeout");
        long deadline = deadline(timeout);
        ensureOpen();
        Op op = takeOp().reset(peer == null ? Op.RECV_ANY : Op.RECV, peer, tag, buffer.address() + offset, length);
        post(op);
        // A matched large message gets at least the default timeout to finish, whatever the poll's wait.
        long extended = poll ? Math.max(deadline, deadline(defaultTimeout)) : deadline;
        int st = await(op, deadline, extended);
        if (st == Op.CANCELLED) {
            if (poll) {
                return null;
            }
            throw new TransportException(ErrorCode.TIMEOUT, "aeron " + name + ": recv of tag " + tag + " (" + length
                    + " B) from " + (peer == null ? "any peer" : peer.address) + " timed out after "
                    + timeout.toMillis() + " ms" + Peer.flowNote(peer, tag, op.received, op.seq));
        }
        if (st == Op.FAILED && poll && op.failure.code() == ErrorCode.TIMEOUT
                && !(op.failure instanceof TransportClosedException)) {
            // A poll never reports TIMEOUT: a message that began arriving and stalled is a network failure.
            TransportException f = op.failure;
            op.abandoned = true;
            throw new TransportException(ErrorCode.NETWORK, f.getMessage(), f);
        }
        throwIfFailed(op);
        Peer from = op.peer;
        recycle(op);
        return from;
    }

    /**
     * Posts a receive from one peer whose end the agent reports through {@code done} ({@link Op#posted}); the
     * agent enforces its deadline in its duty cycle.
     */
    void receiveAsync(Peer peer, int tag, MemoryBuffer buffer, long offset, long length, Duration timeout,
                      RecvCompletion done) {
        checkBuffer(buffer, offset, length);
        Objects.requireNonNull(timeout, "timeout");
        Objects.requireNonNull(done, "done");
        long deadline = deadline(timeout);
        ensureOpen();
        Op op = Op.posted(peer, tag, buffer.address() + offset, length, deadline, done, reporter);
        while (!agent.commands.offer(op)) {
            if (agent.isRemoved()) {
                throw closedError("post");
            }
            Thread.yield(); // the queue is full: the agent drains it every duty cycle
        }
        if (agent.removalStarting() && op.casState(Op.QUEUED, Op.CANCELLED)) {
            // The agent's last drain may have run before our offer: the op is ours again, nothing was posted.
            throw closedError("post");
        }
        group.wake(); // nothing polls for a posted receive: the agent thread must see it
    }

    // ------------------------------------------------------------------------------------------------------
    // Ops and the command queue

    /** @return this thread's reusable op (a fresh one when the last went through a cancel) */
    Op takeOp() {
        Op op = OPS.get();
        if (op == null || op.abandoned || !op.isFinal()) {
            op = new Op();
            op.state = Op.DONE;
            OPS.set(op);
        }
        return op;
    }

    void recycle(Op op) {
        op.waiter = null;
        op.peer = null;
    }

    /** Hands an op to the agent. */
    void post(Op op) {
        while (!agent.commands.offer(op)) {
            if (agent.isRemoved()) {
                op.abandoned = true;
                throw closedError("post");
            }
            Thread.yield(); // the queue is full: the agent drains it every duty cycle
        }
        if (settings.callerPollNs == 0) {
            group.wake(); // polling, the caller drains the queue itself (and wakes the agent when it stops)
        }
    }

    /**
     * Waits for an op: polls for it itself ({@link #pollWhileWaiting}), or spins briefly, then parks in slices (the
     * agent unparks it when it completes).
     *
     * @param deadline  when to give up
     * @param extended  when to give up on an op that already matched a large message (RECEIVING)
     * @return the op's final state: DONE, FAILED or CANCELLED (the deadline passed and the agent let go of it)
     */
    int await(Op op, long deadline, long extended) {
        if (settings.callerPollNs > 0) {
            int st = pollWhileWaiting(op, deadline, extended);
            if (st >= 0) {
                return st;
            }
        }
        if (settings.callerSpinNs > 0) {
            // Yield rather than spin: on a small host the agent that completes the op may need this core.
            long spinUntil = System.nanoTime() + settings.callerSpinNs;
            while (!op.isFinal() && System.nanoTime() - spinUntil < 0) {
                Thread.yield();
            }
        }
        while (true) {
            int st = op.state;
            if (st == Op.DONE || st == Op.FAILED || st == Op.CANCELLED) {
                return st;
            }
            if (agent.isRemoved()) {
                // The agent is gone: it will never touch the op again.
                op.abandoned = true;
                if (!op.isFinal()) {
                    op.failure = closedError("wait");
                    op.state = Op.FAILED;
                }
                return op.state;
            }
            long now = System.nanoTime();
            long limit = st == Op.RECEIVING ? extended : deadline;
            long remaining = limit - now;
            if (remaining <= 0) {
                if (st == Op.QUEUED) {
                    seeOnce(op);
                    if (op.isFinal()) {
                        return op.state;
                    }
                }
                return withdraw(op);
            }
            LockSupport.parkNanos(this, Math.min(remaining, WAIT_SLICE_NS));
        }
    }

    /**
     * A wait that ended before the agent took its op (a zero-wait call does at once) lets the matcher see it once,
     * so a message that already arrived is taken: one duty cycle on this thread when no other thread runs one (even
     * with caller polling off), else a bounded wait for the one that does. Else a parked agent never saw the op.
     */
    private void seeOnce(Op op) {
        long until = System.nanoTime() + SEE_ONCE_NS;
        while (op.state == Op.QUEUED && System.nanoTime() - until < 0 && !agent.isRemoved()) {
            if (agent.tryDutyCycle() < 0) {
                Thread.yield();
            }
        }
    }

    /**
     * The caller-side poll ({@code aeron.callerPollMicros}): while its op is not final, the waiting thread runs the
     * manager's duty cycle itself when no other thread does (try-lock: the agent thread, or another waiting caller,
     * may hold it — then this one just checks again), so the message it waits for is read and copied into its
     * memory on this thread, with no hand-off to the agent and back. It stops once no work turned up for the poll
     * time (it then hands back to the agent thread and parks as before), at the op's deadline, or when the agent is
     * gone; the spin between cycles yields every few rounds, for the other threads of a small host.
     *
     * @return the op's final state, or -1 to go on waiting the parked way (the deadline is checked there)
     */
    private int pollWhileWaiting(Op op, long deadline, long extended) {
        long now = System.nanoTime();
        long idleSince = now;
        int spins = 0;
        while (true) {
            int st = op.state;
            if (st == Op.DONE || st == Op.FAILED || st == Op.CANCELLED) {
                return st;
            }
            long limit = st == Op.RECEIVING ? extended : deadline;
            if (limit - now <= 0 || agent.isRemoved()) {
                return -1;
            }
            if (now - idleSince >= settings.callerPollNs) {
                agent.handBack();
                group.wake();
                return -1;
            }
            int work = agent.tryDutyCycle();
            if (op.isFinal()) {
                if (work > 0) {
                    counters.callerCompleted.increment(); // (almost always) in this thread's own cycle
                }
                return op.state;
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
    }

    /**
     * Withdraws an op whose deadline passed and waits until the agent let go of it (it may complete meanwhile).
     *
     * @return DONE, FAILED or CANCELLED
     */
    int withdraw(Op op) {
        op.abandoned = true;
        if (op.casState(Op.QUEUED, Op.CANCELLED)) {
            return Op.CANCELLED; // the agent never took it: it drops it when it sees it
        }
        op.cancelRequested = true;
        while (!agent.commands.offer(op)) {
            if (agent.isRemoved()) {
                return finalOrClosed(op);
            }
            Thread.yield();
        }
        group.wake();
        long until = System.nanoTime() + CANCEL_ACK_NS;
        while (!op.isFinal()) {
            if (agent.isRemoved()) {
                return finalOrClosed(op);
            }
            if (System.nanoTime() - until > 0) {
                reporter.report(new IllegalStateException("aeron " + name + ": the agent did not acknowledge a"
                        + " cancel within 10 s"));
                return Op.CANCELLED;
            }
            LockSupport.parkNanos(this, TimeUnit.MILLISECONDS.toNanos(1));
        }
        return op.state;
    }

    private int finalOrClosed(Op op) {
        if (!op.isFinal()) {
            op.failure = closedError("wait");
            op.state = Op.FAILED;
        }
        return op.state;
    }

    void throwIfFailed(Op op) {
        if (op.state == Op.FAILED) {
            TransportException f = op.failure;
            recycle(op);
            throw rethrow(f);
        }
    }

    // ------------------------------------------------------------------------------------------------------
    // Close

    @Override
    public void close() {
        if (!closed.compareAndSet(false, true)) {
            return;
        }
        // One-sided writes first: revoking a region waits for the batches writing into it, over this transport.
        oneSided.close();
        closing = true;
        group.wake();
        long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(5);
        while (!agent.sweepDone() && !agent.isRemoved() && System.nanoTime() - until < 0) {
            LockSupport.parkNanos(TimeUnit.MILLISECONDS.toNanos(1));
        }
        // A send returns once its bytes are in the log buffer; let them reach the peers before we go.
        List<Peer> all = new ArrayList<>(peers.values());
        long drainDeadline = System.nanoTime() + Math.min(settings.peerTimeoutNs, TimeUnit.SECONDS.toNanos(5));
        for (Peer p : all) {
            p.connection.drain(drainDeadline);
        }
        if (!group.leave(agent, TimeUnit.SECONDS.toNanos(10))) {
            reporter.report(new IllegalStateException("aeron " + name + ": the agent did not stop within 10 s"));
        }
        runtime.leave(agent);
        if (ipcStream != 0 && group.doorbell() != null) {
            group.doorbell().unregister(ipcStream);
        }
        for (Peer p : all) {
            p.lost = true;
            p.lostReason = "the manager closed";
            p.connection.shutdown();
        }
        peers.clear();
        CloseHelper.quietCloseAll(ipcSubscription, udpSubscription);
        if (ipcStream != 0) {
            IPC_STREAMS.remove(ipcStream);
        }
        counters.close();
        runtime.release();
    }

    void ensureOpen() {
        if (closed.get()) {
            throw closedError("call");
        }
        String f = failure;
        if (f != null) {
            throw new TransportException(ErrorCode.NETWORK, "aeron transport " + name + " (" + localAddress
                    + ") stopped serving: " + f);
        }
    }

    boolean isClosed() {
        return closed.get();
    }

    TransportClosedException closedError(String what) {
        return new TransportClosedException("aeron transport " + name + " (" + localAddress + ") is closed (" + what
                + ")");
    }

    /** The agent gave up on the manager (the driver could not be reached again). */
    void fail(String why) {
        failure = why;
        reporter.report(new TransportException(ErrorCode.NETWORK, "aeron " + name + ": stopped serving: " + why));
    }

    // ------------------------------------------------------------------------------------------------------
    // Channels and subscriptions (agent and connections)

    Subscription subscription(boolean ipc) {
        return ipc ? ipcSubscription : udpSubscription;
    }

    void subscription(boolean ipc, Subscription s) {
        if (ipc) {
            ipcSubscription = s;
        } else {
            udpSubscription = s;
        }
    }

    /** The client closed: our subscriptions died with it. */
    void dropSubscriptions() {
        udpSubscription = null;
        ipcSubscription = null;
    }

    int ipcStream() {
        return ipcStream;
    }

    String udpChannel() {
        return "aeron:udp?endpoint=" + host + ":" + port + "|so-rcvbuf=" + settings.socketBuffer + "|rcv-wnd="
                + settings.receiverWindow() + "|cc=" + settings.congestionControl;
    }

    Address addressOf(Peer p) {
        return Address.parse(p.address);
    }

    /** @return the peer's IPC stream when it is on our driver and both of us listen on IPC, else 0 (UDP) */
    int ipcStreamTo(Address a) {
        if (ipcStream == 0 || a.driverId() == null || a.ipcStream() == 0) {
            return 0;
        }
        return a.driverId().equals(self.driverId()) ? a.ipcStream() : 0;
    }

    String ipcPublicationChannel() {
        return AeronSettings.IPC_CHANNEL + "?mtu=" + settings.mtu + "|term-length=" + settings.termLength
                + "|sparse=true";
    }

    String publicationChannel(Address a) {
        return "aeron:udp?endpoint=" + a.hostPort() + "|mtu=" + settings.mtu + "|term-length=" + settings.termLength
                + "|so-sndbuf=" + settings.socketBuffer + "|sparse=true";
    }

    TransportException peerLostError(Peer p, String what) {
        if (p.lostCode != ErrorCode.PEER_LOST) {
            return new TransportException(p.lostCode, "aeron " + name + ": " + what + " failed: peer "
                    + ErrorReporter.peerText(p.address) + " " + p.lostReason);
        }
        return new TransportException(ErrorCode.PEER_LOST, "aeron " + name + ": " + what + " failed: peer "
                + ErrorReporter.peerText(p.address) + " lost (" + p.lostReason + ")");
    }

    /** @return the media driver directory this manager uses (tests, benchmarks) */
    String driverDirectory() {
        return runtime.directory();
    }

    /** @return the UDP socket addresses the driver bound for this manager (tests) */
    List<String> boundAddresses() {
        Subscription s = udpSubscription;
        return s == null ? List.of() : s.localSocketAddresses();
    }

    /** @return live peers (tests: HELLOs must not leave peers behind) */
    int peerCount() {
        return peers.size();
    }

    /** @return whether this manager listens on IPC (tests) */
    boolean ipcEnabled() {
        return ipcStream != 0;
    }

    // ------------------------------------------------------------------------------------------------------
    // Helpers

    static void checkBuffer(MemoryBuffer buffer, long offset, long length) {
        Objects.requireNonNull(buffer, "buffer");
        if (buffer.kind() == MemoryKind.DEVICE) {
            throw new UnsupportedOperationException("the aeron transport cannot send or receive DEVICE memory"
                    + " (it does not declare DEVICE_MEMORY); stage it through host memory");
        }
        if (offset < 0 || length < 0 || offset > buffer.size() - length) {
            throw new IndexOutOfBoundsException("range [" + offset + ", +" + length + ") leaves a buffer of "
                    + buffer.size() + " B");
        }
    }

    static long deadline(Duration timeout) {
        long nanos;
        try {
            nanos = timeout.toNanos();
        } catch (ArithmeticException e) {
            nanos = Long.MAX_VALUE;
        }
        return System.nanoTime() + Math.max(0, Math.min(nanos, Long.MAX_VALUE / 4));
    }

    /** Re-creates a failure raised on another thread so the caller's stack shows up, keeping the original. */
    static TransportException rethrow(TransportException f) {
        if (f instanceof TransportClosedException) {
            return new TransportClosedException(f.getMessage());
        }
        return new TransportException(f.code(), f.getMessage(), f);
    }
}
