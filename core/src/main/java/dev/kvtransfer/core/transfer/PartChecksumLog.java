package dev.kvtransfer.core.transfer;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.KvTransferException;
import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.transport.Connection;
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
    /** Per peer: the message whose CRC32C the formatter owes, or -1 (valid once the peer has a message). */
    private final int[] owed;

    PartChecksumLog(int peers) {
        this.crcs = new int[peers][];
        this.starts = new long[peers][];
        this.owed = new int[peers];
    }

    /** Keeps the CRC32C of a peer's k-th message, which starts at {@code start} in its stream. */
    void record(int peer, int k, long start, int crc) {
        int[] c = crcs[peer];
        if (c == null) {
            // Most peers of a small request move one or two messages: start small, double after.
            c = crcs[peer] = new int[2];
            starts[peer] = new long[2];
            owed[peer] = -1;
        } else if (k == c.length) {
            c = crcs[peer] = Arrays.copyOf(c, k * 2);
            starts[peer] = Arrays.copyOf(starts[peer], k * 2);
        }
        c[k] = crc;
        starts[peer][k] = start;
    }

    /** The formatter sums the peer's k-th message in its scatter: its CRC32C comes with {@link #settle}. */
    void owe(int peer, int k, long start) {
        record(peer, k, start, 0);
        owed[peer] = k;
    }

    /** @return whether the peer's formatter owes a message's CRC32C */
    boolean owes(int peer) {
        return crcs[peer] != null && owed[peer] >= 0;
    }

    /** Takes the CRC32C a session's formatter owed for a peer: IllegalStateException when none is owed. */
    static void settle(PartChecksumLog log, DefaultTransferSession s, int peer, int crc) {
        if (log == null || !log.owes(peer)) {
            throw new IllegalStateException("request " + s.requestId() + ": no part checksum is owed for peer " + peer);
        }
        log.crcs[peer][log.owed[peer]] = crc;
        log.owed[peer] = -1;
    }

    /** Fails INTERNAL when a peer's formatter still owes a checksum (it would compare against a placeholder). */
    void checkSettled(DefaultTransferSession s, int peer) {
        if (owes(peer)) {
            throw new KvTransferException(ErrorCode.INTERNAL, s.requestId(), "the formatter did not hand over the"
                    + " CRC32C of message " + owed[peer] + " from peer rank " + s.targets().peerRanks().get(peer)
                    + " (recvChecksumLater without receivedChecksum)", null);
        }
    }

    /** Sends each peer that moved messages their checksums. */
    void send(DefaultTransferSession s) {
        PartChecksumsFlyweight f = new PartChecksumsFlyweight();
        for (int p = 0; p < crcs.length; p++) {
            int n = s.messagesWith(p);
            if (n == 0) {
                continue;
            }
            checkSettled(s, p);
            long len = PartChecksumsFlyweight.length(n);
            try (ControlBuffers.Lease lease = s.controlBuffer(len)) {
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
            checkSettled(s, p);
            Connection conn = s.peerConnectionOf(p);
            int peerRank = s.targets().peerRanks().get(p);
            long len = PartChecksumsFlyweight.length(n);
            try (ControlBuffers.Lease lease = s.controlBuffer(len)) {
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
