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
 *
 * <p>With a {@link Doorbell} (the agent threads' strategy; callers' strategies have none), the park phase becomes
 * a sleep that a peer's message cuts short: the doorbell is armed, one more duty cycle runs, then the thread sleeps
 * up to {@code maxParkNs}. While the group reads streams from other hosts (UDP images, which ring no doorbell) the
 * doubling parks run first, so such a message after a short pause still waits no longer than the pause so far.
 */
final class SpinThenParkIdleStrategy implements IdleStrategy {
    private static final long MIN_PARK_NS = 1_000;

    private final long spinNs;
    private final long maxParkNs;
    private long lastWorkNs = System.nanoTime();
    private long parkNs = MIN_PARK_NS;
    private int spins;
    private final Doorbell doorbell;
    private final java.util.function.BooleanSupplier remoteStreams;
    private boolean armed;

    SpinThenParkIdleStrategy(long spinNs, long maxParkNs) {
        this(spinNs, maxParkNs, null, () -> true);
    }

    /**
     * @param doorbell the agent group's doorbell, or null (park only)
     * @param remoteStreams whether the group now reads a stream that rings no doorbell (from another host)
     */
    SpinThenParkIdleStrategy(long spinNs, long maxParkNs, Doorbell doorbell,
            java.util.function.BooleanSupplier remoteStreams) {
        this.spinNs = spinNs;
        this.maxParkNs = maxParkNs;
        this.doorbell = doorbell;
        this.remoteStreams = remoteStreams;
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
        Doorbell d = doorbell;
        if (d != null && (parkNs >= maxParkNs || !remoteStreams.getAsBoolean())) {
            if (!armed) {
                d.arm();
                armed = true; // the runner's next duty cycle sees whatever came before the flags
                return;
            }
            d.sleep(maxParkNs); // disarms
            armed = false;
            return;
        }
        LockSupport.parkNanos(parkNs);
        parkNs = Math.min(parkNs << 1, maxParkNs);
    }

    @Override
    public void reset() {
        if (armed) {
            doorbell.disarm();
            armed = false;
        }
        lastWorkNs = System.nanoTime();
        parkNs = MIN_PARK_NS;
        spins = 0;
    }

    @Override
    public String alias() {
        return "spin-then-park";
    }
}
