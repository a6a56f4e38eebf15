package dev.kvtransfer.core.journal;

import com.code_intelligence.jazzer.junit.FuzzTest;
import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.core.journal.TransferJournal.Role;
import dev.kvtransfer.fuzz.Contract;
import org.junit.jupiter.api.AfterAll;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.stream.Stream;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * Whole journal files as {@code kvtransfer journal} reads them ({@code JournalReader.readAll}): a genuine queue
 * written by {@code ChronicleTransferJournal}, then changed by the input (bytes flipped at offsets it chooses in
 * the region the records occupy, and the file cut short where it says). The reader returns the events, or throws
 * {@code JournalCorruptedException} naming the file; never another exception, an {@code Error}, or a fault of
 * the JVM's read of a memory-mapped file. The input is {@code [u32 cut][(u16 offset, u8 xor)...]}.
 */
class JournalFileFuzzTest {
    private static Path root;
    private static final List<Path> FILES = new ArrayList<>();
    private static final List<byte[]> PRISTINE = new ArrayList<>();
    private static int used;

    private static synchronized void genuine() throws IOException {
        if (root != null) {
            return;
        }
        root = Files.createTempDirectory("kvtransfer-journal-fuzz");
        Path written = root.resolve("genuine");
        CacheState s = CacheState.builder().uniformKvHeads(4, 4).sizePerHead(16).tokensPerBlock(16).build();
        List<Throwable> errors = new ArrayList<>();
        try (ChronicleTransferJournal j = ChronicleTransferJournal.open(written, "ctx", 0, s, true, errors::add)) {
            for (int i = 0; i < 4; i++) {
                j.requestAccepted(Role.CONTEXT, i, 4096, 256);
                j.requestInfoReceived(i, 1);
                j.readySignalSent(i, 1, true);
                j.partSent(i, 0, 1 << 20, 0x1234_5678L + i, 5000 + i);
                if (i == 3) {
                    j.failed(Role.CONTEXT, i, ErrorCode.PEER_LOST, "peer went away");
                } else {
                    j.completed(Role.CONTEXT, i, 1 << 20);
                }
            }
        }
        assertThat(errors).isEmpty();
        Path q = written.resolve("ctx-rank-0");
        try (Stream<Path> files = Files.list(q)) {
            for (Path f : files.sorted().toList()) {
                FILES.add(q.relativize(f));
                byte[] b = Files.readAllBytes(f);
                PRISTINE.add(b);
                if (f.toString().endsWith(".cq4")) {
                    int last = b.length;
                    while (last > 0 && b[last - 1] == 0) {
                        last--;
                    }
                    used = last; // the records end here; the rest of the pre-sized file is zeros
                }
            }
        }
        assertThat(used).isPositive();
    }

    @AfterAll
    static void remove() throws IOException {
        if (root != null) {
            try (Stream<Path> s = Files.walk(root)) {
                s.sorted(Comparator.reverseOrder()).forEach(p -> p.toFile().delete());
            }
            root = null;
            FILES.clear();
            PRISTINE.clear();
        }
    }

    @FuzzTest(maxDuration = "10m")
    void journalFile(byte[] data) throws IOException {
        genuine();
        ByteBuffer in = ByteBuffer.wrap(data).order(ByteOrder.LITTLE_ENDIAN);
        long cut = in.remaining() >= 4 ? in.getInt() & 0xffffffffL : 0;
        Path dir = root.resolve("case").resolve("ctx-rank-0");
        Files.createDirectories(dir);
        for (int i = 0; i < FILES.size(); i++) {
            byte[] b = PRISTINE.get(i).clone();
            boolean queueFile = FILES.get(i).toString().endsWith(".cq4");
            if (queueFile) {
                while (in.remaining() >= 3) {
                    int at = (in.getShort() & 0xffff) % used;
                    b[at] ^= in.get();
                }
            }
            int length = queueFile && cut != 0 && cut < b.length ? (int) cut : b.length;
            try {
                Files.write(dir.resolve(FILES.get(i)), java.util.Arrays.copyOf(b, length));
            } catch (IOException e) {
                throw new UncheckedIOException(e);
            }
        }
        Path caseRoot = root.resolve("case");
        // Chronicle Queue's index scan maps the chunks up to a position a damaged header claims and keeps one
        // list entry per chunk (SCQIndexing.linearScanByPosition, ChunkedMappedFile.acquireByteStore): about
        // 74 MB of heap for the seed known-chronicle-index-scan before the mapped read faults. That is Chronicle's,
        // bounded here at 256 MiB so that anything worse (an out-of-memory) is still a finding.
        Throwable t = Contract.onlyWithin(256L << 20, () -> JournalReader.readAll(caseRoot),
                JournalCorruptedException.class);
        if (t == null) {
            assertThat(JournalReader.readAll(caseRoot).events()).isNotEmpty();
        } else {
            assertThat(t.getMessage()).as("names the queue").contains("ctx-rank-0");
        }
    }
}
