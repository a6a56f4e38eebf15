package dev.kvtransfer.aeron;

import org.agrona.ErrorHandler;

import java.io.PrintWriter;
import java.io.StringWriter;
import java.lang.System.Logger.Level;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;

/**
 * The media driver's error handler: every error is counted; at most {@value #PER_SECOND} lines a second reach the
 * log (with a stack trace for the first {@value #WITH_STACK} only), then one line saying how many more were counted.
 * Malformed frames from the network (a forged SETUP, say) raise one driver error each: logged as they came, 800 KB
 * of them made 14.4 MB of stack traces, an 18-fold amplification. Aeron's own distinct-error log in cnc.dat is bounded by
 * itself and still records each kind.
 */
final class DriverErrorLog implements ErrorHandler {
    static final int PER_SECOND = 10;
    static final int WITH_STACK = 3;
    private static final int MAX_TEXT = 512;
    private static final System.Logger LOG = System.getLogger("dev.kvtransfer.aeron.driver");

    private final String directory;
    private final AtomicLong count = new AtomicLong();
    private final AtomicLong lines = new AtomicLong();
    private final AtomicLong chars = new AtomicLong();
    // Guarded by this.
    private long windowStart = System.nanoTime();
    private int inWindow;
    private long suppressed;

    DriverErrorLog(String directory) {
        this.directory = directory;
    }

    @Override
    public void onError(Throwable t) {
        long n = count.incrementAndGet();
        long skipped = 0;
        boolean pass;
        long now = System.nanoTime();
        synchronized (this) {
            if (now - windowStart > TimeUnit.SECONDS.toNanos(1)) {
                skipped = suppressed;
                windowStart = now;
                inWindow = 0;
                suppressed = 0;
            }
            pass = inWindow++ < PER_SECOND;
            if (!pass) {
                suppressed++;
            }
        }
        if (skipped > 0) {
            emit("aeron media driver in " + directory + ": " + skipped + " more errors were counted but not logged ("
                    + n + " in all)");
        }
        if (!pass) {
            return;
        }
        String text = String.valueOf(t);
        if (text.length() > MAX_TEXT) {
            text = text.substring(0, MAX_TEXT) + "...";
        }
        String line = "aeron media driver error in " + directory + " (#" + n + "): " + text;
        if (n <= WITH_STACK) {
            StringWriter w = new StringWriter();
            t.printStackTrace(new PrintWriter(w));
            line = line + System.lineSeparator() + w;
        }
        emit(line);
    }

    private void emit(String line) {
        lines.incrementAndGet();
        chars.addAndGet(line.length());
        LOG.log(Level.WARNING, line);
    }

    /** @return driver errors so far */
    long count() {
        return count.get();
    }

    /** @return lines this handler logged */
    long linesLogged() {
        return lines.get();
    }

    /** @return characters this handler logged (stack traces included) */
    long charsLogged() {
        return chars.get();
    }
}
