package dev.kvtransfer.core.transfer;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.KvTransferException;
import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.memory.MemoryKind;
import dev.kvtransfer.api.transport.Connection;
import dev.kvtransfer.api.transport.WriteBatch;
import dev.kvtransfer.core.journal.Checksums;
import dev.kvtransfer.core.protocol.PushEntryFlyweight;
import dev.kvtransfer.core.protocol.PushNoticeFlyweight;

import java.nio.ByteBuffer;
import java.time.Duration;
import java.util.Arrays;

/**
 * What a push session wrote into each peer's pool (region id, offset, length and CRC32C per entry) and how much of
 * it was already reported: each layer or done notice ({@link PushNoticeFlyweight}) carries the entries written since
 * the previous one ({@link PushEntryFlyweight}), so the peer checks a layer while the next one is written.
 * With checksums on, each entry's CRC32C comes from the transport's copy where it can sum in that pass
 * ({@link Connection#writeSummed}), else from a pass of its own after the write.
 */
final class PushWriteLog {
    /** Per peer, the entries written: region id, offset, length (3 longs each). */
    private final long[][] written;
    private final int[][] writtenCrc;
    /** Per peer, the entries already reported to it. */
    private final int[] reportedCount;
    private final int[] writtenCount;
    /** Per peer, the transport's sums of its last batch (reused; each peer's thread touches its own). */
    private final int[][] sums;
    /** Per peer, whether it takes progress notices (null: none does), and its batch of a part (reused). */
    private boolean[] progress;
    private final WriteBatch[] parts;
    /**
     * Bytes after which a large batch's part is announced with its entries: the peer checks them while the next
     * part is written instead of checking the whole batch after the done notice.
     */
    static final long PROGRESS_BYTES = 16L << 20;

    PushWriteLog(int peers) {
        this.written = new long[peers][];
        this.writtenCrc = new int[peers][];
        this.reportedCount = new int[peers];
        this.writtenCount = new int[peers];
        this.sums = new int[peers][];
        this.parts = new WriteBatch[peers];
    }

    /**
     * The peers whose requests set {@code FLAG_PROGRESS_NOTICES}: a batch of more than twice
     * {@link #PROGRESS_BYTES} to such a peer, on a connection that writes with one copy and sums in that copy's pass
     * ({@link Connection#writeSummed}), goes in parts of at least that many bytes, each followed by a progress notice
     * with its entries (with checksums on only: the check they move earlier is the CRC32C pass over the written
     * bytes).
     */
    void progress(boolean[] perPeer) {
        this.progress = perPeer;
    }

    /** Writes a batch, in announced parts where {@link #progress} says so, and records its entries. */
    void write(DefaultTransferSession s, int p, Connection conn, WriteBatch batch, boolean checksums) {
        if (!checksums || progress == null || !progress[p] || batch.totalBytes() <= 2 * PROGRESS_BYTES) {
            writeAll(s, p, conn, batch, checksums);
            return;
        }
        WriteBatch part = parts[p];
        if (part == null) {
            part = parts[p] = new WriteBatch();
        }
        part.clear();
        long left = batch.totalBytes();
        boolean announce = true;
        for (int i = 0; i < batch.size(); i++) {
            long len = batch.length(i);
            long done = 0;
            do {
                // An entry is cut where a part fills up (a large pool's whole request is often one entry).
                long n = announce ? Math.min(len - done, PROGRESS_BYTES - part.totalBytes()) : len - done;
                part.add(batch.source(i), batch.sourceOffset(i) + done, batch.target(i), batch.targetOffset(i) + done,
                        n);
                done += n;
                left -= n;
                if (announce && left > 0 && part.totalBytes() >= PROGRESS_BYTES) {
                    boolean summed = writeAll(s, p, conn, part, true);
                    part.clear();
                    // Only where the transport summed in its copy's pass and copied once: a writer that sums apart
                    // would compete with the peer's sums for memory, and emulated writes pay round trips per
                    // batch. Otherwise the rest goes as one, checked after the done notice.
                    announce = summed && conn.writeCopiesPerByte(PROGRESS_BYTES) == 1;
                    if (announce) {
                        send(s, p, PushNoticeFlyweight.TYPE_PROGRESS, 0, "what was written so far");
                    }
                }
            } while (done < len);
        }
        writeAll(s, p, conn, part, true); // the last part (and any empty entries after the last byte)
        part.clear();
    }

    /** Writes a batch into a peer's pool and records its entries, each with its CRC32C when checksums are on. */
    private boolean writeAll(DefaultTransferSession s, int p, Connection conn, WriteBatch batch, boolean checksums) {
        Duration left = s.remaining("writing into peer rank " + s.targets().peerRanks().get(p));
        int[] sum = null;
        boolean summed = false;
        try {
            if (checksums) {
                sum = sums[p];
                if (sum == null || sum.length < batch.size()) {
                    sum = sums[p] = new int[Math.max(8, batch.size())];
                }
                summed = conn.writeSummed(batch, left, sum);
            }
            if (!summed) {
                conn.write(batch, left);
            }
        } catch (KvTransferException e) {
            throw new KvTransferException(e.code(), s.requestId(), "writing " + batch.totalBytes() + " bytes into peer "
                    + "rank " + s.targets().peerRanks().get(p) + " (" + conn.peer() + ") failed: " + e.getMessage(), e);
        } catch (RuntimeException e) {
            throw new KvTransferException(ErrorCode.NETWORK, s.requestId(), "writing into peer rank "
                    + s.targets().peerRanks().get(p) + " (" + conn.peer() + ") failed: " + e, e);
        }
        reserve(p, batch.size());
        for (int i = 0; i < batch.size(); i++) {
            long n = batch.length(i);
            int crc = !checksums ? 0 : summed ? sum[i]
                    : (int) Checksums.crc32c(batch.source(i), batch.sourceOffset(i), n);
            record(p, batch.target(i).regionId(), batch.targetOffset(i), n, crc);
        }
        return summed;
    }

    /** Room for {@code n} more entries of peer {@code p} (once per batch, not by doubling per entry). */
    private void reserve(int p, int n) {
        int want = writtenCount[p] + n;
        if (writtenCrc[p] == null) {
            written[p] = new long[3 * Math.max(8, want)];
            writtenCrc[p] = new int[Math.max(8, want)];
        } else if (want > writtenCrc[p].length) {
            int c = Math.max(want, 2 * writtenCrc[p].length);
            written[p] = Arrays.copyOf(written[p], 3 * c);
            writtenCrc[p] = Arrays.copyOf(writtenCrc[p], c);
        }
    }

    void record(int p, long regionId, long offset, long length, int crc) {
        reserve(p, 1);
        int k = writtenCount[p]++;
        long[] w = written[p];
        w[3 * k] = regionId;
        w[3 * k + 1] = offset;
        w[3 * k + 2] = length;
        writtenCrc[p][k] = crc;
    }

    /** Sends a peer a LAYER or DONE notice with the entries written since the previous one. */
    void send(DefaultTransferSession s, int peerIndex, int type, int layer, String what) {
        int from = reportedCount[peerIndex];
        int n = writtenCount[peerIndex] - from;
        Connection conn = s.peerConnectionOf(peerIndex);
        int tag = s.peerTag(peerIndex);
        try (MemoryBuffer m = s.bufferManager().allocate(PushNoticeFlyweight.LENGTH
                + (long) PushEntryFlyweight.LENGTH * n, MemoryKind.HOST)) {
            ByteBuffer bb = m.asByteBuffer();
            new PushNoticeFlyweight().wrap(bb, 0).write(type, layer, n);
            PushEntryFlyweight entry = new PushEntryFlyweight();
            long[] w = written[peerIndex];
            for (int i = 0; i < n; i++) {
                int k = from + i;
                entry.wrap(bb, PushNoticeFlyweight.LENGTH, i).write(w[3 * k], w[3 * k + 1], w[3 * k + 2],
                        writtenCrc[peerIndex][k]);
            }
            conn.send(tag, m, 0, PushNoticeFlyweight.LENGTH, s.remaining("sending a push notice"));
            if (n > 0) {
                conn.send(tag, m, PushNoticeFlyweight.LENGTH, (long) PushEntryFlyweight.LENGTH * n,
                        s.remaining("sending what was written"));
                reportedCount[peerIndex] += n;
            }
        } catch (KvTransferException e) {
            throw new KvTransferException(e.code(), s.requestId(), "telling peer rank "
                    + s.targets().peerRanks().get(peerIndex) + " (" + conn.peer() + ") " + what + " failed: "
                    + e.getMessage(), e);
        }
    }
}
