package dev.kvtransfer.core.journal;

import com.code_intelligence.jazzer.junit.FuzzTest;
import dev.kvtransfer.fuzz.Contract;
import net.openhft.chronicle.bytes.Bytes;

/**
 * One journal record's fields as {@code JournalReader.decode} reads them from a queue a reader was handed (the
 * journal of another host, a damaged or hostile file): an event, null for a type this version does not know, or
 * a {@code RuntimeException} that the reader turns into {@code JournalCorruptedException} naming the file and the
 * record. Never an {@code Error}, and never an allocation sized by a length the record claims.
 */
class JournalDecodeFuzzTest {
    private static final JournalEvent.Source SOURCE = new JournalEvent.Source("fuzz", 0, "fuzz-rank-0");

    @FuzzTest(maxDuration = "10m")
    void record(byte[] data) {
        Bytes<?> b = Bytes.allocateElasticOnHeap(Math.max(1, data.length));
        b.write(data);
        Contract.only(data.length, () -> JournalReader.decode(SOURCE, b), RuntimeException.class);
    }
}
