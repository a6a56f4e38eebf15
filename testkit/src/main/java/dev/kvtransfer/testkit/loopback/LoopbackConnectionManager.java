package dev.kvtransfer.testkit.loopback;

import dev.kvtransfer.api.ErrorHandler;
import dev.kvtransfer.api.transport.RegisteredRegion;
import dev.kvtransfer.core.memory.HostBufferManager;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.memory.MemoryKind;
import dev.kvtransfer.api.transport.Connection;
import dev.kvtransfer.api.transport.ConnectionManager;
import dev.kvtransfer.api.transport.RecvCompletion;
import dev.kvtransfer.api.transport.TransportClosedException;
import dev.kvtransfer.api.transport.TransportConfig;
import dev.kvtransfer.api.transport.TransportException;
import dev.kvtransfer.core.memory.MemoryAccess;
import dev.kvtransfer.transport.support.EmulatedOneSided;

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
import java.util.function.Supplier;

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
 *
 * <p>Rendezvous: a send of more than {@link Connection#EAGER_LIMIT} bytes that finds no posted receive queues a
 * <em>ready-to-send</em> message that points at the sender's own buffer and waits (at most the rendezvous wait, and
 * never past its own deadline) for a receive to take it; the receive then copies straight from the sender's buffer
 * (one copy, done by whichever thread arrives second). If no receive comes within the wait, the sender copies the
 * message into an eager buffer and returns as an eager send would (no sender ever waits on a receiver that never
 * comes; a receive arriving during that copy still takes it from the sender's buffer). Eager buffers come from a
 * small per-manager pool (power-of-two classes, bounded), so a stream of eager messages does not fault in fresh
 * pages for every one.
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

    /** Longest a large send waits for its receive before it goes eager; 0: every send is eager. */
    private final long rendezvousNanos;
    /** Eager buffers of messages queued at this (receiving) manager. */
    private final EagerPool eagerPool;

    private final ReentrantLock lock = new ReentrantLock();
    /** Unclaimed messages per tag, oldest first. Guarded by {@link #lock}. */
    private final Map<Integer, ArrayDeque<Message>> pending = new HashMap<>();
    /** Waiting receives per tag, oldest first. Guarded by {@link #lock}. */
    private final Map<Integer, ArrayDeque<PostedReceive>> posted = new HashMap<>();
    private volatile boolean closed;
    /** Callbacks and deadlines of posted receives ({@code recvAsync}). Used under {@link #lock}. */
    private final PostedRunner postedRunner;

    private LoopbackConnectionManager(String fabricName, Map<String, LoopbackConnectionManager> fabric,
                                      long id, TransportConfig config) {
        this.fabricName = fabricName;
        this.fabric = fabric;
        this.address = SCHEME + fabricName + "/" + id;
        this.name = config.name();
        this.defaultTimeout = config.defaultTimeout();
        this.errors = config.errorHandler();
        this.postedRunner = new PostedRunner(name, errors);
        this.rendezvousNanos = TimeUnit.MICROSECONDS.toNanos(config.longProperty(
                LoopbackTransportProvider.RENDEZVOUS_WAIT_US_PROPERTY, LoopbackTransportProvider.DEFAULT_RENDEZVOUS_WAIT_US));
        this.eagerPool = new EagerPool(config.longProperty(LoopbackTransportProvider.EAGER_POOL_BYTES_PROPERTY,
                LoopbackTransportProvider.DEFAULT_EAGER_POOL_BYTES));
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
        checkOpen(() -> "register");
        return oneSided().register(memory);
    }

    @Override
    public RegisteredRegion register(MemoryBuffer memory, java.util.Set<String> writers) {
        java.util.Objects.requireNonNull(writers, "writers");
        checkOpen(() -> "register");
        return oneSided().register(memory, writers);
    }

    /** The emulated one-sided writes of this manager (created on first use). */
    EmulatedOneSided oneSided() {
        EmulatedOneSided o = oneSided;
        if (o == null) {
            synchronized (this) {
                if (oneSided == null) {
                    checkOpen(() -> "one-sided write");
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
        checkOpen(() -> "connection to " + peerAddress);
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
            for (ArrayDeque<PostedReceive> q : posted.values()) {
                for (Iterator<PostedReceive> it = q.iterator(); it.hasNext(); ) {
                    PostedReceive p = it.next();
                    if (p.state == PostedReceive.WAITING) {
                        it.remove();
                        p.fail(ErrorCode.NETWORK, "loopback manager " + address + " closed", true);
                        notifyPosted(p);
                    }
                }
            }
            posted.clear();
            for (ArrayDeque<Message> q : pending.values()) {
                for (Message m : q) {
                    if (m.state == Message.READY) {
                        m.fail(ErrorCode.PEER_LOST, "send tag " + m.tag + " from " + m.from + ": peer " + address
                                + " closed before receiving it");
                    } else {
                        m.free(eagerPool);
                    }
                }
            }
            pending.clear();
            eagerPool.close();
            postedRunner.shutdown();
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
            for (ArrayDeque<PostedReceive> q : posted.values()) {
                for (Iterator<PostedReceive> it = q.iterator(); it.hasNext(); ) {
                    PostedReceive p = it.next();
                    if (p.state == PostedReceive.WAITING && peer.equals(p.from)) {
                        it.remove();
                        p.fail(ErrorCode.PEER_LOST, "peer " + peer + " closed while " + address
                                + " waited for tag " + p.tag, false);
                        notifyPosted(p);
                    }
                }
            }
            // A closed sender's ready-to-send messages are withdrawn: its blocked send fails (closed), and the
            // receive that would have copied from its buffer never does.
            for (ArrayDeque<Message> q : pending.values()) {
                for (Iterator<Message> it = q.iterator(); it.hasNext(); ) {
                    Message m = it.next();
                    if (m.state == Message.READY && peer.equals(m.from)) {
                        it.remove();
                        m.closed = true;
                        m.fail(ErrorCode.NETWORK, "send tag " + m.tag + " from " + peer + " to " + address
                                + ": loopback manager " + peer + " closed");
                    }
                }
            }
        } finally {
            lock.unlock();
        }
    }

    private void checkOpen(Supplier<String> what) {
        if (closed) {
            throw new TransportClosedException(what.get() + ": loopback manager " + address + " is closed");
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
        checkOpen(() -> "send tag " + tag + " to " + to);
        LoopbackConnectionManager r = peer(to);
        if (r == null) {
            throw new TransportException(ErrorCode.PEER_LOST, "send tag " + tag + " from " + address + ": peer "
                    + to + " is closed");
        }
        long src = length == 0 ? 0 : buffer.address() + offset;
        long wait = length > Connection.EAGER_LIMIT ? Math.min(rendezvousNanos, nanos(timeout)) : 0;
        r.deliver(address, tag, src, length, wait);
    }

    /**
     * Called on the receiving manager by a sender thread.
     *
     * @param wait nanoseconds to wait, ready-to-send, for a receive to take the message; 0 sends eagerly
     */
    private void deliver(String from, int tag, long src, long length, long wait) {
        // Fast path: a receive is already posted: copy straight into its buffer.
        PostedReceive p;
        Message rts = null;
        lock.lock();
        try {
            checkPeerOpen(from, tag);
            p = claim(from, tag, length);
            if (p == null && wait > 0) {
                rts = new Message(from, tag, length, src, lock.newCondition());
                pending.computeIfAbsent(tag, k -> new ArrayDeque<>()).add(rts);
            }
        } finally {
            lock.unlock();
        }
        if (p != null) {
            complete(p, src, length);
            return;
        }
        if (rts != null) {
            rendezvous(rts, wait);
            return;
        }
        // Eager path: copy into an off-heap message the receive will copy out, so the send returns now.
        Message m = new Message(from, tag, length, eagerPool.take(length));
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
            m.free(eagerPool);
            throw e;
        } finally {
            lock.unlock();
        }
        try {
            complete(p, m.address, length);
        } finally {
            m.free(eagerPool);
        }
    }

    /**
     * The sender's side of a queued ready-to-send message: waits until a receive has copied it out of the sender's
     * buffer, or, after {@code wait}, copies it into an eager buffer (a receive arriving meanwhile still copies from
     * the sender's buffer: the sender does not return before that copy is done).
     */
    private void rendezvous(Message m, long wait) {
        boolean interrupted = false;
        long eager = 0;
        lock.lock();
        try {
            long start = System.nanoTime();
            while (m.state == Message.READY || m.state == Message.CLAIMED) {
                long left;
                if (m.state == Message.READY) {
                    left = wait - (System.nanoTime() - start);
                    if (left <= 0 || interrupted) {
                        break;
                    }
                } else {
                    left = TimeUnit.MILLISECONDS.toNanos(100); // a claimed copy is a bounded memcpy
                }
                try {
                    m.cond.awaitNanos(left);
                } catch (InterruptedException e) {
                    interrupted = true;
                }
            }
            if (m.state == Message.READY) {
                if (interrupted) {
                    ArrayDeque<Message> q = pending.get(m.tag);
                    if (q != null) {
                        q.remove(m);
                    }
                    m.state = Message.FAILED;
                    throw new TransportException(ErrorCode.NETWORK, "send tag " + m.tag + " from " + m.from + " to "
                            + address + ": interrupted");
                }
                eager = -1; // no receive came within the wait: go eager below
            }
            if (m.state == Message.FAILED) {
                throw m.failure();
            }
        } finally {
            lock.unlock();
            if (interrupted) {
                Thread.currentThread().interrupt();
            }
        }
        if (eager == 0) {
            return; // a receive copied it
        }
        long buf = eagerPool.take(m.length);
        try {
            MemoryAccess.copy(m.src, buf, m.length);
        } catch (RuntimeException | Error e) {
            eagerPool.give(buf, m.length);
            throw e;
        }
        lock.lock();
        try {
            if (m.state == Message.READY) {
                m.address = buf;
                m.state = Message.EAGER; // still in the queue, in its place
                m.cond.signalAll();
                return;
            }
            // Taken (or withdrawn) while we copied: the copy is not needed; wait for the receive's own copy.
            while (m.state == Message.CLAIMED) {
                m.cond.awaitUninterruptibly();
            }
        } finally {
            lock.unlock();
        }
        eagerPool.give(buf, m.length);
        if (m.state == Message.FAILED) {
            throw m.failure();
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
    private PostedReceive claim(String from, int tag, long length) {
        ArrayDeque<PostedReceive> q = posted.get(tag);
        if (q == null) {
            return null;
        }
        for (Iterator<PostedReceive> it = q.iterator(); it.hasNext(); ) {
            PostedReceive p = it.next();
            if (p.from == null || p.from.equals(from)) {
                it.remove();
                p.sender = from;
                if (p.length != length) {
                    p.fail(ErrorCode.MALFORMED, "tag " + tag + " from " + from + ": message of " + length
                            + " bytes, receive expected " + p.length, false);
                    notifyPosted(p);
                    return PostedReceive.CONSUMED;
                }
                p.state = PostedReceive.CLAIMED;
                return p;
            }
        }
        return null;
    }

    private void complete(PostedReceive p, long src, long length) {
        if (p == PostedReceive.CONSUMED) {
            return;
        }
        try {
            MemoryAccess.copy(src, p.dst, length);
        } finally {
            lock.lock();
            try {
                p.state = PostedReceive.DONE;
                p.cond.signalAll();
                notifyPosted(p);
            } finally {
                lock.unlock();
            }
        }
    }

    private void notifyPosted(PostedReceive p) {
        postedRunner.notifyEnded(p);
    }

    /**
     * Posts a receive from {@code from}: a message already queued is copied out now, else the receive waits in the
     * tag's FIFO as a blocking one would; its end is reported on the runner thread.
     */
    void receiveAsync(String from, int tag, MemoryBuffer buffer, long offset, long length, Duration timeout,
                      RecvCompletion done) {
        checkRange(buffer, offset, length);
        long nanos = nanos(Objects.requireNonNull(timeout, "timeout"));
        Objects.requireNonNull(done, "done");
        long dst = length == 0 ? 0 : buffer.address() + offset;
        // Built only for an error: a receive that succeeds allocates no text.
        Supplier<String> what = () -> "posted recv from " + from + " tag " + tag + " at " + address;
        PostedReceive p = new PostedReceive(from, tag, dst, length, lock.newCondition());
        p.done = done;
        Message m;
        lock.lock();
        try {
            checkOpen(what);
            postedRunner.start();
            m = takePending(from, tag, length);
            if (m == null) {
                if (peer(from) == null) {
                    p.fail(ErrorCode.PEER_LOST, what.get() + ": peer " + from + " is closed", false);
                    notifyPosted(p);
                    return;
                }
                posted.computeIfAbsent(tag, k -> new ArrayDeque<>()).add(p);
                p.timer = postedRunner.schedule(() -> expire(p, what, nanos), nanos);
                return;
            }
        } finally {
            lock.unlock();
        }
        TransportException failure = null;
        try {
            copyOut(m, dst, length, what);
        } catch (TransportException e) {
            failure = e;
        }
        lock.lock();
        try {
            if (failure == null) {
                p.state = PostedReceive.DONE;
            } else {
                p.fail(failure.code(), failure.getMessage(), false);
            }
            notifyPosted(p);
        } finally {
            lock.unlock();
        }
    }

    /** The runner: a posted receive's deadline passed; one that is being copied into is left to finish. */
    private void expire(PostedReceive p, Supplier<String> what, long nanos) {
        lock.lock();
        try {
            if (p.state == PostedReceive.WAITING) {
                removePostedReceive(p);
                p.fail(ErrorCode.TIMEOUT, what.get() + ": nothing arrived within " + Duration.ofNanos(nanos), false);
                notifyPosted(p);
            }
        } finally {
            lock.unlock();
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
        Supplier<String> what = () -> (from == null ? "recvConnect" : "recv from " + from) + " tag " + tag + " at "
                + address;
        Message m = null;
        PostedReceive p;
        lock.lock();
        try {
            checkOpen(what);
            m = takePending(from, tag, length);
            if (m == null) {
                if (from != null && peer(from) == null) {
                    throw new TransportException(ErrorCode.PEER_LOST, what.get() + ": peer " + from + " is closed");
                }
                p = new PostedReceive(from, tag, dst, length, lock.newCondition());
                posted.computeIfAbsent(tag, k -> new ArrayDeque<>()).add(p);
            } else {
                p = null;
            }
        } finally {
            lock.unlock();
        }
        if (m != null) {
            return copyOut(m, dst, length, what);
        }
        return await(p, remaining, what, nullOnTimeout);
    }

    /**
     * Under the lock: the oldest queued message of the tag from {@code from} (any when null), taken out of the queue.
     * A ready-to-send message is ours to copy from the sender's buffer: the sender waits for it (a length mismatch
     * consumes it and the sender's send completes).
     */
    private Message takePending(String from, int tag, long length) {
        ArrayDeque<Message> q = pending.get(tag);
        if (q == null) {
            return null;
        }
        for (Iterator<Message> it = q.iterator(); it.hasNext(); ) {
            Message x = it.next();
            if (from == null || from.equals(x.from)) {
                it.remove();
                if (x.state == Message.READY) {
                    x.state = x.length == length ? Message.CLAIMED : Message.DONE;
                    if (x.state == Message.DONE) {
                        x.cond.signalAll();
                    }
                }
                return x;
            }
        }
        return null;
    }

    /** Off the lock: copies a taken message into the receive's memory; @return its sender */
    private String copyOut(Message m, long dst, long length, Supplier<String> what) {
        if (m.state == Message.CLAIMED) {
            try {
                MemoryAccess.copy(m.src, dst, length);
            } finally {
                lock.lock();
                try {
                    m.state = Message.DONE;
                    m.cond.signalAll();
                } finally {
                    lock.unlock();
                }
            }
            return m.from;
        }
        try {
            if (m.length != length) {
                throw new TransportException(ErrorCode.MALFORMED, what.get() + ": message of " + m.length
                        + " bytes from " + m.from + ", receive expected " + length);
            }
            MemoryAccess.copy(m.address, dst, length);
            return m.from;
        } finally {
            m.free(eagerPool);
        }
    }

    private String await(PostedReceive p, long nanos, Supplier<String> what, boolean nullOnTimeout) {
        boolean interrupted = false;
        lock.lock();
        try {
            long start = System.nanoTime();
            while (p.state == PostedReceive.WAITING || p.state == PostedReceive.CLAIMED) {
                long left = nanos - (System.nanoTime() - start); // overflow-safe for nanos = Long.MAX_VALUE
                if (p.state == PostedReceive.WAITING) {
                    if (left <= 0) {
                        removePostedReceive(p);
                        if (nullOnTimeout) {
                            return null;
                        }
                        throw new TransportException(ErrorCode.TIMEOUT, what.get() + ": nothing arrived within "
                                + Duration.ofNanos(nanos));
                    }
                    if (interrupted) {
                        removePostedReceive(p);
                        throw new TransportException(ErrorCode.NETWORK, what.get() + ": interrupted");
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
            if (p.state == PostedReceive.FAILED) {
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

    private void removePostedReceive(PostedReceive p) {
        ArrayDeque<PostedReceive> q = posted.get(p.tag);
        if (q != null) {
            q.remove(p);
        }
        p.state = PostedReceive.FAILED;
    }

    /**
     * A queued message: an off-heap copy of the payload ({@link #EAGER}), or a ready-to-send message that points at
     * the blocked sender's buffer ({@link #READY}, then {@link #CLAIMED} by the receive copying it, then
     * {@link #DONE}; or {@link #EAGER} once the sender has copied it after its wait). State changes under the
     * receiving manager's lock.
     */
    private static final class Message {
        static final int EAGER = 0;
        static final int READY = 1;
        static final int CLAIMED = 2;
        static final int DONE = 3;
        static final int FAILED = 4;

        final String from;
        final int tag;
        final long length;
        /** The sender's bytes while it waits (ready-to-send), else 0. */
        final long src;
        /** Signals the waiting sender (ready-to-send only). */
        final Condition cond;
        /** The eager copy, or 0 (none yet, or an empty message). */
        long address;
        int state;
        private ErrorCode failCode;
        private String failure;
        boolean closed;
        private boolean freed;

        /** An eager message whose payload is (or will be) copied to {@code address}. */
        Message(String from, int tag, long length, long address) {
            this.from = from;
            this.tag = tag;
            this.length = length;
            this.src = 0;
            this.cond = null;
            this.address = address;
            this.state = EAGER;
        }

        /** A ready-to-send message over the sender's bytes at {@code src}. */
        Message(String from, int tag, long length, long src, Condition cond) {
            this.from = from;
            this.tag = tag;
            this.length = length;
            this.src = src;
            this.cond = cond;
            this.state = READY;
        }

        void fail(ErrorCode code, String why) {
            state = FAILED;
            failCode = code;
            failure = why;
            cond.signalAll();
        }

        TransportException failure() {
            return closed ? new TransportClosedException(failure) : new TransportException(failCode, failure);
        }

        void free(EagerPool pool) {
            if (!freed && address != 0) {
                pool.give(address, length);
            }
            freed = true;
        }
    }
}
