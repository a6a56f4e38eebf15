package dev.kvtransfer.aeron;

import org.agrona.concurrent.IdleStrategy;

import java.util.concurrent.locks.LockSupport;

/**
 * The {@code backoff} idle strategy of our agents and drivers: after work it keeps spinning (yielding every few
 * rounds, for the other threads of a small host) for {@code spinNs} of wall time, so a request/response exchange
 * finds its agent awake at every hop; then it parks, from 1 µs doubling up to {@code maxParkNs}, so an idle
 * process costs almost nothing. Agrona's {@code BackoffIdleStrategy} counts calls instead of time, which on a
 * loaded host ends the spin phase after a few microseconds and parks ~55 µs (timer slack) between the hops of a
 * round trip.
 */
final class SpinThenParkIdleStrategy implements IdleStrategy {
    private static final long MIN_PARK_NS = 1_000;

    private final long spinNs;
    private final long maxParkNs;
    private long lastWorkNs = System.nanoTime();
    private long parkNs = MIN_PARK_NS;
    private int spins;

    SpinThenParkIdleStrategy(long spinNs, long maxParkNs) {
        this.spinNs = spinNs;
        this.maxParkNs = maxParkNs;
    }

    @Override
    public void idle(int workCount) {
        if (workCount > 0) {
            reset();
            return;
        }
        idle();
    }

    @Override
    public void idle() {
        if (System.nanoTime() - lastWorkNs < spinNs) {
            if ((++spins & 7) == 0) {
                Thread.yield();
            } else {
                Thread.onSpinWait();
            }
            return;
        }
        LockSupport.parkNanos(parkNs);
        parkNs = Math.min(parkNs << 1, maxParkNs);
    }

    @Override
    public void reset() {
        lastWorkNs = System.nanoTime();
        parkNs = MIN_PARK_NS;
        spins = 0;
    }

    @Override
    public String alias() {
        return "spin-then-park";
    }
}
