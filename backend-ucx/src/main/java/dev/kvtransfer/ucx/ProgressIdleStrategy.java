package dev.kvtransfer.ucx;

import org.agrona.concurrent.IdleStrategy;
import org.openucx.jucx.ucp.UcpWorker;

/**
 * The progress agent's idle strategy: after work it keeps spinning (the agent keeps polling) for the spin
 * window ({@code ucx.spinMicros}, 50 µs measured best on 2 cores: the next event of a rendezvous is usually
 * microseconds away), then sleeps in {@code ucp_worker_wait} (epoll on the worker's event fd) until UCX or a
 * {@code ucp_worker_signal} wakes it. An idle manager therefore costs no CPU. The spin yields every eighth round:
 * a pure busy spin kept the thread that takes the next step (a request or info thread of the same process) off a
 * small host's cores, which about doubled a control round trip between two processes.
 *
 * <p>While sends are in flight it never sleeps in epoll (see {@link TagMatcher#sendsInFlight}): it yields,
 * then naps {@value #POLL_NAP_NANOS} ns between polls.
 *
 * <p>{@link #sleeping} tells submitters whether a signal is needed: the agent sets it before its last look at
 * the command queue, a submitter reads it after queueing (both volatile: one of the two always sees the other),
 * so no command is left waiting and no signal is sent while the agent is awake. {@code ucp_worker_arm} inside
 * the wait consumes a signal sent just before and returns at once.
 */
final class ProgressIdleStrategy implements IdleStrategy {
    /** Nap between polls while sends are in flight and nothing moves. */
    static final long POLL_NAP_NANOS = 20_000;
    volatile boolean sleeping;

    private final UcpWorker worker;
    private final CommandQueue commands;
    private final UcxLifecycle life;
    private final long spinNanos;
    private final java.util.function.IntSupplier sendsInFlight;
    private final java.util.concurrent.locks.ReentrantLock workerLock;
    private final java.util.concurrent.atomic.AtomicInteger callersPolling;
    private long lastWork;
    private int polls;
    private int spins;

    ProgressIdleStrategy(UcpWorker worker, CommandQueue commands, UcxLifecycle life, long spinNanos,
                         java.util.function.IntSupplier sendsInFlight,
                         java.util.concurrent.locks.ReentrantLock workerLock,
                         java.util.concurrent.atomic.AtomicInteger callersPolling) {
        this.workerLock = workerLock;
        this.callersPolling = callersPolling;
        this.sendsInFlight = sendsInFlight;
        this.worker = worker;
        this.commands = commands;
        this.life = life;
        this.spinNanos = spinNanos;
        // nanoTime's origin is arbitrary: start with the window closed, so an idle start never spins.
        this.lastWork = System.nanoTime() - spinNanos;
    }

    @Override
    public void idle(int workCount) {
        if (workCount > 0) {
            lastWork = System.nanoTime();
            polls = 0;
            return;
        }
        if (callersPolling.get() > 0) {
            // A caller progresses the worker itself right now: do not spin beside it (2 small cores), nap.
            java.util.concurrent.locks.LockSupport.parkNanos(POLL_NAP_NANOS);
            return;
        }
        if (spinNanos > 0 && System.nanoTime() - lastWork < spinNanos) {
            if ((++spins & 7) == 0) {
                Thread.yield();
            } else {
                Thread.onSpinWait();
            }
            return;
        }
        if (sendsInFlight.getAsInt() > 0 && life.running()) {
            // A send may be waiting for room in a peer's shared-memory FIFO, which signals nothing when it
            // drains: poll, yielding the core first and then napping, instead of sleeping in epoll.
            if (polls++ < 64) {
                Thread.yield();
            } else {
                java.util.concurrent.locks.LockSupport.parkNanos(POLL_NAP_NANOS);
            }
            return;
        }
        // The epoll sleep touches the worker (ucp_worker_arm): only under the worker lock, and never while a caller
        // polls (it would wait for the lock for as long as we sleep). A caller that starts polling after our check
        // signals the worker: it raises callersPolling, then reads sleeping; we set sleeping, then read it.
        sleeping = true;
        if (callersPolling.get() > 0 || !workerLock.tryLock()) {
            sleeping = false;
            java.util.concurrent.locks.LockSupport.parkNanos(POLL_NAP_NANOS);
            return;
        }
        try {
            // Read again under the lock: a polling caller may have posted a send since the racy read above.
            if (commands.isEmpty() && life.running() && callersPolling.get() == 0 && sendsInFlight.getAsInt() == 0) {
                worker.waitForEvents();
            }
        } finally {
            sleeping = false;
            workerLock.unlock();
        }
    }

    @Override
    public void idle() {
        idle(0);
    }

    @Override
    public void reset() {
        lastWork = System.nanoTime() - spinNanos;
    }

    @Override
    public String alias() {
        return "ucx-spin-then-epoll";
    }
}
