package dev.kvtransfer.examples.tcp;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.ErrorHandler;
import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.memory.MemoryKind;
import dev.kvtransfer.api.transport.Connection;
import dev.kvtransfer.api.transport.ConnectionManager;
import dev.kvtransfer.api.transport.RegisteredRegion;
import dev.kvtransfer.api.transport.TransportClosedException;
import dev.kvtransfer.api.transport.TransportConfig;
import dev.kvtransfer.api.transport.TransportException;
import dev.kvtransfer.api.transport.support.EmulatedOneSided;

import java.io.IOException;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.StandardSocketOptions;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.channels.SelectionKey;
import java.nio.channels.Selector;
import java.nio.channels.ServerSocketChannel;
import java.nio.channels.SocketChannel;
import java.time.Duration;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.Condition;
import java.util.concurrent.locks.ReentrantLock;

/**
 * One rank's endpoint of the tcp transport.
 *
 * <p><b>Sockets.</b> A rank sends to a peer over its own outbound socket to the peer's listener (connected when
 * the {@link Connection} is made, so a peer that dies before any byte was exchanged is still noticed), and
 * receives from the peer over the peer's outbound socket. So messages of one direction share one TCP stream and
 * keep their order; each outbound socket's reverse direction carries only the handshake answer and the EOF that
 * says the peer is gone. First bytes of a socket: the {@link Handshake}. Then frames: {@code int32 tag, int32 0,
 * int64 length} (little-endian) and the payload.
 *
 * <p><b>Receiving.</b> One I/O thread ({@code tcp-io-<name>}) reads every socket with a selector. When a frame's
 * header arrives it is matched, in this order, with a receive posted on that peer's connection for the tag, a
 * {@link #pollConnect} waiting for the tag, or else staged in an off-heap buffer (every send is eager: senders never
 * wait for the receiver). A matched frame is read straight into the receiver's memory. A receive whose length
 * differs from the message's fails {@code MALFORMED} and the message is dropped. A receive that gives up (deadline,
 * interrupt, close) while its message is being read leaves the rest of the message to be discarded: the I/O thread
 * writes into a receiver's memory only under the manager's lock and only while that receive waits, so nothing is
 * written after the call returned.
 *
 * <p><b>Deadlines, loss, close.</b> Every wait has its deadline; a send stuck on a full socket past its deadline
 * after writing part of a frame resets its socket (a partial frame cannot be taken back). A socket of a peer that
 * closes marks the peer lost: calls waiting on it fail {@code PEER_LOST} once everything it sent has been
 * delivered; a new handshake from that address revives it. {@link #close()} wakes every waiting call with
 * {@link TransportClosedException}, ends the I/O thread and closes every socket and selector.
 */
final class TcpConnectionManager implements ConnectionManager {
    /** Bytes of one ByteBuffer view (asByteBuffer works up to 2 GiB; larger ranges are split). */
    static final long VIEW = 1L << 30;
    private static final int HEADER = 16;
    private static final long READ_BUDGET = 8L << 20;

    private static final int WAITING = 0;
    private static final int CLAIMED = 1;
    private static final int DONE = 2;
    private static final int FAILED = 3;
    private static final int ABANDONED = 4;

    private final String name;
    private final String localAddress;
    private final Duration defaultTimeout;
    private final TcpSettings settings;
    private final ErrorHandler errors;
    private final Handshake handshake;
    private final ServerSocketChannel server;
    private final Selector selector;
    private final Thread io;
    private final ConcurrentLinkedQueue<Runnable> ioTasks = new ConcurrentLinkedQueue<>();
    private final ReentrantLock lock = new ReentrantLock();
    private final Condition changed = lock.newCondition();
    private final CountDownLatch closedLatch = new CountDownLatch(1);
    /** Guarded by {@link #lock}. */
    private final Map<String, Peer> peers = new HashMap<>();
    /** Guarded by {@link #lock}: pollConnect waits per tag. */
    private final Map<Integer, ArrayDeque<Posted>> anyPosted = new HashMap<>();
    private final Map<String, TcpConnection> connections = new ConcurrentHashMap<>();
    private final Map<String, String> canonical = new ConcurrentHashMap<>();
    private final EmulatedOneSided oneSided;
    private final ByteBuffer scratch = ByteBuffer.allocateDirect(64 << 10);
    private volatile boolean closed;
    /** Guarded by {@link #lock}. */
    private long arrivals;

    private TcpConnectionManager(TransportConfig config, TcpSettings settings) throws IOException {
        this.name = config.name();
        this.defaultTimeout = config.defaultTimeout();
        this.settings = settings;
        this.errors = config.errorHandler();
        this.handshake = new Handshake(config.authSecret());
        ServerSocketChannel s = ServerSocketChannel.open();
        Selector sel = null;
        try {
            s.bind(new InetSocketAddress(config.host(), config.port()), 256);
            s.configureBlocking(false);
            sel = Selector.open();
            s.register(sel, SelectionKey.OP_ACCEPT);
        } catch (IOException | RuntimeException e) {
            s.close();
            if (sel != null) {
                sel.close();
            }
            throw e;
        }
        this.server = s;
        this.selector = sel;
        InetSocketAddress bound = (InetSocketAddress) s.getLocalAddress();
        String host = bound.getAddress().isAnyLocalAddress() ? InetAddress.getLocalHost().getHostAddress()
                : config.host();
        this.localAddress = TcpAddress.format(host, bound.getPort());
        this.oneSided = new EmulatedOneSided(this, new dev.kvtransfer.api.transport.support.ControlMemory("tcp"),
                errors, defaultTimeout, "tcp-" + name);
        this.io = new Thread(this::runIo, "tcp-io-" + name);
        io.setDaemon(true);
        io.start();
    }

    static TcpConnectionManager open(TransportConfig config, TcpSettings settings) {
        try {
            return new TcpConnectionManager(config, settings);
        } catch (IOException e) {
            throw new TransportException(ErrorCode.NETWORK, "tcp transport " + config.name() + ": cannot listen on "
                    + config.host() + ":" + config.port() + ": " + e.getMessage(), e);
        }
    }

    TcpSettings settings() {
        return settings;
    }

    Handshake handshake() {
        return handshake;
    }

    String name() {
        return name;
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
    public boolean isRunning() {
        return !closed && io.isAlive();
    }

    void ensureOpen() {
        if (closed) {
            throw new TransportClosedException("tcp transport " + name + " (" + localAddress + ") is closed");
        }
    }

    /** Waits until the manager closes or {@code nanos} pass (retry pacing that close cuts short). */
    void pause(long nanos) {
        try {
            closedLatch.await(Math.max(0, nanos), TimeUnit.NANOSECONDS);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new TransportException(ErrorCode.NETWORK, "tcp transport " + name + ": interrupted");
        }
    }

    // ---------------------------------------------------------------- connections

    @Override
    public Connection connection(String address) {
        Objects.requireNonNull(address, "address");
        ensureOpen();
        String key = canonical(address);
        TcpConnection c = connections.computeIfAbsent(key, k -> new TcpConnection(this, address, peer(k)));
        c.connectEagerly();
        return c;
    }

    /** The canonical form of an address (resolved IP and port): the key of its peer. */
    String canonical(String address) {
        return canonical.computeIfAbsent(address, a -> {
            InetSocketAddress sa = TcpAddress.parse(a);
            if (sa.isUnresolved()) {
                throw new IllegalArgumentException("cannot resolve the host of tcp transport address '" + a + "'");
            }
            return TcpAddress.format(sa.getAddress().getHostAddress(), sa.getPort());
        });
    }

    private Peer peer(String key) {
        lock.lock();
        try {
            return peers.computeIfAbsent(key, Peer::new);
        } finally {
            lock.unlock();
        }
    }

    /** Hands an outbound socket to the I/O thread, which watches it for the peer's EOF. */
    void watch(SocketChannel ch, TcpConnection c) {
        ioTasks.add(() -> {
            try {
                if (closed) {
                    ch.close();
                    return;
                }
                ch.register(selector, SelectionKey.OP_READ, new Watch(c, ch));
            } catch (IOException | RuntimeException e) {
                c.broken(ch);
            }
        });
        selector.wakeup();
    }

    /** Marks a peer lost and wakes everything waiting on it. */
    void peerLost(Peer p, String why) {
        lock.lock();
        try {
            if (p.lost == null) {
                p.lost = why;
            }
            changed.signalAll();
        } finally {
            lock.unlock();
        }
    }

    String lostReason(Peer p) {
        lock.lock();
        try {
            return p.lost;
        } finally {
            lock.unlock();
        }
    }

    // ---------------------------------------------------------------- one-sided writes (emulated)

    @Override
    public RegisteredRegion register(MemoryBuffer memory) {
        ensureOpen();
        return oneSided.register(memory);
    }

    EmulatedOneSided oneSided() {
        return oneSided;
    }

    // ---------------------------------------------------------------- receiving

    /** A receive waiting for its message. */
    private static final class Posted {
        final Peer peer;
        final int tag;
        final ByteBuffer[] dst;
        final long length;
        int state = WAITING;
        TransportException failure;
        Peer from;

        Posted(Peer peer, int tag, ByteBuffer[] dst, long length) {
            this.peer = peer;
            this.tag = tag;
            this.dst = dst;
            this.length = length;
        }
    }

    /** A message that arrived before its receive. */
    private record Arrived(ByteBuffer[] data, long length, long seq) {
    }

    /** What this rank knows of one peer (guarded by the manager's lock). */
    static final class Peer {
        final String key;
        final Map<Integer, ArrayDeque<Arrived>> arrived = new HashMap<>();
        final Map<Integer, ArrayDeque<Posted>> posted = new HashMap<>();
        final Map<Integer, Integer> staging = new HashMap<>();
        String lost;

        Peer(String key) {
            this.key = key;
        }

        int staging(int tag) {
            return staging.getOrDefault(tag, 0);
        }
    }

    static ByteBuffer[] views(MemoryBuffer b, long offset, long length) {
        Objects.requireNonNull(b, "buffer");
        if (b.kind() == MemoryKind.DEVICE) {
            throw new UnsupportedOperationException("the tcp transport does not declare DEVICE_MEMORY: it moves host"
                    + " memory only, not " + b);
        }
        Objects.checkFromIndexSize(offset, length, b.size());
        if (length == 0) {
            return new ByteBuffer[0];
        }
        int n = (int) ((length + VIEW - 1) / VIEW);
        ByteBuffer[] v = new ByteBuffer[n];
        for (int i = 0; i < n; i++) {
            long l = Math.min(VIEW, length - i * VIEW);
            ByteBuffer bb = b.slice(offset + i * VIEW, l).asByteBuffer();
            bb.clear();
            bb.limit((int) l);
            v[i] = bb;
        }
        return v;
    }

    private static ByteBuffer[] staging(long length) {
        int n = (int) Math.max(0, (length + VIEW - 1) / VIEW);
        ByteBuffer[] v = new ByteBuffer[n];
        for (int i = 0; i < n; i++) {
            v[i] = ByteBuffer.allocateDirect((int) Math.min(VIEW, length - i * VIEW));
        }
        return v;
    }

    private static void copy(ByteBuffer[] src, ByteBuffer[] dst) {
        int d = 0;
        for (ByteBuffer s0 : src) {
            ByteBuffer s = s0.duplicate().clear();
            while (s.hasRemaining()) {
                ByteBuffer t = dst[d];
                if (!t.hasRemaining()) {
                    d++;
                    continue;
                }
                int n = Math.min(s.remaining(), t.remaining());
                ByteBuffer part = s.slice(s.position(), n);
                t.put(part);
                s.position(s.position() + n);
            }
        }
    }

    private static long nanos(Duration d) {
        try {
            return Math.max(0, d.toNanos());
        } catch (ArithmeticException e) {
            return Long.MAX_VALUE / 4;
        }
    }

    private static long deadline(Duration timeout) {
        long now = System.nanoTime();
        long n = nanos(timeout);
        return n > Long.MAX_VALUE / 4 ? now + Long.MAX_VALUE / 4 : now + n;
    }

    /** A connection's receive. */
    void recv(Peer p, String peerAddress, int tag, MemoryBuffer buffer, long offset, long length, Duration timeout) {
        Objects.requireNonNull(timeout, "timeout");
        ByteBuffer[] dst = views(buffer, offset, length);
        long deadline = deadline(timeout);
        lock.lock();
        try {
            ensureOpen();
            ArrayDeque<Arrived> q = p.arrived.get(tag);
            if (q != null && !q.isEmpty()) {
                deliver(q.poll(), dst, length, "recv tag " + tag + " from " + peerAddress);
                return;
            }
            if (p.lost != null && p.staging(tag) == 0) {
                throw lost(p, peerAddress, tag);
            }
            Posted r = new Posted(p, tag, dst, length);
            p.posted.computeIfAbsent(tag, k -> new ArrayDeque<>()).add(r);
            if (!await(r, deadline, peerAddress)) {
                throw new TransportException(ErrorCode.TIMEOUT, "recv tag " + tag + " from " + peerAddress + " at "
                        + localAddress + ": nothing arrived within " + timeout.toMillis() + " ms");
            }
        } finally {
            lock.unlock();
        }
    }

    @Override
    public Connection pollConnect(int tag, MemoryBuffer buffer, long offset, long length, Duration wait) {
        Objects.requireNonNull(wait, "wait");
        ByteBuffer[] dst = views(buffer, offset, length);
        long deadline = deadline(wait);
        Peer from;
        lock.lock();
        try {
            ensureOpen();
            Peer best = null;
            for (Peer p : peers.values()) {
                ArrayDeque<Arrived> q = p.arrived.get(tag);
                if (q != null && !q.isEmpty() && (best == null || q.peek().seq() < best.arrived.get(tag).peek().seq())) {
                    best = p;
                }
            }
            if (best != null) {
                deliver(best.arrived.get(tag).poll(), dst, length, "pollConnect tag " + tag + " from " + best.key);
                from = best;
            } else {
                Posted r = new Posted(null, tag, dst, length);
                anyPosted.computeIfAbsent(tag, k -> new ArrayDeque<>()).add(r);
                if (!await(r, deadline, "any peer")) {
                    return null;
                }
                from = r.from;
            }
        } finally {
            lock.unlock();
        }
        return connectionTo(from);
    }

    /** The connection to a peer known by its key (the address its hello gave). */
    private Connection connectionTo(Peer p) {
        TcpConnection c = connections.computeIfAbsent(p.key, k -> new TcpConnection(this, p.key, p));
        c.connectEagerly();
        return c;
    }

    private TransportException lost(Peer p, String peerAddress, int tag) {
        return new TransportException(ErrorCode.PEER_LOST, "recv tag " + tag + " from " + peerAddress + " at "
                + localAddress + ": peer lost (" + p.lost + ")");
    }

    private void deliver(Arrived m, ByteBuffer[] dst, long length, String what) {
        if (m.length() != length) {
            throw new TransportException(ErrorCode.MALFORMED, what + ": the message has " + m.length()
                    + " bytes, the receive expects " + length + " (message dropped)");
        }
        copy(m.data(), dst);
    }

    /**
     * Waits (holding the lock) until the receive is done. Returns false on deadline (the receive withdrawn).
     */
    private boolean await(Posted r, long deadline, String peerAddress) {
        while (true) {
            if (r.state == DONE) {
                return true;
            }
            if (r.state == FAILED) {
                throw r.failure;
            }
            if (closed) {
                withdraw(r);
                throw new TransportClosedException("recv tag " + r.tag + " from " + peerAddress + " at "
                        + localAddress + ": the transport closed");
            }
            if (r.state == WAITING && r.peer != null && r.peer.lost != null && r.peer.staging(r.tag) == 0) {
                withdraw(r);
                throw lost(r.peer, peerAddress, r.tag);
            }
            long left = deadline - System.nanoTime();
            if (left <= 0) {
                withdraw(r);
                return false;
            }
            try {
                changed.awaitNanos(left);
            } catch (InterruptedException e) {
                withdraw(r);
                Thread.currentThread().interrupt();
                throw new TransportException(ErrorCode.NETWORK, "recv tag " + r.tag + " from " + peerAddress + " at "
                        + localAddress + ": interrupted");
            }
        }
    }

    private void withdraw(Posted r) {
        if (r.state == WAITING) {
            ArrayDeque<Posted> q = (r.peer != null ? r.peer.posted : anyPosted).get(r.tag);
            if (q != null) {
                q.remove(r);
            }
        } else if (r.state == CLAIMED) {
            r.state = ABANDONED; // the I/O thread discards the rest of the message
        }
    }

    private Posted firstWaiting(Peer p, int tag) {
        ArrayDeque<Posted> q = p.posted.get(tag);
        if (q != null && !q.isEmpty()) {
            return q.poll();
        }
        q = anyPosted.get(tag);
        return q == null || q.isEmpty() ? null : q.poll();
    }

    // ---------------------------------------------------------------- the I/O thread

    /** An accepted socket: a peer's outbound stream to us. */
    private final class Inbound {
        final SocketChannel ch;
        final long acceptedAt = System.nanoTime();
        ByteBuffer hello = ByteBuffer.allocate(16).order(ByteOrder.LITTLE_ENDIAN);
        Peer peer;
        final ByteBuffer header = ByteBuffer.allocateDirect(HEADER).order(ByteOrder.LITTLE_ENDIAN);
        boolean inFrame;
        int tag;
        long length;
        long left;
        Posted target;
        ByteBuffer[] staged;

        Inbound(SocketChannel ch) {
            this.ch = ch;
        }
    }

    /** An outbound socket watched for EOF. */
    private record Watch(TcpConnection connection, SocketChannel ch) {
    }

    private void runIo() {
        try {
            while (!closed) {
                selector.select(200);
                Runnable t;
                while ((t = ioTasks.poll()) != null) {
                    t.run();
                }
                Iterator<SelectionKey> it = selector.selectedKeys().iterator();
                while (it.hasNext()) {
                    SelectionKey k = it.next();
                    it.remove();
                    if (!k.isValid()) {
                        continue;
                    }
                    try {
                        if (k.isAcceptable()) {
                            accept();
                        } else if (k.attachment() instanceof Inbound in) {
                            readInbound(k, in);
                        } else if (k.attachment() instanceof Watch w) {
                            readWatch(k, w);
                        }
                    } catch (IOException | RuntimeException e) {
                        drop(k, e);
                    } catch (OutOfMemoryError e) {
                        drop(k, new IOException("out of memory staging a message: " + e.getMessage(), e));
                    }
                }
                expireHandshakes();
            }
        } catch (IOException | RuntimeException e) {
            if (!closed) {
                report(ErrorCode.INTERNAL, "I/O thread stopped: " + e, e);
            }
        } finally {
            for (SelectionKey k : selector.keys()) {
                try {
                    k.channel().close();
                } catch (IOException e) {
                    // closing anyway
                }
            }
            Runnable t;
            while ((t = ioTasks.poll()) != null) {
                t.run(); // closes the channels of late watch requests
            }
        }
    }

    private void report(ErrorCode code, String what, Throwable cause) {
        try {
            errors.onError(new TransportException(code, "tcp transport " + name + " (" + localAddress + "): " + what,
                    cause));
        } catch (RuntimeException ignored) {
            // An error handler must not stop the I/O thread.
        }
    }

    private void accept() throws IOException {
        SocketChannel ch;
        while ((ch = server.accept()) != null) {
            try {
                ch.configureBlocking(false);
                ch.setOption(StandardSocketOptions.TCP_NODELAY, true);
                if (settings.socketBuffer() > 0) {
                    ch.setOption(StandardSocketOptions.SO_RCVBUF, settings.socketBuffer());
                    ch.setOption(StandardSocketOptions.SO_SNDBUF, settings.socketBuffer());
                }
                ch.register(selector, SelectionKey.OP_READ, new Inbound(ch));
            } catch (IOException | RuntimeException e) {
                ch.close();
                report(ErrorCode.NETWORK, "accepting a connection failed: " + e.getMessage(), e);
            }
        }
    }

    private void expireHandshakes() {
        long limit = nanos(settings.handshakeTimeout());
        for (SelectionKey k : selector.keys()) {
            if (k.attachment() instanceof Inbound in && in.peer == null
                    && System.nanoTime() - in.acceptedAt > limit) {
                drop(k, new IOException("no complete hello within " + settings.handshakeTimeout().toMillis() + " ms"));
            }
        }
    }

    /** Closes a socket after an error; its peer (if known) is lost. */
    private void drop(SelectionKey k, Exception why) {
        k.cancel();
        try {
            k.channel().close();
        } catch (IOException e) {
            // closing anyway
        }
        if (closed) {
            return;
        }
        if (k.attachment() instanceof Inbound in) {
            if (in.peer == null) {
                report(ErrorCode.UNAUTHORIZED, "connection refused during its handshake: " + why.getMessage(), why);
                return;
            }
            endInbound(in, "connection from " + in.peer.key + " failed: " + why.getMessage());
            report(ErrorCode.PEER_LOST, "connection from " + in.peer.key + " failed: " + why.getMessage(), why);
        } else if (k.attachment() instanceof Watch w) {
            w.connection().broken(w.ch());
            peerLost(w.connection().peerState(), "connection to " + w.connection().peer() + " failed: "
                    + why.getMessage());
        }
    }

    /** The peer's stream ended: a frame in progress is lost, the peer is lost. */
    private void endInbound(Inbound in, String why) {
        lock.lock();
        try {
            if (in.inFrame) {
                if (in.target != null && in.target.state == CLAIMED) {
                    in.target.state = FAILED;
                    in.target.failure = new TransportException(ErrorCode.PEER_LOST, "recv tag " + in.tag + " from "
                            + in.peer.key + ": peer lost in the middle of the message (" + why + ")");
                }
                if (in.staged != null) {
                    in.peer.staging.merge(in.tag, -1, Integer::sum);
                }
                in.inFrame = false;
            }
            if (in.peer.lost == null) {
                in.peer.lost = why;
            }
            changed.signalAll();
        } finally {
            lock.unlock();
        }
    }

    private void readWatch(SelectionKey k, Watch w) throws IOException {
        scratch.clear();
        int n = w.ch().read(scratch);
        if (n < 0) {
            k.cancel();
            w.ch().close();
            w.connection().broken(w.ch());
            peerLost(w.connection().peerState(), "connection to " + w.connection().peer() + " closed by the peer");
        } else if (n > 0) {
            throw new IOException(n + " unexpected bytes from " + w.connection().peer() + " on the outbound socket");
        }
    }

    private void readInbound(SelectionKey k, Inbound in) throws IOException {
        if (in.peer == null) {
            readHello(k, in);
            return;
        }
        long budget = READ_BUDGET;
        while (budget > 0) {
            if (!in.inFrame) {
                int n = in.ch.read(in.header);
                if (n < 0) {
                    eof(k, in);
                    return;
                }
                if (in.header.hasRemaining()) {
                    return;
                }
                startFrame(in);
                if (in.left == 0) {
                    finishFrame(in);
                }
                continue;
            }
            long n;
            if (in.target != null) {
                lock.lock();
                try {
                    if (in.target.state == CLAIMED) {
                        n = in.ch.read(in.target.dst);
                    } else {
                        in.target = null; // abandoned: the rest is discarded
                        n = 0;
                        continue;
                    }
                } finally {
                    lock.unlock();
                }
            } else if (in.staged != null) {
                n = in.ch.read(in.staged);
            } else {
                scratch.clear().limit((int) Math.min(scratch.capacity(), in.left));
                n = in.ch.read(scratch);
            }
            if (n < 0) {
                eof(k, in);
                return;
            }
            if (n == 0) {
                return;
            }
            in.left -= n;
            budget -= n;
            if (in.left == 0) {
                finishFrame(in);
            }
        }
    }

    private void eof(SelectionKey k, Inbound in) throws IOException {
        k.cancel();
        in.ch.close();
        endInbound(in, "connection from " + in.peer.key + " closed by the peer");
    }

    private void startFrame(Inbound in) throws IOException {
        in.tag = in.header.getInt(0);
        int flags = in.header.getInt(4);
        long length = in.header.getLong(8);
        in.header.clear();
        if (flags != 0 || length < 0 || length > settings.maxMessage()) {
            throw new IOException("bad frame header (flags " + flags + ", length " + length + "; at most "
                    + settings.maxMessage() + ")");
        }
        in.length = length;
        in.left = length;
        in.inFrame = true;
        in.target = null;
        in.staged = null;
        lock.lock();
        try {
            Posted r = firstWaiting(in.peer, in.tag);
            if (r != null) {
                if (r.length != length) {
                    r.state = FAILED;
                    r.failure = new TransportException(ErrorCode.MALFORMED, "recv tag " + in.tag + " from "
                            + in.peer.key + ": the message has " + length + " bytes, the receive expects " + r.length
                            + " (message dropped)");
                } else {
                    r.state = CLAIMED;
                    r.from = in.peer;
                    in.target = r;
                }
                changed.signalAll();
                return;
            }
            in.peer.staging.merge(in.tag, 1, Integer::sum);
        } finally {
            lock.unlock();
        }
        try {
            in.staged = staging(length);
        } catch (OutOfMemoryError e) {
            lock.lock();
            try {
                in.peer.staging.merge(in.tag, -1, Integer::sum);
            } finally {
                lock.unlock();
            }
            throw e;
        }
    }

    private void finishFrame(Inbound in) {
        lock.lock();
        try {
            if (in.target != null) {
                if (in.target.state == CLAIMED) {
                    in.target.state = DONE;
                }
            } else if (in.staged != null) {
                in.peer.staging.merge(in.tag, -1, Integer::sum);
                Posted r = firstWaiting(in.peer, in.tag);
                Arrived m = new Arrived(in.staged, in.length, arrivals++);
                if (r == null) {
                    in.peer.arrived.computeIfAbsent(in.tag, t -> new ArrayDeque<>()).add(m);
                } else {
                    try {
                        deliver(m, r.dst, r.length, "recv tag " + in.tag + " from " + in.peer.key);
                        r.from = in.peer;
                        r.state = DONE;
                    } catch (TransportException e) {
                        r.state = FAILED;
                        r.failure = e;
                    }
                }
            }
            in.inFrame = false;
            in.target = null;
            in.staged = null;
            changed.signalAll();
        } finally {
            lock.unlock();
        }
    }

    private void readHello(SelectionKey k, Inbound in) throws IOException {
        int n = in.ch.read(in.hello);
        if (n < 0) {
            throw new IOException("closed before its hello was complete");
        }
        int total;
        try {
            total = Handshake.helloLength(in.hello);
        } catch (IllegalArgumentException e) {
            throw new IOException(e.getMessage(), e);
        }
        if (total < 0) {
            return;
        }
        if (in.hello.capacity() < total) {
            ByteBuffer bigger = ByteBuffer.allocate(total).order(ByteOrder.LITTLE_ENDIAN);
            in.hello.flip();
            bigger.put(in.hello);
            in.hello = bigger;
            if (in.ch.read(in.hello) < 0) {
                throw new IOException("closed before its hello was complete");
            }
        }
        if (in.hello.position() < total) {
            return;
        }
        if (in.hello.position() > total) {
            throw new IOException("bytes after the hello before its welcome");
        }
        Handshake.Hello h;
        byte[] nonce = new byte[Handshake.NONCE];
        in.hello.get(24, nonce);
        try {
            h = handshake.accept(in.hello, localAddress);
        } catch (IllegalArgumentException refused) {
            writeFully(in.ch, handshake.welcome(nonce, refused.getMessage()));
            throw new IOException(refused.getMessage(), refused);
        }
        writeFully(in.ch, handshake.welcome(h.nonce(), null));
        String key = canonical(h.from());
        lock.lock();
        try {
            Peer p = peers.computeIfAbsent(key, Peer::new);
            p.lost = null; // a new handshake from this address: the peer is (back) here
            in.peer = p;
        } finally {
            lock.unlock();
        }
        in.hello = null;
    }

    private static void writeFully(SocketChannel ch, ByteBuffer b) throws IOException {
        // A welcome is small: a fresh socket's send buffer takes it at once.
        ch.write(b);
        if (b.hasRemaining()) {
            throw new IOException("could not write the handshake answer");
        }
    }

    // ---------------------------------------------------------------- close

    @Override
    public void close() {
        synchronized (this) {
            if (closed) {
                return;
            }
            closed = true;
        }
        lock.lock();
        try {
            changed.signalAll();
        } finally {
            lock.unlock();
        }
        closedLatch.countDown();
        oneSided.close();
        for (TcpConnection c : connections.values()) {
            c.close();
        }
        selector.wakeup();
        try {
            io.join(TimeUnit.SECONDS.toMillis(10));
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
        List<IOException> failures = new ArrayList<>();
        try {
            server.close();
        } catch (IOException e) {
            failures.add(e);
        }
        try {
            selector.close();
        } catch (IOException e) {
            failures.add(e);
        }
        if (!failures.isEmpty()) {
            report(ErrorCode.NETWORK, "closing: " + failures, failures.get(0));
        }
    }

    @Override
    public String toString() {
        return "TcpConnectionManager{" + name + " " + localAddress + (closed ? " closed" : "") + "}";
    }
}
