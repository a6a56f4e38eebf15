package dev.kvtransfer.core.transfer;

import java.time.Duration;

/**
 * The {@link Duration} a transport call gets for the time left to a deadline, without a new object per call: the
 * transport api takes a {@code Duration}, and the control path made one per send and receive (~24 B each, 6-8 per
 * one-block request). Durations of whole milliseconds are kept in one static direct-mapped table (4096 entries,
 * indexed by the millisecond count): every request of a deployment has the same timeout, so the times left of
 * different requests fall on the same few thousand milliseconds and hit. A call whose time left rounds down to a
 * millisecond in the table gets that entry. So a call may get up to 1 ms <em>less</em> than it has left, never more:
 * no wait outlives its deadline. Under 1 ms left the exact time is given (a new object: the last moments of a
 * deadline are rare). {@code Duration} is immutable (final fields), so the table's unsynchronized entries are safe to
 * share between threads: a racing thread sees either an older entry (checked and replaced) or a complete one.
 */
final class Waits {
    private static final long MS = 1_000_000L;
    private static final int SLOTS = 4096;
    private static final Duration[] TABLE = new Duration[SLOTS];

    private Waits() {
    }

    /**
     * @param leftNanos time left, positive
     * @return at most {@code leftNanos} and more than {@code leftNanos - 1 ms} (exactly {@code leftNanos} below 1 ms)
     */
    static Duration left(long leftNanos) {
        if (leftNanos < MS) {
            return Duration.ofNanos(Math.max(1, leftNanos));
        }
        long millis = leftNanos / MS;
        int slot = (int) (millis & (SLOTS - 1));
        Duration d = TABLE[slot];
        if (d == null || d.toMillis() != millis) {
            d = Duration.ofMillis(millis);
            TABLE[slot] = d;
        }
        return d;
    }
}
