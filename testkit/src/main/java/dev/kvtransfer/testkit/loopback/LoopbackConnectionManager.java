package dev.kvtransfer.testkit.loopback;

import dev.kvtransfer.api.ErrorHandler;
import dev.kvtransfer.api.transport.RegisteredRegion;
import dev.kvtransfer.api.transport.support.EmulatedOneSided;
import dev.kvtransfer.core.memory.HostBufferManager;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.memory.MemoryKind;
import dev.kvtransfer.api.transport.Connection;
import dev.kvtransfer.api.transport.ConnectionManager;
import dev.kvtransfer.api.transport.TransportClosedException;
import dev.kvtransfer.api.transport.TransportConfig;
import dev.kvtransfer.api.transport.TransportException;
import dev.kvtransfer.core.memory.MemoryAccess;

import java.time.Duration;
import java.util.ArrayDeque;
import java.util.HashMap;
import java.util.Iterator;
import java.util.Map;
import java.util.Objects;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.locks.Condition;
import java.util.concurrent.locks.ReentrantLock;

/**
 * One rank's endpoint on a loopback fabric. See {@link LoopbackTransportProvider} for the semantics.
 *
 * <p>Matching, under this (receiving) manager's lock: per tag, a FIFO of unclaimed messages (each knows its
 * sender) and a FIFO of posted receives (each for one sender, or for any sender from {@code recvConnect}). A
 * send takes the oldest posted receive that accepts it, else queues. Copies run outside the lock: a sender
 * <em>claims</em> a posted receive, copies, then completes it; a receive that is claimed waits for the copy to
 * finish even past its deadline (the copy is a bounded memcpy), so no one ever writes into a buffer its owner
 * has been given back. Locks never nest: a send takes only the receiver's lock, a close takes one lock at a
 * time.
 */
final class LoopbackConnectionManager implements ConnectionManager {
    private static final String SCHEME = "loopback://";
    /** Every manager of the JVM gets a distinct number, so an address is never reused. */
    private static final AtomicLong NEXT_ID = new AtomicLong();
    private static final Map<String, Map<String, LoopbackConnectionManager>> FABRICS = new ConcurrentHashMap<>();

    private final String fabricName;
    private final Map<String, LoopbackConnectionManager> fabric;
    private final String address;
    private final String name;
    private final Duration defaultTimeout;
    private final Map<String, LoopbackConnection> connections = new ConcurrentHashMap<>();
    private final ErrorHandler errors;
    /** Control buffers of the one-sided emulation: one manager for the JVM, never closed (tests check theirs). */
    private static final HostBufferManager CONTROL_BUFFERS = new HostBufferManager();
    private volatile EmulatedOneSided oneSided;

    private final ReentrantLock lock = new ReentrantLock();
    /** Unclaimed messages per tag, oldest first. Guarded by {@link #lock}. */
    private final Map<Integer, ArrayDeque<Message>> pending = new HashMap<>();
    /** Waiting receives per tag, oldest first. Guarded by {@link #lock}. */
    private final Map<Integer, ArrayDeque<Posted>> posted = new HashMap<>();
    private volatile boolean closed;

    private LoopbackConnectionManager(String fabricName, Map<String, LoopbackConnectionManager> fabric,
                                      long id, TransportConfig config) {
        this.fabricName = fabricName;
        this.fabric = fabric;
        this.address = SCHEME + fabricName + "/" + id;
        this.name = config.name();
        this.defaultTimeout = config.defaultTimeout();
        this.errors = config.errorHandler();
    }

    static LoopbackConnectionManager open(String fabricName, TransportConfig config) {
        Map<String, LoopbackConnectionManager> fabric = FABRICS.computeIfAbsent(fabricName,
                k -> new ConcurrentHashMap<>());
        LoopbackConnectionManager m = new LoopbackConnectionManager(fabricName, fabric,
                NEXT_ID.getAndIncrement(), config);
        fabric.put(m.address, m);
        return m;
    }

    @Override
    public String localAddress() {
        return address;
    }

    @Override
    public Duration defaultTimeout() {
        return defaultTimeout;
    }

    @Override
    public Connection pollConnect(int tag, MemoryBuffer buffer, long offset, long length, Duration wait) {
        String from = receive(null, tag, buffer, offset, length, Objects.requireNonNull(wait, "wait"), true);
        return from == null ? null : connection(from);
    }

    @Override
    public RegisteredRegion register(MemoryBuffer memory) {
        checkOpen("register");
        return oneSided().register(memory);
    }

    /** The emulated one-sided writes of this manager (created on first use). */
    EmulatedOneSided oneSided() {
        EmulatedOneSided o = oneSided;
        if (o == null) {
            synchronized (this) {
                if (oneSided == null) {
                    checkOpen("one-sided write");
                    oneSided = new EmulatedOneSided(this, CONTROL_BUFFERS, errors, defaultTimeout, name);
                }
                o = oneSided;
            }
        }
        return o;
    }

    @Override
    public Connection connection(String peerAddress) {
        Objects.requireNonNull(peerAddress, "address");
        checkOpen("connection to " + peerAddress);
        LoopbackConnection c = connections.get(peerAddress);
        if (c != null) {
            return c;
        }
        parseId(peerAddress); // validates before caching
        return connections.computeIfAbsent(peerAddress, a -> new LoopbackConnection(this, a, defaultTimeout));
    }

    @Override
    public boolean isRunning() {
        return !closed;
    }

    @Override
    public void close() {
        EmulatedOneSided o;
        synchronized (this) {
            o = oneSided;
        }
        if (o != null) {
            o.close();
        }
        lock.lock();
        try {
            if (closed) {
                return;
            }
            closed = true;
            for (ArrayDeque<Posted> q : posted.values()) {
                for (Iterator<Posted> it = q.iterator(); it.hasNext(); ) {
                    Posted p = it.next();
                    if (p.state == Posted.WAITING) {
                        it.remove();
                        p.fail(ErrorCode.NETWORK, "loopback manager " + address + " closed", true);
                    }
                }
            }
            posted.clear();
            for (ArrayDeque<Message> q : pending.values()) {
                for (Message m : q) {
                    m.free();
                }
            }
            pending.clear();
        } finally {
            lock.unlock();
        }
        fabric.remove(address, this);
        // Removed from the fabric first: a receive that starts now sees the peer gone; one already waiting is
        // failed here (peerClosed takes that manager's lock, after which it cannot be mid-post).
        for (LoopbackConnectionManager other : fabric.values()) {
            other.peerClosed(address);
        }
    }

    @Override
    public String toString() {
        return "LoopbackConnectionManager{" + name + " " + address + (closed ? ", closed" : "") + "}";
    }

    private void peerClosed(String peer) {
        lock.lock();
        try {
            for (ArrayDeque<Posted> q : posted.values()) {
                for (Iterator<Posted> it = q.iterator(); it.hasNext(); ) {
                    Posted p = it.next();
                    if (p.state == Posted.WAITING && peer.equals(p.from)) {
                        it.remove();
                        p.fail(ErrorCode.PEER_LOST, "peer " + peer + " closed while " + address
                                + " waited for tag " + p.tag, false);
                    }
                }
            }
        } finally {
            lock.unlock();
        }
    }

    private void checkOpen(String what) {
        if (closed) {
            throw new TransportClosedException(what + ": loopback manager " + address + " is closed");
        }
    }

    private long parseId(String peerAddress) {
        String prefix = SCHEME + fabricName + "/";
        if (!peerAddress.startsWith(prefix)) {
            throw new TransportException(ErrorCode.NETWORK, "address '" + peerAddress + "' is not on loopback fabric '"
                    + fabricName + "' (expected " + prefix + "<n>)");
        }
        try {
            return Long.parseLong(peerAddress.substring(prefix.length()));
        } catch (NumberFormatException e) {
            throw new TransportException(ErrorCode.NETWORK, "malformed loopback address '" + peerAddress + "'", e);
        }
    }

    /** The live manager at an address, or an exception saying why there is none. */
    private LoopbackConnectionManager peer(String peerAddress) {
        LoopbackConnectionManager m = fabric.get(peerAddress);
        if (m != null) {
            return m;
        }
        long id = parseId(peerAddress);
        if (id < NEXT_ID.get()) {
            return null; // existed and closed
        }
        throw new TransportException(ErrorCode.NETWORK, "no loopback manager listens at " + peerAddress);
    }

    private static void checkRange(MemoryBuffer buffer, long offset, long length) {
        Objects.requireNonNull(buffer, "buffer");
        if (buffer.kind() == MemoryKind.DEVICE) {
            throw new UnsupportedOperationException("the loopback transport does not declare DEVICE_MEMORY: it"
                    + " cannot send or receive DEVICE buffers (" + buffer + ")");
        }
        Objects.checkFromIndexSize(offset, length, buffer.size());
    }

    /** @return the wait in nanoseconds */
    private static long nanos(Duration timeout) {
        if (timeout.isNegative()) {
            throw new IllegalArgumentException("timeout " + timeout + " is negative");
        }
        try {
            return timeout.toNanos();
        } catch (ArithmeticException e) {
            return Long.MAX_VALUE;
        }
    }

    /** Sends from this manager to {@code to}. */
    void send(String to, int tag, MemoryBuffer buffer, long offset, long length, Duration timeout) {
        checkRange(buffer, offset, length);
        nanos(timeout);
        checkOpen("send tag " + tag + " to " + to);
        LoopbackConnectionManager r = peer(to);
        if (r == null) {
            throw new TransportException(ErrorCode.PEER_LOST, "send tag " + tag + " from " + address + ": peer "
                    + to + " is closed");
        }
        long src = length == 0 ? 0 : buffer.address() + offset;
        r.deliver(address, tag, src, length);
    }

    /** Called on the receiving manager by a sender thread. */
    private void deliver(String from, int tag, long src, long length) {
        // Fast path: a receive is already posted: copy straight into its buffer.
        Posted p;
        lock.lock();
        try {
            checkPeerOpen(from, tag);
            p = claim(from, tag, length);
        } finally {
            lock.unlock();
        }
        if (p != null) {
            complete(p, src, length);
            return;
        }
        // Eager path: copy into an off-heap message the receive will copy out, so the send returns now.
        Message m = new Message(from, tag, length);
        MemoryAccess.copy(src, m.address, length);
        lock.lock();
        try {
            checkPeerOpen(from, tag);
            p = claim(from, tag, length);
            if (p == null) {
                pending.computeIfAbsent(tag, k -> new ArrayDeque<>()).add(m);
                return;
            }
        } catch (RuntimeException e) {
            m.free();
            throw e;
        } finally {
            lock.unlock();
        }
        try {
            complete(p, m.address, length);
        } finally {
            m.free();
        }
    }

    private void checkPeerOpen(String from, int tag) {
        if (closed) {
            throw new TransportException(ErrorCode.PEER_LOST, "send tag " + tag + " from " + from + ": peer "
                    + address + " is closed");
        }
    }

    /**
     * Under the lock: the oldest posted receive of the tag that accepts the sender, now claimed; a length
     * mismatch fails that receive with MALFORMED (the message is consumed, as on a real network) and returns a
     * claimed-and-done marker so the sender does not queue.
     */
    private Posted claim(String from, int tag, long length) {
        ArrayDeque<Posted> q = posted.get(tag);
        if (q == null) {
            return null;
        }
        for (Iterator<Posted> it = q.iterator(); it.hasNext(); ) {
            Posted p = it.next();
            if (p.from == null || p.from.equals(from)) {
                it.remove();
                p.sender = from;
                if (p.length != length) {
                    p.fail(ErrorCode.MALFORMED, "tag " + tag + " from " + from + ": message of " + length
                            + " bytes, receive expected " + p.length, false);
                    return Posted.CONSUMED;
                }
                p.state = Posted.CLAIMED;
                return p;
            }
        }
        return null;
    }

    private void complete(Posted p, long src, long length) {
        if (p == Posted.CONSUMED) {
            return;
        }
        try {
            MemoryAccess.copy(src, p.dst, length);
        } finally {
            lock.lock();
            try {
                p.state = Posted.DONE;
                p.cond.signalAll();
            } finally {
                lock.unlock();
            }
        }
    }

    /**
     * Receives the next message of a tag from one sender ({@code from}) or any ({@code null}).
     *
     * @return the sender's address
     */
    String receive(String from, int tag, MemoryBuffer buffer, long offset, long length, Duration timeout) {
        return receive(from, tag, buffer, offset, length, Objects.requireNonNull(timeout, "timeout"), false);
    }

    /**
     * Receives the next message of a tag from one sender ({@code from}) or any ({@code null}).
     *
     * @param nullOnTimeout return null instead of failing with TIMEOUT (pollConnect)
     * @return the sender's address, or null on timeout when {@code nullOnTimeout}
     */
    private String receive(String from, int tag, MemoryBuffer buffer, long offset, long length, Duration timeout,
                           boolean nullOnTimeout) {
        checkRange(buffer, offset, length);
        long remaining = nanos(timeout);
        long dst = length == 0 ? 0 : buffer.address() + offset;
        String what = (from == null ? "recvConnect" : "recv from " + from) + " tag " + tag + " at " + address;
        Message m = null;
        Posted p;
        lock.lock();
        try {
            checkOpen(what);
            ArrayDeque<Message> q = pending.get(tag);
            if (q != null) {
                for (Iterator<Message> it = q.iterator(); it.hasNext(); ) {
                    Message x = it.next();
                    if (from == null || from.equals(x.from)) {
                        it.remove();
                        m = x;
                        break;
                    }
                }
            }
            if (m == null) {
                if (from != null && peer(from) == null) {
                    throw new TransportException(ErrorCode.PEER_LOST, what + ": peer " + from + " is closed");
                }
                p = new Posted(from, tag, dst, length, lock.newCondition());
                posted.computeIfAbsent(tag, k -> new ArrayDeque<>()).add(p);
            } else {
                p = null;
            }
        } finally {
            lock.unlock();
        }
        if (m != null) {
            try {
                if (m.length != length) {
                    throw new TransportException(ErrorCode.MALFORMED, what + ": message of " + m.length
                            + " bytes from " + m.from + ", receive expected " + length);
                }
                MemoryAccess.copy(m.address, dst, length);
                return m.from;
            } finally {
                m.free();
            }
        }
        return await(p, remaining, what, nullOnTimeout);
    }

    private String await(Posted p, long nanos, String what, boolean nullOnTimeout) {
        boolean interrupted = false;
        lock.lock();
        try {
            long start = System.nanoTime();
            while (p.state == Posted.WAITING || p.state == Posted.CLAIMED) {
                long left = nanos - (System.nanoTime() - start); // overflow-safe for nanos = Long.MAX_VALUE
                if (p.state == Posted.WAITING) {
                    if (left <= 0) {
                        removePosted(p);
                        if (nullOnTimeout) {
                            return null;
                        }
                        throw new TransportException(ErrorCode.TIMEOUT, what + ": nothing arrived within "
                                + Duration.ofNanos(nanos));
                    }
                    if (interrupted) {
                        removePosted(p);
                        throw new TransportException(ErrorCode.NETWORK, what + ": interrupted");
                    }
                } else {
                    left = TimeUnit.MILLISECONDS.toNanos(100); // a claimed copy is a bounded memcpy
                }
                try {
                    p.cond.awaitNanos(left);
                } catch (InterruptedException e) {
                    interrupted = true;
                }
            }
            if (p.state == Posted.FAILED) {
                if (p.closed) {
                    throw new TransportClosedException(p.failure);
                }
                throw new TransportException(p.failCode, p.failure);
            }
            return p.sender;
        } finally {
            lock.unlock();
            if (interrupted) {
                Thread.currentThread().interrupt();
            }
        }
    }

    private void removePosted(Posted p) {
        ArrayDeque<Posted> q = posted.get(p.tag);
        if (q != null) {
            q.remove(p);
        }
        p.state = Posted.FAILED;
    }

    /** A queued message: an off-heap copy of the payload. */
    private static final class Message {
        final String from;
        final long length;
        final long address;
        private boolean freed;

        Message(String from, int tag, long length) {
            this.from = from;
            this.length = length;
            this.address = length == 0 ? 0 : MemoryAccess.allocate(length);
        }

        void free() {
            if (!freed && address != 0) {
                MemoryAccess.free(address);
            }
            freed = true;
        }
    }

    /** A waiting receive. State changes under the manager's lock. */
    private static final class Posted {
        static final int WAITING = 0;
        static final int CLAIMED = 1;
        static final int DONE = 2;
        static final int FAILED = 3;
        /** Marker: the matched receive was failed (length mismatch), the message is consumed. */
        static final Posted CONSUMED = new Posted(null, 0, 0, 0, null);

        final String from;
        final int tag;
        final long dst;
        final long length;
        final Condition cond;
        int state = WAITING;
        String sender;
        ErrorCode failCode;
        String failure;
        boolean closed;

        Posted(String from, int tag, long dst, long length, Condition cond) {
            this.from = from;
            this.tag = tag;
            this.dst = dst;
            this.length = length;
            this.cond = cond;
        }

        void fail(ErrorCode code, String why, boolean byClose) {
            state = FAILED;
            failCode = code;
            failure = why;
            closed = byClose;
            cond.signalAll();
        }
    }
}
