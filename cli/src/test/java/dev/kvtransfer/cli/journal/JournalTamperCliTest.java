package dev.kvtransfer.cli.journal;

import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.core.journal.ChronicleTransferJournal;
import dev.kvtransfer.core.journal.TransferJournal.Role;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.io.RandomAccessFile;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.stream.Stream;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * A damaged journal as an operator meets it: a flipped bit in a part's recorded CRC used to make
 * {@code journal inspect} print a false "CHECKSUM MISMATCH" and exit 0. Now the record's own checksum fails: exit
 * 2, the damaged file by name, no facts printed; {@code journal replay} refuses the same journal.
 */
class JournalTamperCliTest {
    private static final CacheState STATE = CacheState.builder().uniformKvHeads(2, 2).sizePerHead(8)
            .tokensPerBlock(4).build();
    private static final long MARK = 0x0BAD_C0DE_1234_5678L;

    @TempDir
    Path dir;

    private void write() {
        try (ChronicleTransferJournal ctx = ChronicleTransferJournal.open(dir, "ctx", 0, STATE, true, e -> { });
             ChronicleTransferJournal gen = ChronicleTransferJournal.open(dir, "gen", 0, STATE, true, e -> { })) {
            for (long id = 1; id <= 20; id++) {
                ctx.requestAccepted(Role.CONTEXT, id, 8, 2);
                gen.requestAccepted(Role.GENERATION, id, 8, 2);
                ctx.partSent(id, 0, 256, id == 7 ? MARK : 0xAB00 + id, 1000);
                gen.partReceived(id, 0, 256, id == 7 ? MARK : 0xAB00 + id, 2000);
                ctx.completed(Role.CONTEXT, id, 256);
                gen.completed(Role.GENERATION, id, 256);
            }
        }
    }

    /** Offset of the first occurrence of MARK (little-endian) in the gen rank's queue file. */
    private static long find(Path f) throws Exception {
        byte[] all = Files.readAllBytes(f);
        for (int i = 0; i + 8 <= all.length; i++) {
            long v = 0;
            for (int k = 7; k >= 0; k--) {
                v = (v << 8) | (all[i + k] & 0xff);
            }
            if (v == MARK) {
                return i;
            }
        }
        throw new AssertionError("mark not found in " + f);
    }

    @Test
    void aFlippedBitInARecordedCrcIsReportedNotAFalseMismatch() throws Exception {
        write();
        JournalCli.Run clean = JournalCli.run("inspect", dir.toString());
        assertThat(clean.code()).as(clean.err()).isZero();
        assertThat(clean.out()).contains("requests: 20, completed 20").doesNotContain("MISMATCH");
        Path f;
        try (Stream<Path> s = Files.walk(dir.resolve("gen-rank-0"))) {
            f = s.filter(p -> p.toString().endsWith(".cq4")).findFirst().orElseThrow();
        }
        long at = find(f);
        try (RandomAccessFile raf = new RandomAccessFile(f.toFile(), "rw")) {
            raf.seek(at + 2);
            int v = raf.read();
            raf.seek(at + 2);
            raf.write(v ^ 0x10);
        }
        JournalCli.Run r = JournalCli.run("inspect", dir.toString());
        assertThat(r.code()).isEqualTo(2);
        assertThat(r.err()).contains(f.getFileName().toString()).contains("gen-rank-0")
                .contains("(PART_RECEIVED) fails its checksum");
        assertThat(r.out()).doesNotContain("MISMATCH").doesNotContain("requests:");
        JournalCli.Run replay = JournalCli.run("replay", "--backend=loopback", dir.toString());
        assertThat(replay.code()).isNotZero();
        assertThat(replay.err()).contains("fails its checksum");
        System.out.println("journal inspect on a flipped bit: exit " + r.code() + ": " + r.err().trim());
    }
}
