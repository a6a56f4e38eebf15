package dev.kvtransfer.aeron;

import dev.kvtransfer.api.ErrorHandler;

import java.lang.System.Logger.Level;
import java.nio.charset.StandardCharsets;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;

/**
 * Where a manager's background errors go: every error is counted; the configured {@link ErrorHandler} and the log
 * get at most {@value #PER_SECOND} errors per second of one kind (the error's class and the first words of its
 * message), and a line saying how many were suppressed once the kind is quiet again. A peer that sends the same
 * bad frame a million times therefore costs a counter, not a million log lines.
 */
final class ErrorReporter {
    static final int PER_SECOND = 10;
    /** Peer-supplied text in an error is cut to this many characters. */
    static final int MAX_PEER_TEXT = 256;
    private static final System.Logger LOG = System.getLogger("dev.kvtransfer.aeron");

    private final String name;
    private final ErrorHandler handler;
    private final AtomicLong count = new AtomicLong();
    private final AtomicLong suppressed = new AtomicLong();
    private final ConcurrentHashMap<String, Window> windows = new ConcurrentHashMap<>();

    ErrorReporter(String name, ErrorHandler handler) {
        this.name = name;
        this.handler = handler;
    }

    /** @return errors reported so far (suppressed ones included) */
    long count() {
        return count.get();
    }

    /** @return errors counted but not passed on (rate limit) */
    long suppressed() {
        return suppressed.get();
    }

    /** Counts an error and passes it on unless its kind exceeded the rate. Never throws. */
    void report(Throwable t) {
        count.incrementAndGet();
        String kind = kindOf(t);
        if (windows.size() > 256) {
            windows.clear(); // kinds carry peer text: keep the map bounded
        }
        Window w = windows.computeIfAbsent(kind, k -> new Window());
        long now = System.nanoTime();
        long skipped = 0;
        boolean pass;
        synchronized (w) {
            if (now - w.start > TimeUnit.SECONDS.toNanos(1)) {
                skipped = w.suppressed;
                w.start = now;
                w.inWindow = 0;
                w.suppressed = 0;
            }
            pass = w.inWindow++ < PER_SECOND;
            if (!pass) {
                w.suppressed++;
            }
        }
        if (skipped > 0) {
            LOG.log(Level.WARNING, "aeron " + name + ": " + skipped + " more errors like '" + kind
                    + "' were counted but not logged");
        }
        if (!pass) {
            suppressed.incrementAndGet();
            return;
        }
        try {
            handler.onError(t);
        } catch (RuntimeException e) {
            LOG.log(Level.WARNING, "aeron " + name + ": the error handler threw", e);
        }
        LOG.log(Level.WARNING, "aeron " + name + ": " + t);
    }

    private static final Window INFO = new Window();

    /**
     * Logs an informational line (a peer lost, a stream refused), at most {@value #PER_SECOND} per second across
     * the process: closing 64 ranks at once must not print thousands of lines.
     */
    static void info(String line) {
        long skipped = 0;
        boolean pass;
        long now = System.nanoTime();
        synchronized (INFO) {
            if (now - INFO.start > TimeUnit.SECONDS.toNanos(1)) {
                skipped = INFO.suppressed;
                INFO.start = now;
                INFO.inWindow = 0;
                INFO.suppressed = 0;
            }
            pass = INFO.inWindow++ < PER_SECOND;
            if (!pass) {
                INFO.suppressed++;
            }
        }
        if (skipped > 0) {
            LOG.log(Level.INFO, "aeron: " + skipped + " more lines like these were not logged");
        }
        if (pass) {
            LOG.log(Level.INFO, line);
        }
    }

    /**
     * The error's class and its message's first 48 characters with digits masked: errors that differ only in a
     * session id, port or count are one kind (a flood of streams with fresh session ids must not make a kind each).
     */
    static String kindOf(Throwable t) {
        String m = String.valueOf(t.getMessage());
        int cut = Math.min(m.length(), 48);
        StringBuilder b = new StringBuilder(cut + 24).append(t.getClass().getSimpleName()).append(':');
        for (int i = 0; i < cut; i++) {
            char c = m.charAt(i);
            b.append(c >= '0' && c <= '9' ? '#' : c);
        }
        return b.toString();
    }

    /**
     * Peer-supplied text fit for an error message: at most {@value #MAX_PEER_TEXT} characters, control characters
     * replaced.
     */
    static String peerText(String s) {
        if (s == null) {
            return "null";
        }
        StringBuilder b = new StringBuilder(Math.min(s.length(), MAX_PEER_TEXT) + 16);
        for (int i = 0; i < s.length() && b.length() < MAX_PEER_TEXT; i++) {
            char c = s.charAt(i);
            b.append(c < 0x20 || c == 0x7f ? '?' : c);
        }
        if (s.length() > MAX_PEER_TEXT) {
            b.append("...(").append(s.length()).append(" chars)");
        }
        return b.toString();
    }

    /** Peer-supplied UTF-8 bytes as bounded text. */
    static String peerText(byte[] utf8, int length) {
        int n = Math.min(length, MAX_PEER_TEXT * 4);
        String s = new String(utf8, 0, n, StandardCharsets.UTF_8);
        return length > n ? peerText(s) + "...(" + length + " bytes)" : peerText(s);
    }

    private static final class Window {
        long start = System.nanoTime();
        int inWindow;
        long suppressed;
    }
}
