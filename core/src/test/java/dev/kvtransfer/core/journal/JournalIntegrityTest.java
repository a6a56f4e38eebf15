package dev.kvtransfer.core.journal;

import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.core.journal.TransferJournal.Role;
import net.openhft.chronicle.bytes.Bytes;
import net.openhft.chronicle.queue.ChronicleQueue;
import net.openhft.chronicle.queue.ExcerptTailer;
import net.openhft.chronicle.queue.RollCycles;
import net.openhft.chronicle.wire.DocumentContext;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.io.RandomAccessFile;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Random;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.stream.Stream;
import java.util.zip.CRC32C;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.catchThrowable;

/**
 * A damaged journal is refused, never read as facts: single-bit flips inside records used to come back as wrong facts
 * with exit 0 (a phantom in-flight request, wrong durations, a false checksum mismatch); records of version 99 and
 * queues of format 99 were read; a file truncated inside a record surfaced as "InternalError: a fault occurred in a
 * recent unsafe memory access". Every record now ends with a CRC32C; unknown versions and formats are refused; a cut
 * file is reported in plain words. The attacks are done on real journal files, at the byte offsets of real records.
 */
class JournalIntegrityTest {
    @TempDir
    Path tmp;
    private Path dir;

    @org.junit.jupiter.api.BeforeEach
    void fresh() {
        dir = tmp.resolve("journal");
    }

    private static CacheState state() {
        return CacheState.builder().uniformKvHeads(4, 4).sizePerHead(16).tokensPerBlock(16).build();
    }

    private void writeTwoRanks(int requests) {
        List<Throwable> errors = new CopyOnWriteArrayList<>();
        for (int rank = 0; rank < 2; rank++) {
            try (ChronicleTransferJournal j = ChronicleTransferJournal.open(dir, "ctx", rank, state(), true,
                    errors::add)) {
                for (int i = 0; i < requests; i++) {
                    j.requestAccepted(Role.CONTEXT, i, 4096, 256);
                    j.requestInfoReceived(i, 1);
                    j.readySignalSent(i, 1, true);
                    j.partSent(i, 0, 1 << 20, 0x1234_5678L + i, 5000 + i);
                    if (i % 7 == 3) {
                        j.failed(Role.CONTEXT, i, dev.kvtransfer.api.ErrorCode.PEER_LOST, "peer went away");
                    } else {
                        j.completed(Role.CONTEXT, i, 1 << 20);
                    }
                }
            }
        }
        assertThat(errors).isEmpty();
    }

    private Path rankFile(int rank) throws Exception {
        try (Stream<Path> s = Files.walk(dir.resolve("ctx-rank-" + rank))) {
            return s.filter(p -> p.toString().endsWith(".cq4")).findFirst().orElseThrow();
        }
    }

    /** [start, end) file offsets of every record of a queue (Chronicle maps the file: positions are offsets). */
    private static List<long[]> records(Path queueDir, Path file) throws Exception {
        List<long[]> out = new ArrayList<>();
        try (ChronicleQueue q = ChronicleQueue.singleBuilder(queueDir).rollCycle(RollCycles.FAST_DAILY)
                .readOnly(true).build();
             ExcerptTailer t = q.createTailer()) {
            while (true) {
                try (DocumentContext dc = t.readingDocument()) {
                    if (!dc.isPresent()) {
                        break;
                    }
                    if (dc.isData()) {
                        Bytes<?> b = dc.wire().bytes();
                        out.add(new long[] {b.readPosition(), b.readLimit(), b.readUnsignedByte(b.readPosition())});
                    }
                }
            }
        }
        // The offsets really are the file's: each record's first byte on disk is its type.
        try (RandomAccessFile raf = new RandomAccessFile(file.toFile(), "r")) {
            for (long[] r : out) {
                raf.seek(r[0]);
                assertThat((long) raf.read()).isEqualTo(r[2]);
            }
        }
        return out;
    }

    private static void flip(Path f, long offset, int bit) throws Exception {
        try (RandomAccessFile raf = new RandomAccessFile(f.toFile(), "rw")) {
            raf.seek(offset);
            int v = raf.read();
            raf.seek(offset);
            raf.write(v ^ (1 << bit));
        }
    }

    private static String facts(JournalReader.Result r) {
        StringBuilder sb = new StringBuilder();
        for (JournalEvent e : r.events()) {
            sb.append(e).append('\n');
        }
        return sb.append(r.skipped()).toString();
    }

    @Test
    void everySingleBitFlipInsideARecordIsReportedNeverReadAsAFact() throws Exception {
        writeTwoRanks(60);
        String genuine = facts(JournalReader.readAll(dir));
        Path f = rankFile(1);
        List<long[]> recs = records(dir.resolve("ctx-rank-1"), f);
        assertThat(recs).hasSizeGreaterThan(300);
        Random rnd = new Random(29);
        int flips = 200;
        int detected = 0;
        int wrong = 0;
        List<String> kinds = new ArrayList<>();
        for (int i = 0; i < flips; i++) {
            long[] r = recs.get(rnd.nextInt(recs.size()));
            long at = r[0] + (long) rnd.nextInt((int) (r[1] - r[0]));
            int bit = rnd.nextInt(8);
            flip(f, at, bit);
            try {
                Throwable t = catchThrowable(() -> JournalReader.readAll(dir));
                if (t instanceof JournalCorruptedException jc) {
                    detected++;
                    assertThat(jc.getMessage()).contains(f.getFileName().toString()).contains("ctx-rank-1");
                    if (kinds.size() < 3) {
                        kinds.add(jc.getMessage());
                    }
                } else if (t != null) {
                    throw new AssertionError("flip of bit " + bit + " at " + at + " raised " + t, t);
                } else if (!facts(JournalReader.readAll(dir)).equals(genuine)) {
                    wrong++;
                }
            } finally {
                flip(f, at, bit);
            }
        }
        System.out.println("journal: " + flips + " single-bit flips inside records: " + detected + " reported, "
                + wrong + " read as wrong facts; e.g. " + kinds.get(0));
        assertThat(wrong).isZero();
        assertThat(detected).isEqualTo(flips);
        assertThat(facts(JournalReader.readAll(dir))).isEqualTo(genuine); // every flip was undone
    }

    /** Rewrites a record's bytes and seals it with a correct checksum: what a newer (or hostile) writer makes. */
    private static void patchAndReseal(Path f, long[] rec, long offset, byte[] bytes) throws Exception {
        try (RandomAccessFile raf = new RandomAccessFile(f.toFile(), "rw")) {
            raf.seek(offset);
            raf.write(bytes);
            byte[] body = new byte[(int) (rec[1] - rec[0] - RecordType.CHECKSUM_BYTES)];
            raf.seek(rec[0]);
            raf.readFully(body);
            CRC32C crc = new CRC32C();
            crc.update(body);
            int v = (int) crc.getValue();
            raf.seek(rec[1] - RecordType.CHECKSUM_BYTES);
            raf.write(new byte[] {(byte) v, (byte) (v >>> 8), (byte) (v >>> 16), (byte) (v >>> 24)});
        }
    }

    @Test
    void aRecordOfAnUnknownVersionIsRefusedEvenWithAValidChecksum() throws Exception {
        writeTwoRanks(5);
        Path f = rankFile(1);
        List<long[]> recs = records(dir.resolve("ctx-rank-1"), f);
        long[] third = recs.get(2);
        patchAndReseal(f, third, third[0] + 1, new byte[] {99});
        Throwable t = catchThrowable(() -> JournalReader.readAll(dir));
        assertThat(t).isInstanceOf(JournalCorruptedException.class);
        assertThat(t.getMessage()).contains("record 3 of ctx-rank-1 has version 99")
                .contains("knows versions 1 and 2");
    }

    @Test
    void aQueueOfAnUnknownFormatIsRefusedEvenWithAValidChecksum() throws Exception {
        writeTwoRanks(5);
        Path f = rankFile(0);
        List<long[]> recs = records(dir.resolve("ctx-rank-0"), f);
        long[] opened = recs.get(0);
        assertThat(opened[2]).isEqualTo(RecordType.OPENED.code());
        // The format field follows the 18-byte header: i32, little-endian.
        patchAndReseal(f, opened, opened[0] + RecordType.HEADER_BYTES, new byte[] {99, 0, 0, 0});
        Throwable t = catchThrowable(() -> JournalReader.readAll(dir));
        assertThat(t).isInstanceOf(JournalCorruptedException.class);
        assertThat(t.getMessage()).contains("ctx-rank-0 is of format 99").contains("knows formats 1 and 2");
    }

    @Test
    void aFileCutInsideARecordIsReportedInPlainWords() throws Exception {
        Random rnd = new Random(3);
        List<String> messages = new ArrayList<>();
        for (int round = 0; round < 6; round++) {
            dir = tmp.resolve("cut-" + round);
            writeTwoRanks(150);
            Path f = rankFile(1);
            List<long[]> recs = records(dir.resolve("ctx-rank-1"), f);
            long[] r = recs.get(recs.size() / 4 + rnd.nextInt(recs.size() / 2));
            long cut = r[0] + 1 + rnd.nextInt((int) (r[1] - r[0] - 1));
            try (RandomAccessFile raf = new RandomAccessFile(f.toFile(), "rw")) {
                raf.setLength(cut);
            }
            Throwable t = catchThrowable(() -> JournalReader.readAll(dir));
            assertThat(t).as("cut at %d", cut).isInstanceOf(JournalCorruptedException.class);
            assertThat(t.getMessage()).contains(f.getFileName().toString()).doesNotContain("InternalError")
                    .doesNotContain("unsafe memory access");
            messages.add(t.getMessage());
        }
        System.out.println("journal cut inside a record: " + messages.get(0));
    }

    /**
     * Owner-only files, as for the media driver's shared memory: another local uid cannot open a rank's journal files
     * (request ids, sizes, timings, checksums, peer addresses). A child as uid {@code nobody} tries every path; run as
     * root only.
     */
    @Test
    void anotherUidCannotOpenAJournal() throws Exception {
        org.junit.jupiter.api.Assumptions.assumeTrue("root".equals(System.getProperty("user.name")),
                "only root can run a child as another uid; this test runs as " + System.getProperty("user.name"));
        org.junit.jupiter.api.Assumptions.assumeTrue(new java.io.File("/usr/bin/setpriv").canExecute(),
                "setpriv (util-linux) is not installed");
        writeTwoRanks(5);
        Path rankDir = dir.resolve("ctx-rank-0");
        assertThat(java.nio.file.attribute.PosixFilePermissions.toString(Files.getPosixFilePermissions(rankDir)))
                .isEqualTo("rwx------");
        List<Path> all;
        try (Stream<Path> s = Files.walk(rankDir)) {
            all = s.toList();
        }
        assertThat(all).anySatisfy(p -> assertThat(p.toString()).endsWith(".cq4"));
        long leaked = 0;
        for (Path p : all) {
            List<String> cmd = new ArrayList<>(List.of("/usr/bin/setpriv", "--reuid=65534", "--regid=65534",
                    "--clear-groups"));
            cmd.addAll(Files.isDirectory(p) ? List.of("ls", "-a", p.toString()) : List.of("head", "-c", "65536",
                    p.toString()));
            Process pr = new ProcessBuilder(cmd).start();
            pr.getOutputStream().close();
            byte[] out = pr.getInputStream().readAllBytes();
            String err = new String(pr.getErrorStream().readAllBytes(), java.nio.charset.StandardCharsets.UTF_8);
            assertThat(pr.waitFor(20, java.util.concurrent.TimeUnit.SECONDS)).isTrue();
            assertThat(pr.exitValue()).as("uid nobody opening %s: %s", p, err).isNotZero();
            assertThat(err).contains("Permission denied");
            leaked += out.length;
        }
        System.out.println("journal: uid nobody tried " + all.size() + " paths, bytes read: " + leaked);
        assertThat(leaked).isZero();
    }
}
