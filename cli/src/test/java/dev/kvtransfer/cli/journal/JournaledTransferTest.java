package dev.kvtransfer.cli.journal;

import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.core.journal.JournalEvent;
import dev.kvtransfer.core.journal.JournalReader;
import dev.kvtransfer.core.journal.RecordType;
import dev.kvtransfer.core.journal.RequestTimeline;
import dev.kvtransfer.core.journal.TransferJournal.Role;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.nio.file.Path;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.stream.Collectors;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * A real transfer run (ctx TP2 -> gen PP2, loopback, standard formatter) with journaling and checksums on: the
 * journal reconstructs every request, {@code inspect} reports them, and {@code replay} re-runs them byte-exact.
 */
class JournaledTransferTest {
    private static final int[] PROMPTS = {100, 64, 33, 300, 17, 1};

    @TempDir
    static Path dir;

    @BeforeAll
    static void record() throws Exception {
        long checked = JournalRun.run(dir, true, PROMPTS);
        assertThat(checked).isPositive();
    }

    @Test
    void theJournalReconstructsEveryRequest() {
        JournalReader.Result r = JournalReader.readAll(dir);
        assertThat(r.queues()).containsExactly("ctx-rank-0", "ctx-rank-1", "gen-rank-0", "gen-rank-1");
        assertThat(r.skipped()).isZero();
        assertThat(RequestTimeline.unclosedRanks(r.events())).isEmpty();
        // Identity: every rank's OPENED record carries its cache state; first contacts carry both.
        List<JournalEvent.Opened> opened = r.events().stream().filter(e -> e instanceof JournalEvent.Opened)
                .map(e -> (JournalEvent.Opened) e).toList();
        assertThat(opened).hasSize(4).allMatch(JournalEvent.Opened::checksums);
        for (JournalEvent.Opened o : opened) {
            assertThat(o.selfState()).isEqualTo(o.instance().equals("ctx") ? JournalRun.CTX : JournalRun.GEN);
        }
        List<JournalEvent.PeerContact> contacts = r.events().stream()
                .filter(e -> e instanceof JournalEvent.PeerContact).map(e -> (JournalEvent.PeerContact) e).toList();
        assertThat(contacts).isNotEmpty();
        for (JournalEvent.PeerContact c : contacts) {
            CacheState self = c.source().instance().equals("ctx") ? JournalRun.CTX : JournalRun.GEN;
            CacheState peer = c.source().instance().equals("ctx") ? JournalRun.GEN : JournalRun.CTX;
            assertThat(c.selfState()).isEqualTo(self);
            assertThat(c.peerState()).isEqualTo(peer);
            assertThat(c.peerTransport()).isEqualTo("loopback");
        }
        // Each rank met each peer rank once, however many requests followed.
        assertThat(contacts.stream().map(c -> c.source() + "->" + c.peerRank()).distinct().count())
                .isEqualTo(contacts.size());

        Map<Long, RequestTimeline> timelines = RequestTimeline.of(r.events());
        assertThat(timelines.keySet()).containsExactly(1L, 2L, 3L, 4L, 5L, 6L);
        for (RequestTimeline t : timelines.values()) {
            int prompt = PROMPTS[(int) t.requestId() - 1];
            assertThat(t.outcome()).as("request %d", t.requestId()).isEqualTo(RequestTimeline.Outcome.COMPLETED);
            assertThat(t.promptLength()).isEqualTo(prompt);
            assertThat(t.accepted(Role.CONTEXT)).extracting(a -> a.source().rank()).containsExactlyInAnyOrder(0, 1);
            assertThat(t.accepted(Role.GENERATION)).extracting(a -> a.source().rank())
                    .containsExactlyInAnyOrder(0, 1);
            int blocks = (prompt + 15) / 16;
            assertThat(t.accepted().values()).allMatch(a -> a.blockCount() == blocks);
            // Every generation rank asked both context ranks and got a ready signal from each.
            Set<String> infos = t.events().stream().filter(e -> e instanceof JournalEvent.RequestInfo)
                    .map(e -> e.type() + " " + e.source() + " peer " + ((JournalEvent.RequestInfo) e).peerRank())
                    .collect(Collectors.toSet());
            assertThat(infos).containsExactlyInAnyOrder(
                    "INFO_SENT gen/0 peer 0", "INFO_SENT gen/0 peer 1", "INFO_SENT gen/1 peer 0",
                    "INFO_SENT gen/1 peer 1", "INFO_RECEIVED ctx/0 peer 0", "INFO_RECEIVED ctx/0 peer 1",
                    "INFO_RECEIVED ctx/1 peer 0", "INFO_RECEIVED ctx/1 peer 1");
            assertThat(t.events().stream().filter(e -> e instanceof JournalEvent.ReadySignal rs && rs.value()))
                    .extracting(JournalEvent::type).filteredOn(x -> x == RecordType.READY_SENT).hasSize(4);
            assertThat(t.events().stream().filter(e -> e instanceof JournalEvent.ReadySignal rs && rs.value()))
                    .extracting(JournalEvent::type).filteredOn(x -> x == RecordType.READY_RECEIVED).hasSize(4);
            // Parts: what was sent arrived, bytes and checksums, for each of the 4 rank pairs.
            long cacheBytes = (long) blocks * 16 * 4 * 2 * 4 * 16 * 2; // tokens x layers x kv x heads x dim x fp16
            assertThat(t.sentBytes()).isEqualTo(cacheBytes);
            assertThat(t.receivedBytes()).isEqualTo(cacheBytes);
            assertThat(t.checksumPairsCompared()).isEqualTo(4);
            assertThat(t.checksumMismatches()).isEmpty();
            assertThat(t.events().stream().filter(e -> e instanceof JournalEvent.Part p && p.hasCrc()
                    && p.durationNanos() > 0)).isNotEmpty();
            assertThat(t.ends().values()).allMatch(e -> e instanceof JournalEvent.Completed);
            assertThat(t.generationDurationNanos()).isPositive();
            // Causality across ranks: each rank accepted before it completed.
            for (JournalEvent.Accepted a : t.accepted().values()) {
                assertThat(t.ends().get(a.source()).monoNanos()).isGreaterThan(a.monoNanos());
            }
        }
    }

    @Test
    void inspectReportsEveryRequestCompleted() {
        JournalCli.Run r = JournalCli.run("inspect", dir.toString());
        assertThat(r.code()).as(r.err()).isZero();
        assertThat(r.out()).contains("requests: 6, completed 6, failed 0, in flight 0")
                .doesNotContain("ranks without a CLOSED record").doesNotContain("MISMATCH");
        for (int id = 1; id <= 6; id++) {
            assertThat(r.out()).contains("request " + id + " COMPLETED: prompt " + PROMPTS[id - 1]
                    + " tokens, 2 ctx ranks -> 2 gen ranks");
        }
        JournalCli.Run unfinished = JournalCli.run("inspect", dir.toString(), "--unfinished");
        assertThat(unfinished.out()).contains("never completed: 0");
        JournalCli.Run one = JournalCli.run("inspect", dir.toString(), "--request", "4");
        assertThat(one.out()).contains("PART_SENT").contains("PART_RECEIVED").contains("READY_RECEIVED");
    }

    @Test
    void replayReRunsTheRecordedTransfersByteExact() {
        JournalCli.Run r = JournalCli.run("replay", dir.toString(), "--backend", "loopback", "--as-fast-as-possible");
        assertThat(r.code()).as(r.out() + r.err()).isZero();
        assertThat(r.out()).contains("replayed 6 requests: 6 verified byte-exact, 0 failed");
        // A memory budget below one request: one request in flight at a time, still every byte checked.
        List<JournalReplay.Replayed> oneByOne = JournalReplay.run(JournalReplay.plan(JournalReader.readAll(dir)),
                "loopback", true, dev.kvtransfer.core.TransceiverConfig.defaults(), Duration.ofSeconds(60), 1);
        assertThat(oneByOne).hasSize(6).allMatch(JournalReplay.Replayed::verified);
    }

    @Test
    void replayKeepsTheRecordedLayoutsSizesAndGaps() {
        JournalReplay.Plan plan = JournalReplay.plan(JournalReader.readAll(dir));
        assertThat(plan.contextState()).isEqualTo(JournalRun.CTX);
        assertThat(plan.generationState()).isEqualTo(JournalRun.GEN);
        assertThat(plan.requests()).extracting(JournalReplay.RecordedRequest::promptLength)
                .containsExactly(100, 64, 33, 300, 17, 1);
        // The second wave started after the first was verified: a real gap the replay waits for.
        long gap = plan.requests().get(3).arrivalNanos();
        assertThat(gap).isGreaterThan(plan.requests().get(2).arrivalNanos());
        List<JournalReplay.Replayed> results = JournalReplay.run(plan, "loopback", false,
                dev.kvtransfer.core.TransceiverConfig.defaults(), Duration.ofSeconds(60));
        assertThat(results).hasSize(6).allMatch(JournalReplay.Replayed::verified);
        for (JournalReplay.Replayed x : results) {
            assertThat(x.submittedNanos()).isGreaterThanOrEqualTo(x.request().arrivalNanos());
            assertThat(x.replayedNanos()).isPositive();
            assertThat(x.request().recordedNanos()).isPositive();
        }
    }
}
