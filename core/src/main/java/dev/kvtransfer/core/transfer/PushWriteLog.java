package dev.kvtransfer.core.transfer;

import dev.kvtransfer.api.KvTransferException;
import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.memory.MemoryKind;
import dev.kvtransfer.api.transport.Connection;
import dev.kvtransfer.core.protocol.PushEntryFlyweight;
import dev.kvtransfer.core.protocol.PushNoticeFlyweight;

import java.nio.ByteBuffer;
import java.util.Arrays;

/**
 * What a push session wrote into each peer's pool (region id, offset, length and CRC32C per entry) and how much of
 * it was already reported: each layer or done notice ({@link PushNoticeFlyweight}) carries the entries written since
 * the previous one ({@link PushEntryFlyweight}), so the peer checks a layer while the next one is written.
 */
final class PushWriteLog {
    /** Per peer, the entries written: region id, offset, length (3 longs each). */
    private final long[][] written;
    private final int[][] writtenCrc;
    /** Per peer, the entries already reported to it. */
    private final int[] reportedCount;
    private final int[] writtenCount;

    PushWriteLog(int peers) {
        this.written = new long[peers][];
        this.writtenCrc = new int[peers][];
        this.reportedCount = new int[peers];
        this.writtenCount = new int[peers];
    }

    void record(int p, long regionId, long offset, long length, int crc) {
        int k = writtenCount[p]++;
        long[] w = written[p];
        if (w == null) {
            w = written[p] = new long[3 * 8];
            writtenCrc[p] = new int[8];
        } else if (3 * k == w.length) {
            w = written[p] = Arrays.copyOf(w, w.length * 2);
            writtenCrc[p] = Arrays.copyOf(writtenCrc[p], writtenCrc[p].length * 2);
        }
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
