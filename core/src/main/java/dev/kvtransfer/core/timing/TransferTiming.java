package dev.kvtransfer.core.timing;

import java.util.Arrays;
import java.util.Locale;

/**
 * Stage stamps and per-peer measures of one request on one rank, in {@code System.nanoTime()} units: what
 * one row of TensorRT-LLM's {@code rank_<r>_send.csv} / {@code rank_<r>_recv.csv} holds. Stamps are set by the
 * transfer thread; measures may be recorded from several peer threads at once (synchronized). A stamp left at
 * 0 is "unset" and prints as {@code 0.0}.
 *
 * <p>Stages (each column is the time since the previous set stamp, in ms): {@code RequestInfo} (context: all
 * counterparts asked; generation: infos sent), {@code Preparation} (ready signals sent / received),
 * {@code Preprocess} (first payload message starts: staging and split done), {@code Transmissions} (last
 * payload message done), {@code Postprocess} (formatter returned: concat / release done).
 */
public final class TransferTiming {
    /** The CSV header before the per-measure columns. */
    public static final String HEADER = "RequestID,RequestInfo,Preparation,Preprocess,Transmissions,Postprocess";
    /** The columns added per measure. */
    public static final String MEASURE_HEADER = ",Delay,Duration,Bandwidth(Gbps)";

    private final long requestId;
    private final long start;
    private volatile long requestInfo;
    private volatile long preparation;
    private volatile long preprocess;
    private volatile long transmissions;
    private volatile long postprocess;
    // The first measure in fields (a one-counterpart request records one: no array at all), the others as
    // [peer, start, end, bytes] in an array made at the second; O(peers) per request.
    private long firstPeer;
    private long firstStart;
    private long firstEnd;
    private long firstBytes;
    private long[] measures;
    private int measureCount;

    /**
     * Starts the timing of a request.
     *
     * @param requestId  the context request id
     * @param startNanos {@code System.nanoTime()} when the transfer started (the async call)
     */
    public TransferTiming(long requestId, long startNanos) {
        this.requestId = requestId;
        this.start = startNanos;
    }

    /** @return the context request id */
    public long requestId() {
        return requestId;
    }

    /** @param t stamp of the RequestInfo stage */
    public void requestInfo(long t) {
        requestInfo = t;
    }

    /** @param t stamp of the Preparation stage */
    public void preparation(long t) {
        preparation = t;
    }

    /**
     * Moves the Preprocess stamp back to {@code t} when earlier (or unset): the start of the first payload
     * message or of the first measure, whichever came first.
     *
     * @param t stamp
     */
    public synchronized void preprocessAtMost(long t) {
        if (preprocess == 0 || t < preprocess) {
            preprocess = t;
        }
    }

    /** Moves the Transmissions stamp forward (the last payload message). @param t stamp */
    public synchronized void transmissions(long t) {
        if (t > transmissions) {
            transmissions = t;
        }
    }

    /** @param t stamp of the Postprocess stage */
    public void postprocess(long t) {
        postprocess = t;
    }

    /**
     * Records one timed movement.
     *
     * @param peer       peer index
     * @param startNanos start
     * @param endNanos   end
     * @param bytes      bytes moved
     */
    public synchronized void measure(int peer, long startNanos, long endNanos, long bytes) {
        preprocessAtMost(startNanos);
        transmissions(endNanos);
        if (measureCount == 0) {
            firstPeer = peer;
            firstStart = startNanos;
            firstEnd = endNanos;
            firstBytes = bytes;
            measureCount = 1;
            return;
        }
        if (measures == null) {
            measures = new long[16];
        } else if (measureCount * 4 > measures.length) {
            measures = Arrays.copyOf(measures, measures.length * 2);
        }
        int i = (measureCount - 1) * 4;
        measures[i] = peer;
        measures[i + 1] = startNanos;
        measures[i + 2] = endNanos;
        measures[i + 3] = bytes;
        measureCount++;
    }

    /** Field {@code f} (0 peer, 1 start, 2 end, 3 bytes) of measure {@code i}; the caller holds the lock. */
    private long field(int i, int f) {
        if (i == 0) {
            return f == 0 ? firstPeer : f == 1 ? firstStart : f == 2 ? firstEnd : firstBytes;
        }
        return measures[(i - 1) * 4 + f];
    }

    /** @return number of recorded measures */
    public synchronized int measureCount() {
        return measureCount;
    }

    /** @return total bytes of all measures */
    public synchronized long measuredBytes() {
        long sum = 0;
        for (int i = 0; i < measureCount; i++) {
            sum += field(i, 3);
        }
        return sum;
    }

    /**
     * The CSV header for rows with a number of measures.
     *
     * @param measures measures per row
     * @return the header line (no newline)
     */
    public static String header(int measures) {
        StringBuilder sb = new StringBuilder(HEADER);
        for (int i = 0; i < measures; i++) {
            sb.append(MEASURE_HEADER);
        }
        return sb.toString();
    }

    /**
     * This request's CSV row (no newline), as TensorRT-LLM's {@code TransferSession::exportMeasure} writes it:
     * the context request id; the five stage deltas in milliseconds from the transfer start, each from the
     * previous stage that was set ({@code 0.0} for an unset stage); then per measure the delay from the
     * Preprocess stamp, the duration, and {@code bytes * 8 / duration_ms / 1e6} Gbit/s. Numbers are printed the
     * way a C++ {@code std::ostream} prints a {@code double} by default ({@link #cpp}).
     *
     * @return the row, or {@code null} when there is no measure (upstream writes no row then)
     */
    public synchronized String csvRow() {
        if (measureCount == 0) {
            return null;
        }
        StringBuilder sb = new StringBuilder(64 + measureCount * 32);
        sb.append(requestId);
        long prev = start;
        long[] stamps = {requestInfo, preparation, preprocess, transmissions, postprocess};
        for (long s : stamps) {
            if (s == 0) {
                sb.append(",0.0");
            } else {
                sb.append(',').append(cpp((s - prev) / 1e6));
                prev = s;
            }
        }
        long base = preprocess != 0 ? preprocess : start;
        for (int i = 0; i < measureCount; i++) {
            long ms = field(i, 1);
            long me = field(i, 2);
            long bytes = field(i, 3);
            double durationMs = (me - ms) / 1e6;
            double gbps = bytes * 8.0 / durationMs / 1e6;
            sb.append(',').append(cpp((ms - base) / 1e6)).append(',').append(cpp(durationMs)).append(',')
                    .append(cpp(gbps));
        }
        return sb.toString();
    }

    private static final java.math.MathContext SIX = new java.math.MathContext(6, java.math.RoundingMode.HALF_EVEN);

    /**
     * A {@code double} as C++'s {@code std::ostream << double} prints it by default ({@code %g} with six
     * significant digits, no trailing zeros): {@code 0.5}, {@code 123457}, {@code 1.23457e+06}, {@code 1e-07},
     * {@code inf}, {@code nan}.
     *
     * @param v the value
     * @return the text
     */
    public static String cpp(double v) {
        if (Double.isNaN(v)) {
            return "nan";
        }
        if (Double.isInfinite(v)) {
            return v > 0 ? "inf" : "-inf";
        }
        if (v == 0) {
            return 1 / v < 0 ? "-0" : "0";
        }
        java.math.BigDecimal bd = new java.math.BigDecimal(v).round(SIX);
        int x = bd.precision() - bd.scale() - 1;
        if (x < -4 || x >= 6) {
            String m = bd.movePointLeft(x).stripTrailingZeros().toPlainString();
            int ax = Math.abs(x);
            return m + "e" + (x < 0 ? "-" : "+") + (ax < 10 ? "0" : "") + ax;
        }
        return bd.stripTrailingZeros().toPlainString();
    }
}
