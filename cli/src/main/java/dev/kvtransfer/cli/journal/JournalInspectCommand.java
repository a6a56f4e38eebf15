package dev.kvtransfer.cli.journal;

import dev.kvtransfer.core.journal.JournalEvent;
import dev.kvtransfer.core.journal.JournalReader;
import dev.kvtransfer.core.journal.RequestTimeline;
import dev.kvtransfer.core.journal.TransferJournal.Role;
import picocli.CommandLine;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;
import picocli.CommandLine.Parameters;

import java.io.PrintWriter;
import java.nio.file.Path;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.Callable;
import java.util.stream.Collectors;

/**
 * {@code kvtransfer journal inspect DIR}: one line per request (outcome, sizes, generation-side time, checksum
 * agreement), {@code --request ID} for one request's timeline across all ranks, {@code --unfinished} for the
 * requests that never completed with their last event.
 */
@Command(name = "inspect", mixinStandardHelpOptions = true,
        description = "Per-request timelines across all ranks' journals, and the requests that never completed.")
public final class JournalInspectCommand implements Callable<Integer> {
    @Parameters(index = "0", paramLabel = "DIR", description = "journal directory of a run (searched recursively)")
    Path dir;

    @Option(names = "--request", paramLabel = "ID", description = "print the full timeline of this request")
    Long request;

    @Option(names = "--unfinished", description = "list only the requests that never completed, with their last event")
    boolean unfinished;

    @CommandLine.Spec
    CommandLine.Model.CommandSpec spec;

    @Override
    public Integer call() {
        PrintWriter out = spec.commandLine().getOut();
        JournalReader.Result r;
        try {
            r = JournalReader.readAll(dir);
        } catch (dev.kvtransfer.core.journal.JournalCorruptedException e) {
            // Never a success with a rank silently missing, never a JVM stack: the damaged file, by name.
            spec.commandLine().getErr().println("kvtransfer journal inspect: " + e.getMessage());
            return 2;
        }
        Map<Long, RequestTimeline> timelines = RequestTimeline.of(r.events());
        long completed = timelines.values().stream()
                .filter(t -> t.outcome() == RequestTimeline.Outcome.COMPLETED).count();
        long failed = timelines.values().stream().filter(t -> t.outcome() == RequestTimeline.Outcome.FAILED).count();
        long inFlight = timelines.size() - completed - failed;
        out.printf(Locale.ROOT, "journal %s: %d rank journals (%s), %d events%s%n", dir, r.queues().size(),
                String.join(", ", r.queues()), r.events().size(),
                r.skipped() > 0 ? ", " + r.skipped() + " unreadable records skipped" : "");
        out.printf(Locale.ROOT, "requests: %d, completed %d, failed %d, in flight %d%n", timelines.size(), completed,
                failed, inFlight);
        Set<JournalEvent.Source> open = RequestTimeline.unclosedRanks(r.events());
        if (!open.isEmpty()) {
            out.printf(Locale.ROOT, "ranks without a CLOSED record (crashed, killed or still running): %s%n",
                    open.stream().map(Object::toString).collect(Collectors.joining(", ")));
        }
        long lost = r.events().stream().filter(e -> e instanceof JournalEvent.Lost)
                .mapToLong(e -> ((JournalEvent.Lost) e).count()).sum();
        if (lost > 0) {
            out.printf(Locale.ROOT, "WARNING: %d events were dropped by full journal rings%n", lost);
        }
        if (request != null) {
            RequestTimeline t = timelines.get(request);
            if (t == null) {
                out.printf(Locale.ROOT, "request %d: not in the journal%n", request);
                return 1;
            }
            out.println(summary(t));
            printTimeline(out, t);
            return 0;
        }
        if (unfinished) {
            out.printf(Locale.ROOT, "never completed: %d%n", failed + inFlight);
            for (RequestTimeline t : timelines.values()) {
                if (t.outcome() != RequestTimeline.Outcome.COMPLETED) {
                    out.println(summary(t));
                    JournalEvent last = t.lastEvent();
                    out.printf(Locale.ROOT, "    last event: %s %s %s%n", time(last.wallNanos()), last.source(),
                            RequestTimeline.describe(last));
                    if (!t.ranksInFlight().isEmpty()) {
                        out.printf(Locale.ROOT, "    in flight on: %s%n", t.ranksInFlight().stream()
                                .map(Object::toString).collect(Collectors.joining(", ")));
                    }
                }
            }
            return 0;
        }
        for (RequestTimeline t : timelines.values()) {
            out.println(summary(t));
        }
        return 0;
    }

    /**
     * @param t a timeline
     * @return one line: id, outcome, prompt, ranks, bytes, time, checksums
     */
    static String summary(RequestTimeline t) {
        StringBuilder sb = new StringBuilder();
        sb.append(String.format(Locale.ROOT, "request %d %s: prompt %d tokens, %d ctx ranks -> %d gen ranks, "
                        + "%.3f MiB received", t.requestId(), t.outcome(), t.promptLength(),
                t.accepted(Role.CONTEXT).size(), t.accepted(Role.GENERATION).size(),
                t.receivedBytes() / (double) (1 << 20)));
        long d = t.generationDurationNanos();
        if (d >= 0) {
            sb.append(String.format(Locale.ROOT, ", %.3f ms", d / 1e6));
        }
        if (t.checksumPairsCompared() > 0) {
            sb.append(t.checksumMismatches().isEmpty()
                    ? ", checksums agree (" + t.checksumPairsCompared() + " rank pairs)"
                    : ", CHECKSUM MISMATCH: " + String.join("; ", t.checksumMismatches()));
        }
        JournalEvent.Ended err = t.firstError();
        if (err != null) {
            sb.append(String.format(Locale.ROOT, "; first error on %s: %s", err.source(),
                    RequestTimeline.describe(err)));
        }
        return sb.toString();
    }

    private static void printTimeline(PrintWriter out, RequestTimeline t) {
        List<JournalEvent> ev = t.events();
        long t0 = ev.get(0).wallNanos();
        for (JournalEvent e : ev) {
            out.printf(Locale.ROOT, "  %+10.3f ms  %-8s %s%n", (e.wallNanos() - t0) / 1e6, e.source(),
                    RequestTimeline.describe(e));
        }
    }

    private static String time(long wallNanos) {
        return java.time.Instant.ofEpochSecond(0, wallNanos).toString();
    }
}
