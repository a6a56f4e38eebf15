package dev.kvtransfer.bench;

import java.time.Duration;
import java.time.Instant;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Set;

/** The generated section of {@code benchmarks.md}: header, headline table, one table per step, plots, problems. */
final class ReportMarkdown {
    private ReportMarkdown() {
    }

    /**
     * How and where the report was made.
     *
     * @param command    the command line, as typed
     * @param commit     the git commit and its state
     * @param started    when the first step started
     * @param finished   when the last step ended
     * @param machine    cores, CPU, memory, OS, JDK
     * @param loadBefore load averages before
     * @param loadAfter  load averages after
     * @param quick      the tiny suite that checks the report (its figures mean nothing)
     */
    record Header(String command, String commit, Instant started, Instant finished, String machine,
                  String loadBefore, String loadAfter, boolean quick) {
    }

    static String section(Header h, Map<BenchReport.Step, List<BenchReport.Row>> bySteps,
            List<BenchReport.Row> headline, List<String> problems) {
        StringBuilder b = new StringBuilder();
        b.append(BenchReport.BEGIN).append("\n\n");
        b.append("## Generated report\n\n");
        b.append("Written by the command below; rerun it rather than editing this section. Each step is one "
                + "`kvtransfer bench` invocation (its command is given) in which every figure of ours was measured "
                + "right beside its baseline: the transport's raw library where it offers one (plain Aeron on the "
                + "same channel), else a single-thread memcpy of the same bytes.\n\n");
        if (h.quick()) {
            b.append("**`--report-quick`: tiny sizes that check the report itself. These figures mean nothing.**\n\n");
        }
        b.append("- Command: `").append(h.command()).append("`\n");
        b.append("- Commit: ").append(h.commit()).append('\n');
        long seconds = Duration.between(h.started(), h.finished()).toSeconds();
        b.append("- Date: ").append(BenchReport.utc(h.started())).append(" to ").append(BenchReport.utc(h.finished()))
                .append(" (").append(seconds / 60).append(" min ").append(seconds % 60).append(" s)\n");
        b.append("- Machine: ").append(h.machine()).append('\n');
        b.append("- Load average (1 / 5 / 15 min): before ").append(h.loadBefore()).append(", after ")
                .append(h.loadAfter()).append("\n\n");
        b.append("How to read: figures are the median of the repeats, with min and max; the ratio is ours / "
                + "baseline, taken per repeat (ours of repeat r over the baseline of repeat r) and then folded the "
                + "same way. For GB/s a higher ratio is better for ours, for latencies a lower one. On a shared "
                + "machine read the ranges: a load spike moves both sides of a pair, not always equally.\n\n");
        b.append("### Headline\n\n");
        b.append(headline(h, headline)).append("\n\n");
        for (Map.Entry<BenchReport.Step, List<BenchReport.Row>> e : bySteps.entrySet()) {
            BenchReport.Step step = e.getKey();
            b.append("### ").append(capitalize(step.name())).append("\n\n");
            b.append(step.title()).append(".\n\n");
            b.append("Command: `kvtransfer bench ").append(String.join(" ", step.args())).append("`\n\n");
            b.append("| figure | ours: median (min – max) | baseline | baseline: median (min – max) "
                    + "| ours / baseline: median (min – max) |\n");
            b.append("| --- | --- | --- | --- | --- |\n");
            Set<String> sources = new LinkedHashSet<>();
            for (BenchReport.Row r : e.getValue()) {
                b.append("| ").append(r.figure()).append(", ").append(r.metric()).append(" | ")
                        .append(stat(r.oursStat(), r.latency())).append(" | ")
                        .append(r.baseline() == null ? "-" : r.baseline()).append(" | ")
                        .append(stat(r.baseStat(), r.latency())).append(" | ").append(ratio(r.ratio())).append(" |\n");
                if (r.baseline() != null && !r.source().isEmpty()) {
                    sources.add(r.baseline().replace(" round trip", "") + ": " + r.source());
                }
            }
            if (!sources.isEmpty()) {
                b.append("\nBaselines: ").append(String.join("; ", sources).replace("|", "/")).append(".\n");
            }
            b.append('\n');
        }
        b.append("### Plots\n\n");
        b.append("![throughput, ours beside its baseline](").append(BenchReport.PLOTS).append("/throughput.svg)\n\n");
        b.append("![latency p50, ours beside its baseline](").append(BenchReport.PLOTS).append("/latency.svg)\n\n");
        b.append("![ours / baseline](").append(BenchReport.PLOTS).append("/ratios.svg)\n\n");
        b.append("### Problems\n\n");
        if (problems.isEmpty()) {
            b.append("None: every request completed and every figure has its baseline.\n\n");
        } else {
            problems.forEach(p -> b.append("- ").append(p.replace("\n", " ")).append('\n'));
            b.append('\n');
        }
        b.append(BenchReport.END);
        return b.toString();
    }

    /** The headline block, markers included: what the README copies. */
    private static String headline(Header h, List<BenchReport.Row> rows) {
        StringBuilder b = new StringBuilder();
        b.append(BenchReport.HEADLINE_BEGIN).append("\n\n");
        String cores = h.machine().contains(",") ? h.machine().substring(0, h.machine().indexOf("),") + 1)
                : h.machine();
        b.append("Medians of one `kvtransfer bench --report` run (").append(BenchReport.utc(h.started()))
                .append(", commit ").append(h.commit().split(" ")[0]).append(", ").append(cores)
                .append(", load ").append(h.loadBefore().split(" ")[0]).append(" before and ")
                .append(h.loadAfter().split(" ")[0]).append(" after). Each baseline ran in the same invocation, right "
                        + "beside ours; the ratio is the median of the per-repeat ratios, so it need not equal the "
                        + "quotient of the two medians.\n\n");
        b.append("| figure | ours | baseline (same run) | ours / baseline |\n");
        b.append("| --- | --- | --- | --- |\n");
        for (BenchReport.Row r : rows) {
            b.append("| ").append(r.step().name()).append(": ").append(r.figure()).append(" | ")
                    .append(num(r.oursStat().median(), r.latency())).append(' ').append(r.metric()).append(" | ")
                    .append(r.baseline() == null ? "-" : r.baseline() + " " + num(r.baseStat().median(), r.latency())
                            + " " + r.metric())
                    .append(" | ").append(num2(r.ratio().median())).append(" |\n");
        }
        b.append('\n').append(BenchReport.HEADLINE_END);
        return b.toString();
    }

    private static String stat(Summary.Stat s, boolean latency) {
        if (!s.present()) {
            return "-";
        }
        if (Double.isNaN(s.min())) {
            return num(s.median(), latency);
        }
        return num(s.median(), latency) + " (" + num(s.min(), latency) + " – " + num(s.max(), latency) + ")";
    }

    private static String ratio(Summary.Stat s) {
        if (!s.present()) {
            return "-";
        }
        if (Double.isNaN(s.min())) {
            return num2(s.median());
        }
        return num2(s.median()) + " (" + num2(s.min()) + " – " + num2(s.max()) + ")";
    }

    private static String num(double v, boolean latency) {
        if (Double.isNaN(v)) {
            return "-";
        }
        if (latency) {
            return v >= 100 ? String.format(Locale.ROOT, "%,.0f", v) : String.format(Locale.ROOT, "%.1f", v);
        }
        return String.format(Locale.ROOT, "%.3f", v);
    }

    private static String num2(double v) {
        return Double.isNaN(v) ? "-" : String.format(Locale.ROOT, "%.2f", v);
    }

    private static String capitalize(String s) {
        return s.isEmpty() ? s : Character.toUpperCase(s.charAt(0)) + s.substring(1);
    }
}
