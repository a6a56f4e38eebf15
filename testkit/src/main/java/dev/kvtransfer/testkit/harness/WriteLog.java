package dev.kvtransfer.testkit.harness;

import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.transport.WriteBatch;

import java.nio.ByteBuffer;
import java.util.Arrays;
import java.util.zip.CRC32C;

/**
 * What the context ranks wrote one-sided into one generation rank's pool for one request: per entry the writer,
 * the grant's region id, the offset in it, the length and the CRC32C of the source bytes when written (what core's
 * session records and the done notice carries). Thread-safe (several writers append).
 */
final class WriteLog {
    private final boolean checksums;
    private long[] entries = new long[4 * 16];
    private int[] crcs = new int[16];
    private int size;

    WriteLog(boolean checksums) {
        this.checksums = checksums;
    }

    synchronized void record(int writer, WriteBatch batch) {
        for (int i = 0; i < batch.size(); i++) {
            if (size == crcs.length) {
                entries = Arrays.copyOf(entries, entries.length * 2);
                crcs = Arrays.copyOf(crcs, crcs.length * 2);
            }
            entries[4 * size] = writer;
            entries[4 * size + 1] = batch.target(i).regionId();
            entries[4 * size + 2] = batch.targetOffset(i);
            entries[4 * size + 3] = batch.length(i);
            crcs[size] = checksums ? crc(batch.source(i), batch.sourceOffset(i), batch.length(i)) : 0;
            size++;
        }
    }

    static int crc(MemoryBuffer b, long offset, long length) {
        CRC32C c = new CRC32C();
        ByteBuffer bb = b.asByteBuffer();
        bb.limit(Math.toIntExact(offset + length)).position(Math.toIntExact(offset));
        c.update(bb);
        return (int) c.getValue();
    }

    synchronized int size() {
        return size;
    }

    synchronized int writer(int i) {
        return (int) entries[4 * i];
    }

    synchronized long region(int i) {
        return entries[4 * i + 1];
    }

    synchronized long offset(int i) {
        return entries[4 * i + 2];
    }

    synchronized long length(int i) {
        return entries[4 * i + 3];
    }

    synchronized int crc(int i) {
        return crcs[i];
    }

    boolean checksums() {
        return checksums;
    }
}
