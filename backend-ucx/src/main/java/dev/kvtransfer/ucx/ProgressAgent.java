package dev.kvtransfer.ucx;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.transport.TransportException;
import org.agrona.concurrent.Agent;
import org.agrona.concurrent.AgentTerminationException;
import org.openucx.jucx.ucp.UcpWorker;

import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.locks.ReentrantLock;

/**
 * The agent that owns a manager's UCX worker (jucx workers are not thread-safe: no other thread touches it).
 * Callers queue {@link UcxCommand}s and, when the agent sleeps, wake it with {@code ucp_worker_signal} (the one
 * worker call UCX allows from any thread, under the lifecycle's read lock so it never hits a destroyed worker).
 * {@link #doWork()} drains commands in queue order (which orders concurrent calls by whoever entered first),
 * progresses the worker a bounded number of rounds (so incoming data cannot starve the queue) and closes the
 * endpoints that callbacks queued for closing; it stops when the manager leaves RUNNING, and {@link #onClose()}
 * runs the shutdown sequence on this thread. All jucx callbacks run here — or on a blocked caller that runs the
 * round itself ({@link #tryCallerRound}, {@code ucx.callerPollMicros}): every round, the agent's sleep in
 * {@code ucp_worker_wait} and the shutdown sequence hold {@link #workerLock}, so exactly one thread touches the
 * worker at a time, and the agent does not sleep in epoll while a caller wants the worker.
 */
final class ProgressAgent implements Agent {
    /** Queue capacity; a full queue makes submitters yield until there is room. */
    static final int QUEUE_CAPACITY = 1 << 16;
    private static final int COMMANDS_PER_ROUND = 256;
    private static final int PROGRESS_PER_ROUND = 64;

    private final String roleName;
    private final UcpWorker worker;
    private final UcxLifecycle life;
    private final UcxErrors errors;
    private final CommandQueue commands = new CommandQueue(QUEUE_CAPACITY);
    private final ProgressIdleStrategy idle;
    private EndpointCloser endpoints;
    private AbandonedSends abandoned;
    private Runnable shutdown;
    private volatile Thread thread;
    /** Held by whichever thread touches the worker: the agent (round, epoll sleep, shutdown) or a polling caller. */
    private final ReentrantLock workerLock = new ReentrantLock();
    /** Callers in their poll phase: the agent naps instead of sleeping in epoll while there are any. */
    private final AtomicInteger callersPolling = new AtomicInteger();
    /** Rounds with work that a polling caller ran (written under the worker lock; tests). */
    private volatile long callerRounds;

    ProgressAgent(String name, UcpWorker worker, UcxLifecycle life, UcxErrors errors, long spinNanos,
                  java.util.function.IntSupplier sendsInFlight) {
        this.roleName = "ucx-progress-" + name;
        this.worker = worker;
        this.life = life;
        this.errors = errors;
        this.idle = new ProgressIdleStrategy(worker, commands, life, spinNanos, sendsInFlight, workerLock,
                callersPolling);
    }

    /** Completes the wiring (the closer and the shutdown sequence need the agent's queue themselves). */
    void wire(EndpointCloser endpoints, AbandonedSends abandoned, Runnable shutdown) {
        this.endpoints = endpoints;
        this.abandoned = abandoned;
        this.shutdown = shutdown;
    }

    ProgressIdleStrategy idleStrategy() {
        return idle;
    }

    /** @return whether the current thread is this agent's */
    boolean onAgentThread() {
        return Thread.currentThread() == thread || workerLock.isHeldByCurrentThread();
    }

    /**
     * A caller begins (true) or ends (false) its poll phase; at the beginning an agent asleep in epoll is
     * signalled, so it lets go of the worker.
     */
    void callerPolling(boolean begin) {
        if (!begin) {
            callersPolling.decrementAndGet();
            return;
        }
        callersPolling.incrementAndGet();
        if (idle.sleeping) {
            var lock = life.readLock();
            lock.lock();
            try {
                if (life.running()) {
                    worker.signal();
                }
            } finally {
                lock.unlock();
            }
        }
    }

    /**
     * A blocked caller's round: the agent's round on the caller's thread, when no other thread holds the worker.
     *
     * @return the work done, or -1 when another thread holds the worker right now
     */
    int tryCallerRound() throws Exception {
        if (!workerLock.tryLock()) {
            return -1;
        }
        try {
            if (!life.running()) {
                return 0;
            }
            int work = round();
            if (work > 0) {
                callerRounds++;
            }
            return work;
        } finally {
            workerLock.unlock();
        }
    }

    /** @return rounds with work that polling callers ran so far */
    long callerRounds() {
        return callerRounds;
    }

    /**
     * Queues a command and wakes the agent if it sleeps. Holds the lifecycle's read lock, so a command is either
     * queued before the shutdown sequence starts (which then fails it) or refused.
     *
     * @return false once the manager left RUNNING (the command was not queued)
     */
    boolean submit(UcxCommand c) {
        var lock = life.readLock();
        lock.lock();
        try {
            if (!life.running()) {
                return false;
            }
            offer(c);
            if (idle.sleeping) {
                worker.signal();
            }
            return true;
        } finally {
            lock.unlock();
        }
    }

    /** Queues a command even while closing (the shutdown sequence drains it, or finds its op done). */
    void submitAlways(UcxCommand c) {
        var lock = life.readLock();
        lock.lock();
        try {
            offer(c);
            if (life.running() && idle.sleeping) {
                worker.signal();
            }
        } finally {
            lock.unlock();
        }
    }

    private void offer(UcxCommand c) {
        while (!commands.offer(c)) {
            Thread.yield(); // 65,536 queued commands: let the agent catch up
        }
    }

    /** Signals unconditionally (closing: the agent must see the state change now). */
    void signalNow() {
        worker.signal();
    }

    /** @return the next queued command or null (shutdown drains with it) */
    UcxCommand pollCommand() {
        return commands.poll();
    }

    @Override
    public void onStart() {
        thread = Thread.currentThread();
    }

    @Override
    public int doWork() throws Exception {
        if (!life.running()) {
            throw new AgentTerminationException();
        }
        if (!workerLock.tryLock()) {
            return 0; // a polling caller runs the round right now
        }
        try {
            return round();
        } finally {
            workerLock.unlock();
        }
    }

    private int round() throws Exception {
        int work = 0;
        UcxCommand c;
        while (work < COMMANDS_PER_ROUND && (c = commands.poll()) != null) {
            work++;
            try {
                c.run();
            } catch (RuntimeException e) {
                errors.report("command", new TransportException(ErrorCode.INTERNAL, roleName + ": command failed: "
                        + e, e));
                c.abort(new UcxFailure(ErrorCode.NETWORK, "UCX call failed: " + e.getMessage(), false, e));
            }
        }
        for (int i = 0; i < PROGRESS_PER_ROUND && worker.progress() > 0; i++) {
            work++;
        }
        work += endpoints.closeQueued();
        if (abandoned.outgoingActive() > 0) {
            work += abandoned.expire(System.nanoTime());
        }
        return work;
    }

    @Override
    public void onClose() {
        workerLock.lock(); // a polling caller holds it for one round at most
        try {
            shutdown.run();
        } finally {
            workerLock.unlock();
        }
    }

    @Override
    public String roleName() {
        return roleName;
    }
}
