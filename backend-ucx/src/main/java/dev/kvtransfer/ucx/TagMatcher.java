package dev.kvtransfer.ucx;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.transport.TransportException;
import org.openucx.jucx.UcxException;
import org.openucx.jucx.ucp.UcpContext;
import org.openucx.jucx.ucp.UcpEndpoint;
import org.openucx.jucx.ucp.UcpEndpointParams;
import org.openucx.jucx.ucp.UcpMemMapParams;
import org.openucx.jucx.ucp.UcpMemory;
import org.openucx.jucx.ucp.UcpRequest;
import org.openucx.jucx.ucp.UcpTagMessage;
import org.openucx.jucx.ucp.UcpWorker;
import org.openucx.jucx.ucs.UcsConstants;

import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.Collections;
import java.util.IdentityHashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;

/**
 * Matching: posts sends and receives on the worker, turns UCX completions into outcomes (length checks, the
 * sender of a receive from any sender), cancels what a caller gave up on, and fails a connection's operations
 * when its peer is lost. Agent thread only, except {@link #bySenderId} (filled when a connection is created,
 * before its peer can learn the id) and {@link #localAddress()}.
 *
 * <p>Tags: see {@link UcxTags}. A receive first probes for a message that is already here (length and sender
 * tag then come from the probe); a zero-wait poll that finds none ends there.
 */
final class TagMatcher {
    private final UcxSettings settings;
    private final UcxErrors errors;
    private final UcpContext context;
    private final UcpWorker worker;
    private final EndpointCloser endpoints;
    private final String localAddress;
    /** Sender id (the one this manager gave a peer) → connection; written by any thread, read here. */
    final ConcurrentHashMap<Integer, UcxConnection> bySenderId = new ConcurrentHashMap<>();
    /** Every posted operation, to cancel or fail on close. */
    final Set<UcxOp> posted = Collections.newSetFromMap(new IdentityHashMap<>());
    /**
     * Posted sends not yet complete. While there are any the agent polls instead of sleeping in epoll: UCX's
     * shared-memory FIFO raises no event when a full FIFO drains, so a send waiting for room would otherwise
     * wait for an unrelated wake-up (measured: 0.08–0.1 GB/s with sysv, as {@code ucx_perftest -I -E sleep}).
     */
    int sendsInFlight;
    private final LinkedHashMap<Long, UcpMemory> registrations;
    private ConnectionHook hook;
    /** Sends a caller gave up on, ended with the receiver's help instead of closing the connection. */
    final AbandonedSends abandoned;

    /** What the rest of the manager hears about a connection (agent thread). */
    interface ConnectionHook {
        /** Its endpoint exists: sends may go. */
        void onReady(UcxConnection c);

        /** It failed: close its control sessions. */
        void onFailed(UcxConnection c);
    }

    TagMatcher(UcxSettings settings, UcxErrors errors, UcpContext context, UcpWorker worker,
               EndpointCloser endpoints, String localAddress) {
        this.settings = settings;
        this.errors = errors;
        this.context = context;
        this.worker = worker;
        this.endpoints = endpoints;
        this.localAddress = localAddress;
        this.abandoned = new AbandonedSends(this, worker, errors, settings.closeGraceNanos());
        int maxRegs = settings.registrationMaxEntries();
        this.registrations = new LinkedHashMap<>(16, 0.75f, true) {
            private static final long serialVersionUID = 1L;

            @Override
            protected boolean removeEldestEntry(Map.Entry<Long, UcpMemory> eldest) {
                if (size() > maxRegs) {
                    deregister(eldest.getValue());
                    return true;
                }
                return false;
            }
        };
    }

    void hook(ConnectionHook h) {
        this.hook = h;
    }

    String localAddress() {
        return localAddress;
    }

    /** Runs an operation's posting. */
    void post(UcxOp op) {
        if (op.done) {
            return;
        }
        UcxConnection c = op.conn;
        if (c != null && c.failure != null) {
            finish(op, c.failure);
            return;
        }
        if (op.kind == UcxOp.SEND || op.kind == UcxOp.PUTS) {
            if (!c.ready() || !c.waitingSends.isEmpty()) {
                c.waitingSends.add(op); // posted in order once the handshake finished
                return;
            }
            postSend(op);
        } else {
            postRecv(op);
        }
    }

    /**
     * Creates the connection's endpoint to the peer's worker address (the bootstrap handshake finished) and
     * posts the sends that waited for it.
     *
     * @param c            the connection
     * @param peerWorker   the peer's UCX worker address
     * @param peerSenderId the sender id the peer gave this manager
     * @param peerMode     whether to use UCX's peer error mode (net mode; shm mode detects loss itself)
     */
    void openEndpoint(UcxConnection c, byte[] peerWorker, int peerSenderId, boolean peerMode) {
        if (c.failure != null || c.sendEp != null) {
            return;
        }
        ByteBuffer addr = ByteBuffer.allocateDirect(peerWorker.length);
        addr.put(peerWorker).flip();
        UcpEndpointParams p = new UcpEndpointParams().setUcpAddress(addr).setName("kv-" + localAddress + "->"
                + c.peer).setErrorHandler((ep, status, msg) -> failConnection(c, UcxFailure.of(ErrorCode.PEER_LOST,
                "peer " + c.peer + " lost (UCX: " + msg + ", status " + status + ")")));
        if (peerMode) {
            p.setPeerErrorHandlingMode();
        }
        try {
            UcpEndpoint ep = worker.newEndpoint(p);
            c.endpoints.add(ep);
            c.sendEp = ep;
            c.outId = peerSenderId;
            c.established = true;
        } catch (UcxException e) {
            // The handshake just gave the peer's worker address: a worker unreachable now went away meanwhile
            // (closed or killed between the two), which is the peer's loss, not a network fault.
            boolean gone = e.getStatus() == UcsConstants.STATUS.UCS_ERR_UNREACHABLE
                    || e.getStatus() == UcsConstants.STATUS.UCS_ERR_CONNECTION_RESET
                    || e.getStatus() == UcsConstants.STATUS.UCS_ERR_NOT_CONNECTED;
            failConnection(c, new UcxFailure(gone ? ErrorCode.PEER_LOST : ErrorCode.NETWORK, (gone ? "peer " + c.peer
                    + " lost right after its handshake: " : "") + "cannot create a UCX endpoint to " + c.peer
                    + "'s worker: " + e.getMessage(), false, e));
            return;
        }
        hook.onReady(c);
        releaseWaitingSends(c);
    }

    /** Posts sends that waited for the handshake (in order). */
    void releaseWaitingSends(UcxConnection c) {
        while (!c.waitingSends.isEmpty() && c.failure == null && c.ready()) {
            UcxOp op = c.waitingSends.poll();
            if (!op.done) {
                postSend(op);
            }
        }
    }

    private void postSend(UcxOp op) {
        if (op.kind == UcxOp.PUTS) {
            postPuts(op);
            return;
        }
        UcxConnection c = op.conn;
        if (c.outgoing != null && !c.outgoing.isEmpty() && abandoned.holds(op)) {
            return; // an abandoned send of this tag is being discarded: this one goes after it
        }
        register(op);
        posted.add(op);
        sendsInFlight++;
        c.pending.add(op);
        op.posted = true;
        op.beginPost();
        try {
            long t = UcxTags.data(c.outId, op.tag);
            op.request = op.iovAddresses != null
                    ? c.sendEp.sendTaggedNonBlocking(op.iovAddresses, op.iovLengths, t, op, op.memType)
                    : c.sendEp.sendTaggedNonBlocking(op.address, op.length, t, op, op.memType);
        } catch (UcxException e) {
            postFailed(op, e);
        } finally {
            op.endPost();
        }
    }

    /** Posts a send that waited for its tag's discard to end. */
    void postHeld(UcxOp op) {
        postSend(op);
    }

    /** @return whether a caller's receive that could take a message of this (connection, tag) is posted */
    boolean receivePosted(UcxConnection c, int tag) {
        for (UcxOp op : c.pending) {
            if (op.kind == UcxOp.RECV && op.tag == tag && !op.done) {
                return true;
            }
        }
        for (UcxOp op : posted) {
            if (op.kind == UcxOp.RECV_ANY && op.tag == tag && !op.done) {
                return true;
            }
        }
        return false;
    }

    /** A write batch: implicit puts, then one flush whose completion is remote completion. */
    private void postPuts(UcxOp op) {
        UcxConnection c = op.conn;
        posted.add(op);
        sendsInFlight++;
        c.pending.add(op);
        op.posted = true;
        dev.kvtransfer.api.transport.WriteBatch b = op.batch;
        try {
            for (int i = 0; i < b.size(); i++) {
                long len = b.length(i);
                if (len == 0) {
                    continue;
                }
                RmaWriter.Target t = op.targets[i];
                if (t.unpacked == null) {
                    ByteBuffer k = ByteBuffer.allocateDirect(t.rkey.length);
                    k.put(t.rkey).flip();
                    t.unpacked = c.sendEp.unpackRemoteKey(k);
                }
                c.sendEp.putNonBlockingImplicit(b.source(i).address() + b.sourceOffset(i), len,
                        t.address + b.targetOffset(i), t.unpacked);
            }
        } catch (UcxException e) {
            onError(op, e.getStatus(), e.getMessage());
            return;
        }
        op.beginPost();
        try {
            op.request = c.sendEp.flushNonBlocking(op);
        } catch (UcxException e) {
            postFailed(op, e);
        } finally {
            op.endPost();
        }
    }

    /** Destroys an unpacked remote key (its region was revoked or its connection failed). */
    void releaseRemoteKey(RmaWriter.Target t) {
        if (t.unpacked != null) {
            try {
                t.unpacked.close();
            } catch (RuntimeException e) {
                errors.report("rma", new TransportException(ErrorCode.INTERNAL, "ucp_rkey_destroy failed: " + e, e));
            }
            t.unpacked = null;
        }
    }

    private void postRecv(UcxOp op) {
        long tag;
        long mask;
        if (op.kind == UcxOp.RECV_ANY) {
            tag = UcxTags.anySender(op.tag);
            mask = UcxTags.ANY_SENDER_MASK;
        } else {
            tag = UcxTags.data(op.conn.inId, op.tag);
            mask = UcxTags.EXACT_MASK;
        }
        register(op);
        // jucx 1.12.1 reports neither length nor sender tag when a receive completes inside the posting call (the
        // message was already here). Probing first (same thread, so the same message then matches) gives both.
        // (Taking the probed message by its handle instead lost the "consumed" state of a truncated message on
        // UCX 1.13.1: the next receive of the tag saw it again, 1 run in ~30.)
        UcpTagMessage m = worker.tagProbeNonBlocking(tag, mask, false);
        if (m == null && op.pollOnce) {
            finish(op, null); // non-blocking poll, nothing here: the sender stays null
            return;
        }
        if (m != null) {
            op.probed = true;
            op.probedLength = m.getRecvLength();
            op.probedSenderTag = m.getSenderTag();
        }
        posted.add(op);
        if (op.conn != null) {
            op.conn.pending.add(op);
        }
        op.posted = true;
        op.beginPost();
        try {
            op.request = op.iovAddresses != null
                    ? worker.recvTaggedNonBlocking(op.iovAddresses, op.iovLengths, tag, mask, op, op.memType)
                    : worker.recvTaggedNonBlocking(op.address, op.length, tag, mask, op, op.memType);
        } catch (UcxException e) {
            postFailed(op, e);
        } finally {
            op.endPost();
        }
    }

    /**
     * A jucx post threw. jucx 1.12.1 both calls the callback's {@code onError} and throws when a request fails
     * inside the posting call; only an error the callback did not see is handled here.
     */
    void postFailed(UcxOp op, UcxException e) {
        if (!op.calledBack) {
            op.outstanding--;
            onError(op, e.getStatus(), e.getMessage());
        }
    }

    void onSuccess(UcxOp op, UcpRequest r) {
        if (op.done) {
            return;
        }
        if (op.kind == UcxOp.SEND || op.kind == UcxOp.PUTS) {
            // An abandoned send completes when the receiver discarded it: its caller gets why it was abandoned.
            finish(op, op.abandoned ? op.cancelReason : null);
            return;
        }
        long size = op.probed ? op.probedLength : r.getRecvSize();
        long senderTag = op.probed ? op.probedSenderTag : r.getSenderTag();
        UcxConnection from = op.conn;
        if (op.kind == UcxOp.RECV_ANY) {
            from = bySenderId.get(UcxTags.senderId(senderTag));
            if (from == null) {
                finish(op, UcxFailure.of(ErrorCode.NETWORK, "message from unknown sender id "
                        + UcxTags.senderId(senderTag)));
                return;
            }
        }
        if (size != op.length) {
            finish(op, UcxFailure.of(ErrorCode.MALFORMED, "received a message of " + size + " bytes from "
                    + from.peer + ", expected " + op.length));
            return;
        }
        op.sender = from;
        finish(op, null);
    }

    void onError(UcxOp op, int status, String message) {
        if (op.done) {
            return;
        }
        UcxFailure f;
        if (op.cancelReason != null) {
            f = op.cancelReason;
        } else if (status == UcsConstants.STATUS.UCS_ERR_MESSAGE_TRUNCATED) {
            f = UcxFailure.of(ErrorCode.MALFORMED, "received a message longer than the expected " + op.length
                    + " bytes" + (op.probed ? " (" + op.probedLength + " bytes)" : "") + " (UCX: " + message + ")");
        } else if (op.conn != null && op.conn.failure != null) {
            f = op.conn.failure;
        } else if (op.conn != null && isPeerStatus(status)) {
            // A receive from one peer ends this way too when that peer went away before the endpoint's error
            // handler marked the connection: the same loss, not a network fault.
            f = UcxFailure.of(ErrorCode.PEER_LOST, "peer " + op.conn.peer + " lost (UCX: " + message + ")");
        } else {
            f = UcxFailure.of(ErrorCode.NETWORK, "UCX request failed: " + message + " (status " + status + ")");
        }
        finish(op, f);
    }

    static boolean isPeerStatus(int status) {
        return status == UcsConstants.STATUS.UCS_ERR_CONNECTION_RESET
                || status == UcsConstants.STATUS.UCS_ERR_ENDPOINT_TIMEOUT
                || status == UcsConstants.STATUS.UCS_ERR_UNREACHABLE
                || status == UcsConstants.STATUS.UCS_ERR_NOT_CONNECTED
                || status == UcsConstants.STATUS.UCS_ERR_REJECTED
                || status == UcsConstants.STATUS.UCS_ERR_IO_ERROR
                || status == UcsConstants.STATUS.UCS_ERR_CANCELED;
    }

    /** Ends an operation with an outcome (null = success) and wakes its caller. */
    void finish(UcxOp op, UcxFailure f) {
        if (posted.remove(op) && (op.kind == UcxOp.SEND || op.kind == UcxOp.PUTS)) {
            sendsInFlight--;
        }
        if (op.conn != null) {
            op.conn.pending.remove(op);
        }
        boolean receive = op.kind == UcxOp.RECV || op.kind == UcxOp.RECV_ANY;
        if (op.abandoned) {
            abandoned.markedFinished(op);
        }
        op.complete(f);
        if (receive && abandoned.incomingActive() > 0) {
            abandoned.receiveFinished(); // a discard may have waited for this receive to end
        }
    }

    /**
     * A caller gave up on an operation (deadline, interrupt, or the end of a poll's wait).
     *
     * @param generation the use of the op the caller gave up on (the op may have finished and been reused since)
     */
    void cancel(UcxOp op, int generation, UcxFailure reason) {
        if (op.done || op.generation != generation) {
            return;
        }
        op.cancelReason = reason;
        if (!op.posted) {
            if (op.conn != null) {
                op.conn.waitingSends.remove(op);
                abandoned.unhold(op);
            }
            finish(op, reason);
            return;
        }
        if (op.kind == UcxOp.RECV || op.kind == UcxOp.RECV_ANY) {
            // Completes with UCS_ERR_CANCELED, or normally if the message matched meanwhile.
            cancelRecv(op);
            return;
        }
        // UCX cannot cancel a posted send and may read the buffer until it completes: the receiver is asked to
        // take it into a scratch buffer (AbandonedSends), which completes it and keeps the connection.
        if (op.kind == UcxOp.SEND && abandoned.abandon(op, reason)) {
            return;
        }
        // A put cannot be ended from the other side: the only way to give the buffer back by the deadline is to
        // close the endpoint; the connection is broken after this.
        failConnection(op.conn, UcxFailure.of(ErrorCode.NETWORK, "connection to " + op.conn.peer + " was closed"
                + " because a " + (op.kind == UcxOp.PUTS ? "write" : "send") + " missed its deadline (UCX cannot"
                + " cancel it)"));
    }

    void cancelRecv(UcxOp op) {
        if (op.done || op.request == null) {
            return;
        }
        try {
            worker.cancelRequest(op.request);
        } catch (RuntimeException e) {
            errors.report("cancel", new TransportException(ErrorCode.INTERNAL, "UCX cancel failed: " + e, e));
        }
    }

    /** Marks a connection dead, fails everything on it, queues its endpoints for closing. */
    void failConnection(UcxConnection c, UcxFailure f) {
        if (c.failure != null) {
            return;
        }
        c.failure = f;
        c.manager.forget(c);
        bySenderId.remove(c.inId, c);
        while (!c.waitingSends.isEmpty()) {
            finish(c.waitingSends.poll(), f);
        }
        abandoned.connectionFailed(c, f);
        hook.onFailed(c);
        synchronized (c.writerTargets) {
            for (RmaWriter.Target t : c.writerTargets.values()) {
                t.revoked = true;
                endpoints.afterClose(() -> releaseRemoteKey(t)); // puts may still use it until the close purges them
            }
        }
        List<UcxOp> ops = new ArrayList<>(c.pending);
        for (UcxOp op : ops) {
            if (op.cancelReason == null) {
                op.cancelReason = f;
            }
            if (op.kind == UcxOp.RECV || op.kind == UcxOp.RECV_ANY) {
                cancelRecv(op);
            }
        }
        for (UcxOp op : ops) {
            if (!op.done && (op.kind == UcxOp.RECV || op.kind == UcxOp.RECV_ANY)) {
                finish(op, op.cancelReason); // a receive whose message was matching: the peer is gone anyway
            }
        }
        endpoints.closeEndpoints(c);
        for (UcxOp op : ops) {
            if (!op.done) {
                endpoints.finishAfterClose(op);
            }
        }
    }

    // ---- explicit memory registration (ucx.registration=explicit) ----

    private void register(UcxOp op) {
        if (!settings.explicitRegistration() || op.length == 0 || op.buffer == null) {
            return;
        }
        MemoryBuffer b = op.buffer;
        long key = b.address();
        UcpMemory m = registrations.get(key);
        if (m != null && m.getLength() >= b.size()) {
            return;
        }
        if (m != null) {
            registrations.remove(key);
            deregister(m);
        }
        try {
            registrations.put(key, context.memoryMap(new UcpMemMapParams().setAddress(b.address())
                    .setLength(b.size()).setMemoryType(op.memType)));
        } catch (UcxException e) {
            // Registration is an optimisation; UCX registers on its own when sending.
            errors.report("registration", new TransportException(ErrorCode.NETWORK, "ucp_mem_map of " + b.size()
                    + " bytes failed: " + e.getMessage(), e));
        }
    }

    private void deregister(UcpMemory m) {
        try {
            m.deregister();
        } catch (RuntimeException e) {
            errors.report("registration", new TransportException(ErrorCode.INTERNAL, "UCX deregistration failed: "
                    + e, e));
        }
    }

    /** Releases every explicit registration (shutdown). */
    void deregisterAll() {
        for (UcpMemory m : registrations.values()) {
            deregister(m);
        }
        registrations.clear();
    }

    int explicitRegistrations() {
        return registrations.size();
    }
}
