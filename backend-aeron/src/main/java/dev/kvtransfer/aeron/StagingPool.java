package dev.kvtransfer.aeron;

import org.agrona.UnsafeApi;

/**
 * Off-heap staging for early eager messages, by power-of-two size class (256 B .. 1 MiB), and the
 * {@link Peer.Arrival} records that describe them: both reused, so a steady stream of messages that arrive before
 * their receive allocates nothing. At most {@code maxPooledBytes} of staging is kept for reuse; the rest goes back
 * to the allocator. Agent thread only.
 */
final class StagingPool {
    private static final int MIN_SHIFT = 8;
    private static final int MAX_SHIFT = 20;

    private final long[][] free = new long[MAX_SHIFT - MIN_SHIFT + 1][];
    private final int[] freeCount = new int[MAX_SHIFT - MIN_SHIFT + 1];
    private final long maxPooledBytes;
    private long pooledBytes;
    private Peer.Arrival[] arrivals = new Peer.Arrival[64];
    private int arrivalCount;
    private long outstandingBytes;

    StagingPool(long maxPooledBytes) {
        this.maxPooledBytes = maxPooledBytes;
        for (int i = 0; i < free.length; i++) {
            free[i] = new long[8];
        }
    }

    /** @return the staging capacity a message of this length uses (0 for an empty message) */
    static int capacityFor(long length) {
        if (length == 0) {
            return 0;
        }
        int shift = Math.max(MIN_SHIFT, 64 - Long.numberOfLeadingZeros(length - 1));
        if (shift > MAX_SHIFT) {
            throw new IllegalArgumentException("staging of " + length + " B exceeds 1 MiB");
        }
        return 1 << shift;
    }

    /** Takes an arrival record with staging for {@code length} bytes. */
    Peer.Arrival take(int type, long seq, long length, long stamp) {
        Peer.Arrival a = arrivalCount > 0 ? arrivals[--arrivalCount] : new Peer.Arrival();
        a.type = type;
        a.seq = seq;
        a.length = length;
        a.stamp = stamp;
        int cap = type == Wire.EAGER ? capacityFor(length) : 0;
        a.capacity = cap;
        a.staging = cap == 0 ? 0 : allocate(cap);
        return a;
    }

    /** Returns an arrival and its staging. */
    void give(Peer.Arrival a) {
        if (a.staging != 0) {
            release(a.staging, a.capacity);
            a.staging = 0;
            a.capacity = 0;
        }
        if (arrivalCount == arrivals.length) {
            if (arrivals.length >= 65_536) {
                return;
            }
            arrivals = java.util.Arrays.copyOf(arrivals, arrivals.length * 2);
        }
        arrivals[arrivalCount++] = a;
    }

    private long allocate(int capacity) {
        int c = Integer.numberOfTrailingZeros(capacity) - MIN_SHIFT;
        outstandingBytes += capacity;
        if (freeCount[c] > 0) {
            pooledBytes -= capacity;
            return free[c][--freeCount[c]];
        }
        return UnsafeApi.allocateMemory(capacity);
    }

    private void release(long address, int capacity) {
        int c = Integer.numberOfTrailingZeros(capacity) - MIN_SHIFT;
        outstandingBytes -= capacity;
        if (pooledBytes + capacity > maxPooledBytes) {
            UnsafeApi.freeMemory(address);
            return;
        }
        if (freeCount[c] == free[c].length) {
            free[c] = java.util.Arrays.copyOf(free[c], free[c].length * 2);
        }
        free[c][freeCount[c]++] = address;
        pooledBytes += capacity;
    }

    /** @return staging bytes handed out and not returned */
    long outstandingBytes() {
        return outstandingBytes;
    }

    /** Frees everything pooled (outstanding staging must have been given back first). */
    void close() {
        for (int c = 0; c < free.length; c++) {
            for (int i = 0; i < freeCount[c]; i++) {
                UnsafeApi.freeMemory(free[c][i]);
            }
            freeCount[c] = 0;
        }
        pooledBytes = 0;
        arrivalCount = 0;
    }
}
