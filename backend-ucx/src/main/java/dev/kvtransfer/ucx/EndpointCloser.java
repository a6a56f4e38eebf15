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
 * process no longer drains), so an endpoint to a lost peer is force-closed where the endpoint has UCX's peer
 * error mode (net mode; completes inline). In shm mode UCX refuses a forced close, and leaving such endpoints
 * unclosed for {@code ucp_worker_destroy} to destroy was tried and crashed once in the module suite
 * ({@code SIGSEGV} in {@code uct_md_mem_dereg} inside {@code ucp_worker_destroy}), so they are flush-closed like
 * any other; {@link #allClosed()} then tells the shutdown whether destroying the worker is safe (if not, the
 * shutdown leaves it undestroyed and reports it). An endpoint is closed at
 * most once (jucx keeps the native pointer after a close: a second close is a use after free).
 */
final class EndpointCloser {
    /** One close: queued, then (if UCX did not finish it inline) in flight. */
    private static final class Close {
        final UcpEndpoint ep;
        final String peer;
        final boolean lost;
        UcpRequest request;

        Close(UcpEndpoint ep, String peer, boolean lost) {
            this.ep = ep;
            this.peer = peer;
            this.lost = lost;
        }
    }

    private final ArrayDeque<Close> toForceClose = new ArrayDeque<>();
    private final ArrayDeque<Close> toFlushClose = new ArrayDeque<>();
    private final List<Close> closing = new ArrayList<>();
    private final List<UcxOp> sendsAwaitingClose = new ArrayList<>();
    private final List<Runnable> afterClose = new ArrayList<>();
    /** Endpoints queued or closed: each at most once. */
    private final Set<UcpEndpoint> handled = Collections.newSetFromMap(new IdentityHashMap<>());
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
     * was not lost, else force (without peer error mode: flush, the only close UCX allows).
     */
    void closeEndpoints(UcxConnection c) {
        UcxFailure f = c.failure;
        boolean lost = f != null && !f.closed() && f.code() == ErrorCode.PEER_LOST;
        boolean flush = c.pending.isEmpty() && !lost;
        for (UcpEndpoint ep : c.endpoints) {
            if (!handled.add(ep)) {
                continue; // already closing or closed
            }
            Close close = new Close(ep, c.peer, lost);
            (flush || !peerErrorMode ? toFlushClose : toForceClose).add(close);
        }
        c.endpoints.clear();
        c.sendEp = null;
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
        Close c;
        while ((c = toForceClose.poll()) != null) {
            n++;
            start(c, true);
        }
        while ((c = toFlushClose.poll()) != null) {
            n++;
            start(c, false);
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

    private void start(Close c, boolean force) {
        try {
            UcpRequest r = force ? c.ep.closeNonBlockingForce() : c.ep.closeNonBlockingFlush();
            if (r != null && !r.isCompleted()) {
                c.request = r;
                closing.add(c);
            }
        } catch (org.openucx.jucx.UcxException e) {
            if (TagMatcher.isPeerStatus(e.getStatus())) {
                // The endpoint had failed already (its peer died; UCX's keepalive saw it before our control
                // connection did): UCX releases it and returns why, which jucx throws. Nothing is left to close.
                return;
            }
            errors.report("endpoint-close", new TransportException(dev.kvtransfer.api.ErrorCode.NETWORK,
                    "UCX endpoint close failed: " + e.getMessage(), e));
        } catch (RuntimeException e) {
            errors.report("endpoint-close", new TransportException(ErrorCode.NETWORK,
                    "UCX endpoint close to " + c.peer + " failed: " + e.getMessage(), e));
        }
    }

    private void pruneCompleted() {
        closing.removeIf(c -> c.request.isCompleted());
    }

    /** @return whether every close started so far has completed (so the worker may be destroyed) */
    boolean allClosed() {
        pruneCompleted();
        return closing.isEmpty() && toForceClose.isEmpty() && toFlushClose.isEmpty();
    }

    /**
     * @return whether a close to a peer that was not lost is queued or in flight (worth waiting for: a live peer
     * drains its FIFO; a lost one never will)
     */
    boolean closingLivePeers() {
        pruneCompleted();
        if (!toForceClose.isEmpty() || !toFlushClose.isEmpty()) {
            return true;
        }
        for (Close c : closing) {
            if (!c.lost) {
                return true;
            }
        }
        return false;
    }

    /** @return whether every close still in flight is to a lost peer */
    boolean onlyLostInFlight() {
        pruneCompleted();
        for (Close c : closing) {
            if (!c.lost) {
                return false;
            }
        }
        return true;
    }

    /** @return the peers of the closes still in flight (for reports) */
    List<String> inFlightPeers() {
        pruneCompleted();
        List<String> peers = new ArrayList<>();
        for (Close c : closing) {
            peers.add(c.peer + (c.lost ? " (lost)" : ""));
        }
        return peers;
    }
}
