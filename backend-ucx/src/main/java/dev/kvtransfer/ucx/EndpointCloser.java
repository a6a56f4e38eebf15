package dev.kvtransfer.ucx;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.transport.TransportException;
import org.openucx.jucx.ucp.UcpEndpoint;
import org.openucx.jucx.ucp.UcpRequest;

import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Collections;
import java.util.IdentityHashMap;
import java.util.List;
import java.util.Set;

/**
 * Closes endpoints outside UCX callbacks (closing one from inside UCX's error callback crashed Debian's UCX
 * 1.13.1: {@code wireup_ep.c:494 Assertion … failed} in {@code ucp_ep_set_failed}), and tracks closes in
 * flight. A graceful (flush) close tells the peer at once; a forced one purges the endpoint's outstanding sends,
 * whose callbacks then run with an error status. Sends torn out this way are finished right after the close was
 * started. Agent thread only.
 *
 * <p>Every close request UCX hands back must complete before the worker is destroyed: {@code ucp_worker_destroy}
 * completes a flush close still in flight itself, and UCX 1.13.1 then aborts the process
 * ({@code ucp_ep.c:382 Assertion `req->flags & UCP_REQUEST_FLAG_RELEASED' failed}, jucx never releases a
 * request early). A flush close to a peer that is gone can stay in flight forever (a shared-memory FIFO the dead
 * process no longer drains), so an endpoint to a lost peer is never flush-closed: it is force-closed where the
 * endpoint has UCX's peer error mode (net mode; completes inline), and otherwise (shm mode, where UCX refuses a
 * forced close) it is left to {@code ucp_worker_destroy}, which destroys endpoints the user did not close without
 * any request. {@link #allClosed()} tells the shutdown whether destroying the worker is safe. An endpoint is
 * closed at most once (jucx keeps the native pointer after a close: a second close is a use after free).
 */
final class EndpointCloser {
    private final ArrayDeque<UcpEndpoint> toForceClose = new ArrayDeque<>();
    private final ArrayDeque<UcpEndpoint> toFlushClose = new ArrayDeque<>();
    private final List<UcpRequest> closing = new ArrayList<>();
    private final List<UcxOp> sendsAwaitingClose = new ArrayList<>();
    private final List<Runnable> afterClose = new ArrayList<>();
    /** Endpoints queued, closed or left to the worker's destruction: each at most once. */
    private final Set<UcpEndpoint> handled = Collections.newSetFromMap(new IdentityHashMap<>());
    /** Endpoints to lost peers that cannot be force-closed (no peer error mode): the worker destroys them. */
    private final List<UcpEndpoint> leftToWorker = new ArrayList<>();
    private final UcxErrors errors;
    private final boolean peerErrorMode;
    private TagMatcher matcher;

    /**
     * @param errors        where close failures go
     * @param peerErrorMode whether endpoints are created with UCX's peer error mode (net mode), so a forced
     *                      close is allowed
     */
    EndpointCloser(UcxErrors errors, boolean peerErrorMode) {
        this.errors = errors;
        this.peerErrorMode = peerErrorMode;
    }

    void wire(TagMatcher matcher) {
        this.matcher = matcher;
    }

    /**
     * Queues every endpoint of a failed connection: flush when nothing of ours is outstanding on it and the peer
     * was not lost, else force (or, without peer error mode, leave it to the worker's destruction).
     */
    void closeEndpoints(UcxConnection c) {
        UcxFailure f = c.failure;
        boolean lost = f != null && !f.closed() && f.code() == ErrorCode.PEER_LOST;
        boolean flush = c.pending.isEmpty() && !lost;
        for (UcpEndpoint ep : c.endpoints) {
            if (flush) {
                if (handled.add(ep)) {
                    toFlushClose.add(ep);
                }
            } else {
                forceClose(ep);
            }
        }
        c.endpoints.clear();
        c.sendEp = null;
    }

    /** Queues a forced close (without peer error mode: leaves the endpoint to the worker's destruction). */
    void forceClose(UcpEndpoint ep) {
        if (!handled.add(ep)) {
            return; // already closing or closed
        }
        if (peerErrorMode) {
            toForceClose.add(ep);
        } else {
            leftToWorker.add(ep);
        }
    }

    /** A send to finish (with its cancel reason) once its endpoint's forced close has started. */
    void finishAfterClose(UcxOp op) {
        sendsAwaitingClose.add(op);
    }

    /** Something to do once the queued closes have started (e.g. destroy remote keys their puts used). */
    void afterClose(Runnable r) {
        afterClose.add(r);
    }

    /** Starts the queued closes; returns how many things it did. */
    int closeQueued() {
        int n = 0;
        UcpEndpoint ep;
        while ((ep = toForceClose.poll()) != null) {
            n++;
            start(ep, true);
        }
        while ((ep = toFlushClose.poll()) != null) {
            n++;
            start(ep, false);
        }
        if (!sendsAwaitingClose.isEmpty()) {
            n++;
            for (UcxOp op : sendsAwaitingClose) {
                if (!op.done) {
                    matcher.finish(op, op.cancelReason);
                }
            }
            sendsAwaitingClose.clear();
        }
        if (!afterClose.isEmpty()) {
            n++;
            List<Runnable> rs = new ArrayList<>(afterClose);
            afterClose.clear();
            for (Runnable r : rs) {
                r.run();
            }
        }
        if (n > 0) {
            pruneCompleted();
        }
        return n;
    }

    private void start(UcpEndpoint ep, boolean force) {
        try {
            UcpRequest r = force ? ep.closeNonBlockingForce() : ep.closeNonBlockingFlush();
            if (r != null && !r.isCompleted()) {
                closing.add(r);
            }
        } catch (RuntimeException e) {
            errors.report("endpoint-close", new TransportException(ErrorCode.NETWORK,
                    "UCX endpoint close failed: " + e.getMessage(), e));
        }
    }

    private void pruneCompleted() {
        closing.removeIf(UcpRequest::isCompleted);
    }

    /** @return whether every close started so far has completed (so the worker may be destroyed) */
    boolean allClosed() {
        pruneCompleted();
        return closing.isEmpty() && toForceClose.isEmpty() && toFlushClose.isEmpty();
    }

    /** @return close requests UCX still holds */
    int inFlight() {
        pruneCompleted();
        return closing.size();
    }

    /** @return endpoints to lost peers left to the worker's destruction (shm mode) */
    int leftToWorker() {
        return leftToWorker.size();
    }
}
