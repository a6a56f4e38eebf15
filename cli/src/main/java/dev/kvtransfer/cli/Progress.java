package dev.kvtransfer.cli;

import java.io.PrintStream;
import java.util.Locale;
import java.util.Objects;
import java.util.function.LongSupplier;

/**
 * Progress of long cli work, on stderr (stdout stays the report): a bar redrawn in place on a terminal
 * ({@code System.console() != null}), plain lines elsewhere (CI logs, pipes), at most one every
 * {@value #DEFAULT_LINE_INTERVAL_MS} ms ({@value #LINE_INTERVAL_PROPERTY} changes it), so short work prints nothing.
 *
 * <pre>{@code
 * Progress p = Progress.start("requests", n);
 * for (...) { ...; p.step(); }
 * p.done();
 * }</pre>
 *
 * Not thread-safe: one thread reports.
 */
public final class Progress {
    /** Milliseconds between two plain lines (not on a terminal). */
    public static final String LINE_INTERVAL_PROPERTY = "kvtransfer.progress.intervalMs";
    /** Default interval of plain lines. */
    public static final long DEFAULT_LINE_INTERVAL_MS = 5_000;
    private static final long REDRAW_NANOS = 100_000_000L;
    private static final int WIDTH = 30;

    private final String label;
    private final long total;
    private final PrintStream out;
    private final boolean terminal;
    private final long lineIntervalNanos;
    private final LongSupplier clock;
    private final long started;
    private long done;
    private long lastPrint;
    private boolean printed;
    private boolean finished;

    Progress(String label, long total, PrintStream out, boolean terminal, long lineIntervalNanos, LongSupplier clock) {
        if (total < 0) {
            throw new IllegalArgumentException("total = " + total + ": must be >= 0");
        }
        this.label = Objects.requireNonNull(label, "label");
        this.total = total;
        this.out = Objects.requireNonNull(out, "out");
        this.terminal = terminal;
        this.lineIntervalNanos = lineIntervalNanos;
        this.clock = Objects.requireNonNull(clock, "clock");
        this.started = clock.getAsLong();
        this.lastPrint = started;
    }

    /**
     * Starts reporting on stderr.
     *
     * @param label what is counted, e.g. {@code "requests"}
     * @param total how many there will be
     * @return the progress
     */
    public static Progress start(String label, long total) {
        long interval = Long.getLong(LINE_INTERVAL_PROPERTY, DEFAULT_LINE_INTERVAL_MS);
        return new Progress(label, total, System.err, System.console() != null, interval * 1_000_000L,
                System::nanoTime);
    }

    /** One more done. */
    public void step() {
        step(1);
    }

    /**
     * Some more done.
     *
     * @param n how many
     */
    public void step(long n) {
        if (n < 0) {
            throw new IllegalArgumentException("n = " + n + ": must be >= 0");
        }
        done = Math.min(total, done + n);
        long now = clock.getAsLong();
        if (terminal) {
            if (now - lastPrint >= REDRAW_NANOS || done == total || !printed) {
                out.print("\r" + bar(now));
                out.flush();
                lastPrint = now;
                printed = true;
            }
        } else if (now - lastPrint >= lineIntervalNanos) {
            out.println(line(now));
            out.flush();
            lastPrint = now;
            printed = true;
        }
    }

    /** @return how many are done */
    public long completed() {
        return done;
    }

    /** Ends the report: the bar's final state and a newline on a terminal, a last line if any was printed. */
    public void done() {
        if (finished) {
            return;
        }
        finished = true;
        long now = clock.getAsLong();
        if (terminal) {
            out.println("\r" + bar(now));
        } else if (printed) {
            out.println(line(now));
        }
        out.flush();
    }

    private String bar(long now) {
        int filled = total == 0 ? WIDTH : (int) (WIDTH * done / total);
        return "[" + "#".repeat(filled) + " ".repeat(WIDTH - filled) + "] " + done + "/" + total + " " + label
                + String.format(Locale.ROOT, "  %.1f s", (now - started) / 1e9);
    }

    private String line(long now) {
        long pct = total == 0 ? 100 : 100 * done / total;
        return String.format(Locale.ROOT, "kvtransfer: %s %d/%d (%d%%) after %.1f s", label, done, total, pct,
                (now - started) / 1e9);
    }
}
