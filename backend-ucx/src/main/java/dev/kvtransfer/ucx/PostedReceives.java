package dev.kvtransfer.ucx;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.transport.RecvCompletion;
import dev.kvtransfer.api.transport.TransportClosedException;

import java.time.Duration;
import java.util.concurrent.ScheduledThreadPoolExecutor;
import java.util.concurrent.TimeUnit;

/**
 * Posted receives and sends ({@code Connection.recvAsync}, {@code sendAsync}) of one manager: a fresh {@link UcxOp}
 * per operation (UCX and the callback own it; never a thread's reusable one), posted by the progress agent like a
 * blocking one; the op calls its callback once it is done ({@link UcxOp#complete}). Nothing waits for it, and the
 * agent may sleep in epoll for as long as nothing happens, so the deadline is a timer: at the deadline the same
 * cancel as a blocking call's runs on the agent ({@link TagMatcher#cancel}: UCX cancels the tagged receive, or it
 * completes normally when the message matched meanwhile; a send is abandoned to the receiver). The timer's thread
 * starts on the first post and ends at close.
 */
final class PostedReceives {
    private final String name;
    private final ProgressAgent agent;
    private final TagMatcher matcher;
    private final UcxErrors errors;
    private ScheduledThreadPoolExecutor timer;
    private boolean closed;

    PostedReceives(String name, ProgressAgent agent, TagMatcher matcher, UcxErrors errors) {
        this.name = name;
        this.agent = agent;
        this.matcher = matcher;
        this.errors = errors;
    }

    /**
     * Posts a fresh receive op.
     *
     * @throws TransportClosedException when the manager no longer runs (nothing posted, the callback never called)
     */
    void post(UcxOp op, Duration timeout, RecvCompletion done) {
        op.callback = done;
        op.errors = errors;
        op.waiter = null; // nobody to wake
        int generation = op.generation;
        long nanos = saturatedNanos(timeout);
        synchronized (this) {
            if (closed) {
                throw new TransportClosedException(op.describe() + ": UCX manager '" + name + "' is closed");
            }
            if (timer == null) {
                timer = new ScheduledThreadPoolExecutor(1, DaemonThreads.named("ucx-deadlines-" + name));
                timer.setRemoveOnCancelPolicy(true);
            }
            // Scheduled before the op can complete, so completing it always finds the task to cancel.
            op.deadlineTask = timer.schedule(() -> expire(op, generation, timeout), nanos, TimeUnit.NANOSECONDS);
        }
        if (!agent.submit(op)) {
            op.deadlineTask.cancel(false);
            throw new TransportClosedException(op.describe() + ": UCX manager '" + name + "' is closed");
        }
    }

    private void expire(UcxOp op, int generation, Duration timeout) {
        UcxFailure reason = UcxFailure.of(ErrorCode.TIMEOUT, "timed out after " + timeout.toMillis() + " ms");
        agent.submitAlways(new UcxCommand() {
            @Override
            public void run() {
                matcher.cancel(op, generation, reason);
            }

            @Override
            public void abort(UcxFailure f) {
                // Closing completes the operation itself.
            }
        });
    }

    /** The manager closes: no more posts; pending deadlines are dropped (the shutdown fails their receives). */
    void close() {
        synchronized (this) {
            closed = true;
            if (timer != null) {
                timer.shutdownNow();
            }
        }
    }

    static long saturatedNanos(Duration d) {
        try {
            return Math.max(0, d.toNanos());
        } catch (ArithmeticException e) {
            return d.isNegative() ? 0 : Long.MAX_VALUE / 4;
        }
    }
}
