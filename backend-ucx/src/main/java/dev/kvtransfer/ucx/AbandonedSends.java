package dev.kvtransfer.ucx;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.transport.TransportException;
import org.openucx.jucx.UcxCallback;
import org.openucx.jucx.UcxException;
import org.openucx.jucx.ucp.UcpRequest;
import org.openucx.jucx.ucp.UcpWorker;
import org.openucx.jucx.ucs.UcsConstants;

import java.nio.ByteBuffer;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;
import java.util.concurrent.TimeUnit;

/**
 * Ends a send whose receiver never takes it without closing the connection. UCX 1.13 cannot cancel a posted
 * send, and a rendezvous send reads the caller's buffer until the receiver has matched it; closing the endpoint
 * was the only way to give the buffer back, and it broke the connection for every other user of it (measured:
 * the fault suite's requests after a faulted one all failed). Instead the two sides agree, over the control
 * connection, to let the receiver take the message into a scratch buffer:
 *
 * <pre>
 * sender (a caller's deadline passed)              receiver
 *   marks every posted, unfinished send of that
 *   (connection, tag); holds later sends of it
 *   DISCARD  id, sender id, tag, length, marked  →
 *                                                  once none of its callers' receives of that (connection,
 *                                                  tag) is posted: posts receives into a 64-byte scratch, one
 *                                                  after another (each takes the next message of that sender
 *                                                  and tag, truncated: UCX then completes the sender's
 *                                                  rendezvous with nothing copied), at most
 *                                                  {@value #MAX_TAKEN} per announcement
 *   each marked send completes: its caller gets
 *   TIMEOUT (the others "discarded"), the buffer
 *   is free
 *   DISCARD_END  id, tag                          →  cancels its outstanding scratch receive
 *                                               ←  DISCARD_ENDED  id, tag, messages taken
 *   posts the held sends of that tag in order
 * </pre>
 *
 * <p>So the abandoned message, and whatever the receiver had not taken of that (connection, tag) before it, is
 * dropped; nothing of any other tag, and nothing the sender sends on that tag afterwards, is touched. A sender
 * whose peer does not end the exchange within half of {@code ucx.closeGraceMillis} (an old peer, a stalled one,
 * or more than {@value #MAX_PER_CONNECTION} exchanges at once) falls back to closing the connection, as before.
 * One-sided writes are not covered (UCX offers no receiver-side way to end a put): a write past its deadline
 * still closes the connection.
 *
 * <p>Agent thread only, except {@link #onFrame}, which the bootstrap agent calls and which hands each frame to
 * the progress agent.
 */
final class AbandonedSends {
    /** Bytes of the scratch every discard receive truncates into. */
    static final int SCRATCH_BYTES = 64;
    /** Most messages one announcement lets the receiver take. */
    static final int MAX_TAKEN = 1024;
    /** Most exchanges in progress per connection and direction. */
    static final int MAX_PER_CONNECTION = 64;

    private final TagMatcher matcher;
    private final UcpWorker worker;
    private final UcxErrors errors;
    private final long graceNanos;
    private final ByteBuffer scratch = ByteBuffer.allocateDirect(SCRATCH_BYTES);
    private final long scratchAddress = org.openucx.jucx.UcxUtils.getAddress(scratch);
    private BootstrapAgent bootstrap;
    private ProgressAgent agent;
    private long nextId;
    /** Sender side: exchanges in progress (for the fallback's deadline). */
    private final List<Outgoing> outgoing = new ArrayList<>();
    /** Receiver side: announcements being served. */
    private final List<Incoming> incoming = new ArrayList<>();
    /** Discard receives UCX still holds (the shutdown waits for them). */
    private int receivesOutstanding;
    /** For tests: a receiver that ignores announcements (as a peer without this protocol would). */
    volatile boolean ignoreAnnouncements;
    /** For tests: a receiver that keeps its DISCARD_ENDED answers until {@link #releaseWithheld()}. */
    boolean withholdEnded;
    private final List<Runnable> withheld = new ArrayList<>(0);
    private long discardedMessages;
    private long fallbacks;

    /** The sender's side of one exchange: one (connection, tag). */
    static final class Outgoing {
        final UcxConnection conn;
        final long id;
        final int tag;
        final long deadlineNanos;
        final List<UcxOp> marked = new ArrayList<>(1);
        final ArrayDeque<UcxOp> held = new ArrayDeque<>();
        boolean endSent;

        Outgoing(UcxConnection conn, long id, int tag, long deadlineNanos) {
            this.conn = conn;
            this.id = id;
            this.tag = tag;
            this.deadlineNanos = deadlineNanos;
        }
    }

    /** The receiver's side of one announcement. */
    static final class Incoming {
        final UcxConnection conn;
        final long id;
        final int tag;
        final long length;
        Scratch current;
        boolean ending;
        int taken;

        Incoming(UcxConnection conn, long id, int tag, long length) {
            this.conn = conn;
            this.id = id;
            this.tag = tag;
            this.length = length;
        }
    }

    /** One discard receive. */
    private final class Scratch extends UcxCallback {
        final Incoming in;
        UcpRequest request;
        boolean posting;
        boolean done;
        int status;

        Scratch(Incoming in) {
            this.in = in;
        }

        @Override
        public void onSuccess(UcpRequest r) {
            completed(UcsConstants.STATUS.UCS_OK);
        }

        @Override
        public void onError(int ucsStatus, String message) {
            completed(ucsStatus);
        }

        private void completed(int s) {
            if (done) {
                return;
            }
            done = true;
            status = s;
            receivesOutstanding--;
            if (!posting) {
                scratchDone(this);
            }
        }
    }

    AbandonedSends(TagMatcher matcher, UcpWorker worker, UcxErrors errors, long closeGraceNanos) {
        this.matcher = matcher;
        this.worker = worker;
        this.errors = errors;
        this.graceNanos = Math.max(1, closeGraceNanos / 2);
    }

    void wire(BootstrapAgent bootstrap, ProgressAgent agent) {
        this.bootstrap = bootstrap;
        this.agent = agent;
    }

    /** @return exchanges this side started and has not finished (the agent polls instead of sleeping) */
    int outgoingActive() {
        return outgoing.size();
    }

    /** @return announcements this side serves now */
    int incomingActive() {
        return incoming.size();
    }

    int receivesOutstanding() {
        return receivesOutstanding;
    }

    /** @return messages this side took into its scratch for peers so far */
    long discardedMessages() {
        return discardedMessages;
    }

    /** @return exchanges that ended by closing the connection */
    long fallbacks() {
        return fallbacks;
    }

    // ------------------------------------------------------------------ sender side

    /**
     * A caller gave up on a posted send: starts (or joins) the exchange for its (connection, tag).
     *
     * @return false when the connection must be closed instead (no control session, too many exchanges)
     */
    boolean abandon(UcxOp op, UcxFailure reason) {
        UcxConnection c = op.conn;
        if (c.failure != null) {
            return true; // already failing: its calls end with the connection
        }
        op.cancelReason = reason;
        Outgoing o = find(c, op.tag);
        if (o != null && !o.endSent) {
            if (!op.abandoned) {
                mark(o, op);
            }
            return true;
        }
        if (o != null || c.outgoing != null && c.outgoing.size() >= MAX_PER_CONNECTION) {
            return false; // the previous exchange of this tag already ended its marking: cannot join it
        }
        o = new Outgoing(c, ++nextId, op.tag, System.nanoTime() + graceNanos);
        if (c.outgoing == null) {
            c.outgoing = new ArrayList<>(1);
        }
        c.outgoing.add(o);
        outgoing.add(o);
        for (UcxOp p : c.pending) {
            if (p.kind == UcxOp.SEND && p.tag == op.tag && !p.done) {
                mark(o, p);
            }
        }
        if (!op.abandoned) {
            mark(o, op);
        }
        ByteBuffer b = BootstrapFrames.buffer(28);
        b.putLong(o.id).putInt(c.outId).putInt(o.tag).putLong(op.length).putInt(o.marked.size()).flip();
        long id = o.id;
        bootstrap.execute(() -> {
            if (!bootstrap.sendControl(c, BootstrapFrames.DISCARD, b)) {
                agent.submitAlways(command(() -> fallBack(c, "it has no control connection to announce the "
                        + "abandoned send on")));
            }
        });
        return true;
    }

    private void mark(Outgoing o, UcxOp p) {
        p.abandoned = true;
        p.discard = o;
        if (p.cancelReason == null) {
            p.cancelReason = UcxFailure.of(ErrorCode.NETWORK, "discarded: another send of tag " + o.tag + " to "
                    + o.conn.peer + " missed its deadline, and the receiver dropped what it had not taken of that"
                    + " tag");
        }
        o.marked.add(p);
    }

    /** @return whether a send must wait for its tag's exchange to end (it is queued then) */
    boolean holds(UcxOp op) {
        Outgoing o = find(op.conn, op.tag);
        if (o == null) {
            return false;
        }
        o.held.add(op);
        return true;
    }

    /** A held send's caller gave up before it was posted. */
    void unhold(UcxOp op) {
        Outgoing o = find(op.conn, op.tag);
        if (o != null) {
            o.held.remove(op);
        }
    }

    /** A marked send finished (UCX gave it back, or its connection failed). */
    void markedFinished(UcxOp op) {
        Outgoing o = (Outgoing) op.discard;
        op.discard = null;
        if (o == null || !o.marked.remove(op) || !o.marked.isEmpty() || o.endSent) {
            return;
        }
        o.endSent = true;
        UcxConnection c = o.conn;
        if (c.failure != null) {
            return;
        }
        ByteBuffer b = BootstrapFrames.buffer(12);
        b.putLong(o.id).putInt(o.tag).flip();
        bootstrap.execute(() -> bootstrap.sendControl(c, BootstrapFrames.DISCARD_END, b));
    }

    /** The receiver ended the exchange: the held sends of the tag go, in order. */
    private void onEnded(UcxConnection c, long id, int taken) {
        if (c.outgoing == null) {
            return;
        }
        for (Iterator<Outgoing> it = c.outgoing.iterator(); it.hasNext(); ) {
            Outgoing o = it.next();
            if (o.id != id) {
                continue;
            }
            if (!o.endSent) {
                fallBack(c, "the receiver ended the discard of tag " + o.tag + " before the abandoned sends "
                        + "completed");
                return;
            }
            it.remove();
            outgoing.remove(o);
            UcxOp op;
            while ((op = o.held.poll()) != null && c.failure == null) {
                if (!op.done) {
                    matcher.postHeld(op);
                }
            }
            return;
        }
    }

    /** Closes the connections whose exchange did not end in time (agent thread, each round while any is active). */
    int expire(long now) {
        int n = 0;
        for (int i = outgoing.size() - 1; i >= 0 && i < outgoing.size(); i--) {
            Outgoing o = outgoing.get(i);
            if (now - o.deadlineNanos >= 0) {
                n++;
                fallBack(o.conn, "the receiver did not discard the abandoned send of tag " + o.tag + " within "
                        + TimeUnit.NANOSECONDS.toMillis(graceNanos) + " ms");
            }
        }
        return n;
    }

    private void fallBack(UcxConnection c, String why) {
        if (c.failure != null) {
            return;
        }
        fallbacks++;
        matcher.failConnection(c, UcxFailure.of(ErrorCode.NETWORK, "connection to " + c.peer + " was closed "
                + "because a send missed its deadline and " + why + " (UCX cannot cancel a send)"));
    }

    // ------------------------------------------------------------------ receiver side

    private void onAnnounced(UcxConnection c, long id, int senderId, int tag, long length) {
        if (c.failure != null || ignoreAnnouncements) {
            return;
        }
        if (senderId != c.inId) {
            errors.report("discard", new TransportException(ErrorCode.MALFORMED, "peer " + c.peer + " announced an "
                    + "abandoned send with sender id " + senderId + ", but its id here is " + c.inId + "; ignored"));
            return;
        }
        if (c.incoming == null) {
            c.incoming = new ArrayList<>(1);
        }
        for (Incoming in : c.incoming) {
            if (in.id == id) {
                return; // the same announcement twice
            }
        }
        if (c.incoming.size() >= MAX_PER_CONNECTION) {
            errors.report("discard", new TransportException(ErrorCode.NETWORK, "peer " + c.peer + " has "
                    + c.incoming.size() + " abandoned sends being discarded; the announcement for tag " + tag
                    + " is ignored (the peer closes the connection)"));
            return;
        }
        Incoming in = new Incoming(c, id, tag, length);
        c.incoming.add(in);
        incoming.add(in);
        pump(in);
    }

    /** Posts the next discard receive of an announcement when nothing of the caller's would take the message. */
    private void pump(Incoming in) {
        while (in.current == null && !in.ending && in.conn.failure == null && in.taken < MAX_TAKEN
                && !matcher.receivePosted(in.conn, in.tag)) {
            Scratch s = new Scratch(in);
            in.current = s;
            receivesOutstanding++;
            s.posting = true;
            try {
                s.request = worker.recvTaggedNonBlocking(scratchAddress, SCRATCH_BYTES,
                        UcxTags.data(in.conn.inId, in.tag), UcxTags.EXACT_MASK, s);
            } catch (UcxException e) {
                if (!s.done) { // jucx 1.12.1 may both call back and throw; handled once
                    s.done = true;
                    s.status = e.getStatus();
                    receivesOutstanding--;
                }
            } finally {
                s.posting = false;
            }
            if (!s.done) {
                return;
            }
            if (!settle(s)) {
                return;
            }
        }
        if (in.ending && in.current == null) {
            end(in);
        }
    }

    private void scratchDone(Scratch s) {
        if (settle(s)) {
            pump(s.in);
        }
    }

    /** @return whether the announcement may go on (post the next receive) */
    private boolean settle(Scratch s) {
        Incoming in = s.in;
        if (in.current == s) {
            in.current = null;
        }
        if (s.status == UcsConstants.STATUS.UCS_ERR_CANCELED) {
            if (in.ending) {
                end(in);
            }
            return false;
        }
        if (s.status != UcsConstants.STATUS.UCS_OK && s.status != UcsConstants.STATUS.UCS_ERR_MESSAGE_TRUNCATED) {
            errors.report("discard", new TransportException(ErrorCode.NETWORK, "discarding an abandoned message of "
                    + "tag " + in.tag + " from " + in.conn.peer + " failed (UCX status " + s.status + ")"));
            return false;
        }
        in.taken++;
        discardedMessages++;
        if (in.ending) {
            end(in);
            return false;
        }
        return true;
    }

    /** The sender's marked sends all completed: stop taking messages, then say so. */
    private void onEnd(UcxConnection c, long id, int tag) {
        Incoming found = null;
        if (c.incoming != null) {
            for (Incoming in : c.incoming) {
                if (in.id == id) {
                    found = in;
                }
            }
        }
        if (found == null) {
            sendEnded(c, id, tag, 0); // an announcement this side ignored: the sender's sends completed anyway
            return;
        }
        found.ending = true;
        Scratch s = found.current;
        if (s == null) {
            end(found);
        } else if (s.request != null) {
            try {
                worker.cancelRequest(s.request);
            } catch (RuntimeException e) {
                errors.report("cancel", new TransportException(ErrorCode.INTERNAL, "UCX cancel failed: " + e, e));
            }
        }
    }

    private void end(Incoming in) {
        if (in.conn.incoming == null || !in.conn.incoming.remove(in)) {
            return;
        }
        incoming.remove(in);
        if (in.conn.failure == null) {
            sendEnded(in.conn, in.id, in.tag, in.taken);
        }
    }

    private void sendEnded(UcxConnection c, long id, int tag, int taken) {
        ByteBuffer b = BootstrapFrames.buffer(16);
        b.putLong(id).putInt(tag).putInt(taken).flip();
        Runnable send = () -> bootstrap.execute(() -> bootstrap.sendControl(c, BootstrapFrames.DISCARD_ENDED, b));
        if (withholdEnded) {
            withheld.add(send);
            return;
        }
        send.run();
    }

    /** For tests: sends the withheld DISCARD_ENDED answers and stops withholding. */
    int releaseWithheld() {
        withholdEnded = false;
        int n = withheld.size();
        for (Runnable r : withheld) {
            r.run();
        }
        withheld.clear();
        return n;
    }

    /** A caller's receive ended: announcements waiting for it may go on. */
    void receiveFinished() {
        for (Incoming in : new ArrayList<>(incoming)) {
            if (in.current == null && !in.ending) {
                pump(in);
            }
        }
    }

    // ------------------------------------------------------------------ both

    /** The connection failed: held sends fail with it, discard receives are cancelled, exchanges forgotten. */
    void connectionFailed(UcxConnection c, UcxFailure f) {
        // Copies: finishing an op or cancelling a scratch receive calls back into this class (UCX completes a
        // cancelled receive inside cancelRequest, whose callback ends the Incoming and removes it from the list);
        // iterating the live list threw ConcurrentModificationException there and left failConnection half done.
        if (c.outgoing != null) {
            for (Outgoing o : new ArrayList<>(c.outgoing)) {
                outgoing.remove(o);
                UcxOp op;
                while ((op = o.held.poll()) != null) {
                    matcher.finish(op, f);
                }
            }
            c.outgoing.clear();
        }
        if (c.incoming != null) {
            for (Incoming in : new ArrayList<>(c.incoming)) {
                incoming.remove(in);
                in.ending = true;
                if (in.current != null && in.current.request != null) {
                    try {
                        worker.cancelRequest(in.current.request);
                    } catch (RuntimeException e) {
                        errors.report("cancel", new TransportException(ErrorCode.INTERNAL, "UCX cancel failed: " + e,
                                e));
                    }
                }
            }
            c.incoming.clear();
        }
    }

    private static Outgoing find(UcxConnection c, int tag) {
        if (c == null || c.outgoing == null) {
            return null;
        }
        for (int i = 0; i < c.outgoing.size(); i++) {
            Outgoing o = c.outgoing.get(i);
            if (o.tag == tag) {
                return o;
            }
        }
        return null;
    }

    /**
     * A DISCARD, DISCARD_END or DISCARD_ENDED frame (bootstrap agent): parsed here, acted on by the progress agent.
     */
    void onFrame(UcxConnection c, int type, BootstrapFrames.Reader r) throws BootstrapFrames.Violation {
        long id = r.i64("discard id");
        Runnable action;
        switch (type) {
            case BootstrapFrames.DISCARD -> {
                int senderId = r.i32("sender id");
                int tag = r.i32("tag");
                long length = r.i64("length");
                r.i32("marked sends");
                r.end();
                action = () -> onAnnounced(c, id, senderId, tag, length);
            }
            case BootstrapFrames.DISCARD_END -> {
                int tag = r.i32("tag");
                r.end();
                action = () -> onEnd(c, id, tag);
            }
            case BootstrapFrames.DISCARD_ENDED -> {
                r.i32("tag");
                int taken = r.i32("taken");
                r.end();
                action = () -> onEnded(c, id, taken);
            }
            default -> throw new IllegalArgumentException("not a discard frame: " + type);
        }
        agent.submitAlways(command(action));
    }

    private static UcxCommand command(Runnable r) {
        return new UcxCommand() {
            @Override
            public void run() {
                r.run();
            }

            @Override
            public void abort(UcxFailure f) {
                // The manager closes: its connections fail with it.
            }
        };
    }
}
