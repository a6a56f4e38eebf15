package dev.kvtransfer.testkit.loopback;

import dev.kvtransfer.api.ErrorHandler;
import dev.kvtransfer.api.transport.RecvCompletion;
import dev.kvtransfer.api.transport.TransportException;

import java.util.concurrent.Future;
import java.util.concurrent.RejectedExecutionException;
import java.util.concurrent.ScheduledThreadPoolExecutor;
import java.util.concurrent.TimeUnit;

/**
 * The thread of a loopback manager's posted receives ({@code recvAsync}): their callbacks and deadlines run here,
 * never under the manager's lock and never on the poster's thread (the loopback has no transport thread of its own:
 * this is it). Started on the first post, stopped by the manager's close (queued callbacks still run, deadlines are
 * dropped: close failed their receives). Calls are made under the manager's lock.
 */
final class PostedRunner {
    private final String name;
    private final ErrorHandler errors;
    private ScheduledThreadPoolExecutor runner;

    PostedRunner(String name, ErrorHandler errors) {
        this.name = name;
        this.errors = errors;
    }

    /** Starts the thread if needed. */
    void start() {
        if (runner == null) {
            runner = new ScheduledThreadPoolExecutor(1, r -> {
                Thread t = new Thread(r, "loopback-" + name + "-posted");
                t.setDaemon(true);
                return t;
            });
            runner.setRemoveOnCancelPolicy(true);
            runner.setExecuteExistingDelayedTasksAfterShutdownPolicy(false);
        }
    }

    /** @return the deadline task of a posted receive */
    Future<?> schedule(Runnable expire, long nanos) {
        return runner.schedule(expire, nanos, TimeUnit.NANOSECONDS);
    }

    /** A posted receive just ended: its callback is queued (run inline after close: a copy that ended late). */
    void notifyEnded(PostedReceive p) {
        RecvCompletion done = p.done;
        if (done == null) {
            return;
        }
        p.done = null;
        if (p.timer != null) {
            p.timer.cancel(false);
        }
        TransportException outcome = p.outcome();
        Runnable call = () -> {
            try {
                done.completed(outcome);
            } catch (RuntimeException | Error e) {
                errors.onError(e);
            }
        };
        try {
            runner.execute(call);
        } catch (RejectedExecutionException e) {
            call.run();
        }
    }

    /** The manager closed. */
    void shutdown() {
        if (runner != null) {
            runner.shutdown();
        }
    }
}
