package dev.kvtransfer.core.journal;

import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.core.journal.TransferJournal.Role;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.io.RandomAccessFile;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Random;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.stream.Stream;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.catchThrowable;

/**
 * A truncated or partly random journal file is reported by name, never read as empty (a rank silently missing)
 * and never as a raw JVM error from a memory-mapped read.
 */
class CorruptJournalTest {
    @TempDir
    Path dir;

    private static CacheState state() {
        return CacheState.builder().uniformKvHeads(4, 4).sizePerHead(16).tokensPerBlock(16).build();
    }

    /** Two ranks' queues with a few hundred events each. */
    private void writeTwoRanks() {
        List<Throwable> errors = new CopyOnWriteArrayList<>();
        for (int rank = 0; rank < 2; rank++) {
            try (ChronicleTransferJournal j = ChronicleTransferJournal.open(dir, "ctx", rank, state(), true,
                    errors::add)) {
                for (int i = 0; i < 300; i++) {
                    j.requestAccepted(Role.CONTEXT, i, 4096, 256);
                    j.partSent(i, 0, 1 << 20, 0x1234, 5000);
                    j.completed(Role.CONTEXT, i, 1 << 20);
                }
            }
        }
        assertThat(errors).isEmpty();
        assertThat(JournalReader.readAll(dir).queues()).hasSize(2);
    }

    private Path rank1File() throws Exception {
        try (Stream<Path> s = Files.walk(dir.resolve("ctx-rank-1"))) {
            return s.filter(p -> p.toString().endsWith(".cq4")).findFirst().orElseThrow();
        }
    }

    private void assertReportedByName(Path file) {
        Throwable t = catchThrowable(() -> JournalReader.readAll(dir));
        assertThat(t).as("reading a damaged journal must fail").isInstanceOf(JournalCorruptedException.class);
        assertThat(t.getMessage()).contains(file.getFileName().toString()).contains("ctx-rank-1");
    }

    /** The offset just past the last non-zero byte: where the records end in a pre-sized queue file. */
    private static long dataEnd(Path f) throws Exception {
        byte[] all = Files.readAllBytes(f);
        for (int i = all.length - 1; i >= 0; i--) {
            if (all[i] != 0) {
                return i + 1;
            }
        }
        return 0;
    }

    @Test
    void aQueueFileTruncatedInsideItsRecordsIsReportedByName() throws Exception {
        writeTwoRanks();
        Path f = rank1File();
        long end = dataEnd(f);
        assertThat(end).isGreaterThan(20_000);
        try (RandomAccessFile raf = new RandomAccessFile(f.toFile(), "rw")) {
            raf.setLength(end * 2 / 3);
        }
        assertReportedByName(f);
    }

    @Test
    void anEmptiedQueueFileIsReportedByName() throws Exception {
        writeTwoRanks();
        Path f = rank1File();
        try (RandomAccessFile raf = new RandomAccessFile(f.toFile(), "rw")) {
            raf.setLength(0);
        }
        assertReportedByName(f);
    }

    @Test
    void randomBytesInAQueueFileAreReportedByName() throws Exception {
        writeTwoRanks();
        Path f = rank1File();
        Random rnd = new Random(7);
        try (RandomAccessFile raf = new RandomAccessFile(f.toFile(), "rw")) {
            byte[] junk = new byte[64 * 1024];
            rnd.nextBytes(junk);
            raf.seek(0);
            raf.write(junk);
        }
        assertReportedByName(f);
    }

    @Test
    void randomBytesInTheMiddleOfTheRecordsAreReportedByName() throws Exception {
        writeTwoRanks();
        Path f = rank1File();
        Random rnd = new Random(11);
        try (RandomAccessFile raf = new RandomAccessFile(f.toFile(), "rw")) {
            byte[] junk = new byte[4096];
            rnd.nextBytes(junk);
            raf.seek(90_000);
            raf.write(junk);
        }
        assertReportedByName(f);
    }
}
