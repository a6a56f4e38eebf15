package dev.kvtransfer.ucx;

import dev.kvtransfer.api.ErrorHandler;

import java.util.Objects;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;

/**
 * Where every background error of one manager goes: counted ({@link #count()}), then handed to the
 * configuration's {@link ErrorHandler}, at most {@value #PER_KIND_PER_SECOND} per kind and second (the rest are
 * only counted, and the next reported one says how many were suppressed), so a hostile peer cannot turn a few
 * bytes into megabytes of log. A handler that throws is ignored (Agrona's rule: errors never propagate out of
 * an agent's error path).
 */
final class UcxErrors {
    /** Reports per kind and second before suppression. */
    static final int PER_KIND_PER_SECOND = 10;
    /** Longest peer-supplied string quoted in an error. */
    static final int MAX_QUOTED = 256;

    private final ErrorHandler handler;
    private final AtomicLong count = new AtomicLong();
    private final ConcurrentHashMap<String, Window> windows = new ConcurrentHashMap<>();

    UcxErrors(ErrorHandler handler) {
        this.handler = Objects.requireNonNull(handler, "handler");
    }

    /** @return errors reported so far (suppressed ones included) */
    long count() {
        return count.get();
    }

    /**
     * Counts and reports one error.
     *
     * @param kind  a short, fixed key (never peer-supplied) that groups errors for rate limiting
     * @param error the error
     */
    void report(String kind, Throwable error) {
        count.incrementAndGet();
        long suppressed = windows.computeIfAbsent(kind, k -> new Window()).admit(System.nanoTime());
        if (suppressed < 0) {
            return;
        }
        if (suppressed > 0) {
            error.addSuppressed(new SuppressedCount(suppressed, kind));
        }
        try {
            handler.onError(error);
        } catch (RuntimeException | Error e) {
            // The handler is the end of the line; nothing else can be done with its own failure.
        }
    }

    /**
     * A peer-supplied string as errors quote it: at most {@value #MAX_QUOTED} characters, control characters
     * replaced.
     *
     * @param s the string (may be null)
     * @return the quotable form
     */
    static String quote(String s) {
        if (s == null) {
            return "null";
        }
        StringBuilder b = new StringBuilder(Math.min(s.length(), MAX_QUOTED) + 8);
        b.append('\'');
        int n = Math.min(s.length(), MAX_QUOTED);
        for (int i = 0; i < n; i++) {
            char c = s.charAt(i);
            b.append(c < 0x20 || c == 0x7f ? '?' : c);
        }
        b.append('\'');
        if (s.length() > MAX_QUOTED) {
            b.append("...(").append(s.length()).append(" chars)");
        }
        return b.toString();
    }

    /** One kind's one-second window. */
    private static final class Window {
        private long start;
        private int reported;
        private long suppressed;

        /** @return -1 to suppress this one, else how many were suppressed since the last report */
        synchronized long admit(long now) {
            if (now - start > TimeUnit.SECONDS.toNanos(1)) {
                start = now;
                reported = 0;
            }
            if (reported >= PER_KIND_PER_SECOND) {
                suppressed++;
                return -1;
            }
            reported++;
            long s = suppressed;
            suppressed = 0;
            return s;
        }
    }

    /** Attached to a reported error: how many of its kind were only counted before it. */
    static final class SuppressedCount extends RuntimeException {
        private static final long serialVersionUID = 1L;

        SuppressedCount(long n, String kind) {
            super(n + " earlier '" + kind + "' errors were counted but not reported (rate limit "
                    + PER_KIND_PER_SECOND + "/s)", null, false, false);
        }
    }
}
