package dev.kvtransfer.ucx;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.transport.TransportException;
import org.openucx.jucx.ucp.UcpContext;
import org.openucx.jucx.ucp.UcpWorker;

import java.util.ArrayList;
import java.util.LinkedHashSet;
import java.util.Set;
import java.util.concurrent.TimeUnit;

/**
 * The ordered teardown of a manager, on the progress agent's thread once its loop ended: fail queued commands,
 * every connection (their calls end with {@code TransportClosedException}) and every posted receive; close
 * endpoints (flush where nothing is outstanding so peers see it at once, force otherwise); progress until UCX
 * gave everything back or {@code ucx.closeGraceMillis} passed; release registrations; destroy worker and
 * context under the lifecycle's write lock (no signal can hit them after); fail commands that raced in.
 *
 * <p>The worker is destroyed only once every endpoint close UCX handed back has completed: destroying it with
 * a close request in flight aborts the process inside UCX 1.13.1 ({@code ucp_ep.c:382}). Closes to live peers
 * are waited for (at most the grace); closes to lost peers are not (in shm mode a flush to a dead process's
 * full FIFO never finishes). When a close is still in flight at the end, worker and context are left
 * undestroyed (a leak is the lesser evil): reported to the error handler when a live peer's close is among
 * them, silently when only lost peers' are (their loss was reported when it happened).
 */
final class ShutdownSequence implements Runnable {
    private final UcxConnectionManager manager;
    private final ProgressAgent agent;
    private final TagMatcher matcher;
    private final EndpointCloser endpoints;
    private final UcxLifecycle life;
    private final UcxErrors errors;
    private final long graceNanos;
    private final UcpWorker worker;
    private final UcpContext context;

    ShutdownSequence(UcxConnectionManager manager, ProgressAgent agent, TagMatcher matcher, EndpointCloser endpoints,
                     UcxLifecycle life, UcxErrors errors, long graceNanos, UcpWorker worker, UcpContext context) {
        this.manager = manager;
        this.agent = agent;
        this.matcher = matcher;
        this.endpoints = endpoints;
        this.life = life;
        this.errors = errors;
        this.graceNanos = graceNanos;
        this.worker = worker;
        this.context = context;
    }

    @Override
    public void run() {
        life.beginClose(() -> { });
        UcxFailure closed = manager.closedFailure();
        boolean destroy = true;
        try {
            UcxCommand c;
            while ((c = agent.pollCommand()) != null) {
                c.abort(closed);
            }
            Set<UcxConnection> all = new LinkedHashSet<>(manager.allConnections());
            all.addAll(matcher.bySenderId.values());
            for (UcxConnection conn : all) {
                matcher.failConnection(conn, closed);
            }
            for (UcxOp op : new ArrayList<>(matcher.posted)) {
                if (op.cancelReason == null) {
                    op.cancelReason = closed;
                }
                if (op.kind == UcxOp.RECV || op.kind == UcxOp.RECV_ANY) {
                    matcher.cancelRecv(op);
                }
            }
            endpoints.closeQueued();
            long deadline = System.nanoTime() + graceNanos;
            // Closes to lost peers are not waited for: they finish now or never (a FIFO nobody drains).
            while (System.nanoTime() - deadline < 0 && (!matcher.posted.isEmpty() || endpoints.closingLivePeers()
                    || matcher.abandoned.receivesOutstanding() > 0)) {
                if (worker.progress() == 0 && endpoints.closeQueued() == 0) {
                    Thread.onSpinWait();
                }
            }
            for (UcxOp op : new ArrayList<>(matcher.posted)) {
                matcher.finish(op, op.cancelReason);
            }
            for (int i = 0; i < 16 && !endpoints.allClosed(); i++) {
                worker.progress(); // a last chance for closes that only needed a round of progress
            }
            if (!endpoints.allClosed()) {
                // ucp_worker_destroy would complete these close requests itself and UCX 1.13.1 then aborts the
                // process (ucp_ep.c:382, the request was never released): leave worker and context alive.
                destroy = false;
                if (!endpoints.onlyLostInFlight()) {
                    errors.report("close", new TransportException(ErrorCode.NETWORK, "UCX manager '" + manager.name()
                            + "': endpoint close(s) to " + endpoints.inFlightPeers() + " still in flight after "
                            + TimeUnit.NANOSECONDS.toMillis(graceNanos) + " ms; the UCX worker and context are left"
                            + " undestroyed, destroying them now would abort the process"));
                }
                // Only lost peers' closes (their loss was reported as PEER_LOST when it happened): the expected
                // end of a peer killed mid-transfer in shm mode, not reported again.
            }
        } catch (Throwable t) {
            errors.report("close", new TransportException(ErrorCode.INTERNAL, "UCX manager '" + manager.name()
                    + "': error while closing: " + t, t));
            for (UcxOp op : new ArrayList<>(matcher.posted)) {
                op.complete(closed);
            }
            destroy = endpoints.allClosed();
        } finally {
            matcher.deregisterAll();
            manager.unmapRegions();
            life.writeLock().lock();
            try {
                if (destroy) {
                    closeQuietly(worker, context);
                }
                life.closed();
            } finally {
                life.writeLock().unlock();
            }
            UcxCommand c;
            while ((c = agent.pollCommand()) != null) {
                c.abort(closed); // calls that raced with close and queued after the drain
            }
        }
    }

    private void closeQuietly(AutoCloseable... all) {
        for (AutoCloseable c : all) {
            if (c == null) {
                continue;
            }
            try {
                c.close();
            } catch (Exception e) {
                errors.report("close", new TransportException(ErrorCode.INTERNAL, "closing "
                        + c.getClass().getSimpleName() + " failed: " + e, e));
            }
        }
    }
}
