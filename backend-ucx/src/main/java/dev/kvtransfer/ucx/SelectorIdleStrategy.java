package dev.kvtransfer.ucx;

import org.agrona.concurrent.IdleStrategy;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.util.concurrent.TimeUnit;

/**
 * The bootstrap agent's idle strategy: with nothing done it sleeps in {@link java.nio.channels.Selector#select}
 * until a socket is ready, another thread calls {@code wakeup()} (new work in the agent's inbox, or closing),
 * or its next timer (handshake deadline, heartbeat, liveness check) is due.
 */
final class SelectorIdleStrategy implements IdleStrategy {
    private final BootstrapAgent agent;
    private final UcxLifecycle life;

    SelectorIdleStrategy(BootstrapAgent agent, UcxLifecycle life) {
        this.agent = agent;
        this.life = life;
    }

    @Override
    public void idle(int workCount) {
        if (workCount > 0 || !life.running()) {
            return;
        }
        long waitMs = TimeUnit.NANOSECONDS.toMillis(agent.nextTimerNanos() - System.nanoTime());
        try {
            agent.selector().select(Math.max(1, Math.min(1000, waitMs + 1)));
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        } catch (java.nio.channels.ClosedSelectorException e) {
            // Closing.
        }
    }

    @Override
    public void idle() {
        idle(0);
    }

    @Override
    public void reset() {
    }

    @Override
    public String alias() {
        return "select-until-timer";
    }
}
