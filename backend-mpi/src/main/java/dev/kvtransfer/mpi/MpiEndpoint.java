package dev.kvtransfer.mpi;

import org.agrona.collections.Int2ObjectHashMap;

import java.nio.ByteBuffer;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.concurrent.locks.LockSupport;

/**
 * The matching state of one endpoint (one manager): envelopes the progress agent received for receives not yet
 * posted (per tag, in arrival order) and the receives waiting for an envelope (in posting order). The agent
 * delivers an arriving envelope to the first matching waiter, copying an inline payload straight into the
 * waiter's memory, or queues it; a receive takes the first matching queued envelope or waits. One short lock
 * guards both sides (held for at most one inline copy); the waiting itself is a park outside it.
 *
 * <p>Bounded: queued inline bytes and queued messages (zero-length ones count) are capped by the manager's
 * settings; an envelope beyond either bound is dropped and reported, never allocated.
 */
final class MpiEndpoint {
    /** Outcome of a wait: still waiting. */
    static final int WAITING = 0;
    /** Nothing was there and the caller did not want to wait. */
    static final int NOTHING = 1;
    /** An inline message was copied into the waiter's memory. */
    static final int INLINE_DONE = 2;
    /** An inline message of another length arrived (consumed; the waiter's memory is untouched). */
    static final int INLINE_MISMATCH = 3;
    /** A large message's envelope arrived: the waiter receives its payload itself. */
    static final int LARGE = 4;
    /** The endpoint closed. */
    static final int CLOSED = 5;

    /** Outcome of a delivery by the agent. */
    enum Delivery {
        /** Given to a waiter. */
        MATCHED,
        /** Queued for a later receive. */
        QUEUED,
        /** Dropped: the endpoint is closed. */
        CLOSED,
        /** Dropped: the queue bounds are reached. */
        OVER_BOUND
    }

    /** A thread in a receive. One per thread (reused), so a delivery to a waiting receive allocates nothing. */
    static final class Waiter {
        Thread thread;
        int tag;
        int link;
        int rank;
        int endpoint;
        long address;
        long length;
        volatile int state;
        int fromLink;
        int fromRank;
        int fromEndpoint;
        long sentLength;
        int payloadTag;
        int chunk;

        Waiter prepare(int tag, int link, int rank, int endpoint, long address, long length) {
            this.thread = Thread.currentThread();
            this.tag = tag;
            this.link = link;
            this.rank = rank;
            this.endpoint = endpoint;
            this.address = address;
            this.length = length;
            this.state = WAITING;
            return this;
        }

        boolean matches(int tag, int link, int rank, int endpoint) {
            return this.tag == tag && (this.rank < 0 || (this.link == link && this.rank == rank
                    && this.endpoint == endpoint));
        }
    }

    private static final int SPARE_ENVELOPES = 256;

    final int id;
    final MpiConnectionManager owner;
    private final long maxQueuedBytes;
    private final long maxQueuedMessages;
    private final Object lock = new Object();
    private final Int2ObjectHashMap<ArrayDeque<Envelope>> queued = new Int2ObjectHashMap<>();
    private final ArrayList<Waiter> waiters = new ArrayList<>();
    private final ArrayDeque<Envelope> spare = new ArrayDeque<>();
    private long queuedBytes;
    private long queuedMessages;
    private boolean closed;

    MpiEndpoint(int id, MpiConnectionManager owner, long maxQueuedBytes, long maxQueuedMessages) {
        this.id = id;
        this.owner = owner;
        this.maxQueuedBytes = maxQueuedBytes;
        this.maxQueuedMessages = maxQueuedMessages;
    }

    /**
     * Takes the first queued envelope matching the waiter, or registers the waiter ({@code mayWait}), or sets
     * {@link #NOTHING}. On return {@code w.state} is the outcome ({@link #WAITING} when registered).
     */
    void take(Waiter w, boolean mayWait) {
        synchronized (lock) {
            if (closed) {
                w.state = CLOSED;
                return;
            }
            ArrayDeque<Envelope> q = queued.get(w.tag);
            if (q != null) {
                for (Iterator<Envelope> it = q.iterator(); it.hasNext(); ) {
                    Envelope e = it.next();
                    if (e.from(w.link, w.rank, w.endpoint)) {
                        it.remove();
                        if (q.isEmpty()) {
                            queued.remove(w.tag);
                        }
                        queuedMessages--;
                        if (e.inline) {
                            queuedBytes -= e.length;
                        }
                        apply(w, e.link, e.sourceRank, e.sourceEndpoint, e.inline, e.length, e.payloadTag, e.chunk,
                                e.data);
                        recycle(e);
                        return;
                    }
                }
            }
            if (mayWait) {
                w.state = WAITING;
                waiters.add(w);
            } else {
                w.state = NOTHING;
            }
        }
    }

    /** @return true when the waiter was still waiting and is withdrawn; false when its outcome arrived */
    boolean withdraw(Waiter w) {
        synchronized (lock) {
            if (w.state != WAITING) {
                return false;
            }
            waiters.remove(w);
            w.state = NOTHING;
            return true;
        }
    }

    /**
     * Called by the agent with a checked header in {@code header}: the payload of an inline message follows it
     * at {@code payload} (native address).
     */
    Delivery deliver(ByteBuffer header, int link, int sourceRank, long payload) {
        int sourceEndpoint = header.getInt(Envelope.AT_SOURCE_ENDPOINT);
        int tag = header.getInt(Envelope.AT_TAG);
        boolean inline = (header.getInt(Envelope.AT_FLAGS) & Envelope.FLAG_INLINE) != 0;
        long length = header.getLong(Envelope.AT_LENGTH);
        int payloadTag = header.getInt(Envelope.AT_PAYLOAD_TAG);
        int chunk = header.getInt(Envelope.AT_CHUNK);
        Thread wake;
        synchronized (lock) {
            if (closed) {
                return Delivery.CLOSED;
            }
            Waiter w = null;
            for (int i = 0; i < waiters.size(); i++) {
                if (waiters.get(i).matches(tag, link, sourceRank, sourceEndpoint)) {
                    w = waiters.remove(i);
                    break;
                }
            }
            if (w == null) {
                if (queuedMessages >= maxQueuedMessages || (inline && queuedBytes + length > maxQueuedBytes)) {
                    return Delivery.OVER_BOUND;
                }
                Envelope e = spare.isEmpty() ? new Envelope() : spare.poll();
                e.link = link;
                e.sourceRank = sourceRank;
                e.sourceEndpoint = sourceEndpoint;
                e.tag = tag;
                e.inline = inline;
                e.length = length;
                e.payloadTag = payloadTag;
                e.chunk = chunk;
                e.data = 0;
                if (inline && length > 0) {
                    e.data = MpiNative.allocate(length);
                    MpiNative.copy(payload, e.data, length);
                }
                queued.computeIfAbsent(tag, k -> new ArrayDeque<>()).add(e);
                queuedMessages++;
                if (inline) {
                    queuedBytes += length;
                }
                return Delivery.QUEUED;
            }
            apply(w, link, sourceRank, sourceEndpoint, inline, length, payloadTag, chunk, payload);
            wake = w.thread;
        }
        LockSupport.unpark(wake);
        return Delivery.MATCHED;
    }

    /** Gives a message to a waiter (lock held); frees nothing. */
    private static void apply(Waiter w, int link, int rank, int endpoint, boolean inline, long length,
                              int payloadTag, int chunk, long data) {
        w.fromLink = link;
        w.fromRank = rank;
        w.fromEndpoint = endpoint;
        w.sentLength = length;
        w.payloadTag = payloadTag;
        w.chunk = chunk;
        if (!inline) {
            w.state = LARGE;
        } else if (length != w.length) {
            w.state = INLINE_MISMATCH;
        } else {
            MpiNative.copy(data, w.address, length);
            w.state = INLINE_DONE;
        }
    }

    private void recycle(Envelope e) {
        if (e.data != 0) {
            MpiNative.release(e.data);
            e.data = 0;
        }
        if (spare.size() < SPARE_ENVELOPES) {
            spare.add(e);
        }
    }

    /** @return envelopes queued now */
    long queuedMessages() {
        synchronized (lock) {
            return queuedMessages;
        }
    }

    /**
     * Closes: every waiter wakes with {@link #CLOSED}, queued payloads are freed, later deliveries are dropped.
     *
     * @return the envelopes of large messages still queued (their payloads stay unreceived)
     */
    int close() {
        ArrayList<Thread> wake = new ArrayList<>();
        int orphaned = 0;
        synchronized (lock) {
            if (closed) {
                return 0;
            }
            closed = true;
            for (Waiter w : waiters) {
                w.state = CLOSED;
                wake.add(w.thread);
            }
            waiters.clear();
            for (ArrayDeque<Envelope> q : queued.values()) {
                for (Envelope e : q) {
                    if (!e.inline) {
                        orphaned++;
                    }
                    recycle(e);
                }
            }
            queued.clear();
            spare.clear();
            queuedBytes = 0;
            queuedMessages = 0;
        }
        wake.forEach(LockSupport::unpark);
        return orphaned;
    }
}
