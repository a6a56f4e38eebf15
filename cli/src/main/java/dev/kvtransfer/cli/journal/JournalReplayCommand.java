package dev.kvtransfer.cli.journal;

import dev.kvtransfer.core.TransceiverConfig;
import dev.kvtransfer.core.journal.JournalReader;
import picocli.CommandLine;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;
import picocli.CommandLine.Parameters;

import java.io.PrintWriter;
import java.nio.file.Path;
import java.time.Duration;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.Callable;

/**
 * {@code kvtransfer journal replay DIR --backend NAME}: re-runs the recorded transfers between fresh in-JVM
 * instances (see {@link JournalReplay}) and prints recorded vs replayed duration per request. Exit code 0 when
 * every request completed and every byte matched.
 */
@Command(name = "replay", mixinStandardHelpOptions = true,
        description = "Re-run the recorded transfers (same layouts, sizes, gaps) here and verify every byte.")
public final class JournalReplayCommand implements Callable<Integer> {
    @Parameters(index = "0", paramLabel = "DIR", description = "journal directory of a run")
    Path dir;

    @Option(names = "--backend", required = true, description = "transport to replay over (aeron, ucx, loopback, ...)")
    String backend;

    @Option(names = "--as-fast-as-possible", description = "ignore the recorded inter-arrival gaps")
    boolean asFastAsPossible;

    @Option(names = "--set", description = "transceiver property for the replay, e.g. --set kvtransfer.chunkBytes=1MB")
    Map<String, String> properties = new LinkedHashMap<>();

    @Option(names = "--timeout-s", description = "per-request deadline in seconds (default 120)")
    int timeoutSeconds = 120;

    @Option(names = "--memory-budget-mib", description = "KV memory per instance for requests in flight (default 2048)")
    long memoryBudgetMib = 2048;

    @CommandLine.Spec
    CommandLine.Model.CommandSpec spec;

    @Override
    public Integer call() {
        PrintWriter out = spec.commandLine().getOut();
        JournalReplay.Plan plan;
        try {
            plan = JournalReplay.plan(JournalReader.readAll(dir));
        } catch (dev.kvtransfer.core.journal.JournalCorruptedException e) {
            spec.commandLine().getErr().println("kvtransfer journal replay: " + e.getMessage());
            return 2;
        }
        out.printf(Locale.ROOT, "replaying %d requests of %s over %s%s%n", plan.requests().size(), dir, backend,
                asFastAsPossible ? " as fast as possible" : " with the recorded gaps");
        out.printf(Locale.ROOT, "context    %s: %s%n", plan.contextInstance(), plan.contextState());
        out.printf(Locale.ROOT, "generation %s: %s%n", plan.generationInstance(), plan.generationState());
        Map<String, String> props = new LinkedHashMap<>(properties);
        props.put(TransceiverConfig.P_BACKEND, backend);
        List<JournalReplay.Replayed> results = JournalReplay.run(plan, backend, asFastAsPossible,
                TransceiverConfig.fromProperties(props), Duration.ofSeconds(timeoutSeconds), memoryBudgetMib << 20);
        out.printf(Locale.ROOT, "%10s %8s %12s %12s %8s  %s%n", "request", "prompt", "recorded ms", "replayed ms",
                "ratio", "verify");
        int bad = 0;
        for (JournalReplay.Replayed r : results) {
            long rec = r.request().recordedNanos();
            String recorded = rec < 0 ? r.request().recordedOutcome().toString() : String.format(Locale.ROOT, "%.3f",
                    rec / 1e6);
            String replayed = r.replayedNanos() < 0 ? "-" : String.format(Locale.ROOT, "%.3f", r.replayedNanos() / 1e6);
            String ratio = rec > 0 && r.replayedNanos() >= 0
                    ? String.format(Locale.ROOT, "%.2f", r.replayedNanos() / (double) rec) : "-";
            String verify = r.verified() ? "OK (" + r.checked() + " elements)" : "FAILED " + r.error();
            if (!r.verified()) {
                bad++;
            }
            out.printf(Locale.ROOT, "%10d %8d %12s %12s %8s  %s%n", r.request().requestId(),
                    r.request().promptLength(), recorded, replayed, ratio, verify);
        }
        out.printf(Locale.ROOT, "replayed %d requests: %d verified byte-exact, %d failed%n", results.size(),
                results.size() - bad, bad);
        return bad == 0 ? 0 : 1;
    }
}
