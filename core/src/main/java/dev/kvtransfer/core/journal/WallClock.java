package dev.kvtransfer.core.journal;

import java.time.Instant;
import java.util.concurrent.TimeUnit;

/**
 * Wall-clock time from {@code System.nanoTime()}: {@code mono + offset}, with one offset for the whole JVM so
 * that events of different ranks of one process order exactly as their monotonic stamps do. Re-calibrated at
 * most once a second (by a journal thread, never a transfer thread), from the narrowest of a few
 * {@code nanoTime / Instant.now() / nanoTime} samples; between calibrations nothing is allocated.
 */
final class WallClock {
    private static final long RECALIBRATE_NANOS = TimeUnit.SECONDS.toNanos(1);
    private static volatile long offsetNanos;
    private static volatile long calibratedAt;

    static {
        calibrate();
    }

    private WallClock() {
    }

    /**
     * @param monoNanos a {@code System.nanoTime()} stamp
     * @return the wall-clock time of that stamp, in nanoseconds since the epoch
     */
    static long wallNanos(long monoNanos) {
        if (monoNanos - calibratedAt > RECALIBRATE_NANOS) {
            calibrate();
        }
        return monoNanos + offsetNanos;
    }

    private static synchronized void calibrate() {
        long now = System.nanoTime();
        if (calibratedAt != 0 && now - calibratedAt <= RECALIBRATE_NANOS) {
            return; // another journal thread just did it
        }
        long best = Long.MAX_VALUE;
        long offset = 0;
        for (int i = 0; i < 3; i++) {
            long before = System.nanoTime();
            Instant t = Instant.now();
            long after = System.nanoTime();
            if (after - before < best) {
                best = after - before;
                offset = t.getEpochSecond() * 1_000_000_000L + t.getNano() - (before + after) / 2;
            }
        }
        offsetNanos = offset;
        calibratedAt = System.nanoTime();
    }
}
