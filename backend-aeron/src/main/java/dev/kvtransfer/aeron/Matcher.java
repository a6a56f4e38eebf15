package dev.kvtransfer.aeron;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.transport.TransportException;
import io.aeron.logbuffer.ControlledFragmentHandler.Action;
import org.agrona.DirectBuffer;
import org.agrona.UnsafeApi;
import org.agrona.collections.Int2ObjectHashMap;

import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;
import java.util.function.Function;

/**
 * Matching, on the agent thread only: messages of a (peer, tag) meet the receives posted for them, in order.
 * A message whose receive is posted goes straight from Aeron's term buffer to the receive's memory; one that
 * comes first is held (eager: an off-heap copy from {@link StagingPool}; rendezvous: its RTS) within the early
 * bounds — bytes and messages per manager ({@code aeron.earlyBufferBytes}, {@code aeron.earlyMessages}) and a
 * quarter of each per peer, every message counted with its bookkeeping, zero-length ones and RTS included. A
 * message beyond a bound is not consumed ({@code ABORT}): Aeron keeps it in the sender's stream and flow control
 * back-pressures that sender only. Receives from any peer take the oldest held message of their tag.
 */
final class Matcher {
    private final AeronConnectionManager m;
    private final TransportAgent agent;
    final StagingPool pool;
    private final Int2ObjectHashMap<ArrayDeque<Op>> anyPosted = new Int2ObjectHashMap<>();
    private final ArrayDeque<ArrayDeque<Op>> freeDeques = new ArrayDeque<>();
    private final ArrayDeque<Peer.TagQueue> freeQueues = new ArrayDeque<>();
    /** Peers with agent-side state (bound, or named by a posted op), lost ones included while they linger. */
    final List<Peer> known = new ArrayList<>();
    private final long peerBytes;
    private final long peerMessages;
    long earlyBytes;
    long earlyCount;
    private long stamp;
    long droppedChunks;

    Matcher(AeronConnectionManager m, TransportAgent agent) {
        this.m = m;
        this.agent = agent;
        AeronSettings s = m.settings;
        this.pool = new StagingPool(Math.min(s.earlyBufferBytes, 8L << 20));
        this.peerBytes = Math.max(s.earlyBufferBytes / 4, Math.min(s.earlyBufferBytes,
                s.eagerLimit + AeronSettings.ARRIVAL_OVERHEAD));
        this.peerMessages = Math.max(16, s.earlyMessages / 4);
    }

    void know(Peer p) {
        if (!p.known) {
            p.known = true;
            known.add(p);
        }
    }

    private Peer.TagQueue queue(Peer p, int tag) {
        Peer.TagQueue q = p.tags.get(tag);
        if (q == null) {
            q = freeQueues.isEmpty() ? new Peer.TagQueue() : freeQueues.pollFirst();
            q.tag = tag;
            p.tags.put(tag, q);
        }
        return q;
    }

    private void releaseIfEmpty(Peer p, Peer.TagQueue q) {
        if (q.isEmpty()) {
            p.tags.remove(q.tag);
            if (freeQueues.size() < 1024) {
                freeQueues.addLast(q);
            }
        }
    }

    // ---------------------------------------------------------------------------------------------- posts

    /** A receive or a clear-to-send wait, just taken off the command queue. */
    void post(Op op) {
        switch (op.kind) {
            case Op.RECV: {
                Peer p = op.peer;
                know(p);
                Peer.TagQueue q = p.tags.get(op.tag);
                Peer.Arrival a = q == null ? null : q.arrivals.peekFirst();
                if (a != null) {
                    deliver(op, p, q, a);
                } else if (p.lost) {
                    op.fail(m.peerLostError(p, "recv of tag " + op.tag));
                } else {
                    queue(p, op.tag).posted.addLast(op);
                    agent.ensureOpening(p);
                }
                break;
            }
            case Op.RECV_ANY: {
                Peer best = null;
                Peer.TagQueue bestQueue = null;
                long bestStamp = Long.MAX_VALUE;
                for (int i = 0, n = known.size(); i < n; i++) {
                    Peer p = known.get(i);
                    if (p.earlyCount == 0) {
                        continue;
                    }
                    Peer.TagQueue q = p.tags.get(op.tag);
                    Peer.Arrival head = q == null ? null : q.arrivals.peekFirst();
                    if (head != null && head.stamp < bestStamp) {
                        best = p;
                        bestQueue = q;
                        bestStamp = head.stamp;
                    }
                }
                if (best != null) {
                    op.peer = best;
                    deliver(op, best, bestQueue, bestQueue.arrivals.peekFirst());
                } else {
                    ArrayDeque<Op> d = anyPosted.get(op.tag);
                    if (d == null) {
                        d = freeDeques.isEmpty() ? new ArrayDeque<>(4) : freeDeques.pollFirst();
                        anyPosted.put(op.tag, d);
                    }
                    d.addLast(op);
                }
                break;
            }
            case Op.AWAIT_CTS: {
                Peer p = op.peer;
                know(p);
                long[] early = p.earlyClears.isEmpty() ? null : p.earlyClears.remove(op.seq);
                if (early != null) {
                    clear(op, p, early[1] == 1);
                } else if (p.lost) {
                    op.fail(m.peerLostError(p, "send of tag " + op.tag));
                } else {
                    p.awaitingCts.put(op.seq, op);
                }
                break;
            }
            default:
                op.fail(new TransportException(ErrorCode.INTERNAL, "aeron " + m.name + ": unknown op " + op.kind));
        }
    }

    /** Withdraws an op whose caller gave up (its deadline passed). */
    void cancel(Op op) {
        if (op.isFinal()) {
            return;
        }
        unpost(op);
        op.cancelled();
    }

    /**
     * A posted receive's deadline passed: withdrawn as a blocking receive's caller would withdraw it (nothing of a
     * message that has not begun to arrive is consumed), then failed with {@code TIMEOUT}.
     */
    void expire(Op op) {
        if (op.isFinal()) {
            return;
        }
        Peer p = op.peer;
        unpost(op);
        op.fail(new TransportException(ErrorCode.TIMEOUT, "aeron " + m.name + ": posted recv of tag " + op.tag + " ("
                + op.length + " B) from " + (p == null ? "any peer" : p.address) + " timed out (its deadline passed)"));
    }

    private void unpost(Op op) {
        Peer p = op.peer;
        if (op.kind == Op.AWAIT_CTS) {
            if (p != null) {
                p.awaitingCts.remove(op.seq, op);
            }
        } else {
            if (op.state == Op.RECEIVING && p != null) {
                p.activeLarge.remove(op.seq, op);
            }
            if (op.kind == Op.RECV && p != null) {
                Peer.TagQueue q = p.tags.get(op.tag);
                if (q != null) {
                    q.posted.remove(op);
                    releaseIfEmpty(p, q);
                }
            } else if (op.kind == Op.RECV_ANY) {
                ArrayDeque<Op> d = anyPosted.get(op.tag);
                if (d != null) {
                    d.remove(op);
                    releaseAny(op.tag, d);
                }
            }
            ImageState img = op.assembling;
            if (img != null) {
                img.assemble = ImageState.ASSEMBLE_DISCARD;
                img.op = null;
                op.assembling = null;
            }
        }
    }

    private void releaseAny(int tag, ArrayDeque<Op> d) {
        if (d.isEmpty()) {
            anyPosted.remove(tag);
            if (freeDeques.size() < 1024) {
                freeDeques.addLast(d);
            }
        }
    }

    private Op takePosted(Peer p, Peer.TagQueue q, int tag) {
        Op op = q == null ? null : q.posted.pollFirst();
        if (op != null) {
            releaseIfEmpty(p, q);
            return op;
        }
        ArrayDeque<Op> any = anyPosted.get(tag);
        if (any != null) {
            op = any.pollFirst();
            releaseAny(tag, any);
            if (op != null) {
                op.peer = p;
            }
        }
        return op;
    }

    private void deliver(Op op, Peer p, Peer.TagQueue q, Peer.Arrival a) {
        q.arrivals.pollFirst();
        releaseIfEmpty(p, q);
        consume(op, p, a);
    }

    /** Hands a held message (no longer queued) to its receive and returns it to the pool. */
    private void consume(Op op, Peer p, Peer.Arrival a) {
        unaccount(p, a);
        if (a.type == Wire.EAGER) {
            if (a.length != op.length) {
                op.fail(malformed(op, p, a.length));
            } else {
                if (a.length > 0) {
                    UnsafeApi.copyMemory(null, a.staging, null, op.address, a.length);
                }
                m.counters.received(a.length);
                op.complete();
            }
        } else {
            matchRts(op, p, a.seq, a.length);
        }
        pool.give(a);
    }

    private void matchRts(Op op, Peer p, long seq, long length) {
        op.peer = p;
        if (length != op.length) {
            agent.queueControl(p, Wire.REJECT, op.tag, seq);
            op.fail(malformed(op, p, length));
            return;
        }
        op.seq = seq;
        op.received = 0;
        op.state = Op.RECEIVING;
        p.activeLarge.put(seq, op);
        agent.queueControl(p, Wire.CTS, op.tag, seq);
    }

    private void account(Peer p, long length) {
        long cost = length + AeronSettings.ARRIVAL_OVERHEAD;
        p.earlyBytes += cost;
        p.earlyCount++;
        earlyBytes += cost;
        earlyCount++;
    }

    private void unaccount(Peer p, Peer.Arrival a) {
        long cost = (a.type == Wire.EAGER ? a.length : 0) + AeronSettings.ARRIVAL_OVERHEAD;
        p.earlyBytes -= cost;
        p.earlyCount--;
        earlyBytes -= cost;
        earlyCount--;
    }

    /** Whether one more early message of {@code length} payload bytes fits the bounds. */
    private boolean fits(Peer p, long length) {
        long cost = length + AeronSettings.ARRIVAL_OVERHEAD;
        return earlyBytes + cost <= m.settings.earlyBufferBytes && earlyCount < m.settings.earlyMessages
                && p.earlyBytes + cost <= peerBytes && p.earlyCount < peerMessages;
    }

    // ---------------------------------------------------------------------------------------------- arrivals

    Action onEager(ImageState img, Peer p, int tag, long total, DirectBuffer b, int off, int len, boolean end) {
        if (total < 0 || total > m.settings.eagerLimit || len > total || (end && len != total)) {
            agent.reportError(new TransportException(ErrorCode.MALFORMED, "aeron " + m.name + ": EAGER of tag " + tag
                    + " from " + p.address + " declares " + total + " B with a first fragment of " + len
                    + " B (eager limit " + m.settings.eagerLimit + "); dropped"));
            if (!end) {
                img.assemble = ImageState.ASSEMBLE_DISCARD;
            }
            return Action.CONTINUE;
        }
        Peer.TagQueue q = p.tags.get(tag);
        if (q == null || q.arrivals.isEmpty()) {
            Op op = takePosted(p, q, tag);
            if (op != null) {
                if (op.length != total) {
                    op.fail(malformed(op, p, total));
                    if (!end) {
                        img.assemble = ImageState.ASSEMBLE_DISCARD;
                    }
                    return Action.CONTINUE;
                }
                if (len > 0) {
                    UnsafeApi.copyMemory(b.byteArray(), b.addressOffset() + off, null, op.address, len);
                }
                if (end) {
                    m.counters.received(total);
                    op.complete();
                } else {
                    img.assemble = ImageState.ASSEMBLE_OP;
                    img.op = op;
                    img.position = len;
                    img.messageLength = total;
                    op.assembling = img;
                }
                return Action.CONTINUE;
            }
        }
        if (!fits(p, total)) {
            p.heldBack(Wire.EAGER, tag);
            return Action.ABORT;
        }
        Peer.Arrival a = pool.take(Wire.EAGER, 0, total, ++stamp);
        if (len > 0) {
            UnsafeApi.copyMemory(b.byteArray(), b.addressOffset() + off, null, a.staging, len);
        }
        account(p, total);
        if (end) {
            queue(p, tag).arrivals.addLast(a);
        } else {
            img.assemble = ImageState.ASSEMBLE_STAGED;
            img.arrival = a;
            img.arrivalTag = tag;
            img.position = len;
            img.messageLength = total;
        }
        return Action.CONTINUE;
    }

    /** A fragment after the first of a message (EAGER spanning frames, or a DATA chunk). */
    void onContinuation(ImageState img, Peer p, DirectBuffer b, int off, int len, boolean end) {
        switch (img.assemble) {
            case ImageState.ASSEMBLE_OP: {
                Op op = img.op;
                if (img.position + len > img.messageLength) {
                    img.assemble = end ? ImageState.ASSEMBLE_NONE : ImageState.ASSEMBLE_DISCARD;
                    img.op = null;
                    op.assembling = null;
                    if (op.kind != Op.AWAIT_CTS && op.state == Op.RECEIVING) {
                        p.activeLarge.remove(op.seq, op);
                    }
                    op.fail(new TransportException(ErrorCode.MALFORMED, "aeron " + m.name + ": data of tag " + op.tag
                            + " from " + p.address + " runs past the message length " + img.messageLength));
                    return;
                }
                UnsafeApi.copyMemory(b.byteArray(), b.addressOffset() + off, null, op.address + img.position, len);
                img.position += len;
                if (op.state == Op.RECEIVING) {
                    op.received += len;
                }
                if (end) {
                    img.assemble = ImageState.ASSEMBLE_NONE;
                    img.op = null;
                    op.assembling = null;
                    if (op.state == Op.RECEIVING) {
                        if (op.received == op.length) {
                            p.activeLarge.remove(op.seq, op);
                            m.counters.received(op.length);
                            op.complete();
                        }
                    } else if (img.position == img.messageLength) {
                        m.counters.received(op.length);
                        op.complete();
                    } else {
                        op.fail(malformed(op, p, img.position));
                    }
                }
                return;
            }
            case ImageState.ASSEMBLE_STAGED: {
                Peer.Arrival a = img.arrival;
                if (img.position + len > img.messageLength) {
                    img.assemble = end ? ImageState.ASSEMBLE_NONE : ImageState.ASSEMBLE_DISCARD;
                    img.arrival = null;
                    unaccount(p, a);
                    pool.give(a);
                    agent.reportError(new TransportException(ErrorCode.MALFORMED, "aeron " + m.name + ": EAGER of tag "
                            + img.arrivalTag + " from " + p.address + " runs past its length " + img.messageLength
                            + "; dropped"));
                    return;
                }
                UnsafeApi.copyMemory(b.byteArray(), b.addressOffset() + off, null, a.staging + img.position, len);
                img.position += len;
                if (end) {
                    img.assemble = ImageState.ASSEMBLE_NONE;
                    img.arrival = null;
                    if (img.position != img.messageLength) {
                        unaccount(p, a);
                        pool.give(a);
                        agent.reportError(new TransportException(ErrorCode.MALFORMED, "aeron " + m.name + ": EAGER of tag "
                                + img.arrivalTag + " from " + p.address + " ended after " + img.position + " of "
                                + img.messageLength + " B; dropped"));
                        return;
                    }
                    Peer.TagQueue q = p.tags.get(img.arrivalTag);
                    if (q == null || q.arrivals.isEmpty()) {
                        // A receive may have been posted while the message was arriving.
                        Op op = takePosted(p, q, img.arrivalTag);
                        if (op != null) {
                            consume(op, p, a);
                            return;
                        }
                    }
                    queue(p, img.arrivalTag).arrivals.addLast(a);
                }
                return;
            }
            case ImageState.ASSEMBLE_DISCARD:
                if (end) {
                    img.assemble = ImageState.ASSEMBLE_NONE;
                }
                return;
            default:
                agent.reportError(new TransportException(ErrorCode.MALFORMED, "aeron " + m.name + ": a fragment from "
                        + p.address + " continues no message; dropped"));
        }
    }

    Action onRts(Peer p, int tag, long seq, long length) {
        if (length <= 0) {
            agent.reportError(new TransportException(ErrorCode.MALFORMED, "aeron " + m.name + ": RTS of tag " + tag
                    + " from " + p.address + " announces " + length + " B; dropped"));
            return Action.CONTINUE;
        }
        Peer.TagQueue q = p.tags.get(tag);
        if (q == null || q.arrivals.isEmpty()) {
            Op op = takePosted(p, q, tag);
            if (op != null) {
                matchRts(op, p, seq, length);
                return Action.CONTINUE;
            }
        }
        if (!fits(p, 0)) {
            p.heldBack(Wire.RTS, tag);
            return Action.ABORT;
        }
        Peer.Arrival a = pool.take(Wire.RTS, seq, length, ++stamp);
        account(p, 0);
        queue(p, tag).arrivals.addLast(a);
        return Action.CONTINUE;
    }

    void onClear(Peer p, long seq, boolean cts) {
        Op op = p.awaitingCts.remove(seq);
        if (op == null) {
            // Its wait may still be in the command queue: the sender enqueues it before it offers the RTS.
            agent.drainCommands();
            op = p.awaitingCts.remove(seq);
        }
        if (op == null) {
            // Its wait is not visible yet (another producer holds an earlier slot of the command queue), or the
            // sender gave up: kept for the wait to take when it arrives, dropped after EARLY_CLEAR_NS.
            p.lastStrayClear = seq;
            p.strayClears++; // agent only: a plain count, read racily in timeout messages
            keepEarlyClear(p, seq, cts);
            return;
        }
        clear(op, p, cts);
    }

    private void clear(Op op, Peer p, boolean cts) {
        if (cts) {
            op.complete();
        } else {
            op.fail(new TransportException(ErrorCode.MALFORMED, "aeron " + m.name + ": " + p.address
                    + " posted a receive of another length for tag " + op.tag + " (" + op.length + " B sent)"));
        }
    }

    /** How long a CTS / REJECT with no visible wait is kept: a live sender's wait shows up within microseconds. */
    static final long EARLY_CLEAR_NS = java.util.concurrent.TimeUnit.SECONDS.toNanos(30);

    private static void keepEarlyClear(Peer p, long seq, boolean cts) {
        long now = System.nanoTime();
        if (!p.earlyClears.isEmpty()) {
            // Those of senders that gave up: rare, so swept here rather than on a timer.
            p.earlyClears.values().removeIf(e -> now - e[0] > EARLY_CLEAR_NS);
        }
        if (p.earlyClears.size() < 1024) {
            p.earlyClears.put(seq, new long[] {now, cts ? 1 : 0});
        }
    }

    void onCancel(Peer p, int tag, long seq) {
        Peer.TagQueue q = p.tags.get(tag);
        if (q != null) {
            for (Iterator<Peer.Arrival> it = q.arrivals.iterator(); it.hasNext(); ) {
                Peer.Arrival a = it.next();
                if (a.type == Wire.RTS && a.seq == seq) {
                    it.remove();
                    unaccount(p, a);
                    pool.give(a);
                    releaseIfEmpty(p, q);
                    return;
                }
            }
        }
        Op op = p.activeLarge.remove(seq);
        if (op != null) {
            detach(op);
            op.fail(new TransportException(ErrorCode.TIMEOUT, "aeron " + m.name + ": " + p.address
                    + " gave up sending tag " + op.tag + " (its deadline passed)"));
        }
    }

    private static void detach(Op op) {
        ImageState img = op.assembling;
        if (img != null) {
            img.assemble = ImageState.ASSEMBLE_DISCARD;
            img.op = null;
            op.assembling = null;
        }
    }

    void onData(ImageState img, Peer p, long seq, long chunkOffset, DirectBuffer b, int off, int len, boolean end) {
        Op op = p.activeLarge.get(seq);
        if (op == null) {
            droppedChunks++; // its receive timed out or failed: the bytes go nowhere
            if (!end) {
                img.assemble = ImageState.ASSEMBLE_DISCARD;
            }
            return;
        }
        if (chunkOffset < 0 || chunkOffset > op.length - len) {
            p.activeLarge.remove(seq);
            op.fail(new TransportException(ErrorCode.MALFORMED, "aeron " + m.name + ": data of tag " + op.tag
                    + " from " + p.address + " at offset " + chunkOffset + " (+" + len + " B) exceeds the message"
                    + " length " + op.length));
            if (!end) {
                img.assemble = ImageState.ASSEMBLE_DISCARD;
            }
            return;
        }
        UnsafeApi.copyMemory(b.byteArray(), b.addressOffset() + off, null, op.address + chunkOffset, len);
        op.received += len;
        if (!end) {
            img.assemble = ImageState.ASSEMBLE_OP;
            img.op = op;
            img.position = chunkOffset + len;
            img.messageLength = op.length;
            op.assembling = img;
        } else if (op.received == op.length) {
            p.activeLarge.remove(seq);
            m.counters.received(op.length);
            op.complete();
        }
    }

    // ---------------------------------------------------------------------------------------------- loss, close

    /** Fails everything waiting on a lost peer. Its early messages stay readable while it lingers. */
    void failPeer(Peer p, Function<String, TransportException> why) {
        for (Peer.TagQueue q : p.tags.values()) {
            for (Op op : q.posted) {
                op.fail(why.apply("recv of tag " + op.tag));
            }
            q.posted.clear();
        }
        for (Op op : p.activeLarge.values()) {
            detach(op);
            op.fail(why.apply("recv of tag " + op.tag));
        }
        p.activeLarge.clear();
        for (Op op : p.awaitingCts.values()) {
            op.fail(why.apply("send of tag " + op.tag));
        }
        p.awaitingCts.clear();
        p.pendingControlCount = 0;
        if (p.image != null) {
            abandonAssembly(p.image, p);
        }
    }

    /** Drops a half-assembled message of a stream that went away. */
    void abandonAssembly(ImageState img, Peer p) {
        if (img.assemble == ImageState.ASSEMBLE_STAGED && img.arrival != null) {
            unaccount(p, img.arrival);
            pool.give(img.arrival);
            img.arrival = null;
        } else if (img.assemble == ImageState.ASSEMBLE_OP && img.op != null) {
            Op op = img.op;
            op.assembling = null;
            img.op = null;
            if (op.state != Op.RECEIVING) {
                op.fail(m.peerLostError(p, "recv of tag " + op.tag));
            }
        }
        img.assemble = ImageState.ASSEMBLE_NONE;
    }

    /** Frees a peer's early messages (it lingered long enough, or the manager closes). */
    void dropArrivals(Peer p) {
        for (Peer.TagQueue q : p.tags.values()) {
            for (Peer.Arrival a : q.arrivals) {
                unaccount(p, a);
                pool.give(a);
            }
            q.arrivals.clear();
        }
        p.tags.clear();
    }

    /** Fails every op (the manager closes). */
    void failAll(Function<String, TransportException> why) {
        for (Peer p : known) {
            failPeer(p, why);
        }
        for (ArrayDeque<Op> d : anyPosted.values()) {
            for (Op op : d) {
                op.fail(why.apply("recvConnect of tag " + op.tag));
            }
            d.clear();
        }
        anyPosted.clear();
    }

    /** Fails the peer-bound ops of every peer (the client was rebuilt); receives from any peer stay posted. */
    List<Peer> knownPeers() {
        return known;
    }

    private TransportException malformed(Op op, Peer p, long actual) {
        return new TransportException(ErrorCode.MALFORMED, "aeron " + m.name + ": message of tag " + op.tag + " from "
                + (p == null ? "?" : p.address) + " has " + actual + " B, the recv expected " + op.length + " B");
    }
}
