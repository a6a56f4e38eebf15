package dev.kvtransfer.ucx;

import org.agrona.concurrent.IdleStrategy;
import org.openucx.jucx.ucp.UcpWorker;

/**
 * The progress agent's idle strategy: after work it keeps spinning (the agent keeps polling) for the spin
 * window ({@code ucx.spinMicros}, 50 µs measured best on 2 cores: the next event of a rendezvous is usually
 * microseconds away), then sleeps in {@code ucp_worker_wait} (epoll on the worker's event fd) until UCX or a
 * {@code ucp_worker_signal} wakes it. An idle manager therefore costs no CPU.
 *
 * <p>{@link #sleeping} tells submitters whether a signal is needed: the agent sets it before its last look at
 * the command queue, a submitter reads it after queueing (both volatile: one of the two always sees the other),
 * so no command is left waiting and no signal is sent while the agent is awake. {@code ucp_worker_arm} inside
 * the wait consumes a signal sent just before and returns at once.
 */
final class ProgressIdleStrategy implements IdleStrategy {
    volatile boolean sleeping;

    private final UcpWorker worker;
    private final CommandQueue commands;
    private final UcxLifecycle life;
    private final long spinNanos;
    private long lastWork;

    ProgressIdleStrategy(UcpWorker worker, CommandQueue commands, UcxLifecycle life,
                         long spinNanos) {
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
            return;
        }
        if (spinNanos > 0 && System.nanoTime() - lastWork < spinNanos) {
            Thread.onSpinWait();
            return;
        }
        sleeping = true;
        try {
            if (commands.isEmpty() && life.running()) {
                worker.waitForEvents();
            }
        } finally {
            sleeping = false;
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
