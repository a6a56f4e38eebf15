package dev.kvtransfer.bench;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.function.Function;

/**
 * {@code bench.svg}, written by hand: three panels against size (message bytes for the transport level, request
 * bytes for the transceiver levels; log2 axis): GB/s, p50 and p99 latency (µs, one axis for both), all log10. One
 * line per series (level, backend, what, mode, checksums, in flight) through the medians of the repeats, with a
 * min–max whisker at each point; ours solid, the raw baseline dashed beside it in the same colour family, memcpy dotted grey.
 */
final class SvgPlot {
    private static final int PANEL_W = 560;
    private static final int PANEL_H = 360;
    private static final int MARGIN_L = 70;
    private static final int MARGIN_T = 40;
    private static final int MARGIN_B = 50;
    private static final int GAP = 90;
    private static final String[] COLORS = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b",
        "#e377c2", "#17becf", "#bcbd22", "#7f7f7f"};

    private SvgPlot() {
    }

    private record Series(String label, String impl, List<Summary> points) {
    }

    static String render(List<Summary> summaries, String title) {
        Map<String, List<Summary>> bySeries = new LinkedHashMap<>();
        for (Summary s : summaries) {
            Measurement f = s.first();
            String key = f.level() + " " + f.backend() + " " + f.impl()
                    + (f.mode().equals("-") ? "" : " " + f.mode())
                    + (f.checksums().equals("-") ? "" : " crc " + f.checksums())
                    + (f.level().equals("transport") || f.inflight() == 0 ? "" : " x" + f.inflight());
            bySeries.computeIfAbsent(key, k -> new ArrayList<>()).add(s);
        }
        List<Series> series = new ArrayList<>();
        bySeries.forEach((k, v) -> {
            v.sort(Comparator.comparingLong(s -> s.first().sizeBytes()));
            series.add(new Series(k, v.get(0).first().impl(), v));
        });
        long minSize = summaries.stream().mapToLong(s -> s.first().sizeBytes()).min().orElse(4096);
        long maxSize = summaries.stream().mapToLong(s -> s.first().sizeBytes()).max().orElse(1 << 26);
        double x0 = Math.floor(log2(minSize));
        double x1 = Math.max(x0 + 1, Math.ceil(log2(maxSize)));
        double gbMin = summaries.stream().mapToDouble(s -> s.gbps().present() && s.gbps().min() > 0
                ? s.gbps().min() : Double.MAX_VALUE).min().orElse(0.01);
        double gbMax = summaries.stream().mapToDouble(s -> s.gbps().present() ? s.gbps().max() : 0).max().orElse(1);
        if (gbMin == Double.MAX_VALUE) {
            gbMin = 0.01;
            gbMax = 1;
        }
        double g0 = Math.floor(Math.log10(Math.max(gbMin, 1e-6)));
        double g1 = Math.max(g0 + 1, Math.ceil(Math.log10(Math.max(gbMax, 1e-6))));
        double latMin = summaries.stream().mapToDouble(s -> s.p50Us().present() ? s.p50Us().min()
                : s.p99Us().present() ? s.p99Us().min() : Double.MAX_VALUE).min().orElse(1);
        double latMax = summaries.stream().mapToDouble(s -> s.p99Us().present() ? s.p99Us().max() : 0).max().orElse(10);
        if (latMin == Double.MAX_VALUE) {
            latMin = 1;
            latMax = 10;
        }
        double l0 = Math.floor(Math.log10(Math.max(latMin, 1e-3)));
        double l1 = Math.max(l0 + 1, Math.ceil(Math.log10(Math.max(latMax, 1e-3))));

        int legendRows = series.size();
        int width = 3 * (MARGIN_L + PANEL_W) + 2 * GAP + 40;
        int height = MARGIN_T + PANEL_H + MARGIN_B + 20 + legendRows * 18 + 20;
        StringBuilder b = new StringBuilder();
        b.append("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
        b.append(String.format(Locale.ROOT, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
                + "viewBox=\"0 0 %d %d\" font-family=\"sans-serif\" font-size=\"12\">%n", width, height, width, height));
        b.append("<rect x=\"0\" y=\"0\" width=\"100%\" height=\"100%\" fill=\"white\"/>\n");
        text(b, width / 2.0, 20, "middle", 15, title);
        int leftX = MARGIN_L;
        int midX = MARGIN_L + PANEL_W + GAP + MARGIN_L;
        int rightX = midX + PANEL_W + GAP + MARGIN_L;
        double fx0 = x0;
        double fx1 = x1;
        Function<Double, Double> xs = v -> (log2(v) - fx0) / (fx1 - fx0) * PANEL_W;
        double fg0 = g0;
        double fg1 = g1;
        Function<Double, Double> ysGb = v -> PANEL_H - (Math.log10(Math.max(v, 1e-6)) - fg0) / (fg1 - fg0) * PANEL_H;
        double fl0 = l0;
        double fl1 = l1;
        Function<Double, Double> ysLat = v -> PANEL_H - (Math.log10(Math.max(v, 1e-3)) - fl0) / (fl1 - fl0) * PANEL_H;

        axes(b, leftX, x0, x1, "GB/s (log scale)", "size (message or request bytes)");
        for (double e = g0; e <= g1; e++) {
            double y = MARGIN_T + ysGb.apply(Math.pow(10, e));
            line(b, leftX - 4, y, leftX + PANEL_W, y, "#e0e0e0", "");
            text(b, leftX - 8, y + 4, "end", 11, formatGb(Math.pow(10, e)));
        }
        for (int panel : new int[] {midX, rightX}) {
            axes(b, panel, x0, x1, (panel == midX ? "p50" : "p99") + " latency, us (log scale)",
                    "size (message or request bytes)");
            for (double e = l0; e <= l1; e++) {
                double y = MARGIN_T + ysLat.apply(Math.pow(10, e));
                line(b, panel - 4, y, panel + PANEL_W, y, "#e0e0e0", "");
                text(b, panel - 8, y + 4, "end", 11, formatMicros(Math.pow(10, e)));
            }
        }
        for (int si = 0; si < series.size(); si++) {
            Series s = series.get(si);
            String color = s.impl().equals("memcpy") ? "#555555" : COLORS[(colorIndex(series, si)) % COLORS.length];
            String dash = s.impl().equals("ours") ? "" : s.impl().equals("raw") ? "6,4" : "2,3";
            plot(b, s, leftX, xs, ysGb, color, dash, Summary::gbps);
            plot(b, s, midX, xs, ysLat, color, dash, Summary::p50Us);
            plot(b, s, rightX, xs, ysLat, color, dash, Summary::p99Us);
            double ly = MARGIN_T + PANEL_H + MARGIN_B + 20 + si * 18;
            line(b, leftX, ly - 4, leftX + 36, ly - 4, color, dash, 2.5);
            text(b, leftX + 44, ly, "start", 12, s.label());
        }
        b.append("</svg>\n");
        return b.toString();
    }

    /** Ours and its raw baseline share a colour: the index of the first series of the same level and backend. */
    private static int colorIndex(List<Series> series, int si) {
        Measurement f = series.get(si).points().get(0).first();
        int family = 0;
        List<String> seen = new ArrayList<>();
        for (Series s : series) {
            Measurement g = s.points().get(0).first();
            if (g.impl().equals("memcpy")) {
                continue;
            }
            String k = g.level() + "/" + g.backend() + "/" + (g.impl().equals("raw") ? "" : g.mode() + g.checksums()
                    + g.inflight());
            if (!seen.contains(k)) {
                seen.add(k);
            }
        }
        String mine = f.level() + "/" + f.backend() + "/" + (f.impl().equals("raw") ? "" : f.mode() + f.checksums()
                + f.inflight());
        family = Math.max(0, seen.indexOf(mine));
        return family;
    }

    private static void plot(StringBuilder b, Series s, int left, Function<Double, Double> xs,
            Function<Double, Double> ys, String color, String dash, Function<Summary, Summary.Stat> figure) {
        StringBuilder pts = new StringBuilder();
        for (Summary p : s.points()) {
            Summary.Stat st = figure.apply(p);
            if (!st.present()) {
                continue;
            }
            double x = left + xs.apply((double) p.first().sizeBytes());
            double y = MARGIN_T + ys.apply(st.median());
            pts.append(String.format(Locale.ROOT, "%.1f,%.1f ", x, y));
            line(b, x, MARGIN_T + ys.apply(st.min()), x, MARGIN_T + ys.apply(st.max()), color, "", 1);
            b.append(String.format(Locale.ROOT, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"/>%n", x, y, color));
        }
        if (pts.length() > 0) {
            b.append(String.format(Locale.ROOT, "<polyline points=\"%s\" fill=\"none\" stroke=\"%s\" "
                    + "stroke-width=\"2\"%s/>%n", pts.toString().trim(), color,
                    dash.isEmpty() ? "" : " stroke-dasharray=\"" + dash + "\""));
        }
    }

    private static void axes(StringBuilder b, int left, double x0, double x1, String yLabel, String xLabel) {
        b.append(String.format(Locale.ROOT, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"none\" "
                + "stroke=\"#333333\"/>%n", left, MARGIN_T, PANEL_W, PANEL_H));
        for (double e = x0; e <= x1; e++) {
            double x = left + (e - x0) / (x1 - x0) * PANEL_W;
            line(b, x, MARGIN_T, x, MARGIN_T + PANEL_H + 4, "#eeeeee", "");
            if (((long) e) % 2 == 0 || x1 - x0 <= 10) {
                text(b, x, MARGIN_T + PANEL_H + 18, "middle", 11, Sizes.label(1L << (long) e));
            }
        }
        text(b, left + PANEL_W / 2.0, MARGIN_T + PANEL_H + 38, "middle", 12, xLabel);
        b.append(String.format(Locale.ROOT, "<text x=\"%d\" y=\"%.1f\" text-anchor=\"middle\" font-size=\"12\" "
                + "transform=\"rotate(-90 %d %.1f)\">%s</text>%n", left - 52, MARGIN_T + PANEL_H / 2.0, left - 52,
                MARGIN_T + PANEL_H / 2.0, escape(yLabel)));
    }

    private static void line(StringBuilder b, double x1, double y1, double x2, double y2, String color, String dash) {
        line(b, x1, y1, x2, y2, color, dash, 1);
    }

    private static void line(StringBuilder b, double x1, double y1, double x2, double y2, String color, String dash,
            double width) {
        b.append(String.format(Locale.ROOT, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" "
                + "stroke-width=\"%.1f\"%s/>%n", x1, y1, x2, y2, color, width,
                dash.isEmpty() ? "" : " stroke-dasharray=\"" + dash + "\""));
    }

    private static void text(StringBuilder b, double x, double y, String anchor, int size, String s) {
        b.append(String.format(Locale.ROOT, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"%s\" font-size=\"%d\">%s</text>%n",
                x, y, anchor, size, escape(s)));
    }

    static String escape(String s) {
        return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace("\"", "&quot;");
    }

    private static String formatMicros(double us) {
        if (us >= 1e6) {
            return String.format(Locale.ROOT, "%.0f s", us / 1e6);
        }
        if (us >= 1e3) {
            return String.format(Locale.ROOT, "%.0f ms", us / 1e3);
        }
        return String.format(Locale.ROOT, us >= 1 ? "%.0f us" : "%.2f us", us);
    }

    private static String formatGb(double v) {
        return v >= 1 ? String.format(Locale.ROOT, "%.0f", v) : String.format(Locale.ROOT, "%s",
                new java.math.BigDecimal(v).round(new java.math.MathContext(1)).stripTrailingZeros().toPlainString());
    }

    private static double log2(double v) {
        return Math.log(Math.max(v, 1)) / Math.log(2);
    }

    static void write(Path file, List<Summary> summaries, String title) throws IOException {
        Files.writeString(file, render(summaries, title), StandardCharsets.UTF_8);
    }
}
