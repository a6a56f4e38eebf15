package dev.kvtransfer.bench;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.function.ToDoubleFunction;

/**
 * The runs of one configuration folded into min / median / max per figure, with the ratios to the raw baseline
 * and to memcpy of the same level and size, computed per repeat (ours of repeat r over the baseline of repeat r,
 * measured next to it) and then folded the same way.
 *
 * @param first    the first run (names and sizes)
 * @param runs     how many runs
 * @param gbps     GB/s
 * @param opsPerS  messages or requests per second
 * @param p50Us    median latency, µs
 * @param p99Us    99th percentile, µs
 * @param p999Us   99.9th percentile, µs
 * @param maxUs    maximum latency, µs
 * @param heap     heap bytes per op
 * @param toRaw    ours GB/s / raw GB/s ({@code NaN}s when there is no raw run)
 * @param p50ToRaw ours p50 / raw p50
 * @param toMemcpy ours GB/s / memcpy GB/s
 * @param verified elements verified over all runs
 * @param mismatches mismatching elements over all runs
 * @param failures failed ops over all runs
 */
public record Summary(Measurement first, int runs, Stat gbps, Stat opsPerS, Stat p50Us, Stat p99Us, Stat p999Us,
                      Stat maxUs, Stat heap, Stat toRaw, Stat p50ToRaw, Stat toMemcpy, long verified,
                      long mismatches, long failures) {

    /**
     * Minimum, median and maximum of a figure over the repeats ({@code NaN}s when no repeat has it).
     *
     * @param min    smallest
     * @param median median (mean of the middle two for an even count)
     * @param max    largest
     */
    public record Stat(double min, double median, double max) {
        static final Stat NONE = new Stat(Double.NaN, Double.NaN, Double.NaN);

        static Stat of(double[] values) {
            double[] v = Arrays.stream(values).filter(d -> !Double.isNaN(d)).sorted().toArray();
            if (v.length == 0) {
                return NONE;
            }
            int n = v.length;
            double med = n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
            return new Stat(v[0], med, v[n - 1]);
        }

        /** @return whether any repeat had the figure */
        public boolean present() {
            return !Double.isNaN(median);
        }
    }

    /**
     * Folds runs per configuration, keeping the order in which configurations first appeared.
     *
     * @param all every run
     * @return one summary per configuration
     */
    public static List<Summary> of(List<Measurement> all) {
        Map<String, List<Measurement>> groups = new LinkedHashMap<>();
        for (Measurement m : all) {
            groups.computeIfAbsent(m.configKey(), k -> new ArrayList<>()).add(m);
        }
        List<Summary> out = new ArrayList<>();
        for (List<Measurement> g : groups.values()) {
            Measurement f = g.get(0);
            double[] toRaw = new double[g.size()];
            double[] p50ToRaw = new double[g.size()];
            double[] toMemcpy = new double[g.size()];
            for (int i = 0; i < g.size(); i++) {
                Measurement m = g.get(i);
                toRaw[i] = Double.NaN;
                p50ToRaw[i] = Double.NaN;
                toMemcpy[i] = Double.NaN;
                if (!m.impl().equals("ours")) {
                    continue;
                }
                Measurement raw = baseline(all, m, "raw");
                if (raw != null) {
                    toRaw[i] = raw.gbps() > 0 ? m.gbps() / raw.gbps() : Double.NaN;
                    p50ToRaw[i] = raw.p50Us() > 0 ? m.p50Us() / raw.p50Us() : Double.NaN;
                }
                Measurement copy = baseline(all, m, "memcpy");
                if (copy != null && copy.gbps() > 0) {
                    toMemcpy[i] = m.gbps() / copy.gbps();
                }
            }
            long verified = g.stream().mapToLong(Measurement::verifiedElements).sum();
            long mismatches = g.stream().mapToLong(Measurement::mismatches).sum();
            long failures = g.stream().mapToLong(Measurement::failures).sum();
            out.add(new Summary(f, g.size(), stat(g, Measurement::gbps), stat(g, Measurement::opsPerSecond),
                    stat(g, Measurement::p50Us), stat(g, Measurement::p99Us), stat(g, Measurement::p999Us),
                    stat(g, Measurement::maxUs), stat(g, Measurement::heapBytesPerOp), Stat.of(toRaw),
                    Stat.of(p50ToRaw), Stat.of(toMemcpy), verified, mismatches, failures));
        }
        return out;
    }

    /**
     * The baseline run next to {@code ours}: same level, repeat and size; for {@code raw} the same backend, for
     * {@code memcpy} any.
     */
    static Measurement baseline(List<Measurement> all, Measurement ours, String impl) {
        for (Measurement m : all) {
            if (m.impl().equals(impl) && m.level().equals(ours.level()) && m.repeat() == ours.repeat()
                    && m.sizeBytes() == ours.sizeBytes()
                    && (impl.equals("memcpy") || m.backend().equals(ours.backend()))) {
                return m;
            }
        }
        return null;
    }

    private static Stat stat(List<Measurement> g, ToDoubleFunction<Measurement> f) {
        double[] v = new double[g.size()];
        for (int i = 0; i < g.size(); i++) {
            v[i] = f.applyAsDouble(g.get(i));
        }
        return Stat.of(v);
    }
}
