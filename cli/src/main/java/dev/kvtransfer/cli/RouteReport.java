package dev.kvtransfer.cli;

import dev.kvtransfer.registry.ControlHttp;
import dev.kvtransfer.registry.InstanceRecord;
import org.HdrHistogram.Histogram;

import java.io.PrintStream;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.TreeMap;

/**
 * The figures of one {@code kvtransfer route} run: requests/s over the run's wall time, the generation side's
 * transfer time (p50 / p99), end of prefill to KV ready (the transfer's share of TTFT; wall clocks of two hosts, so
 * across machines it is as good as their clock sync), failures by cause, bytes moved and elements verified; as a
 * table, CSV (one header line, one value line) or JSON.
 */
record RouteReport(String run, int requests, int completed, int failed, double requestsPerSecond,
                   double transferP50Ms, double transferP99Ms, double prefillToReadyP50Ms,
                   double prefillToReadyP99Ms, double routerP50Ms, double routerP99Ms, long bytes, long checked,
                   long mismatches, Map<String, Integer> failuresByCause, double timeToErrorMaxMs, String firstError,
                   Map<String, Integer> servedBy, int liveInstances, long evictions, long unauthorizedRefused,
                   double wallSeconds) {

    /** Output formats. */
    enum Format {
        TABLE, CSV, JSON;

        static Format parse(String s) {
            try {
                return valueOf(s.toUpperCase(Locale.ROOT));
            } catch (IllegalArgumentException e) {
                throw new IllegalArgumentException("--format " + s + ": expected table, csv or json");
            }
        }
    }

    static RouteReport of(List<Router.Outcome> outcomes, long wallNanos, List<InstanceRecord> live, long evictions,
                          long refused, String run) {
        Histogram transfer = new Histogram(3_600_000_000_000L, 3);
        Histogram toReady = new Histogram(3_600_000_000_000L, 3);
        Histogram total = new Histogram(3_600_000_000_000L, 3);
        int completed = 0;
        long bytes = 0;
        long checked = 0;
        long mismatches = 0;
        Map<String, Integer> causes = new TreeMap<>();
        Map<String, Integer> served = new TreeMap<>();
        String first = "";
        long slowestError = 0;
        for (Router.Outcome o : outcomes) {
            bytes += o.bytes();
            checked += o.checked();
            mismatches += o.mismatches();
            if (o.ok()) {
                completed++;
                transfer.recordValue(Math.max(1, o.transferNanos()));
                total.recordValue(Math.max(1, o.totalNanos()));
                if (o.prefillToReady() >= 0) {
                    toReady.recordValue(Math.max(1, o.prefillToReady()));
                }
                served.merge(o.generation(), 1, Integer::sum);
                served.merge(o.context(), 1, Integer::sum);
            } else {
                causes.merge(o.code().isEmpty() ? "INTERNAL" : o.code(), 1, Integer::sum);
                slowestError = Math.max(slowestError, o.totalNanos());
                if (first.isEmpty()) {
                    first = o.error();
                }
            }
        }
        double wall = wallNanos / 1e9;
        return new RouteReport(run, outcomes.size(), completed, outcomes.size() - completed,
                wall > 0 ? completed / wall : 0, ms(transfer, 50), ms(transfer, 99), ms(toReady, 50), ms(toReady, 99),
                ms(total, 50), ms(total, 99), bytes, checked, mismatches, causes, slowestError / 1e6, first, served, live.size(),
                evictions, refused, wall);
    }

    private static double ms(Histogram h, double p) {
        return h.getTotalCount() == 0 ? 0 : h.getValueAtPercentile(p) / 1e6;
    }

    void print(PrintStream out, Format f) throws java.io.IOException {
        switch (f) {
            case JSON -> out.println(ControlHttp.JSON.writerWithDefaultPrettyPrinter().writeValueAsString(this));
            case CSV -> {
                Map<String, String> row = row();
                out.println(String.join(",", row.keySet()));
                out.println(String.join(",", row.values()));
            }
            case TABLE -> {
                out.printf(Locale.ROOT, "%-22s %s%n", "run", run);
                out.printf(Locale.ROOT, "%-22s %d of %d completed, %d failed, in %.2f s%n", "requests", completed,
                        requests, failed, wallSeconds);
                out.printf(Locale.ROOT, "%-22s %.1f%n", "requests/s", requestsPerSecond);
                out.printf(Locale.ROOT, "%-22s p50 %.3f ms, p99 %.3f ms%n", "transfer", transferP50Ms, transferP99Ms);
                out.printf(Locale.ROOT, "%-22s p50 %.3f ms, p99 %.3f ms%n", "prefill end -> KV ready",
                        prefillToReadyP50Ms, prefillToReadyP99Ms);
                out.printf(Locale.ROOT, "%-22s p50 %.3f ms, p99 %.3f ms%n", "request via router", routerP50Ms,
                        routerP99Ms);
                out.printf(Locale.ROOT, "%-22s %d B (%.1f MiB)%n", "bytes moved", bytes, bytes / 1048576.0);
                out.printf(Locale.ROOT, "%-22s %d elements, %d mismatches%n", "verified", checked, mismatches);
                out.printf(Locale.ROOT, "%-22s %s%s%n", "failures by cause", causes(), failed == 0 ? ""
                        : String.format(Locale.ROOT, " (slowest failure after %.1f ms)", timeToErrorMaxMs));
                if (!firstError.isEmpty()) {
                    out.printf(Locale.ROOT, "%-22s %s%n", "first failure", firstError);
                }
                out.printf(Locale.ROOT, "%-22s %s%n", "served by", servedBy);
                out.printf(Locale.ROOT, "%-22s %d live, %d evicted, %d unauthenticated calls refused%n", "registry",
                        liveInstances, evictions, unauthorizedRefused);
            }
            default -> throw new IllegalStateException(f.toString());
        }
        out.flush();
    }

    private String causes() {
        return failuresByCause.isEmpty() ? "none" : failuresByCause.toString();
    }

    private Map<String, String> row() {
        Map<String, String> r = new LinkedHashMap<>();
        r.put("requests", Integer.toString(requests));
        r.put("completed", Integer.toString(completed));
        r.put("failed", Integer.toString(failed));
        r.put("requests_per_s", fmt(requestsPerSecond));
        r.put("transfer_p50_ms", fmt(transferP50Ms));
        r.put("transfer_p99_ms", fmt(transferP99Ms));
        r.put("prefill_to_ready_p50_ms", fmt(prefillToReadyP50Ms));
        r.put("prefill_to_ready_p99_ms", fmt(prefillToReadyP99Ms));
        r.put("bytes", Long.toString(bytes));
        r.put("verified_elements", Long.toString(checked));
        r.put("mismatches", Long.toString(mismatches));
        r.put("failures_by_cause", "\"" + failuresByCause.toString().replace("\"", "'") + "\"");
        r.put("time_to_error_max_ms", fmt(timeToErrorMaxMs));
        r.put("wall_s", fmt(wallSeconds));
        return r;
    }

    private static String fmt(double v) {
        return String.format(Locale.ROOT, "%.3f", v);
    }
}
