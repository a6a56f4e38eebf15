package dev.kvtransfer.core.transfer;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.KvTransferException;
import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.transport.Connection;
import dev.kvtransfer.core.journal.Checksums;
import dev.kvtransfer.core.protocol.PartChecksumsFlyweight;

import java.util.Arrays;

/**
 * The part checksums of one pull session: per peer, the CRC32C of every message moved and where it starts in that
 * peer's byte stream. The sender sends them after its last part ({@link PartChecksumsFlyweight}); the receiver
 * compares them with what arrived. Each peer's arrays are touched by that peer's thread only.
 */
final class PartChecksumLog {
    private final int[][] crcs;
    private final long[][] starts;

    PartChecksumLog(int peers) {
        this.crcs = new int[peers][];
        this.starts = new long[peers][];
    }

    /** Keeps the CRC32C of a peer's k-th message, which starts at {@code start} in its stream. */
    void record(int peer, int k, long start, MemoryBuffer buffer, long offset, long n) {
        int[] c = crcs[peer];
        if (c == null) {
            // Most peers of a small request move one or two messages: start small, double after.
            c = crcs[peer] = new int[2];
            starts[peer] = new long[2];
        } else if (k == c.length) {
            c = crcs[peer] = Arrays.copyOf(c, k * 2);
            starts[peer] = Arrays.copyOf(starts[peer], k * 2);
        }
        c[k] = (int) Checksums.crc32c(buffer, offset, n);
        starts[peer][k] = start;
    }

    /** Sends each peer that moved messages their checksums. */
    void send(DefaultTransferSession s) {
        PartChecksumsFlyweight f = new PartChecksumsFlyweight();
        for (int p = 0; p < crcs.length; p++) {
            int n = s.messagesWith(p);
            if (n == 0) {
                continue;
            }
            long len = PartChecksumsFlyweight.length(n);
            try (ControlBuffers.Lease lease = s.checksumBuffer(len)) {
                f.wrap(lease.bytes(), 0).write(crcs[p], n);
                Connection conn = s.peerConnectionOf(p);
                try {
                    conn.send(s.peerTag(p), lease.buffer(), 0, len, s.remaining("sending part checksums"));
                } catch (KvTransferException e) {
                    throw new KvTransferException(e.code(), s.requestId(), "sending the part checksums to peer rank "
                            + s.targets().peerRanks().get(p) + " (" + conn.peer() + ") failed: " + e.getMessage(), e);
                }
                lease.reusable();
            }
        }
    }

    /** Receives each sending peer's checksums and compares them with what arrived: MALFORMED naming the part. */
    void verify(DefaultTransferSession s) {
        PartChecksumsFlyweight f = new PartChecksumsFlyweight();
        long id = s.requestId();
        for (int p = 0; p < crcs.length; p++) {
            int n = s.messagesWith(p);
            if (n == 0) {
                continue;
            }
            Connection conn = s.peerConnectionOf(p);
            int peerRank = s.targets().peerRanks().get(p);
            long len = PartChecksumsFlyweight.length(n);
            try (ControlBuffers.Lease lease = s.checksumBuffer(len)) {
                try {
                    conn.recv(s.peerTag(p), lease.buffer(), 0, len, s.remaining("receiving part checksums"));
                } catch (KvTransferException e) {
                    throw new KvTransferException(e.code(), id, "the part checksums of peer rank " + peerRank
                            + " (" + conn.peer() + ") did not arrive: " + e.getMessage(), e);
                }
                lease.reusable(); // received in full: whatever the check below finds, the buffer may be reused
                f.wrap(lease.bytes(), 0);
                if (f.count() != n) {
                    throw new KvTransferException(ErrorCode.MALFORMED, id, "peer rank " + peerRank + " ("
                            + conn.peer() + ") sent " + f.count() + " messages, " + n + " arrived", null);
                }
                for (int i = 0; i < n; i++) {
                    int want = f.crc(i);
                    if (want != crcs[p][i]) {
                        throw new KvTransferException(ErrorCode.MALFORMED, id, "corrupted part: message " + i
                                + " of " + n + " from peer rank " + peerRank + " (" + conn.peer() + ", tag "
                                + s.peerTag(p) + "), at byte offset " + starts[p][i] + " of its " + s.bytesWith(p)
                                + " bytes: CRC32C " + Integer.toHexString(crcs[p][i]) + " arrived, the sender's is "
                                + Integer.toHexString(want), null);
                    }
                }
            }
        }
    }
}
