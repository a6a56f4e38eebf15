package dev.kvtransfer.core.transfer;

import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.core.CopyLedger;

/**
 * The copy ledger of one session while its bytes move ({@link CopyLedger}): per peer, so each peer's entries are
 * touched only by that peer's thread ({@code forEachPeer} gives each peer one), plus the staging buffers the session
 * handed out, by which a message is known to have been gathered or to be scattered.
 */
final class SessionLedger {
    private final long[] staged;
    private final long[] transport;
    private final long[] unknown;
    private final long[] checksummed;
    /** The staging buffers handed out, copy-on-write (appended under the session's lock). */
    private volatile MemoryBuffer[] staging = new MemoryBuffer[0];

    SessionLedger(int peers) {
        staged = new long[peers];
        transport = new long[peers];
        unknown = new long[peers];
        checksummed = new long[peers];
    }

    /** Staging buffers the session just carved (called under the session's lock). */
    void staging(MemoryBuffer[] carved) {
        MemoryBuffer[] all = java.util.Arrays.copyOf(staging, staging.length + carved.length);
        System.arraycopy(carved, 0, all, staging.length, carved.length);
        staging = all;
    }

    /** @return whether {@code b} lies in a staging buffer of the session (its bytes were, or will be, copied) */
    private boolean isStaging(MemoryBuffer b) {
        long a = b.address();
        for (MemoryBuffer s : staging) {
            if (s.kind() == b.kind() && a >= s.address() && a < s.address() + Math.max(1, s.size())) {
                return true;
            }
        }
        return false;
    }

    /** {@code n} bytes moved with a peer from or into {@code b}; {@code passes} as the connection declared them. */
    void moved(int peer, MemoryBuffer b, long n, int passes) {
        if (isStaging(b)) {
            staged[peer] += n;
        }
        if (passes >= 0) {
            transport[peer] += n * passes;
        } else {
            unknown[peer] += n;
        }
    }

    /** A CRC32C ran over {@code n} bytes moved with a peer. */
    void checksummed(int peer, long n) {
        checksummed[peer] += n;
    }

    /** @return the ledger of {@code bytes} moved, read once the session moved everything */
    CopyLedger total(long bytes) {
        long s = 0;
        long t = 0;
        long u = 0;
        long c = 0;
        for (int i = 0; i < staged.length; i++) {
            s += staged[i];
            t += transport[i];
            u += unknown[i];
            c += checksummed[i];
        }
        return new CopyLedger(bytes, s, t, u, c);
    }
}
