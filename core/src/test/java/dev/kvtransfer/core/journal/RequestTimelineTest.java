package dev.kvtransfer.core.journal;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.core.journal.TransferJournal.Role;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.nio.file.Path;
import java.util.Map;

import static org.assertj.core.api.Assertions.assertThat;

class RequestTimelineTest {
    @TempDir
    Path dir;

    private static final CacheState STATE = CacheState.builder().uniformKvHeads(2, 2).sizePerHead(8)
            .tokensPerBlock(4).build();

    @Test
    void outcomesChecksumsAndDurationsAcrossRanks() {
        try (ChronicleTransferJournal ctx = ChronicleTransferJournal.open(dir, "ctx", 0, STATE, true, e -> { });
             ChronicleTransferJournal gen = ChronicleTransferJournal.open(dir, "gen", 0, STATE, true, e -> { })) {
            // 1: completed, parts agree.
            ctx.requestAccepted(Role.CONTEXT, 1, 8, 2);
            gen.requestAccepted(Role.GENERATION, 1, 8, 2);
            ctx.partSent(1, 0, 10, 0x11, 5);
            ctx.partSent(1, 0, 10, 0x12, 5);
            gen.partReceived(1, 0, 10, 0x11, 5);
            gen.partReceived(1, 0, 10, 0x12, 5);
            ctx.completed(Role.CONTEXT, 1, 20);
            gen.completed(Role.GENERATION, 1, 20);
            // 2: completed, but the second part arrived different.
            ctx.requestAccepted(Role.CONTEXT, 2, 8, 2);
            gen.requestAccepted(Role.GENERATION, 2, 8, 2);
            ctx.partSent(2, 0, 10, 0x21, 5);
            ctx.partSent(2, 0, 10, 0x22, 5);
            gen.partReceived(2, 0, 10, 0x21, 5);
            gen.partReceived(2, 0, 10, 0xBAD, 5);
            ctx.completed(Role.CONTEXT, 2, 20);
            gen.completed(Role.GENERATION, 2, 20);
            // 3: cut short: one part sent and not yet received is not a mismatch.
            ctx.requestAccepted(Role.CONTEXT, 3, 8, 2);
            gen.requestAccepted(Role.GENERATION, 3, 8, 2);
            ctx.partSent(3, 0, 10, 0x31, 5);
            ctx.partSent(3, 0, 10, 0x32, 5);
            gen.partReceived(3, 0, 10, 0x31, 5);
            // 4: timed out on the generation side, cancelled on the context side.
            ctx.requestAccepted(Role.CONTEXT, 4, 8, 2);
            gen.requestAccepted(Role.GENERATION, 4, 8, 2);
            ctx.ended(Role.CONTEXT, 4, ErrorCode.CANCELLED, "closing");
            gen.ended(Role.GENERATION, 4, ErrorCode.TIMEOUT, "no ready signal");
        }
        Map<Long, RequestTimeline> t = RequestTimeline.of(JournalReader.readAll(dir).events());
        assertThat(t.get(1L).outcome()).isEqualTo(RequestTimeline.Outcome.COMPLETED);
        assertThat(t.get(1L).checksumMismatches()).isEmpty();
        assertThat(t.get(1L).checksumPairsCompared()).isEqualTo(1);
        assertThat(t.get(1L).generationDurationNanos()).isPositive();
        assertThat(t.get(1L).sentBytes()).isEqualTo(20);
        assertThat(t.get(2L).checksumMismatches()).singleElement().asString().contains("0->0").contains("bad");
        assertThat(t.get(3L).outcome()).isEqualTo(RequestTimeline.Outcome.IN_FLIGHT);
        assertThat(t.get(3L).checksumMismatches()).isEmpty();
        assertThat(t.get(3L).ranksInFlight()).extracting(Object::toString).containsExactly("ctx/0", "gen/0");
        assertThat(t.get(3L).generationDurationNanos()).isEqualTo(-1);
        RequestTimeline four = t.get(4L);
        assertThat(four.outcome()).isEqualTo(RequestTimeline.Outcome.FAILED);
        assertThat(four.ends().values()).extracting(JournalEvent::type)
                .containsExactlyInAnyOrder(RecordType.CANCELLED, RecordType.TIMED_OUT);
        assertThat(RequestTimeline.describe(four.lastEvent())).contains("TIMEOUT").contains("no ready signal");
    }
}
