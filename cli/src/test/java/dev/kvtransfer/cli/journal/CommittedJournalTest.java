package dev.kvtransfer.cli.journal;

import dev.kvtransfer.core.TransceiverConfig;
import dev.kvtransfer.core.journal.JournalEvent;
import dev.kvtransfer.core.journal.JournalReader;
import dev.kvtransfer.core.journal.RecordType;
import dev.kvtransfer.core.journal.RequestTimeline;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.io.InputStream;
import java.nio.file.Path;
import java.time.Duration;
import java.util.List;
import java.util.Map;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * Journals written by format version 1 (committed as {@code journal/format-v1-tiny-run.zip}, made by
 * {@link CommittedJournalFixture}) must stay readable: a format change that breaks old journals fails here.
 */
class CommittedJournalTest {
    @TempDir
    Path dir;

    private JournalReader.Result readV1() throws Exception {
        try (InputStream in = getClass().getResourceAsStream("/journal/format-v1-tiny-run.zip")) {
            assertThat(in).as("committed journal resource").isNotNull();
            CommittedJournalFixture.unzip(in, dir);
        }
        return JournalReader.readAll(dir);
    }

    @Test
    void formatV1JournalsAreStillRead() throws Exception {
        JournalReader.Result r = readV1();
        assertThat(r.skipped()).isZero();
        assertThat(r.queues()).containsExactly("ctx-rank-0", "ctx-rank-1", "gen-rank-0", "gen-rank-1");
        List<JournalEvent.Opened> opened = r.events().stream().filter(e -> e instanceof JournalEvent.Opened)
                .map(e -> (JournalEvent.Opened) e).toList();
        assertThat(opened).hasSize(4);
        for (JournalEvent.Opened o : opened) {
            assertThat(o.formatVersion()).isEqualTo(1);
            assertThat(o.checksums()).isTrue();
            assertThat(o.selfState()).isEqualTo(o.instance().equals("ctx") ? JournalRun.CTX : JournalRun.GEN);
        }
        assertThat(RequestTimeline.unclosedRanks(r.events())).isEmpty();
        // Every record type a clean run writes is present.
        assertThat(r.events()).extracting(JournalEvent::type).contains(RecordType.OPENED, RecordType.PEER_CONTACT,
                RecordType.ACCEPTED, RecordType.INFO_SENT, RecordType.INFO_RECEIVED, RecordType.READY_SENT,
                RecordType.READY_RECEIVED, RecordType.PART_SENT, RecordType.PART_RECEIVED, RecordType.COMPLETED,
                RecordType.CLOSED);
        Map<Long, RequestTimeline> t = RequestTimeline.of(r.events());
        assertThat(t.keySet()).containsExactly(1L, 2L, 3L);
        for (RequestTimeline x : t.values()) {
            assertThat(x.outcome()).isEqualTo(RequestTimeline.Outcome.COMPLETED);
            assertThat(x.promptLength()).isEqualTo(CommittedJournalFixture.PROMPTS[(int) x.requestId() - 1]);
            assertThat(x.checksumPairsCompared()).isEqualTo(4);
            assertThat(x.checksumMismatches()).isEmpty();
            assertThat(x.receivedBytes()).isEqualTo(x.sentBytes()).isPositive();
        }
    }

    @Test
    void formatV1JournalsStillReplayByteExact() throws Exception {
        JournalReplay.Plan plan = JournalReplay.plan(readV1());
        List<JournalReplay.Replayed> results = JournalReplay.run(plan, "loopback", true, TransceiverConfig.defaults(),
                Duration.ofSeconds(60));
        assertThat(results).hasSize(3).allMatch(JournalReplay.Replayed::verified);
    }
}
