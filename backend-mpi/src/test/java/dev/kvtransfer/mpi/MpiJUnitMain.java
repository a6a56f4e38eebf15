package dev.kvtransfer.mpi;

import org.junit.platform.engine.TestExecutionResult;
import org.junit.platform.engine.discovery.DiscoverySelectors;
import org.junit.platform.launcher.Launcher;
import org.junit.platform.launcher.LauncherDiscoveryRequest;
import org.junit.platform.launcher.TestExecutionListener;
import org.junit.platform.launcher.TestIdentifier;
import org.junit.platform.launcher.TestPlan;
import org.junit.platform.launcher.core.LauncherDiscoveryRequestBuilder;
import org.junit.platform.launcher.core.LauncherFactory;
import org.junit.platform.launcher.listeners.SummaryGeneratingListener;
import org.junit.platform.launcher.listeners.TestExecutionSummary;

import java.io.IOException;
import java.io.PrintWriter;
import java.io.StringWriter;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.concurrent.ConcurrentHashMap;

/**
 * The program every rank of an {@code mpirun} job runs to execute real JUnit test classes inside the ranks —
 * the testkit's conformance suites through this module's subclasses, and the cross-rank tests — with the JUnit
 * Platform launcher: {@code MpiJUnitMain --report-dir DIR --job NAME --class FQCN [--class FQCN ...]}
 * ({@code --method FQCN#name} selects one test method).
 *
 * <p>MPI is initialized before the first test (collective) and finalized after the last (every rank gets there
 * whatever its results). Each rank writes {@code DIR/NAME-rank-R.txt}: one line per test with its outcome and
 * time, and the full stack trace of each failure; and prints
 * {@code MPI-JUNIT rank=R size=N found=F succeeded=S failed=X aborted=A skipped=K}. The rank exits 1 when any
 * test failed or none was found, so {@code mpirun} (and the build that ran it) fails.
 */
public final class MpiJUnitMain {
    private MpiJUnitMain() {
    }

    /**
     * Runs the selected classes in this rank.
     *
     * @param args see the class comment
     * @throws IOException when the report cannot be written
     */
    public static void main(String[] args) throws IOException {
        List<String> classes = new ArrayList<>();
        Path reportDir = Path.of("target/mpi-reports");
        String job = "junit";
        for (int i = 0; i < args.length; i++) {
            switch (args[i]) {
                case "--class" -> classes.add(args[++i]);
                case "--method" -> classes.add("#" + args[++i]);
                case "--report-dir" -> reportDir = Path.of(args[++i]);
                case "--job" -> job = args[++i];
                default -> throw new IllegalArgumentException("unknown argument " + args[i]
                        + " (--class FQCN, --report-dir DIR, --job NAME)");
            }
        }
        MpiRuntime rt = MpiRuntime.get();
        int rank = rt.worldRank();
        int size = rt.worldSize();
        Files.createDirectories(reportDir);
        Path report = reportDir.resolve(job + "-rank-" + rank + ".txt");
        LauncherDiscoveryRequestBuilder request = LauncherDiscoveryRequestBuilder.request();
        for (String c : classes) {
            request.selectors(c.startsWith("#") ? DiscoverySelectors.selectMethod(c.substring(1))
                    : DiscoverySelectors.selectClass(c));
        }
        LauncherDiscoveryRequest discovery = request.build();
        Launcher launcher = LauncherFactory.create();
        SummaryGeneratingListener summary = new SummaryGeneratingListener();
        RankReport lines = new RankReport(rank);
        System.out.println("[rank " + rank + "] MPI-JUNIT start: " + rt.libraryVersion() + ", " + size
                + " ranks, MPI_TAG_UB " + rt.tagUpperBound() + ", one-sided: " + (rt.rmaFailure() == null
                ? "MPI-3 RMA window" : "emulated (" + rt.rmaFailure() + ")") + ", classes "
                + classes);
        System.out.flush();
        long t0 = System.nanoTime();
        launcher.execute(discovery, summary, lines);
        TestExecutionSummary s = summary.getSummary();
        long found = s.getTestsFoundCount();
        long failed = s.getTestsFailedCount();
        long aborted = s.getTestsAbortedCount();
        String line = String.format(Locale.ROOT, "MPI-JUNIT rank=%d size=%d found=%d succeeded=%d failed=%d "
                        + "aborted=%d skipped=%d seconds=%.1f", rank, size, found, s.getTestsSucceededCount(), failed,
                aborted, s.getTestsSkippedCount(), (System.nanoTime() - t0) / 1e9);
        StringWriter failures = new StringWriter();
        s.printFailuresTo(new PrintWriter(failures), 40);
        String text = String.join("\n", lines.lines) + "\n\n" + line + "\n\n" + failures + "\ncounters: "
                + rt.counterValues() + "\n";
        Files.writeString(report, text, StandardCharsets.UTF_8);
        System.out.println("[rank " + rank + "] " + line + " (report " + report + ")");
        if (failed > 0) {
            System.out.println("[rank " + rank + "] failures:\n" + failures);
        }
        System.out.flush();
        MpiRuntime.shutdown();
        System.exit(failed == 0 && found > 0 ? 0 : 1);
    }

    /** One line per test: outcome, duration, and the reason of a skip or failure. */
    private static final class RankReport implements TestExecutionListener {
        final List<String> lines = java.util.Collections.synchronizedList(new ArrayList<>());
        private final int rank;
        private final ConcurrentHashMap<String, Long> started = new ConcurrentHashMap<>();
        private TestPlan plan;

        RankReport(int rank) {
            this.rank = rank;
        }

        @Override
        public void testPlanExecutionStarted(TestPlan testPlan) {
            this.plan = testPlan;
        }

        @Override
        public void executionStarted(TestIdentifier id) {
            started.put(id.getUniqueId(), System.nanoTime());
        }

        @Override
        public void executionSkipped(TestIdentifier id, String reason) {
            if (id.isTest()) {
                add("SKIPPED  " + name(id) + ": " + reason);
            }
        }

        @Override
        public void executionFinished(TestIdentifier id, TestExecutionResult result) {
            Long t = started.remove(id.getUniqueId());
            double ms = t == null ? 0 : (System.nanoTime() - t) / 1e6;
            if (!id.isTest() && result.getStatus() == TestExecutionResult.Status.SUCCESSFUL) {
                return;
            }
            String cause = result.getThrowable().map(e -> ": " + e).orElse("");
            add(String.format(Locale.ROOT, "%-8s %s (%.0f ms)%s", result.getStatus(), name(id), ms, cause));
        }

        private String name(TestIdentifier id) {
            String parent = plan == null ? "" : plan.getParent(id).map(TestIdentifier::getDisplayName).orElse("");
            return parent.isEmpty() ? id.getDisplayName() : parent + " > " + id.getDisplayName();
        }

        private void add(String line) {
            lines.add(line);
            System.out.println("[rank " + rank + "] " + line);
            System.out.flush();
        }
    }
}
