package dev.kvtransfer.bench;

import org.HdrHistogram.Histogram;

/** HdrHistogram percentiles of latency samples (nanoseconds in, microseconds out; 3 significant digits). */
public final class Latencies {
    /** Highest value the histograms track: one hour. */
    static final long HIGHEST_NANOS = 3_600_000_000_000L;

    /** p50, p99, p99.9 and max in µs, each {@code NaN} when there was no sample. */
    public record Percentiles(double p50Us, double p99Us, double p999Us, double maxUs) {
        /** No samples. */
        public static final Percentiles NONE = new Percentiles(Double.NaN, Double.NaN, Double.NaN, Double.NaN);
    }

    private final Histogram histogram = new Histogram(HIGHEST_NANOS, 3);

    /** @param nanos one sample (clamped to [1, one hour]) */
    public void record(long nanos) {
        histogram.recordValue(Math.max(1, Math.min(HIGHEST_NANOS, nanos)));
    }

    /** @return samples recorded */
    public long count() {
        return histogram.getTotalCount();
    }

    /** @return the percentiles so far */
    public Percentiles percentiles() {
        if (histogram.getTotalCount() == 0) {
            return Percentiles.NONE;
        }
        return new Percentiles(histogram.getValueAtPercentile(50) / 1e3, histogram.getValueAtPercentile(99) / 1e3,
                histogram.getValueAtPercentile(99.9) / 1e3, histogram.getMaxValue() / 1e3);
    }

    /**
     * @param nanos samples
     * @return their percentiles
     */
    public static Percentiles of(long[] nanos) {
        Latencies l = new Latencies();
        for (long n : nanos) {
            l.record(n);
        }
        return l.percentiles();
    }
}
