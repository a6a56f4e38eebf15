package dev.kvtransfer.core.transfer;

import java.time.Duration;

/**
 * The {@link Duration} a transport call gets for the time left to a deadline, without a new object per call: the
 * transport api takes a {@code Duration}, and the control path made one per send and receive (~24 B each, 6-8 per
 * one-block request). Per thread the last duration handed out is kept with the millisecond it stands for; a later
 * call whose time left rounds down to the same millisecond gets it again. So a call may get up to 1 ms
 * <em>less</em> than it has left, never more: no wait outlives its deadline. Under 1 ms left the exact time is
 * given (a new object: the last moments of a deadline are rare).
 */
final class Waits {
    private static final long MS = 1_000_000L;
    private static final ThreadLocal<Last> LAST = ThreadLocal.withInitial(Last::new);

    private Waits() {
    }

    private static final class Last {
        long millis = -1;
        Duration duration;
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
        Last last = LAST.get();
        if (last.millis != millis) {
            last.millis = millis;
            last.duration = Duration.ofMillis(millis);
        }
        return last.duration;
    }
}
