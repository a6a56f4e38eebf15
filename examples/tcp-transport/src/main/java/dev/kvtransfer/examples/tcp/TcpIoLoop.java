package dev.kvtransfer.examples.tcp;

import dev.kvtransfer.api.ErrorCode;

import java.io.IOException;
import java.net.StandardSocketOptions;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.channels.SelectionKey;
import java.nio.channels.Selector;
import java.nio.channels.ServerSocketChannel;
import java.nio.channels.SocketChannel;
import java.util.Iterator;
import java.util.concurrent.ConcurrentLinkedQueue;

/**
 * The transport's one I/O thread ({@code tcp-io-<name>}): accepts peers' outbound sockets and reads their
 * handshake and frames with a selector, and watches this rank's outbound sockets for the EOF that says a peer is
 * gone. What a frame means for the receives is the {@link ReceiveMatcher}'s; this class only reads: a matched
 * frame straight into the receiver's memory, an unmatched one into off-heap staging, a frame nobody may take into
 * a scratch buffer (discarded). A socket that fails or ends marks its peer lost.
 */
final class TcpIoLoop {
    private static final int HEADER = 16;
    /** Bytes read from one socket before the others get their turn. */
    private static final long READ_BUDGET = 8L << 20;

    private final TcpConnectionManager manager;
    private final ReceiveMatcher matcher;
    private final TcpSettings settings;
    private final Handshake handshake;
    private final ServerSocketChannel server;
    private final Selector selector;
    private final Thread thread;
    private final ConcurrentLinkedQueue<Runnable> tasks = new ConcurrentLinkedQueue<>();
    private final ByteBuffer scratch = ByteBuffer.allocateDirect(64 << 10);
    private final boolean[] stagedOut = new boolean[1];

    TcpIoLoop(TcpConnectionManager manager, ReceiveMatcher matcher, ServerSocketChannel server, Selector selector) {
        this.manager = manager;
        this.matcher = matcher;
        this.settings = manager.settings();
        this.handshake = manager.handshake();
        this.server = server;
        this.selector = selector;
        this.thread = new Thread(this::run, "tcp-io-" + manager.name());
        thread.setDaemon(true);
    }

    void start() {
        thread.start();
    }

    boolean isAlive() {
        return thread.isAlive();
    }

    /** Wakes the thread (closing: it then ends and closes every socket it holds). */
    void wakeup() {
        selector.wakeup();
    }

    /** Waits (bounded) for the thread to end. */
    void join(long millis) throws InterruptedException {
        thread.join(millis);
    }

    /** Hands an outbound socket to the I/O thread, which watches it for the peer's EOF. */
    void watch(SocketChannel ch, TcpConnection c) {
        tasks.add(() -> {
            try {
                if (manager.isClosed()) {
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

    /** An accepted socket: a peer's outbound stream to us. */
    private static final class Inbound {
        final SocketChannel ch;
        final long acceptedAt = System.nanoTime();
        ByteBuffer hello = ByteBuffer.allocate(16).order(ByteOrder.LITTLE_ENDIAN);
        ReceiveMatcher.Peer peer;
        final ByteBuffer header = ByteBuffer.allocateDirect(HEADER).order(ByteOrder.LITTLE_ENDIAN);
        boolean inFrame;
        int tag;
        long length;
        long left;
        ReceiveMatcher.Posted target;
        ByteBuffer[] staged;

        Inbound(SocketChannel ch) {
            this.ch = ch;
        }
    }

    /** An outbound socket watched for EOF. */
    private record Watch(TcpConnection connection, SocketChannel ch) {
    }

    private void run() {
        try {
            while (!manager.isClosed()) {
                selector.select(200);
                Runnable t;
                while ((t = tasks.poll()) != null) {
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
            if (!manager.isClosed()) {
                manager.report(ErrorCode.INTERNAL, "I/O thread stopped: " + e, e);
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
            while ((t = tasks.poll()) != null) {
                t.run(); // closes the channels of late watch requests
            }
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
                manager.report(ErrorCode.NETWORK, "accepting a connection failed: " + e.getMessage(), e);
            }
        }
    }

    private void expireHandshakes() {
        long limit = TcpBuffers.nanos(settings.handshakeTimeout());
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
        if (manager.isClosed()) {
            return;
        }
        if (k.attachment() instanceof Inbound in) {
            if (in.peer == null) {
                manager.report(ErrorCode.UNAUTHORIZED, "connection refused during its handshake: " + why.getMessage(),
                        why);
                return;
            }
            endInbound(in, "connection from " + in.peer.key + " failed: " + why.getMessage());
            manager.report(ErrorCode.PEER_LOST, "connection from " + in.peer.key + " failed: " + why.getMessage(),
                    why);
        } else if (k.attachment() instanceof Watch w) {
            w.connection().broken(w.ch());
            matcher.peerLost(w.connection().peerState(), "connection to " + w.connection().peer() + " failed: "
                    + why.getMessage());
        }
    }

    /** The peer's stream ended: a frame in progress is lost, the peer is lost. */
    private void endInbound(Inbound in, String why) {
        matcher.streamEnded(in.peer, in.inFrame, in.tag, in.target, in.staged != null, why);
        in.inFrame = false;
    }

    private void readWatch(SelectionKey k, Watch w) throws IOException {
        scratch.clear();
        int n = w.ch().read(scratch);
        if (n < 0) {
            k.cancel();
            w.ch().close();
            w.connection().broken(w.ch());
            matcher.peerLost(w.connection().peerState(), "connection to " + w.connection().peer()
                    + " closed by the peer");
        } else if (n > 0) {
            throw new IOException(n + " unexpected bytes from " + w.connection().peer() + " on the outbound socket");
        }
    }

    private void readInbound(SelectionKey k, Inbound in) throws IOException {
        if (in.peer == null) {
            readHello(in);
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
                n = matcher.readInto(in.target, in.ch);
                if (n == -3) {
                    in.staged = in.target.restaged; // the receive gave up: the rest is staged for a later one
                    in.target = null;
                    continue;
                }
                if (n == -2) {
                    in.target = null; // abandoned: the rest is discarded
                    continue;
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
        in.staged = null;
        in.target = matcher.claim(in.peer, in.tag, length, stagedOut);
        if (!stagedOut[0]) {
            return; // read into the claimed receive, or discarded (a receive of another length failed)
        }
        try {
            in.staged = TcpBuffers.staging(length);
        } catch (OutOfMemoryError e) {
            matcher.unstage(in.peer, in.tag);
            throw e;
        }
    }

    private void finishFrame(Inbound in) {
        matcher.finish(in.peer, in.tag, in.length, in.target, in.staged);
        in.inFrame = false;
        in.target = null;
        in.staged = null;
    }

    private void readHello(Inbound in) throws IOException {
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
            h = handshake.accept(in.hello, manager.localAddress());
        } catch (IllegalArgumentException refused) {
            writeFully(in.ch, handshake.welcome(nonce, refused.getMessage()));
            throw new IOException(refused.getMessage(), refused);
        }
        writeFully(in.ch, handshake.welcome(h.nonce(), null));
        in.peer = matcher.revive(manager.canonical(h.from()));
        in.hello = null;
    }

    private static void writeFully(SocketChannel ch, ByteBuffer b) throws IOException {
        // A welcome is small: a fresh socket's send buffer takes it at once.
        ch.write(b);
        if (b.hasRemaining()) {
            throw new IOException("could not write the handshake answer");
        }
    }
}
