package dev.kvtransfer.core.timing;

import java.time.Instant;

/** Wall-clock time in nanoseconds since the epoch (for request start/end times that cross processes). */
public final class EpochClock {
    private EpochClock() {
    }

    /** @return now, in nanoseconds since 1970-01-01T00:00Z */
    public static long nowNanos() {
        Instant now = Instant.now();
        return now.getEpochSecond() * 1_000_000_000L + now.getNano();
    }
}
