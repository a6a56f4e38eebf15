package dev.kvtransfer.cli.journal;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.api.model.CommState;
import dev.kvtransfer.api.model.TransceiverState;
import dev.kvtransfer.core.journal.ChronicleTransferJournal;
import dev.kvtransfer.core.journal.TransferJournal.Role;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.nio.file.Path;
import java.util.List;

import static org.assertj.core.api.Assertions.assertThat;

/** {@code journal inspect} over journals written directly through the journal API (no transfer involved). */
class JournalInspectCommandTest {
    @TempDir
    Path dir;

    private static final CacheState STATE = CacheState.builder().uniformKvHeads(2, 2).sizePerHead(8)
            .tokensPerBlock(4).build();

    /** Request 1 completes, 2 fails on the generation side, 3 is left in flight (the context rank never closes). */
    private void writeJournals() {
        TransceiverState genPeer = new TransceiverState(STATE, new CommState("loopback", List.of("g0"), 0));
        TransceiverState ctxPeer = new TransceiverState(STATE, new CommState("loopback", List.of("c0"), 0));
        ChronicleTransferJournal ctx = ChronicleTransferJournal.open(dir, "ctx", 0, STATE, true, e -> { });
        try (ChronicleTransferJournal gen = ChronicleTransferJournal.open(dir, "gen", 0, STATE, true, e -> { })) {
            for (long id = 1; id <= 3; id++) {
                ctx.requestAccepted(Role.CONTEXT, id, 8, 2);
                gen.requestAccepted(Role.GENERATION, id, 8, 2);
                gen.peerContact(Role.GENERATION, id, ctxPeer);
                gen.requestInfoSent(id, 0);
                ctx.peerContact(Role.CONTEXT, id, genPeer);
                ctx.requestInfoReceived(id, 0);
                ctx.readySignalSent(id, 0, true);
                gen.readySignalReceived(id, 0, true);
            }
            ctx.partSent(1, 0, 256, 0xAB, 1000);
            gen.partReceived(1, 0, 256, 0xAB, 2000);
            ctx.completed(Role.CONTEXT, 1, 256);
            gen.completed(Role.GENERATION, 1, 256);
            ctx.partSent(2, 0, 256, 0xCD, 1000);
            ctx.completed(Role.CONTEXT, 2, 256);
            gen.failed(Role.GENERATION, 2, ErrorCode.PEER_LOST, "context rank 0 went away");
            ctx.partSent(3, 0, 128, 0xEF, 1000);
            assertThat(ctx.awaitWritten(java.time.Duration.ofSeconds(10))).isTrue();
        }
        // ctx is deliberately not closed before reading: as after a crash, its journal has no CLOSED record.
        closeLater = ctx;
    }

    private ChronicleTransferJournal closeLater;

    @Test
    void summaryListsEveryRequestWithItsOutcome() {
        writeJournals();
        try {
            JournalCli.Run r = JournalCli.run("inspect", dir.toString());
            assertThat(r.code()).as(r.err()).isZero();
            assertThat(r.out()).contains("2 rank journals (ctx-rank-0, gen-rank-0)")
                    .contains("requests: 3, completed 1, failed 1, in flight 1")
                    .contains("ranks without a CLOSED record (crashed, killed or still running): ctx/0")
                    .contains("request 1 COMPLETED: prompt 8 tokens, 1 ctx ranks -> 1 gen ranks")
                    .contains("checksums agree (1 rank pairs)")
                    .contains("request 2 FAILED")
                    .contains("first error on gen/0: FAILED GENERATION, PEER_LOST: context rank 0 went away")
                    .contains("request 3 IN_FLIGHT");
        } finally {
            closeLater.close();
        }
    }

    @Test
    void unfinishedNamesTheRequestsThatNeverCompletedWithTheirLastEvent() {
        writeJournals();
        try {
            JournalCli.Run r = JournalCli.run("inspect", dir.toString(), "--unfinished");
            assertThat(r.code()).as(r.err()).isZero();
            assertThat(r.out()).contains("never completed: 2").doesNotContain("request 1 ");
            assertThat(r.out()).contains("request 2 FAILED").contains("request 3 IN_FLIGHT")
                    .contains("gen/0 FAILED GENERATION, PEER_LOST")
                    .contains("ctx/0 PART_SENT peer rank 0, 128 B, crc32c 000000ef")
                    .contains("in flight on: ctx/0, gen/0");
        } finally {
            closeLater.close();
        }
    }

    @Test
    void requestPrintsItsTimelineAcrossRanks() {
        writeJournals();
        closeLater.close();
        JournalCli.Run r = JournalCli.run("inspect", dir.toString(), "--request", "1");
        assertThat(r.code()).as(r.err()).isZero();
        String out = r.out();
        assertThat(out).doesNotContain("ranks without a CLOSED record");
        assertThat(out).contains("ctx/0    ACCEPTED CONTEXT, prompt 8 tokens, 2 blocks")
                .contains("gen/0    ACCEPTED GENERATION")
                .contains("gen/0    INFO_SENT peer rank 0")
                .contains("ctx/0    INFO_RECEIVED peer rank 0")
                .contains("ctx/0    READY_SENT peer rank 0, true")
                .contains("gen/0    READY_RECEIVED peer rank 0, true")
                .contains("ctx/0    PART_SENT peer rank 0, 256 B, crc32c 000000ab, 0.001 ms")
                .contains("gen/0    PART_RECEIVED peer rank 0, 256 B, crc32c 000000ab, 0.002 ms")
                .contains("COMPLETED CONTEXT, 256 B").contains("COMPLETED GENERATION, 256 B");
        // Timeline order: accepted before parts before completion.
        assertThat(out.indexOf("ACCEPTED CONTEXT")).isLessThan(out.indexOf("PART_SENT"));
        assertThat(out.indexOf("PART_RECEIVED")).isLessThan(out.indexOf("COMPLETED GENERATION"));
        assertThat(JournalCli.run("inspect", dir.toString(), "--request", "99").code()).isEqualTo(1);
    }

    @Test
    void aDirectoryWithoutJournalsIsAClearError() {
        JournalCli.Run r = JournalCli.run("inspect", dir.toString());
        assertThat(r.code()).isNotZero();
        assertThat(r.err()).contains("no journal found under " + dir);
    }

    @Test
    void aDamagedJournalFileIsReportedByNameWithANonZeroExit() throws Exception {
        writeJournals();
        closeLater.close();
        java.nio.file.Path file;
        try (var files = java.nio.file.Files.walk(dir.resolve("gen-rank-0"))) {
            file = files.filter(p -> p.toString().endsWith(".cq4")).findFirst().orElseThrow();
        }
        try (java.io.RandomAccessFile raf = new java.io.RandomAccessFile(file.toFile(), "rw")) {
            raf.setLength(0);
        }
        for (String sub : new String[] {"inspect", "replay"}) {
            JournalCli.Run run = sub.equals("inspect") ? JournalCli.run("inspect", dir.toString())
                    : JournalCli.run("replay", dir.toString(), "--backend", "loopback");
            assertThat(run.code()).as("%s exit code", sub).isEqualTo(2);
            assertThat(run.err()).contains(file.getFileName().toString(), "gen-rank-0", "damaged");
            assertThat(run.err().lines().count()).as("one line, no stack trace").isEqualTo(1);
            assertThat(run.out()).doesNotContain("requests:");
        }
    }
}
