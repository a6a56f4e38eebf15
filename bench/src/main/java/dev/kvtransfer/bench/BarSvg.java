package dev.kvtransfer.bench;

import java.util.List;
import java.util.Locale;

/**
 * The report's plots, written by hand: one horizontal bar per figure, ours beside its baseline of the same run
 * (grey) when there is one, on a log10 axis (figures spanning decades) or a linear one with a reference line (the
 * ratios, reference 1).
 */
final class BarSvg {
    private static final int LABEL_W = 420;
    private static final int PLOT_W = 480;
    private static final int RIGHT = 90;
    private static final int TOP = 56;
    private static final int BAR_H = 13;
    private static final int GROUP_GAP = 10;
    private static final String OURS = "#1f77b4";
    private static final String BASE = "#9a9a9a";

    private BarSvg() {
    }

    /**
     * One bar, or a pair.
     *
     * @param label    what it is
     * @param ours     our figure
     * @param baseline the baseline's figure ({@code NaN}: no second bar)
     */
    record Bar(String label, double ours, double baseline) {
    }

    /**
     * @param title     the plot's title
     * @param axis      the axis label (unit)
     * @param bars      the bars, top to bottom
     * @param log       log10 axis, else linear from 0
     * @param reference a value to mark with a dashed line ({@code NaN}: none)
     * @return the SVG document
     */
    static String render(String title, String axis, List<Bar> bars, boolean log, double reference) {
        double min = Double.MAX_VALUE;
        double max = 0;
        boolean pairs = false;
        for (Bar b : bars) {
            for (double v : new double[] {b.ours(), b.baseline()}) {
                if (v > 0 && !Double.isNaN(v) && !Double.isInfinite(v)) {
                    min = Math.min(min, v);
                    max = Math.max(max, v);
                }
            }
            pairs |= !Double.isNaN(b.baseline());
        }
        if (max == 0) {
            min = 1;
            max = 10;
        }
        if (!Double.isNaN(reference)) {
            max = Math.max(max, reference);
        }
        double lo;
        double hi;
        if (log) {
            lo = Math.floor(Math.log10(min));
            hi = Math.max(lo + 1, Math.ceil(Math.log10(max)));
        } else {
            lo = 0;
            hi = niceCeiling(max * 1.05);
        }
        int groupH = (pairs ? 2 : 1) * BAR_H + GROUP_GAP;
        int plotH = Math.max(1, bars.size()) * groupH;
        int width = LABEL_W + PLOT_W + RIGHT;
        int height = TOP + plotH + 60;
        StringBuilder s = new StringBuilder();
        s.append("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
        s.append(String.format(Locale.ROOT, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
                + "viewBox=\"0 0 %d %d\" font-family=\"sans-serif\">%n", width, height, width, height));
        s.append(String.format(Locale.ROOT, "<rect width=\"%d\" height=\"%d\" fill=\"white\"/>%n", width, height));
        text(s, 10, 22, "start", 15, title);
        if (pairs) {
            s.append(String.format(Locale.ROOT, "<rect x=\"%d\" y=\"32\" width=\"12\" height=\"10\" fill=\"%s\"/>%n",
                    LABEL_W, OURS));
            text(s, LABEL_W + 16, 41, "start", 11, "ours");
            s.append(String.format(Locale.ROOT, "<rect x=\"%d\" y=\"32\" width=\"12\" height=\"10\" fill=\"%s\"/>%n",
                    LABEL_W + 60, BASE));
            text(s, LABEL_W + 76, 41, "start", 11, "baseline, same run");
        }
        // Grid and ticks.
        int ticks = log ? (int) (hi - lo) : 5;
        for (int i = 0; i <= ticks; i++) {
            double v = log ? Math.pow(10, lo + i) : lo + (hi - lo) * i / ticks;
            double x = LABEL_W + PLOT_W * (double) i / ticks;
            s.append(String.format(Locale.ROOT, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#e0e0e0\"/>%n",
                    x, TOP, x, TOP + plotH));
            text(s, x, TOP + plotH + 16, "middle", 11, tick(v));
        }
        text(s, LABEL_W + PLOT_W / 2.0, TOP + plotH + 40, "middle", 12, axis + (log ? " (log scale)" : ""));
        if (!Double.isNaN(reference)) {
            double x = LABEL_W + scale(reference, lo, hi, log);
            s.append(String.format(Locale.ROOT, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#d62728\" "
                    + "stroke-dasharray=\"5,4\"/>%n", x, TOP - 4, x, TOP + plotH));
        }
        for (int i = 0; i < bars.size(); i++) {
            Bar b = bars.get(i);
            int y = TOP + i * groupH;
            text(s, LABEL_W - 8, y + BAR_H - 2, "end", 11, b.label());
            bar(s, y, b.ours(), OURS, lo, hi, log);
            if (pairs && !Double.isNaN(b.baseline())) {
                bar(s, y + BAR_H, b.baseline(), BASE, lo, hi, log);
            }
        }
        s.append(String.format(Locale.ROOT, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"black\"/>%n",
                LABEL_W, TOP, LABEL_W, TOP + plotH));
        s.append("</svg>\n");
        return s.toString();
    }

    private static void bar(StringBuilder s, int y, double v, String color, double lo, double hi, boolean log) {
        if (Double.isNaN(v) || v <= 0) {
            text(s, LABEL_W + 4, y + BAR_H - 2, "start", 10, "-");
            return;
        }
        double w = Math.max(1, scale(v, lo, hi, log));
        s.append(String.format(Locale.ROOT, "<rect x=\"%d\" y=\"%d\" width=\"%.1f\" height=\"%d\" fill=\"%s\"/>%n",
                LABEL_W, y, w, BAR_H - 1, color));
        text(s, LABEL_W + w + 4, y + BAR_H - 2, "start", 10, value(v));
    }

    /** Pixels from the axis's start. */
    private static double scale(double v, double lo, double hi, boolean log) {
        double f = log ? (Math.log10(Math.max(v, Math.pow(10, lo))) - lo) / (hi - lo) : (v - lo) / (hi - lo);
        return PLOT_W * Math.max(0, Math.min(1, f));
    }

    private static double niceCeiling(double v) {
        double p = Math.pow(10, Math.floor(Math.log10(v)));
        for (double m : new double[] {1, 2, 2.5, 5, 10}) {
            if (m * p >= v) {
                return m * p;
            }
        }
        return 10 * p;
    }

    private static String tick(double v) {
        if (v >= 1 && v == Math.rint(v)) {
            return String.format(Locale.ROOT, "%,.0f", v);
        }
        return String.format(Locale.ROOT, "%s", trim(v));
    }

    static String value(double v) {
        if (v >= 100) {
            return String.format(Locale.ROOT, "%,.0f", v);
        }
        if (v >= 10) {
            return String.format(Locale.ROOT, "%.1f", v);
        }
        return String.format(Locale.ROOT, "%.3f", v);
    }

    private static String trim(double v) {
        String t = String.format(Locale.ROOT, "%.4f", v);
        return t.contains(".") ? t.replaceAll("0+$", "").replaceAll("\\.$", "") : t;
    }

    private static void text(StringBuilder s, double x, double y, String anchor, int size, String t) {
        s.append(String.format(Locale.ROOT, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"%s\" font-size=\"%d\">%s</text>%n",
                x, y, anchor, size, SvgPlot.escape(t)));
    }
}
