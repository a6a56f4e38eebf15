package dev.kvtransfer.bench;

import java.io.IOException;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Locale;
import java.util.Map;

/**
 * The bench's outputs: the summary table (stdout), {@code runs.csv} (one line per timed run), {@code summary.csv}
 * (min / median / max per configuration), {@code bench.json} (both, and how the run was made) and
 * {@code bench.svg} ({@link SvgPlot}).
 */
final class Reports {
    /** Columns of {@code runs.csv}, in order. */
    static final List<String> RUN_COLUMNS = List.of("level", "backend", "impl", "mode", "checksums", "size_bytes",
            "blocks", "inflight", "repeat", "ops", "bytes", "nanos", "gbps", "ops_per_s", "p50_us", "p99_us",
            "p999_us", "max_us", "heap_bytes_per_op", "verified_elements", "mismatches", "failures", "source", "note",
            "staged_per_byte", "transport_per_byte", "checksum_per_byte");

    /** Columns of {@code summary.csv}, in order. */
    static final List<String> SUMMARY_COLUMNS = List.of("level", "backend", "impl", "mode", "checksums",
            "size_bytes", "blocks", "inflight", "runs", "gbps_min", "gbps_median", "gbps_max", "ops_per_s_min",
            "ops_per_s_median", "ops_per_s_max", "p50_us_median", "p99_us_min", "p99_us_median", "p99_us_max",
            "p999_us_median", "max_us_median", "heap_bytes_per_op_median", "ratio_to_raw_min", "ratio_to_raw_median",
            "ratio_to_raw_max", "p50_ratio_to_raw_median", "ratio_to_memcpy_median", "verified_elements", "mismatches",
            "failures", "source", "staged_per_byte", "transport_per_byte", "checksum_per_byte");

    private Reports() {
    }

    /** Prints the summary as a fixed-width table. */
    static void table(PrintStream out, List<Summary> summaries) {
        String head = String.format(Locale.ROOT, "%-11s %-8s %-6s %-4s %-3s %9s %4s %4s %22s %10s %9s %9s %9s %9s %9s"
                + " %18s %8s %7s %9s %5s", "level", "backend", "impl", "mode", "crc", "size", "blk", "infl",
                "GB/s min/med/max", "ops/s", "p50 us", "p99 us", "p99.9 us", "max us", "heap B/op", "x raw min/med/max",
                "x memcpy", "p50/raw", "copy/B", "crc/B");
        out.println(head);
        out.println("-".repeat(head.length()));
        for (Summary s : summaries) {
            Measurement f = s.first();
            out.println(String.format(Locale.ROOT, "%-11s %-8s %-6s %-4s %-3s %9s %4s %4s %22s %10s %9s %9s %9s %9s %9s"
                    + " %18s %8s %7s %9s %5s", f.level(), f.backend(), f.impl(), f.mode(), f.checksums(),
                    Sizes.label(f.sizeBytes()), f.blocks() == 0 ? "-" : Integer.toString(f.blocks()),
                    f.inflight() == 0 ? "-" : Integer.toString(f.inflight()), triple(s.gbps(), "%.3f"),
                    num(s.opsPerS().median(), "%.0f"), num(s.p50Us().median(), "%.1f"),
                    num(s.p99Us().median(), "%.1f"), num(s.p999Us().median(), "%.1f"),
                    num(s.maxUs().median(), "%.1f"), num(s.heap().median(), "%.0f"), triple(s.toRaw(), "%.2f"),
                    num(s.toMemcpy().median(), "%.2f"), num(s.p50ToRaw().median(), "%.2f"), copies(f),
                    num(f.checksumPerByte(), "%.2f")));
        }
    }

    /** The copy ledger's copies per byte delivered as staging+transport ("-" where not counted). */
    private static String copies(Measurement m) {
        if (Double.isNaN(m.stagedPerByte()) && Double.isNaN(m.transportPerByte())) {
            return "-";
        }
        return num(m.stagedPerByte(), "%.2f") + "+" + num(m.transportPerByte(), "%.2f");
    }

    private static String triple(Summary.Stat s, String f) {
        if (!s.present()) {
            return "-";
        }
        return String.format(Locale.ROOT, f + "/" + f + "/" + f, s.min(), s.median(), s.max());
    }

    private static String num(double v, String f) {
        return Double.isNaN(v) ? "-" : String.format(Locale.ROOT, f, v);
    }

    static void runsCsv(Path file, List<Measurement> runs) throws IOException {
        StringBuilder b = new StringBuilder(String.join(",", RUN_COLUMNS)).append('\n');
        for (Measurement m : runs) {
            Object[] v = {m.level(), m.backend(), m.impl(), m.mode(), m.checksums(), m.sizeBytes(), m.blocks(),
                m.inflight(), m.repeat(), m.ops(), m.bytes(), m.nanos(), m.gbps(), m.opsPerSecond(), m.p50Us(),
                m.p99Us(), m.p999Us(), m.maxUs(), m.heapBytesPerOp(), m.verifiedElements(), m.mismatches(),
                m.failures(), m.source(), m.note(), m.stagedPerByte(), m.transportPerByte(), m.checksumPerByte()};
            csvLine(b, v);
        }
        Files.writeString(file, b.toString(), StandardCharsets.UTF_8);
    }

    static void summaryCsv(Path file, List<Summary> summaries) throws IOException {
        StringBuilder b = new StringBuilder(String.join(",", SUMMARY_COLUMNS)).append('\n');
        for (Summary s : summaries) {
            Measurement f = s.first();
            Object[] v = {f.level(), f.backend(), f.impl(), f.mode(), f.checksums(), f.sizeBytes(), f.blocks(),
                f.inflight(), s.runs(), s.gbps().min(), s.gbps().median(), s.gbps().max(), s.opsPerS().min(),
                s.opsPerS().median(), s.opsPerS().max(), s.p50Us().median(), s.p99Us().min(), s.p99Us().median(),
                s.p99Us().max(), s.p999Us().median(), s.maxUs().median(), s.heap().median(), s.toRaw().min(),
                s.toRaw().median(), s.toRaw().max(), s.p50ToRaw().median(), s.toMemcpy().median(), s.verified(),
                s.mismatches(), s.failures(), f.source(), f.stagedPerByte(), f.transportPerByte(), f.checksumPerByte()};
            csvLine(b, v);
        }
        Files.writeString(file, b.toString(), StandardCharsets.UTF_8);
    }

    private static void csvLine(StringBuilder b, Object[] v) {
        for (int i = 0; i < v.length; i++) {
            if (i > 0) {
                b.append(',');
            }
            Object o = v[i];
            if (o instanceof Double d) {
                b.append(Double.isNaN(d) || Double.isInfinite(d) ? "" : String.format(Locale.ROOT, "%.6g", d));
            } else if (o instanceof String s) {
                b.append(csvText(s));
            } else {
                b.append(o);
            }
        }
        b.append('\n');
    }

    static String csvText(String s) {
        if (s.indexOf(',') < 0 && s.indexOf('"') < 0 && s.indexOf('\n') < 0 && s.indexOf('\r') < 0) {
            return s;
        }
        return '"' + s.replace("\"", "\"\"").replace('\n', ' ').replace('\r', ' ') + '"';
    }

    static void json(Path file, Map<String, Object> run, List<Measurement> runs, List<Summary> summaries)
            throws IOException {
        StringBuilder b = new StringBuilder("{\n  \"run\": ");
        value(b, run);
        b.append(",\n  \"runs\": [");
        for (int i = 0; i < runs.size(); i++) {
            Measurement m = runs.get(i);
            b.append(i == 0 ? "\n    " : ",\n    ");
            Map<String, Object> o = new java.util.LinkedHashMap<>();
            Object[] v = {m.level(), m.backend(), m.impl(), m.mode(), m.checksums(), m.sizeBytes(), m.blocks(),
                m.inflight(), m.repeat(), m.ops(), m.bytes(), m.nanos(), m.gbps(), m.opsPerSecond(), m.p50Us(),
                m.p99Us(), m.p999Us(), m.maxUs(), m.heapBytesPerOp(), m.verifiedElements(), m.mismatches(),
                m.failures(), m.source(), m.note(), m.stagedPerByte(), m.transportPerByte(), m.checksumPerByte()};
            for (int k = 0; k < v.length; k++) {
                o.put(RUN_COLUMNS.get(k), v[k]);
            }
            value(b, o);
        }
        b.append("\n  ],\n  \"summary\": [");
        for (int i = 0; i < summaries.size(); i++) {
            Summary s = summaries.get(i);
            Measurement f = s.first();
            b.append(i == 0 ? "\n    " : ",\n    ");
            Map<String, Object> o = new java.util.LinkedHashMap<>();
            o.put("level", f.level());
            o.put("backend", f.backend());
            o.put("impl", f.impl());
            o.put("mode", f.mode());
            o.put("checksums", f.checksums());
            o.put("size_bytes", f.sizeBytes());
            o.put("blocks", f.blocks());
            o.put("inflight", f.inflight());
            o.put("runs", s.runs());
            o.put("gbps", stat(s.gbps()));
            o.put("ops_per_s", stat(s.opsPerS()));
            o.put("p50_us", stat(s.p50Us()));
            o.put("p99_us", stat(s.p99Us()));
            o.put("p999_us", stat(s.p999Us()));
            o.put("max_us", stat(s.maxUs()));
            o.put("heap_bytes_per_op", stat(s.heap()));
            o.put("ratio_to_raw", stat(s.toRaw()));
            o.put("p50_ratio_to_raw", stat(s.p50ToRaw()));
            o.put("ratio_to_memcpy", stat(s.toMemcpy()));
            o.put("verified_elements", s.verified());
            o.put("mismatches", s.mismatches());
            o.put("failures", s.failures());
            o.put("source", f.source());
            value(b, o);
        }
        b.append("\n  ]\n}\n");
        Files.writeString(file, b.toString(), StandardCharsets.UTF_8);
    }

    private static Map<String, Object> stat(Summary.Stat s) {
        Map<String, Object> m = new java.util.LinkedHashMap<>();
        m.put("min", s.min());
        m.put("median", s.median());
        m.put("max", s.max());
        return m;
    }

    @SuppressWarnings("unchecked")
    private static void value(StringBuilder b, Object v) {
        if (v == null) {
            b.append("null");
        } else if (v instanceof Double d) {
            b.append(Double.isNaN(d) || Double.isInfinite(d) ? "null" : String.format(Locale.ROOT, "%.6g", d));
        } else if (v instanceof Float f) {
            value(b, (double) f);
        } else if (v instanceof Number || v instanceof Boolean) {
            b.append(v);
        } else if (v instanceof Map<?, ?> m) {
            b.append('{');
            boolean first = true;
            for (Map.Entry<?, ?> e : m.entrySet()) {
                b.append(first ? "" : ", ");
                first = false;
                string(b, String.valueOf(e.getKey()));
                b.append(": ");
                value(b, e.getValue());
            }
            b.append('}');
        } else if (v instanceof List<?> l) {
            b.append('[');
            for (int i = 0; i < l.size(); i++) {
                b.append(i == 0 ? "" : ", ");
                value(b, l.get(i));
            }
            b.append(']');
        } else {
            string(b, v.toString());
        }
    }

    static void string(StringBuilder b, String s) {
        b.append('"');
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            switch (c) {
                case '"' -> b.append("\\\"");
                case '\\' -> b.append("\\\\");
                case '\n' -> b.append("\\n");
                case '\r' -> b.append("\\r");
                case '\t' -> b.append("\\t");
                default -> {
                    if (c < 0x20) {
                        b.append(String.format(Locale.ROOT, "\\u%04x", (int) c));
                    } else {
                        b.append(c);
                    }
                }
            }
        }
        b.append('"');
    }
}
