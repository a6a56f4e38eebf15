package dev.kvtransfer.ucx;

import dev.kvtransfer.api.transport.TransportException;
import org.openucx.jucx.ucp.UcpEndpoint;
import org.openucx.jucx.ucp.UcpRequest;

import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;

/**
 * Closes endpoints outside UCX callbacks (closing one from inside UCX's error callback crashed Debian's UCX
 * 1.13.1: {@code wireup_ep.c:494 Assertion … failed} in {@code ucp_ep_set_failed}), and tracks closes in
 * flight. A graceful (flush) close tells the peer at once; a forced one purges the endpoint's outstanding sends,
 * whose callbacks then run with an error status. Sends torn out this way are finished right after the close was
 * started. Agent thread only.
 */
final class EndpointCloser {
    private final ArrayDeque<UcpEndpoint> toForceClose = new ArrayDeque<>();
    private final ArrayDeque<UcpEndpoint> toFlushClose = new ArrayDeque<>();
    private final List<UcpRequest> closing = new ArrayList<>();
    private final List<UcxOp> sendsAwaitingClose = new ArrayList<>();
    private final List<Runnable> afterClose = new ArrayList<>();
    private final UcxErrors errors;
    private TagMatcher matcher;

    EndpointCloser(UcxErrors errors) {
        this.errors = errors;
    }

    void wire(TagMatcher matcher) {
        this.matcher = matcher;
    }

    /** Queues every endpoint of a connection: flush when nothing of ours is outstanding on it, else force. */
    void closeEndpoints(UcxConnection c) {
        boolean flush = c.pending.isEmpty();
        for (UcpEndpoint ep : c.endpoints) {
            (flush ? toFlushClose : toForceClose).add(ep);
        }
        c.endpoints.clear();
        c.sendEp = null;
    }

    void forceClose(UcpEndpoint ep) {
        toForceClose.add(ep);
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
        return n;
    }

    private void start(UcpEndpoint ep, boolean force) {
        try {
            UcpRequest r = force ? ep.closeNonBlockingForce() : ep.closeNonBlockingFlush();
            if (r != null && !r.isCompleted()) {
                closing.add(r);
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
            errors.report("endpoint-close", new TransportException(dev.kvtransfer.api.ErrorCode.NETWORK,
                    "UCX endpoint close failed: " + e.getMessage(), e));
        }
    }

    /** @return whether every close started so far has completed */
    boolean allClosed() {
        for (Iterator<UcpRequest> it = closing.iterator(); it.hasNext(); ) {
            if (it.next().isCompleted()) {
                it.remove();
            }
        }
        return closing.isEmpty() && toForceClose.isEmpty() && toFlushClose.isEmpty();
    }
}
