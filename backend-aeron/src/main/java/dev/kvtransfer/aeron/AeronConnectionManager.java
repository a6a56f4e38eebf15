package dev.kvtransfer.aeron;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.memory.MemoryKind;
import dev.kvtransfer.api.model.CommState;
import dev.kvtransfer.api.transport.Connection;
import dev.kvtransfer.api.transport.ConnectionManager;
import dev.kvtransfer.api.transport.TransportClosedException;
import dev.kvtransfer.api.transport.TransportConfig;
import dev.kvtransfer.api.transport.TransportException;
import io.aeron.Aeron;
import io.aeron.Image;
import io.aeron.Subscription;
import io.aeron.logbuffer.ControlledFragmentHandler;
import io.aeron.logbuffer.FrameDescriptor;
import io.aeron.logbuffer.Header;
import org.agrona.CloseHelper;
import org.agrona.DirectBuffer;
import org.agrona.UnsafeApi;
import org.agrona.collections.Int2ObjectHashMap;
import org.agrona.concurrent.IdleStrategy;

import java.lang.System.Logger.Level;
import java.nio.ByteOrder;
import java.time.Duration;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Queue;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.locks.LockSupport;

/**
 * One rank's Aeron endpoint: a UDP subscription on {@code host:port} (its {@link #localAddress()}), one
 * exclusive publication per peer it talks to, and a receive agent thread that demultiplexes every incoming
 * message by (peer, tag) and copies payload straight into the destination {@link MemoryBuffer}. Managers of one
 * process on the same media driver also listen on an {@code aeron:ipc} stream and reach each other through it
 * (property {@code aeron.ipc}, default true); the address stays the UDP {@code host:port}.
 *
 * <p>Protocol (see {@link Wire}): each publication starts with HELLO (the sender's listen address), which ties
 * the Aeron image (session) to a peer. Messages that fit one frame travel EAGER; if no receive is posted yet
 * they are kept off-heap per (peer, tag), bounded by {@code aeron.earlyBufferBytes} (beyond it the agent stops
 * consuming that peer's image, so Aeron back-pressures the sender). Larger messages use a rendezvous: RTS, the
 * receiver answers CTS once a matching receive is posted, then DATA chunks land directly at their offset, so
 * large payload is never buffered nor copied twice.
 *
 * <p>Thread-safe. Matching state is guarded by one monitor; payload copies happen outside it.
 */
public final class AeronConnectionManager implements ConnectionManager {
    private static final System.Logger LOG = System.getLogger(AeronConnectionManager.class.getName());
    /** Blocked callers re-check close, peer loss and their deadline at least this often. */
    private static final long WAIT_SLICE_NS = TimeUnit.MILLISECONDS.toNanos(50);
    private static final long CHECK_INTERVAL_NS = TimeUnit.MILLISECONDS.toNanos(100);
    private static final int FRAGMENT_LIMIT = 64;
    /**
     * Managers of this process reachable over IPC, by {@link #localAddress()}: a connection to an address found
     * here whose manager uses the same media driver directory publishes on {@code aeron:ipc} to that manager's
     * IPC stream instead of UDP. Only immutable endpoints go in, never a manager under construction.
     */
    private static final java.util.concurrent.ConcurrentHashMap<String, IpcEndpoint> IPC_ENDPOINTS =
            new java.util.concurrent.ConcurrentHashMap<>();
    /** Image keys: which subscription an image belongs to, in the upper half (session ids may coincide). */
    private static final long UDP_IMAGE = 0L;
    private static final long IPC_IMAGE = 1L << 32;

    // Receive operation states.
    static final int POSTED = 0;
    static final int RTS_MATCHED = 1;
    static final int RECEIVING = 2;
    static final int DONE = 3;
    static final int FAILED = 4;
    // Send operation states.
    static final int WAITING = 0;
    static final int CLEARED = 1;
    static final int REJECTED = 2;

    final AeronSettings settings;
    final String name;
    private final Duration defaultTimeout;
    private final dev.kvtransfer.api.ErrorHandler errorHandler;
    private final EmbeddedDriver.Lease lease;
    final Aeron aeron;
    private final Subscription subscription;
    private final String localAddress;
    /** The IPC subscription for managers of this process on the same driver; null when IPC is off. */
    private final Subscription ipcSubscription;
    private final IpcEndpoint ipcEndpoint;
    private final Thread agentThread;
    private final AtomicBoolean closed = new AtomicBoolean();
    private volatile boolean running = true;

    /** Guards every field below marked "lock" and the matching state inside peers and operations. */
    final Object lock = new Object();
    private final Map<String, Peer> peers = new HashMap<>();          // lock: live peers by address
    private final List<Peer> allPeers = new ArrayList<>();            // lock: every peer ever seen, for close
    private final Int2ObjectHashMap<ArrayDeque<RecvOp>> anyPosted = new Int2ObjectHashMap<>(); // lock
    private long earlyBytes;                                          // lock
    private long arrivalStamp;                                        // lock

    // Receive agent only.
    private final org.agrona.collections.Long2ObjectHashMap<ImageState> images =
            new org.agrona.collections.Long2ObjectHashMap<>(); // by image key (subscription | session id)
    private final Queue<Long> unavailableImages = new ConcurrentLinkedQueue<>();
    private final ControlledFragmentHandler handler = (b, o, l, h) -> onFragment(UDP_IMAGE, b, o, l, h);
    private final ControlledFragmentHandler ipcHandler = (b, o, l, h) -> onFragment(IPC_IMAGE, b, o, l, h);

    private final AtomicLong errorCount = new AtomicLong();
    private final AtomicLong droppedChunks = new AtomicLong();

    /**
     * Starts a manager: takes a lease on the embedded driver (or connects to {@code aeron.dir}), subscribes on
     * {@code host:port} and starts the receive agent.
     *
     * @param config where to listen and the {@code aeron.*} properties
     * @throws TransportException ({@code NETWORK}) if Aeron cannot start or bind
     */
    public AeronConnectionManager(TransportConfig config) {
        Objects.requireNonNull(config, "config");
        this.settings = AeronSettings.from(config);
        this.name = config.name();
        this.defaultTimeout = config.defaultTimeout();
        this.errorHandler = config.errorHandler();
        EmbeddedDriver.Lease l = null;
        Aeron a = null;
        String address = null;
        IpcEndpoint ipc = null;
        try {
            l = settings.externalDir == null ? EmbeddedDriver.acquire(settings) : null;
            String dir = l != null ? l.directory() : settings.externalDir;
            a = Aeron.connect(new Aeron.Context()
                    .aeronDirectoryName(dir)
                    .clientName("kvtransfer-" + name)
                    .errorHandler(this::onError));
            String channel = "aeron:udp?endpoint=" + config.host() + ":" + config.port()
                    + "|so-rcvbuf=" + settings.socketBuffer + "|rcv-wnd=" + settings.receiverWindow();
            Subscription sub = a.addSubscription(channel, AeronSettings.STREAM_ID, null,
                    image -> onUnavailableImage(UDP_IMAGE, image));
            this.subscription = sub;
            int port = resolvePort(sub, config.port());
            address = config.host() + ":" + port;
            this.localAddress = address;
            ipc = settings.ipc ? IpcEndpoint.reserve(address, dir, AeronSettings.IPC_STREAM_BASE + port) : null;
            this.ipcEndpoint = ipc;
            this.ipcSubscription = ipc == null ? null : a.addSubscription(AeronSettings.IPC_CHANNEL, ipc.streamId(),
                    null, image -> onUnavailableImage(IPC_IMAGE, image));
        } catch (RuntimeException | Error e) {
            if (ipc != null) {
                IPC_ENDPOINTS.remove(address, ipc);
            }
            CloseHelper.quietClose(a);
            CloseHelper.quietClose(l);
            throw new TransportException(ErrorCode.NETWORK, "aeron transport " + name + ": cannot start on "
                    + config.host() + ":" + config.port() + " (" + settings + "): " + e, e);
        }
        this.lease = l;
        this.aeron = a;
        this.agentThread = new Thread(this::runAgent, "kvtransfer-aeron-recv-" + name);
        agentThread.setDaemon(true);
        agentThread.start();
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
    public Duration defaultTimeout() {
        return defaultTimeout;
    }

    @Override
    public Connection pollConnect(int tag, MemoryBuffer buffer, long offset, long length, Duration wait) {
        Objects.requireNonNull(wait, "wait");
        Peer p = receive(null, tag, buffer, offset, length, wait, true);
        return p == null ? null : connectionOf(p);
    }

    @Override
    public Connection connection(String address) {
        Objects.requireNonNull(address, "address");
        if (address.lastIndexOf(':') <= 0) {
            throw new IllegalArgumentException("address = '" + address + "': expected host:port");
        }
        Peer p;
        synchronized (lock) {
            ensureOpen();
            p = peers.get(address);
            if (p == null) {
                p = newPeer(address);
            }
        }
        return connectionOf(p);
    }

    @Override
    public boolean isRunning() {
        return !closed.get();
    }

    /** @return errors reported by background threads so far (they are logged, never dropped) */
    public long errorCount() {
        return errorCount.get();
    }

    /** @return bytes of early small messages held off-heap right now (bounded by aeron.earlyBufferBytes) */
    public long earlyBufferedBytes() {
        synchronized (lock) {
            return earlyBytes;
        }
    }

    Duration settingsTimeout() {
        return defaultTimeout;
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
    // Close

    @Override
    public void close() {
        if (!closed.compareAndSet(false, true)) {
            return;
        }
        if (ipcEndpoint != null) {
            IPC_ENDPOINTS.remove(localAddress, ipcEndpoint); // new connections to us use UDP from now on
        }
        List<AeronConnection> connections = new ArrayList<>();
        synchronized (lock) {
            String why = "aeron transport " + name + " (" + localAddress + ") closed";
            for (Peer p : allPeers) {
                failPeerOps(p, () -> new TransportClosedException(why)); // wakes them; the agent stops writing
                if (p.connection != null) {
                    connections.add(p.connection);
                }
            }
            for (ArrayDeque<RecvOp> q : anyPosted.values()) {
                for (RecvOp op : q) {
                    op.fail(new TransportClosedException(why));
                }
                q.clear();
            }
            peers.clear();
        }
        // A send returns once its bytes are in the log buffer; let them reach the peers before the driver goes.
        long drainDeadline = System.nanoTime() + Math.min(settings.peerTimeoutNs, TimeUnit.SECONDS.toNanos(5));
        boolean recentlyActive = false;
        for (AeronConnection c : connections) {
            recentlyActive |= c.drain(drainDeadline);
        }
        running = false;
        // The agent parks at most ~1 ms between duty cycles; once it has stopped nothing writes user memory.
        try {
            agentThread.join(TimeUnit.SECONDS.toMillis(10));
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
        if (agentThread.isAlive()) {
            onError(new IllegalStateException("receive agent of " + name + " did not stop within 10 s"));
        }
        synchronized (lock) {
            for (Peer p : allPeers) {
                for (Arrival a : p.allArrivals()) {
                    freeArrival(a);
                }
                p.tags.clear();
            }
        }
        for (AeronConnection c : connections) {
            c.shutdown();
        }
        if (recentlyActive) {
            // Closed publications end with an end-of-stream frame on the next heartbeat (100 ms); the peer then
            // drains what it holds before dropping the stream, instead of waiting out the liveness timeout.
            LockSupport.parkNanos(TimeUnit.MILLISECONDS.toNanos(150));
        }
        CloseHelper.quietClose(ipcSubscription);
        CloseHelper.quietClose(subscription);
        CloseHelper.quietClose(aeron);
        CloseHelper.quietClose(lease);
    }

    void ensureOpen() {
        if (closed.get()) {
            throw new TransportClosedException("aeron transport " + name + " (" + localAddress + ") is closed");
        }
    }

    boolean isClosed() {
        return closed.get();
    }

    // ------------------------------------------------------------------------------------------------------
    // Receiving (caller threads)

    /**
     * Receives the next message of a tag from one peer, or from any peer when {@code peer} is null.
     *
     * @return the peer that sent it
     */
    Peer receive(Peer peer, int tag, MemoryBuffer buffer, long offset, long length, Duration timeout) {
        return receive(peer, tag, buffer, offset, length, timeout, false);
    }

    /**
     * @param poll true for {@link #pollConnect}: when nothing matched by the deadline, null instead of TIMEOUT; a
     *             message that matched but did not complete in time then fails with NETWORK
     */
    private Peer receive(Peer peer, int tag, MemoryBuffer buffer, long offset, long length, Duration timeout,
            boolean poll) {
        checkBuffer(buffer, offset, length);
        Objects.requireNonNull(timeout, "timeout");
        long deadline = deadline(timeout);
        RecvOp op = new RecvOp(tag, buffer.address() + offset, length, Thread.currentThread());
        Arrival arrival = null;
        synchronized (lock) {
            ensureOpen();
            if (peer != null) {
                TagQueue q = peer.tags.get(tag);
                arrival = q == null ? null : q.arrivals.pollFirst();
                if (arrival == null) {
                    if (peer.lost) {
                        throw peerLostError(peer, "recv of tag " + tag);
                    }
                    peer.queue(tag).posted.addLast(op);
                }
                op.peer = peer;
            } else {
                Peer best = null;
                long bestStamp = Long.MAX_VALUE;
                for (Peer p : peers.values()) {
                    TagQueue q = p.tags.get(tag);
                    Arrival head = q == null ? null : q.arrivals.peekFirst();
                    if (head != null && head.stamp < bestStamp) {
                        best = p;
                        bestStamp = head.stamp;
                    }
                }
                if (best != null) {
                    arrival = best.tags.get(tag).arrivals.pollFirst();
                    op.peer = best;
                } else {
                    anyPosted.computeIfAbsent(tag, t -> new ArrayDeque<>()).addLast(op);
                }
            }
        }
        if (arrival != null) {
            return consumeArrival(op, arrival, poll ? Math.max(deadline, deadline(defaultTimeout)) : deadline, poll);
        }
        while (true) {
            int st = op.state;
            if (st == DONE) {
                return op.peer;
            }
            if (st == FAILED) {
                throw rethrow(op.failure);
            }
            if (st == RTS_MATCHED) {
                return rendezvous(op, poll ? Math.max(deadline, deadline(defaultTimeout)) : deadline, poll);
            }
            long remaining = deadline - System.nanoTime();
            if (remaining <= 0) {
                synchronized (lock) {
                    if (op.state == POSTED) {
                        if (peer != null) {
                            peer.queue(tag).posted.remove(op);
                        } else {
                            ArrayDeque<RecvOp> q = anyPosted.get(tag);
                            if (q != null) {
                                q.remove(op);
                            }
                        }
                        if (poll) {
                            return null;
                        }
                        throw new TransportException(ErrorCode.TIMEOUT, "aeron " + name + ": recv of tag " + tag
                                + " (" + length + " B) from " + (peer == null ? "any peer" : peer.address)
                                + " timed out after " + timeout.toMillis() + " ms");
                    }
                }
                continue;
            }
            LockSupport.parkNanos(this, Math.min(remaining, WAIT_SLICE_NS));
        }
    }

    private Peer consumeArrival(RecvOp op, Arrival a, long deadline, boolean poll) {
        if (a.type == Wire.EAGER) {
            try {
                if (a.length != op.length) {
                    throw malformed(op, a.length);
                }
                if (a.length > 0) {
                    UnsafeApi.copyMemory(null, a.staging, null, op.address, a.length);
                }
                return op.peer;
            } finally {
                synchronized (lock) {
                    freeArrival(a);
                }
            }
        }
        op.seq = a.seq;
        op.rtsLength = a.length;
        return rendezvous(op, deadline, poll);
    }

    /** The receive side of a large message: answer CTS (or REJECT), then wait until the data has landed. */
    private Peer rendezvous(RecvOp op, long deadline, boolean poll) {
        Peer p = op.peer;
        AeronConnection reply = connectionOf(p);
        if (op.rtsLength != op.length) {
            try {
                reply.sendControl(Wire.REJECT, op.tag, op.seq, deadline);
            } catch (TransportException e) {
                LOG.log(Level.DEBUG, "could not tell " + p.address + " about the length mismatch", e);
            }
            throw malformed(op, op.rtsLength);
        }
        synchronized (lock) {
            ensureOpen();
            if (p.lost) {
                throw peerLostError(p, "recv of tag " + op.tag);
            }
            op.state = RECEIVING;
            p.activeLarge.put(op.seq, op);
        }
        try {
            reply.sendControl(Wire.CTS, op.tag, op.seq, deadline);
        } catch (TransportException e) {
            cancelActive(op);
            throw e;
        }
        while (true) {
            int st = op.state;
            if (st == DONE) {
                return p;
            }
            if (st == FAILED) {
                throw rethrow(op.failure);
            }
            long remaining = deadline - System.nanoTime();
            if (remaining <= 0) {
                if (cancelActive(op)) {
                    return p;
                }
                // A poll never reports TIMEOUT: a message that began arriving and stalled is a network failure.
                throw new TransportException(poll ? ErrorCode.NETWORK : ErrorCode.TIMEOUT, "aeron " + name
                        + ": recv of tag " + op.tag + " (" + op.length + " B) from " + p.address + " timed out with "
                        + op.received + " B received");
            }
            LockSupport.parkNanos(this, Math.min(remaining, WAIT_SLICE_NS));
        }
    }

    /**
     * Withdraws a receive whose data may be arriving: after this the agent never writes its memory again.
     *
     * @return true when it had completed after all
     */
    private boolean cancelActive(RecvOp op) {
        op.shutGate();
        synchronized (lock) {
            op.peer.activeLarge.remove(op.seq);
            if (op.state == DONE) {
                return true;
            }
            if (op.state != FAILED) {
                op.state = FAILED;
            }
            return false;
        }
    }

    // ------------------------------------------------------------------------------------------------------
    // Sending support (called by AeronConnection)

    SendOp registerSend(Peer p, long seq) {
        SendOp s = new SendOp(seq, Thread.currentThread());
        synchronized (lock) {
            ensureOpen();
            if (p.lost) {
                throw peerLostError(p, "send");
            }
            p.awaitingCts.put(seq, s);
        }
        return s;
    }

    void unregisterSend(Peer p, SendOp s) {
        synchronized (lock) {
            p.awaitingCts.remove(s.seq, s);
        }
    }

    /** Waits for the receiver's CTS; returns normally when cleared. */
    void awaitClear(Peer p, SendOp s, int tag, long length, long deadline) {
        while (true) {
            int st = s.state;
            if (st == CLEARED) {
                return;
            }
            if (st == REJECTED) {
                throw new TransportException(ErrorCode.MALFORMED, "aeron " + name + ": " + p.address
                        + " posted a receive of another length for tag " + tag + " (" + length + " B sent)");
            }
            if (st == FAILED) {
                throw rethrow(s.failure);
            }
            long remaining = deadline - System.nanoTime();
            if (remaining <= 0) {
                synchronized (lock) {
                    if (s.state == WAITING) {
                        p.awaitingCts.remove(s.seq, s);
                        throw new TransportException(ErrorCode.TIMEOUT, "aeron " + name + ": send of tag " + tag
                                + " (" + length + " B) to " + p.address + " timed out waiting for the receiver to"
                                + " post a matching recv");
                    }
                }
                continue;
            }
            LockSupport.parkNanos(this, Math.min(remaining, WAIT_SLICE_NS));
        }
    }

    AeronConnection connectionOf(Peer p) {
        AeronConnection c;
        boolean created = false;
        synchronized (lock) {
            if (p.connection == null) {
                p.connection = new AeronConnection(this, p);
                created = true;
            }
            c = p.connection;
        }
        if (created) {
            c.open(); // outside the lock: it waits for the driver's answer (about a millisecond)
        }
        return c;
    }

    /**
     * The IPC stream to publish on for a peer: set when the peer's manager lives in this process on the same
     * media driver and both have IPC on.
     *
     * @return the peer's IPC stream id, or -1 for UDP
     */
    int ipcStreamOf(String address) {
        if (ipcEndpoint == null) {
            return -1;
        }
        IpcEndpoint e = IPC_ENDPOINTS.get(address);
        return e != null && e.directory().equals(ipcEndpoint.directory()) ? e.streamId() : -1;
    }

    String ipcPublicationChannel() {
        return AeronSettings.IPC_CHANNEL + "?mtu=" + settings.ipcMtu() + "|term-length=" + settings.termLength
                + "|sparse=true";
    }

    /** @return whether this manager listens on IPC for managers of this process (tests) */
    boolean ipcEnabled() {
        return ipcEndpoint != null;
    }

    String publicationChannel(String address) {
        return "aeron:udp?endpoint=" + address + "|mtu=" + settings.mtu + "|term-length=" + settings.termLength
                + "|so-sndbuf=" + settings.socketBuffer + "|sparse=true";
    }

    TransportException peerLostError(Peer p, String what) {
        return new TransportException(ErrorCode.PEER_LOST, "aeron " + name + ": " + what + " failed: peer "
                + p.address + " lost (" + p.lostReason + ")");
    }

    // ------------------------------------------------------------------------------------------------------
    // Receive agent

    private void runAgent() {
        IdleStrategy idle = settings.newIdleStrategy();
        long nextCheck = System.nanoTime();
        while (running) {
            int work = 0;
            try {
                work += subscription.controlledPoll(handler, FRAGMENT_LIMIT);
                if (ipcSubscription != null) {
                    work += ipcSubscription.controlledPoll(ipcHandler, FRAGMENT_LIMIT);
                }
                work += drainUnavailableImages();
                long now = System.nanoTime();
                if (now - nextCheck >= 0) {
                    nextCheck = now + CHECK_INTERVAL_NS;
                    work += checkPublications();
                }
            } catch (Throwable t) {
                onError(t);
            }
            idle.idle(work);
        }
    }

    private void onUnavailableImage(long source, Image image) {
        // Called on the Aeron client conductor thread; the agent owns the image table.
        unavailableImages.add(imageKey(source, image.sessionId()));
    }

    /** Images of the UDP and the IPC subscription are kept apart: their session ids may coincide. */
    private static long imageKey(long source, int sessionId) {
        return source | (sessionId & 0xFFFF_FFFFL);
    }

    private int drainUnavailableImages() {
        int n = 0;
        Long key;
        while ((key = unavailableImages.poll()) != null) {
            n++;
            ImageState img = images.remove(key.longValue());
            if (img != null && img.peer != null) {
                synchronized (lock) {
                    img.peer.liveImages--;
                }
                peerLost(img.peer, "its stream went away: the process closed or sent nothing for "
                        + TimeUnit.NANOSECONDS.toMillis(settings.peerTimeoutNs) + " ms");
            }
        }
        return n;
    }

    private int checkPublications() {
        List<AeronConnection> snapshot = new ArrayList<>();
        synchronized (lock) {
            for (Peer p : peers.values()) {
                // A peer whose stream still reaches us is alive; image liveness covers it. The publication check
                // is for peers that never send (and, under load, a busy driver can delay status messages).
                if (p.connection != null && p.liveImages == 0) {
                    snapshot.add(p.connection);
                }
            }
        }
        int n = 0;
        for (AeronConnection c : snapshot) {
            if (c.lostConnection()) {
                n++;
                peerLost(c.peer, "no status message (it is not there, or stopped) for "
                        + TimeUnit.NANOSECONDS.toMillis(settings.peerTimeoutNs) + " ms");
            }
        }
        return n;
    }

    private void peerLost(Peer p, String reason) {
        AeronConnection c;
        synchronized (lock) {
            if (p.lost) {
                return;
            }
            p.lost = true;
            p.lostReason = reason;
            if (peers.get(p.address) == p) {
                peers.remove(p.address);
            }
            failPeerOps(p, () -> peerLostError(p, "transfer"));
            c = p.connection;
        }
        LOG.log(Level.INFO, "aeron " + name + ": peer " + p.address + " lost: " + reason);
        if (c != null) {
            c.shutdown();
        }
    }

    /** Fails every operation waiting on a peer (caller holds the lock). Early eager messages stay readable. */
    private void failPeerOps(Peer p, java.util.function.Supplier<TransportException> why) {
        for (TagQueue q : p.tags.values()) {
            for (RecvOp op : q.posted) {
                op.fail(why.get());
            }
            q.posted.clear();
        }
        for (RecvOp op : p.activeLarge.values()) {
            op.shutGate();
            op.fail(why.get());
        }
        p.activeLarge.clear();
        for (SendOp s : p.awaitingCts.values()) {
            s.fail(why.get());
        }
        p.awaitingCts.clear();
    }

    private ControlledFragmentHandler.Action onFragment(long source, DirectBuffer buffer, int offset, int length,
            Header header) {
        int sessionId = header.sessionId();
        long key = imageKey(source, sessionId);
        ImageState img = images.get(key);
        if (img == null) {
            img = new ImageState();
            images.put(key, img);
        }
        byte flags = header.flags();
        boolean end = (flags & FrameDescriptor.END_FRAG_FLAG) != 0;
        if ((flags & FrameDescriptor.BEGIN_FRAG_FLAG) == 0) {
            continueData(img, buffer, offset, length, end); // only DATA chunks span several frames
            return ControlledFragmentHandler.Action.CONTINUE;
        }
        if (length < Wire.HEADER_LENGTH) {
            onError(new IllegalStateException("aeron " + name + ": frame of " + length + " B from session "
                    + sessionId + " is shorter than our header"));
            return ControlledFragmentHandler.Action.CONTINUE;
        }
        int type = buffer.getInt(offset + Wire.TYPE, ByteOrder.LITTLE_ENDIAN);
        int tag = buffer.getInt(offset + Wire.TAG, ByteOrder.LITTLE_ENDIAN);
        long seq = buffer.getLong(offset + Wire.SEQ, ByteOrder.LITTLE_ENDIAN);
        long value = buffer.getLong(offset + Wire.VALUE, ByteOrder.LITTLE_ENDIAN);
        if (type == Wire.DATA) {
            beginData(img, seq, value, buffer, offset + Wire.HEADER_LENGTH, length - Wire.HEADER_LENGTH, end);
            return ControlledFragmentHandler.Action.CONTINUE;
        }
        if (type == Wire.HELLO) {
            onHello(img, buffer.getStringWithoutLengthUtf8(offset + Wire.HEADER_LENGTH, (int) value));
            return ControlledFragmentHandler.Action.CONTINUE;
        }
        Peer p = img.peer;
        if (p == null || !end) {
            onError(new IllegalStateException("aeron " + name + ": " + Wire.typeName(type) + " from session "
                    + sessionId + (p == null ? " before its HELLO" : " spans several frames")));
            return ControlledFragmentHandler.Action.CONTINUE;
        }
        switch (type) {
            case Wire.EAGER:
                return onEager(p, tag, seq, buffer, offset + Wire.HEADER_LENGTH, length - Wire.HEADER_LENGTH);
            case Wire.RTS:
                onRts(p, tag, seq, value);
                break;
            case Wire.CTS:
            case Wire.REJECT:
                onClear(p, seq, type == Wire.CTS);
                break;
            case Wire.CANCEL:
                onCancel(p, tag, seq);
                break;
            default:
                onError(new IllegalStateException("aeron " + name + ": unknown message type " + type + " from "
                        + p.address));
        }
        return ControlledFragmentHandler.Action.CONTINUE;
    }

    private void onHello(ImageState img, String address) {
        synchronized (lock) {
            Peer p = peers.get(address);
            if (p == null) {
                p = newPeer(address);
            }
            img.peer = p;
            p.liveImages++;
        }
    }

    private Peer newPeer(String address) {
        Peer p = new Peer(address);
        peers.put(address, p);
        allPeers.add(p);
        return p;
    }

    private RecvOp takePosted(Peer p, TagQueue q, int tag) {
        RecvOp op = q.posted.pollFirst();
        if (op == null) {
            ArrayDeque<RecvOp> any = anyPosted.get(tag);
            if (any != null) {
                op = any.pollFirst();
                if (op != null) {
                    op.peer = p;
                }
            }
        }
        return op;
    }

    private ControlledFragmentHandler.Action onEager(Peer p, int tag, long seq, DirectBuffer buffer, int offset,
            int length) {
        synchronized (lock) {
            TagQueue q = p.queue(tag);
            if (q.arrivals.isEmpty()) {
                RecvOp op = takePosted(p, q, tag);
                if (op != null) {
                    if (length != op.length) {
                        op.fail(malformed(op, length));
                    } else {
                        if (length > 0) {
                            UnsafeApi.copyMemory(buffer.byteArray(), buffer.addressOffset() + offset, null, op.address,
                                    length);
                        }
                        op.state = DONE;
                        LockSupport.unpark(op.waiter);
                    }
                    return ControlledFragmentHandler.Action.CONTINUE;
                }
            }
            if (length > 0 && earlyBytes + length > settings.earlyBufferBytes) {
                // Bounded: stop consuming this peer's image until receives drain the early buffer; Aeron's flow
                // control then back-pressures the sender.
                return ControlledFragmentHandler.Action.ABORT;
            }
            long staging = 0;
            if (length > 0) {
                staging = UnsafeApi.allocateMemory(length);
                UnsafeApi.copyMemory(buffer.byteArray(), buffer.addressOffset() + offset, null, staging, length);
                earlyBytes += length;
            }
            q.arrivals.addLast(new Arrival(Wire.EAGER, seq, length, staging, ++arrivalStamp));
        }
        return ControlledFragmentHandler.Action.CONTINUE;
    }

    private void onRts(Peer p, int tag, long seq, long length) {
        synchronized (lock) {
            TagQueue q = p.queue(tag);
            if (q.arrivals.isEmpty()) {
                RecvOp op = takePosted(p, q, tag);
                if (op != null) {
                    op.seq = seq;
                    op.rtsLength = length;
                    op.state = RTS_MATCHED;
                    LockSupport.unpark(op.waiter);
                    return;
                }
            }
            q.arrivals.addLast(new Arrival(Wire.RTS, seq, length, 0, ++arrivalStamp));
        }
    }

    private void onClear(Peer p, long seq, boolean cts) {
        synchronized (lock) {
            SendOp s = p.awaitingCts.remove(seq);
            if (s != null) {
                s.state = cts ? CLEARED : REJECTED;
                LockSupport.unpark(s.waiter);
            }
        }
    }

    private void onCancel(Peer p, int tag, long seq) {
        synchronized (lock) {
            TagQueue q = p.tags.get(tag);
            if (q != null) {
                for (Iterator<Arrival> it = q.arrivals.iterator(); it.hasNext(); ) {
                    Arrival a = it.next();
                    if (a.type == Wire.RTS && a.seq == seq) {
                        it.remove();
                        return;
                    }
                }
            }
            RecvOp op = p.activeLarge.remove(seq);
            if (op != null) {
                op.shutGate();
                op.fail(new TransportException(ErrorCode.TIMEOUT, "aeron " + name + ": " + p.address
                        + " gave up sending tag " + tag + " (its deadline passed)"));
            }
        }
    }

    private void beginData(ImageState img, long seq, long chunkOffset, DirectBuffer buffer, int offset, int length,
            boolean end) {
        RecvOp op = null;
        Peer p = img.peer;
        if (p != null) {
            synchronized (lock) {
                op = p.activeLarge.get(seq);
            }
        }
        img.dataOp = op;
        img.dataPos = chunkOffset;
        if (op == null) {
            droppedChunks.incrementAndGet(); // its receive timed out or failed: the bytes go nowhere
        }
        continueData(img, buffer, offset, length, end);
    }

    private void continueData(ImageState img, DirectBuffer buffer, int offset, int length, boolean end) {
        RecvOp op = img.dataOp;
        if (op == null) {
            return;
        }
        if (img.dataPos < 0 || img.dataPos + length > op.length) {
            img.dataOp = null;
            synchronized (lock) {
                op.peer.activeLarge.remove(op.seq);
                op.shutGate();
                op.fail(new TransportException(ErrorCode.MALFORMED, "aeron " + name + ": data of tag " + op.tag
                        + " from " + op.peer.address + " at offset " + img.dataPos + " (+" + length
                        + " B) exceeds the message length " + op.length));
            }
            return;
        }
        if (!op.openGate()) {
            img.dataOp = null; // withdrawn by its caller
            return;
        }
        try {
            UnsafeApi.copyMemory(buffer.byteArray(), buffer.addressOffset() + offset, null, op.address + img.dataPos,
                    length);
        } finally {
            op.releaseGate();
        }
        img.dataPos += length;
        op.received += length;
        if (op.received == op.length) {
            img.dataOp = null;
            synchronized (lock) {
                op.peer.activeLarge.remove(op.seq);
                if (op.state == RECEIVING) {
                    op.state = DONE;
                }
            }
            LockSupport.unpark(op.waiter);
        } else if (end) {
            img.dataOp = null;
        }
    }

    void onError(Throwable t) {
        errorCount.incrementAndGet();
        try {
            errorHandler.onError(t);
        } catch (RuntimeException e) {
            LOG.log(Level.WARNING, "aeron " + name + ": the error handler threw", e);
        }
        LOG.log(Level.WARNING, "aeron " + name + ": background error", t);
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

    private TransportException malformed(RecvOp op, long actual) {
        return new TransportException(ErrorCode.MALFORMED, "aeron " + name + ": message of tag " + op.tag + " from "
                + (op.peer == null ? "?" : op.peer.address) + " has " + actual + " B, the recv expected "
                + op.length + " B");
    }

    /** Re-creates a failure raised on another thread so the caller's stack shows up, keeping the original. */
    static TransportException rethrow(TransportException f) {
        if (f instanceof TransportClosedException) {
            return new TransportClosedException(f.getMessage());
        }
        return new TransportException(f.code(), f.getMessage(), f);
    }

    private void freeArrival(Arrival a) {
        if (a.staging != 0) {
            UnsafeApi.freeMemory(a.staging);
            a.staging = 0;
            earlyBytes -= a.length;
        }
    }

    // ------------------------------------------------------------------------------------------------------
    // State classes

    /** A peer rank, known by its listen address; inbound (HELLO) and outbound (connection) meet here. */
    static final class Peer {
        final String address;
        final Int2ObjectHashMap<TagQueue> tags = new Int2ObjectHashMap<>();
        final org.agrona.collections.Long2ObjectHashMap<RecvOp> activeLarge =
                new org.agrona.collections.Long2ObjectHashMap<>();
        final org.agrona.collections.Long2ObjectHashMap<SendOp> awaitingCts =
                new org.agrona.collections.Long2ObjectHashMap<>();
        AeronConnection connection;
        int liveImages; // lock: images (streams from this peer to us) still available
        volatile boolean lost;
        volatile String lostReason;

        Peer(String address) {
            this.address = address;
        }

        TagQueue queue(int tag) {
            TagQueue q = tags.get(tag);
            if (q == null) {
                q = new TagQueue();
                tags.put(tag, q);
            }
            return q;
        }

        List<Arrival> allArrivals() {
            List<Arrival> out = new ArrayList<>();
            for (TagQueue q : tags.values()) {
                out.addAll(q.arrivals);
            }
            return out;
        }
    }

    /** Per (peer, tag): messages that came before their receive, and receives waiting for a message. */
    static final class TagQueue {
        final ArrayDeque<Arrival> arrivals = new ArrayDeque<>();
        final ArrayDeque<RecvOp> posted = new ArrayDeque<>();
    }

    /** A message that arrived before its receive: a whole small one (off-heap copy) or a large one's RTS. */
    static final class Arrival {
        final int type;
        final long seq;
        final long length;
        long staging;
        final long stamp;

        Arrival(int type, long seq, long length, long staging, long stamp) {
            this.type = type;
            this.seq = seq;
            this.length = length;
            this.staging = staging;
            this.stamp = stamp;
        }
    }

    /** A posted receive. {@code gate} keeps the agent from writing memory its caller has given up. */
    static final class RecvOp {
        final int tag;
        final long address;
        final long length;
        final Thread waiter;
        volatile Peer peer;
        volatile int state = POSTED;
        volatile TransportException failure;
        long seq;
        long rtsLength;
        long received; // agent only
        private final java.util.concurrent.atomic.AtomicInteger gate =
                new java.util.concurrent.atomic.AtomicInteger(); // 0 open, 1 agent copying, 2 shut

        RecvOp(int tag, long address, long length, Thread waiter) {
            this.tag = tag;
            this.address = address;
            this.length = length;
            this.waiter = waiter;
        }

        boolean openGate() {
            return gate.compareAndSet(0, 1);
        }

        void releaseGate() {
            gate.compareAndSet(1, 0);
        }

        /** Waits out a copy in progress (one fragment at most), then shuts the gate for good. */
        void shutGate() {
            while (true) {
                int g = gate.get();
                if (g == 2 || (g == 0 && gate.compareAndSet(0, 2))) {
                    return;
                }
                Thread.onSpinWait();
            }
        }

        void fail(TransportException e) {
            if (state == DONE || state == FAILED) {
                return;
            }
            failure = e;
            state = FAILED;
            LockSupport.unpark(waiter);
        }
    }

    /** A large send waiting for its CTS. */
    static final class SendOp {
        final long seq;
        final Thread waiter;
        volatile int state = WAITING;
        volatile TransportException failure;

        SendOp(long seq, Thread waiter) {
            this.seq = seq;
            this.waiter = waiter;
        }

        void fail(TransportException e) {
            if (state != WAITING) {
                return;
            }
            failure = e;
            state = FAILED;
            LockSupport.unpark(waiter);
        }
    }

    /**
     * A manager's IPC listening point, registered in {@link #IPC_ENDPOINTS} under its address.
     *
     * @param directory the media driver directory (IPC reaches only subscribers of the same driver)
     * @param streamId  the stream its IPC subscription listens on
     */
    record IpcEndpoint(String directory, int streamId) {
        /**
         * Registers an endpoint, unless its stream id is already taken on that driver (two managers on different
         * loopback hosts with the same port): that manager then stays UDP-only.
         *
         * @return the endpoint, or null when IPC is not available to this manager
         */
        static IpcEndpoint reserve(String address, String directory, int streamId) {
            IpcEndpoint e = new IpcEndpoint(directory, streamId);
            synchronized (IPC_ENDPOINTS) {
                for (IpcEndpoint other : IPC_ENDPOINTS.values()) {
                    if (other.equals(e)) {
                        LOG.log(Level.INFO, "aeron: IPC stream " + streamId + " of " + directory
                                + " is taken; " + address + " talks UDP only");
                        return null;
                    }
                }
                return IPC_ENDPOINTS.putIfAbsent(address, e) == null ? e : null;
            }
        }
    }

    /** Per Aeron image (one peer's publication to us): its peer and the DATA chunk being assembled. */
    static final class ImageState {
        Peer peer;
        RecvOp dataOp;
        long dataPos;
    }
}
