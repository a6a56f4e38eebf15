package dev.kvtransfer.examples.tcp;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.transport.Connection;
import dev.kvtransfer.api.transport.TransportClosedException;
import dev.kvtransfer.api.transport.TransportException;
import dev.kvtransfer.api.transport.WriteBatch;

import java.io.IOException;
import java.net.InetSocketAddress;
import java.net.StandardSocketOptions;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.channels.SelectionKey;
import java.nio.channels.Selector;
import java.nio.channels.SocketChannel;
import java.time.Duration;
import java.util.Objects;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.ReentrantLock;

/**
 * The connection to one peer: sends go over this rank's outbound socket to the peer (connected and handshaken
 * on first need, then watched by the manager's I/O thread for the peer's EOF); receives wait in the manager for
 * frames of the peer's own outbound socket. Sends of one connection are serialized whole-frame (any tag); a send
 * writes from the caller's memory straight into the socket (a gathering write of the header and the payload
 * views), waiting on a private selector while the socket's buffer is full.
 */
final class TcpConnection implements Connection {
    private static final long WRITE_SLICE_MS = 100;
    private static final long MAX_RETRY_PAUSE_NANOS = TimeUnit.MILLISECONDS.toNanos(200);

    private final TcpConnectionManager manager;
    private final String peer;
    private final ReceiveMatcher.Peer state;
    private final ReentrantLock writeLock = new ReentrantLock();
    private final ByteBuffer header = ByteBuffer.allocateDirect(16).order(ByteOrder.LITTLE_ENDIAN);
    /** Guarded by {@link #writeLock} (and {@code this} for close). */
    private SocketChannel out;
    private Selector writeSelector;
    private SelectionKey writeKey;
    private volatile boolean broken;
    private volatile boolean closed;

    TcpConnection(TcpConnectionManager manager, String peer, ReceiveMatcher.Peer state) {
        this.manager = manager;
        this.peer = peer;
        this.state = state;
    }

    ReceiveMatcher.Peer peerState() {
        return state;
    }

    @Override
    public Duration defaultTimeout() {
        return manager.defaultTimeout();
    }

    @Override
    public String peer() {
        return peer;
    }

    /** Connects now if nobody else is, bounded by the connect timeout; a failure is left for the first send. */
    void connectEagerly() {
        if (out != null && !broken || !writeLock.tryLock()) {
            return;
        }
        try {
            if (out == null || broken) {
                connect(System.nanoTime() + manager.settings().connectTimeout().toNanos());
            }
        } catch (TransportException e) {
            // Not reachable yet (or any more): sends retry until their deadline, receives wait for its messages.
        } finally {
            writeLock.unlock();
        }
    }

    @Override
    public void send(int tag, MemoryBuffer buffer, long offset, long length, Duration timeout) {
        Objects.requireNonNull(timeout, "timeout");
        manager.ensureOpen();
        ByteBuffer[] views = TcpBuffers.views(buffer, offset, length);
        long deadline = System.nanoTime() + Math.min(Long.MAX_VALUE / 4, nanos(timeout));
        String lost = manager.lostReason(state);
        if (lost != null) {
            // Lost until the peer shakes hands with this rank again (a restarted peer at the same address).
            throw new TransportException(ErrorCode.PEER_LOST, what(tag) + ": peer lost (" + lost + ")");
        }
        try {
            if (!writeLock.tryLock(Math.max(0, deadline - System.nanoTime()), TimeUnit.NANOSECONDS)) {
                throw new TransportException(ErrorCode.TIMEOUT, what(tag) + ": other sends on this connection did "
                        + "not finish within " + timeout.toMillis() + " ms");
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new TransportException(ErrorCode.NETWORK, what(tag) + ": interrupted");
        }
        try {
            if (out == null || broken) {
                connect(deadline);
            }
            writeFrame(tag, views, length, deadline, timeout);
        } finally {
            writeLock.unlock();
        }
    }

    private String what(int tag) {
        return "send tag " + tag + " to " + peer + " from " + manager.localAddress();
    }

    private void writeFrame(int tag, ByteBuffer[] views, long length, long deadline, Duration timeout) {
        header.clear();
        header.putInt(tag).putInt(0).putLong(length).flip();
        ByteBuffer[] all = new ByteBuffer[views.length + 1];
        all[0] = header;
        System.arraycopy(views, 0, all, 1, views.length);
        long total = 16 + length;
        long written = 0;
        try {
            while (written < total) {
                long n = out.write(all);
                written += n;
                if (written == total) {
                    return;
                }
                if (n > 0) {
                    continue;
                }
                if (closed || manager.lostReason(state) != null && broken) {
                    throw new IOException("connection closed");
                }
                long left = deadline - System.nanoTime();
                if (left <= 0) {
                    if (written > 0) {
                        reset();
                    }
                    throw new TransportException(ErrorCode.TIMEOUT, what(tag) + ": " + written + " of " + total
                            + " bytes written within " + timeout.toMillis() + " ms (the peer does not read)"
                            + (written > 0 ? "; the connection was reset: a partial message cannot be taken back" : ""));
                }
                writeKey.interestOps(SelectionKey.OP_WRITE);
                writeSelector.select(Math.max(1, Math.min(TimeUnit.NANOSECONDS.toMillis(left), WRITE_SLICE_MS)));
                writeSelector.selectedKeys().clear();
                if (Thread.currentThread().isInterrupted()) {
                    if (written > 0) {
                        reset();
                    }
                    throw new TransportException(ErrorCode.NETWORK, what(tag) + ": interrupted");
                }
            }
        } catch (IOException | RuntimeException e) {
            if (e instanceof TransportException t) {
                throw t;
            }
            reset();
            manager.ensureOpen();
            String why = manager.lostReason(state);
            throw new TransportException(ErrorCode.PEER_LOST, what(tag) + ": the connection failed after " + written
                    + " of " + total + " bytes (" + (why != null ? why : e.getMessage()) + ")", e);
        } finally {
            if (writeKey != null && writeKey.isValid()) {
                writeKey.interestOps(0);
            }
        }
    }

    /**
     * Connects and handshakes, retrying refused connects (a peer that is not listening yet) until the connect
     * timeout or the call's deadline. Holds the write lock.
     */
    private void connect(long callDeadline) {
        closeSocket();
        long deadline = Math.min(callDeadline, System.nanoTime() + manager.settings().connectTimeout().toNanos());
        long pause = TimeUnit.MILLISECONDS.toNanos(10);
        String last = "no attempt";
        while (true) {
            manager.ensureOpen();
            try {
                connectOnce(deadline);
                broken = false;
                return;
            } catch (IOException e) {
                last = e.getMessage() == null ? e.toString() : e.getMessage();
            }
            long left = deadline - System.nanoTime();
            if (left <= 0) {
                break;
            }
            manager.pause(Math.min(left, pause));
            pause = Math.min(MAX_RETRY_PAUSE_NANOS, pause * 2);
        }
        ErrorCode code = System.nanoTime() - callDeadline >= 0 ? ErrorCode.TIMEOUT : ErrorCode.NETWORK;
        throw new TransportException(code, "tcp transport " + manager.name() + ": cannot connect to " + peer + ": "
                + last);
    }

    private void connectOnce(long deadline) throws IOException {
        InetSocketAddress target = TcpAddress.parse(peer);
        SocketChannel ch = SocketChannel.open();
        Selector sel = null;
        try {
            ch.configureBlocking(false);
            ch.setOption(StandardSocketOptions.TCP_NODELAY, true);
            int buf = manager.settings().socketBuffer();
            if (buf > 0) {
                ch.setOption(StandardSocketOptions.SO_SNDBUF, buf);
                ch.setOption(StandardSocketOptions.SO_RCVBUF, buf);
            }
            sel = Selector.open();
            SelectionKey key = ch.register(sel, 0);
            if (!ch.connect(target)) {
                key.interestOps(SelectionKey.OP_CONNECT);
                while (!ch.finishConnect()) {
                    waitFor(sel, deadline, "connect");
                }
            }
            byte[] nonce = new byte[Handshake.NONCE];
            ByteBuffer hello = manager.handshake().hello(manager.localAddress(), peer, nonce);
            key.interestOps(SelectionKey.OP_WRITE);
            while (hello.hasRemaining()) {
                if (ch.write(hello) == 0) {
                    waitFor(sel, deadline, "hello");
                }
            }
            ByteBuffer welcome = ByteBuffer.allocate(Handshake.WELCOME).order(ByteOrder.LITTLE_ENDIAN);
            key.interestOps(SelectionKey.OP_READ);
            while (welcome.hasRemaining()) {
                int n = ch.read(welcome);
                if (n < 0) {
                    throw new IOException("the peer closed during the handshake");
                }
                if (n == 0) {
                    waitFor(sel, deadline, "welcome");
                }
            }
            try {
                manager.handshake().checkWelcome(welcome.flip(), nonce);
            } catch (IllegalArgumentException refused) {
                // Receives from this peer fail UNAUTHORIZED too: nothing will come from a peer that refused us.
                manager.peerRefused(state, refused.getMessage());
                throw new TransportException(ErrorCode.UNAUTHORIZED, "tcp transport " + manager.name()
                        + ": handshake with " + peer + ": " + refused.getMessage());
            }
            manager.peerRefused(state, null);
            key.interestOps(0);
            synchronized (this) {
                if (closed) {
                    throw new TransportClosedException("connection to " + peer + " closed");
                }
                out = ch;
                writeSelector = sel;
                writeKey = key;
            }
            manager.watch(ch, this);
        } catch (IOException | RuntimeException e) {
            ch.close();
            if (sel != null) {
                sel.close();
            }
            throw e;
        }
    }

    private void waitFor(Selector sel, long deadline, String what) throws IOException {
        long left = deadline - System.nanoTime();
        if (left <= 0) {
            throw new IOException(what + " did not complete in time");
        }
        if (closed) {
            throw new IOException("closing");
        }
        sel.select(Math.max(1, Math.min(TimeUnit.NANOSECONDS.toMillis(left), WRITE_SLICE_MS)));
        sel.selectedKeys().clear();
        if (Thread.currentThread().isInterrupted()) {
            throw new TransportException(ErrorCode.NETWORK, "connect to " + peer + ": interrupted");
        }
    }

    /** The I/O thread saw this socket end (the peer closed): the next send reconnects if the peer came back. */
    void broken(SocketChannel ch) {
        if (ch == out) {
            broken = true;
        }
    }

    private void reset() {
        broken = true;
        closeSocket();
    }

    private synchronized void closeSocket() {
        try {
            if (out != null) {
                out.close();
            }
        } catch (IOException e) {
            // closing anyway
        }
        try {
            if (writeSelector != null) {
                writeSelector.close();
            }
        } catch (IOException e) {
            // closing anyway
        }
        out = null;
        writeSelector = null;
        writeKey = null;
    }

    @Override
    public void recv(int tag, MemoryBuffer buffer, long offset, long length, Duration timeout) {
        manager.recv(state, peer, tag, buffer, offset, length, timeout);
    }

    /**
     * Two: the gathering socket write and the I/O thread's read straight into the waiting receive (a frame that
     * arrives before its receive is staged and costs three).
     */
    @Override
    public int copiesPerByte(long length) {
        return 2;
    }

    /** Writes are emulated: each entry is a message received into place. */
    @Override
    public int writeCopiesPerByte(long length) {
        return 2;
    }

    @Override
    public void write(WriteBatch batch, Duration timeout) {
        manager.ensureOpen();
        manager.oneSided().write(this, batch, timeout);
    }

    /** Closes the socket and its selector (the manager is closing); wakes a sender waiting on it. */
    void close() {
        Selector sel;
        synchronized (this) {
            closed = true;
            sel = writeSelector;
        }
        if (sel != null) {
            sel.wakeup();
        }
        // A sender holds the write lock while it runs; it sees the manager closed within one write slice.
        boolean locked = false;
        try {
            locked = writeLock.tryLock(2, TimeUnit.SECONDS);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
        try {
            closeSocket();
        } finally {
            if (locked) {
                writeLock.unlock();
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

    @Override
    public String toString() {
        return "TcpConnection{" + manager.localAddress() + " -> " + peer + "}";
    }
}
