package dev.kvtransfer.cli.journal;

import dev.kvtransfer.core.journal.JournalEvent;
import dev.kvtransfer.core.journal.JournalReader;
import dev.kvtransfer.core.journal.RequestTimeline;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.lang.management.ManagementFactory;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.TimeUnit;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

/**
 * The process running the sender (here: both instances, over the in-JVM loopback transport) is killed with
 * {@code destroyForcibly} (SIGKILL) while two large transfers are moving: its journals, written through
 * memory-mapped Chronicle files, survive the kill, and {@code inspect --unfinished} names exactly the requests it
 * left in flight, with their last event.
 */
class KilledSenderJournalTest {
    @TempDir
    Path dir;

    @Test
    void inspectUnfinishedNamesTheRequestsAKilledSenderLeftInFlight() throws Exception {
        List<String> cmd = new ArrayList<>();
        cmd.add(Paths.get(System.getProperty("java.home"), "bin", "java").toString());
        for (String a : ManagementFactory.getRuntimeMXBean().getInputArguments()) {
            if (!a.startsWith("-agentlib:jdwp")) {
                cmd.add(a);
            }
        }
        cmd.add("-Xmx512m");
        cmd.add("-cp");
        cmd.add(System.getProperty("java.class.path"));
        cmd.add(JournalCrashChild.class.getName());
        cmd.add(dir.toString());
        Process child = new ProcessBuilder(cmd).redirectErrorStream(true).start();
        List<String> lines = new CopyOnWriteArrayList<>();
        Thread reader = new Thread(() -> {
            try (BufferedReader in = new BufferedReader(new InputStreamReader(child.getInputStream(),
                    StandardCharsets.UTF_8))) {
                String l;
                while ((l = in.readLine()) != null) {
                    lines.add(l);
                }
            } catch (java.io.IOException e) {
                lines.add("reader: " + e);
            }
        }, "crash-child-output");
        reader.setDaemon(true);
        reader.start();
        try {
            // Kill only once the journals show both big requests moving (parts sent, none completed).
            await("parts of requests 2 and 3 in the journal").atMost(Duration.ofSeconds(60))
                    .pollInterval(Duration.ofMillis(200))
                    .failFast("the child exited: " + lines, () -> !child.isAlive())
                    .until(() -> lines.contains("SUBMITTED") && partsSent(2) >= 2 && partsSent(3) >= 2);
        } finally {
            child.destroyForcibly();
            assertThat(child.waitFor(30, TimeUnit.SECONDS)).isTrue();
        }
        assertThat(lines).contains("COMPLETED 1");

        JournalReader.Result r = JournalReader.readAll(dir);
        assertThat(RequestTimeline.unclosedRanks(r.events())).extracting(Object::toString)
                .containsExactlyInAnyOrder("ctx/0", "ctx/1", "gen/0", "gen/1");
        Map<Long, RequestTimeline> t = RequestTimeline.of(r.events());
        assertThat(t.get(1L).outcome()).isEqualTo(RequestTimeline.Outcome.COMPLETED);
        assertThat(t.get(1L).checksumMismatches()).isEmpty();
        for (long id : new long[] {2, 3}) {
            RequestTimeline x = t.get(id);
            assertThat(x.outcome()).isEqualTo(RequestTimeline.Outcome.IN_FLIGHT);
            assertThat(x.ranksInFlight()).isNotEmpty();
            // Far less than the request's 4 MiB made it before the kill.
            assertThat(x.receivedBytes()).isLessThan(4L << 20);
        }

        JournalCli.Run run = JournalCli.run("inspect", dir.toString(), "--unfinished");
        assertThat(run.code()).as(run.err()).isZero();
        assertThat(run.out()).contains("requests: 3, completed 1, failed 0, in flight 2")
                .contains("ranks without a CLOSED record (crashed, killed or still running)")
                .contains("never completed: 2")
                .contains("request 2 IN_FLIGHT").contains("request 3 IN_FLIGHT")
                .doesNotContain("request 1 ")
                .contains("last event:").contains("in flight on:");
    }

    private long partsSent(long id) {
        try {
            return JournalReader.readAll(dir).events().stream()
                    .filter(e -> e instanceof JournalEvent.Part p && !p.received() && p.requestId() == id).count();
        } catch (IllegalArgumentException e) {
            return 0; // no journal yet
        }
    }
}
