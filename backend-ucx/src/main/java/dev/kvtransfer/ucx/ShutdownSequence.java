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
 * a close request in flight aborts the process inside UCX 1.13.1 ({@code ucp_ep.c:382}). When a close is still
 * in flight after the grace (a peer that stopped progressing), worker and context are left undestroyed and the
 * error handler is told; a leak is the lesser evil.
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
            while (System.nanoTime() - deadline < 0 && (!matcher.posted.isEmpty() || !endpoints.allClosed())) {
                if (worker.progress() == 0 && endpoints.closeQueued() == 0) {
                    Thread.onSpinWait();
                }
            }
            for (UcxOp op : new ArrayList<>(matcher.posted)) {
                matcher.finish(op, op.cancelReason);
            }
            if (!endpoints.allClosed()) {
                // ucp_worker_destroy would complete these close requests itself and UCX 1.13.1 then aborts the
                // process (ucp_ep.c:382, the request was never released): leave worker and context alive.
                destroy = false;
                errors.report("close", new TransportException(ErrorCode.NETWORK, "UCX manager '" + manager.name()
                        + "': " + endpoints.inFlight() + " endpoint close(s) still in flight after "
                        + TimeUnit.NANOSECONDS.toMillis(graceNanos) + " ms (a peer that does not progress); the UCX"
                        + " worker and context are left undestroyed, destroying them now would abort the process"));
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
