package dev.kvtransfer.examples.tcp;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.ErrorHandler;
import dev.kvtransfer.api.memory.MemoryBuffer;
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
import java.nio.ByteBuffer;
import java.nio.channels.SelectionKey;
import java.nio.channels.Selector;
import java.nio.channels.ServerSocketChannel;
import java.nio.channels.SocketChannel;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

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
 * <p><b>Receiving.</b> One I/O thread ({@code tcp-io-<name>}, {@link TcpIoLoop}) reads every socket with a
 * selector; the {@link ReceiveMatcher} pairs what it reads with the receives. When a frame's
 * header arrives it is matched, in this order, with a receive posted on that peer's connection for the tag, a
 * {@link #pollConnect} waiting for the tag, or else staged in an off-heap buffer (every send is eager: senders never
 * wait for the receiver). A matched frame is read straight into the receiver's memory. A receive whose length
 * differs from the message's fails {@code MALFORMED} and the message is dropped. A receive or poll that gives up
 * (deadline, interrupt, close) while its message is being read moves what arrived to staging before it returns, and
 * the rest is read there: the message waits for a later receive (the control plane receives and polls with short
 * waits and tries again).
 * The I/O thread writes into a receiver's memory only under the matcher's lock and only while that receive waits,
 * so nothing is written after the call returned.
 *
 * <p><b>Deadlines, loss, close.</b> Every wait has its deadline; a send stuck on a full socket past its deadline
 * after writing part of a frame resets its socket (a partial frame cannot be taken back). A socket of a peer that
 * closes marks the peer lost: calls waiting on it fail {@code PEER_LOST} once everything it sent has been
 * delivered; a new handshake from that address revives it. {@link #close()} wakes every waiting call with
 * {@link TransportClosedException}, ends the I/O thread and closes every socket and selector.
 */
// A single-jar third-party plugin: it uses the api's (deprecated) copy, which the host provides.
@SuppressWarnings("removal")
final class TcpConnectionManager implements ConnectionManager {
    private final String name;
    private final String localAddress;
    private final Duration defaultTimeout;
    private final TcpSettings settings;
    private final ErrorHandler errors;
    private final Handshake handshake;
    private final ServerSocketChannel server;
    private final Selector selector;
    private final ReceiveMatcher matcher;
    private final TcpIoLoop io;
    private final CountDownLatch closedLatch = new CountDownLatch(1);
    private final Map<String, TcpConnection> connections = new ConcurrentHashMap<>();
    private final Map<String, String> canonical = new ConcurrentHashMap<>();
    private final EmulatedOneSided oneSided;
    private volatile boolean closed;

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
        this.matcher = new ReceiveMatcher(name, localAddress, () -> closed);
        this.oneSided = new EmulatedOneSided(this, new dev.kvtransfer.api.transport.support.ControlMemory("tcp"),
                errors, defaultTimeout, "tcp-" + name);
        this.io = new TcpIoLoop(this, matcher, s, sel);
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

    boolean isClosed() {
        return closed;
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

    private ReceiveMatcher.Peer peer(String key) {
        return matcher.peer(key);
    }

    /** Hands an outbound socket to the I/O thread, which watches it for the peer's EOF. */
    void watch(SocketChannel ch, TcpConnection c) {
        io.watch(ch, c);
    }

    /** Marks a peer lost and wakes everything waiting on it. */
    void peerLost(ReceiveMatcher.Peer p, String why) {
        matcher.peerLost(p, why);
    }

    void peerRefused(ReceiveMatcher.Peer p, String why) {
        matcher.peerRefused(p, why);
    }

    String lostReason(ReceiveMatcher.Peer p) {
        return matcher.lostReason(p);
    }

    // ---------------------------------------------------------------- one-sided writes (emulated)

    @Override
    public RegisteredRegion register(MemoryBuffer memory) {
        ensureOpen();
        return oneSided.register(memory);
    }

    @Override
    public RegisteredRegion register(MemoryBuffer memory, java.util.Set<String> writers) {
        java.util.Objects.requireNonNull(writers, "writers");
        ensureOpen();
        return oneSided.register(memory, writers);
    }

    EmulatedOneSided oneSided() {
        return oneSided;
    }

    // ---------------------------------------------------------------- receiving

    /** A connection's receive. */
    void recv(ReceiveMatcher.Peer p, String peerAddress, int tag, MemoryBuffer buffer, long offset, long length,
              Duration timeout) {
        Objects.requireNonNull(timeout, "timeout");
        ByteBuffer[] dst = TcpBuffers.views(buffer, offset, length);
        matcher.recv(p, peerAddress, tag, dst, length, TcpBuffers.deadline(timeout), timeout.toMillis());
    }

    @Override
    public Connection pollConnect(int tag, MemoryBuffer buffer, long offset, long length, Duration wait) {
        Objects.requireNonNull(wait, "wait");
        ByteBuffer[] dst = TcpBuffers.views(buffer, offset, length);
        ReceiveMatcher.Peer from = matcher.pollAny(tag, dst, length, TcpBuffers.deadline(wait));
        return from == null ? null : connectionTo(from);
    }

    /** The connection to a peer known by its key (the address its hello gave). */
    private Connection connectionTo(ReceiveMatcher.Peer p) {
        TcpConnection c = connections.computeIfAbsent(p.key, k -> new TcpConnection(this, p.key, p));
        c.connectEagerly();
        return c;
    }

    void report(ErrorCode code, String what, Throwable cause) {
        try {
            errors.onError(new TransportException(code, "tcp transport " + name + " (" + localAddress + "): " + what,
                    cause));
        } catch (RuntimeException ignored) {
            // An error handler must not stop the I/O thread.
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
        matcher.wakeAll();
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
