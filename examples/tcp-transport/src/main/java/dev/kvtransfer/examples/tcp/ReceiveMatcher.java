package dev.kvtransfer.examples.tcp;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.transport.TransportClosedException;
import dev.kvtransfer.api.transport.TransportException;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.ScatteringByteChannel;
import java.util.ArrayDeque;
import java.util.HashMap;
import java.util.Map;
import java.util.concurrent.locks.Condition;
import java.util.concurrent.locks.ReentrantLock;
import java.util.function.BooleanSupplier;

/**
 * Matches arriving messages with receives, under one lock: what every peer has sent that nobody took yet, the
 * receives posted per (peer, tag), the {@code pollConnect}s waiting per tag, and whether a peer is lost.
 *
 * <p>Callers' receives wait here (each with its deadline); the I/O thread tells it about frames: a header
 * ({@link #claim}), payload bytes for a claimed receive ({@link #readInto}, under the lock, only while that receive
 * still waits, so nothing is written into a receive's memory after it returned), the end of a frame
 * ({@link #finish}) and the end of a peer's stream ({@link #streamEnded}). Matching order for a frame: a receive
 * posted on that peer's connection for the tag, then a {@code pollConnect} waiting for the tag, else the frame is
 * staged (every send is eager). A receive or poll whose wait ends while its frame is being read moves what arrived
 * to staging ({@link #withdraw}): the message goes to a later receive, never lost with the one that gave up. A
 * receive whose length differs from the message's fails {@code MALFORMED} and the message is dropped. A lost peer
 * fails its receives {@code PEER_LOST} once everything it sent was delivered.
 */
final class ReceiveMatcher {
    static final int WAITING = 0;
    static final int CLAIMED = 1;
    static final int DONE = 2;
    static final int FAILED = 3;
    static final int ABANDONED = 4;
    /** Gave up while its frame was being read: the rest goes to staging, and the message to a later receive. */
    static final int RESTAGED = 5;

    private final String name;
    private final String localAddress;
    private final BooleanSupplier closed;
    private final ReentrantLock lock = new ReentrantLock();
    private final Condition changed = lock.newCondition();
    /** Guarded by {@link #lock}. */
    private final Map<String, Peer> peers = new HashMap<>();
    /** Guarded by {@link #lock}: pollConnect waits per tag. */
    private final Map<Integer, ArrayDeque<Posted>> anyPosted = new HashMap<>();
    /** Guarded by {@link #lock}: arrival order across peers, for pollConnect. */
    private long arrivals;

    /**
     * @param name         the manager's name, for messages
     * @param localAddress this rank's address, for messages
     * @param closed       whether the manager closed (every wait then ends with {@link TransportClosedException})
     */
    ReceiveMatcher(String name, String localAddress, BooleanSupplier closed) {
        this.name = name;
        this.localAddress = localAddress;
        this.closed = closed;
    }

    /** A receive waiting for its message. */
    static final class Posted {
        final Peer peer;
        final int tag;
        final ByteBuffer[] dst;
        final long length;
        int state = WAITING;
        TransportException failure;
        Peer from;
        /** With {@link #RESTAGED}: the staging buffers holding what was read so far, positioned after it. */
        ByteBuffer[] restaged;

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

    /** What this rank knows of one peer (guarded by the matcher's lock). */
    static final class Peer {
        final String key;
        final Map<Integer, ArrayDeque<Arrived>> arrived = new HashMap<>();
        final Map<Integer, ArrayDeque<Posted>> posted = new HashMap<>();
        /** Frames of a tag being staged right now (the peer is not "drained" while one is). */
        final Map<Integer, Integer> staging = new HashMap<>();
        String lost;
        /** Why this peer refused our handshake (another secret, or none), until a handshake with it succeeds. */
        String refused;

        Peer(String key) {
            this.key = key;
        }

        int staging(int tag) {
            return staging.getOrDefault(tag, 0);
        }
    }

    /** The state of the peer known by {@code key}, made on first use. */
    Peer peer(String key) {
        lock.lock();
        try {
            return peers.computeIfAbsent(key, Peer::new);
        } finally {
            lock.unlock();
        }
    }

    /** A new handshake from this address: the peer is (back) here. */
    Peer revive(String key) {
        lock.lock();
        try {
            Peer p = peers.computeIfAbsent(key, Peer::new);
            p.lost = null;
            p.refused = null;
            return p;
        } finally {
            lock.unlock();
        }
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

    /**
     * Records whether the peer refused our handshake ({@code why}, or null once a handshake with it succeeded) and
     * wakes the receives waiting on it: they fail {@code UNAUTHORIZED}, as nothing will come from a peer that
     * refused us.
     */
    void peerRefused(Peer p, String why) {
        lock.lock();
        try {
            p.refused = why;
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

    /** Wakes every waiting call (the manager closed: each ends with {@link TransportClosedException}). */
    void wakeAll() {
        lock.lock();
        try {
            changed.signalAll();
        } finally {
            lock.unlock();
        }
    }

    // ---------------------------------------------------------------- callers

    /** A connection's receive from peer {@code p}; {@code deadline} in {@link System#nanoTime()}. */
    void recv(Peer p, String peerAddress, int tag, ByteBuffer[] dst, long length, long deadline, long timeoutMillis) {
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
            if (p.refused != null) {
                throw refused(p, peerAddress, tag);
            }
            Posted r = new Posted(p, tag, dst, length);
            p.posted.computeIfAbsent(tag, k -> new ArrayDeque<>()).add(r);
            if (!await(r, deadline, peerAddress)) {
                throw new TransportException(ErrorCode.TIMEOUT, "recv tag " + tag + " from " + peerAddress + " at "
                        + localAddress + ": nothing arrived within " + timeoutMillis + " ms");
            }
        } finally {
            lock.unlock();
        }
    }

    /**
     * Takes the earliest message of {@code tag} from any peer, waiting until {@code deadline} for one.
     *
     * @return the peer it came from, or null when nothing arrived in time
     */
    Peer pollAny(int tag, ByteBuffer[] dst, long length, long deadline) {
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
                return best;
            }
            Posted r = new Posted(null, tag, dst, length);
            anyPosted.computeIfAbsent(tag, k -> new ArrayDeque<>()).add(r);
            return await(r, deadline, "any peer") ? r.from : null;
        } finally {
            lock.unlock();
        }
    }

    private void ensureOpen() {
        if (closed.getAsBoolean()) {
            throw new TransportClosedException("tcp transport " + name + " (" + localAddress + ") is closed");
        }
    }

    private TransportException refused(Peer p, String peerAddress, int tag) {
        return new TransportException(ErrorCode.UNAUTHORIZED, "recv tag " + tag + " from " + peerAddress + " at "
                + localAddress + ": the peer refused our handshake (" + p.refused + ")");
    }

    private TransportException lost(Peer p, String peerAddress, int tag) {
        return new TransportException(ErrorCode.PEER_LOST, "recv tag " + tag + " from " + peerAddress + " at "
                + localAddress + ": peer lost (" + p.lost + ")");
    }

    private static void deliver(Arrived m, ByteBuffer[] dst, long length, String what) {
        if (m.length() != length) {
            throw new TransportException(ErrorCode.MALFORMED, what + ": the message has " + m.length()
                    + " bytes, the receive expects " + length + " (message dropped)");
        }
        TcpBuffers.copy(m.data(), dst);
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
            if (closed.getAsBoolean()) {
                withdraw(r);
                throw new TransportClosedException("recv tag " + r.tag + " from " + peerAddress + " at "
                        + localAddress + ": the transport closed");
            }
            if (r.state == WAITING && r.peer != null && r.peer.lost != null && r.peer.staging(r.tag) == 0) {
                withdraw(r);
                throw lost(r.peer, peerAddress, r.tag);
            }
            if (r.state == WAITING && r.peer != null && r.peer.refused != null) {
                withdraw(r);
                throw refused(r.peer, peerAddress, r.tag);
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
            // The frame is being read into this receive's memory: move what arrived so far to staging (the receive
            // has not returned, so its memory may still be read) and let the I/O thread read the rest there, so the
            // message waits for a later receive instead of being lost with this one.
            ByteBuffer[] st;
            try {
                st = TcpBuffers.staging(r.length);
            } catch (OutOfMemoryError e) {
                r.state = ABANDONED; // no memory to keep it: the I/O thread discards the rest of the message
                return;
            }
            for (int i = 0; i < st.length; i++) {
                ByteBuffer done = r.dst[i].duplicate();
                done.flip();
                st[i].put(done); // dst and staging are cut at the same VIEW boundaries
            }
            r.restaged = st;
            r.state = RESTAGED;
            r.from.staging.merge(r.tag, 1, Integer::sum);
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

    /**
     * A frame's header arrived from {@code p}: matches it with a waiting receive of the same length (returned,
     * claimed), or fails a waiting receive of another length (returns null: the frame is to be discarded,
     * {@code staged[0]} false), or counts the frame as being staged ({@code staged[0]} true, null returned).
     */
    Posted claim(Peer p, int tag, long length, boolean[] staged) {
        lock.lock();
        try {
            Posted r = firstWaiting(p, tag);
            if (r != null) {
                staged[0] = false;
                changed.signalAll();
                if (r.length != length) {
                    r.state = FAILED;
                    r.failure = new TransportException(ErrorCode.MALFORMED, "recv tag " + tag + " from "
                            + p.key + ": the message has " + length + " bytes, the receive expects " + r.length
                            + " (message dropped)");
                    return null;
                }
                r.state = CLAIMED;
                r.from = p;
                return r;
            }
            p.staging.merge(tag, 1, Integer::sum);
            staged[0] = true;
            return null;
        } finally {
            lock.unlock();
        }
    }

    /** A frame counted by {@link #claim} as staged will not be (its staging buffer could not be made). */
    void unstage(Peer p, int tag) {
        lock.lock();
        try {
            p.staging.merge(tag, -1, Integer::sum);
        } finally {
            lock.unlock();
        }
    }

    /**
     * Reads payload bytes from {@code ch} straight into a claimed receive's memory, under the lock and only while
     * that receive still waits.
     *
     * @return bytes read (-1 at end of stream), -2 when the receive gave up without a place for the rest (to be
     *         discarded), or -3 when it gave up and the rest is to be read into {@code target.restaged}
     */
    long readInto(Posted target, ScatteringByteChannel ch) throws IOException {
        lock.lock();
        try {
            return target.state == CLAIMED ? ch.read(target.dst) : target.state == RESTAGED ? -3 : -2;
        } finally {
            lock.unlock();
        }
    }

    /**
     * A frame ended: a claimed receive is done; a staged message goes to the first receive waiting for it, else it
     * waits for one.
     */
    void finish(Peer p, int tag, long length, Posted target, ByteBuffer[] staged) {
        lock.lock();
        try {
            if (target != null && target.state == RESTAGED) {
                // The receive gave up after the last bytes were read into its memory but before this call: the
                // whole message is in its staging buffers now, and goes to a later receive like any staged one.
                staged = target.restaged;
                target = null;
            }
            if (target != null) {
                if (target.state == CLAIMED) {
                    target.state = DONE;
                }
            } else if (staged != null) {
                p.staging.merge(tag, -1, Integer::sum);
                Posted r = firstWaiting(p, tag);
                Arrived m = new Arrived(staged, length, arrivals++);
                if (r == null) {
                    p.arrived.computeIfAbsent(tag, t -> new ArrayDeque<>()).add(m);
                } else {
                    try {
                        deliver(m, r.dst, r.length, "recv tag " + tag + " from " + p.key);
                        r.from = p;
                        r.state = DONE;
                    } catch (TransportException e) {
                        r.state = FAILED;
                        r.failure = e;
                    }
                }
            }
            changed.signalAll();
        } finally {
            lock.unlock();
        }
    }

    /**
     * The peer's stream ended: a frame in progress (claimed by {@code target}, or staged) is lost, the peer is lost.
     */
    void streamEnded(Peer p, boolean inFrame, int tag, Posted target, boolean staged, String why) {
        lock.lock();
        try {
            if (inFrame) {
                if (target != null && target.state == CLAIMED) {
                    target.state = FAILED;
                    target.failure = new TransportException(ErrorCode.PEER_LOST, "recv tag " + tag + " from "
                            + p.key + ": peer lost in the middle of the message (" + why + ")");
                }
                if (staged) {
                    p.staging.merge(tag, -1, Integer::sum);
                }
            }
            if (p.lost == null) {
                p.lost = why;
            }
            changed.signalAll();
        } finally {
            lock.unlock();
        }
    }
}
