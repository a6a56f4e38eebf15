package dev.kvtransfer.core.transfer;

import java.util.Arrays;

/**
 * A FIFO of (long, long) pairs in one growing ring of longs: what an {@code ArrayDeque<long[]>} held, without an
 * array per element (the context side queued one per request header, issue 14 item 3). Not thread-safe: the owner
 * synchronizes.
 */
final class LongPairQueue {
    private long[] ring = new long[16];
    private int head;
    private int size;

    /** @return pairs queued */
    int size() {
        return size;
    }

    /** @return whether none is queued */
    boolean isEmpty() {
        return size == 0;
    }

    /** Drops every pair. */
    void clear() {
        head = 0;
        size = 0;
    }

    /**
     * Appends a pair.
     *
     * @param a first value
     * @param b second value
     */
    void add(long a, long b) {
        int pairs = ring.length / 2;
        if (size == pairs) {
            long[] grown = new long[ring.length * 2];
            for (int i = 0; i < size; i++) {
                int from = 2 * ((head + i) % pairs);
                grown[2 * i] = ring[from];
                grown[2 * i + 1] = ring[from + 1];
            }
            ring = grown;
            head = 0;
            pairs = ring.length / 2;
        }
        int at = 2 * ((head + size) % pairs);
        ring[at] = a;
        ring[at + 1] = b;
        size++;
    }

    /**
     * Puts a pair back in front, as the oldest (a read that must be tried again later keeps its place).
     *
     * @param a first value
     * @param b second value
     */
    void addFirst(long a, long b) {
        add(a, b);
        // Rotate the new last pair to the front: move head back one and copy the pair there.
        int pairs = ring.length / 2;
        int last = 2 * ((head + size - 1) % pairs);
        long la = ring[last];
        long lb = ring[last + 1];
        for (int i = size - 1; i > 0; i--) {
            int to = 2 * ((head + i) % pairs);
            int from = 2 * ((head + i - 1) % pairs);
            ring[to] = ring[from];
            ring[to + 1] = ring[from + 1];
        }
        ring[2 * head] = la;
        ring[2 * head + 1] = lb;
    }

    /** @return the first value of the oldest pair (the queue must not be empty) */
    long firstA() {
        check();
        return ring[2 * head];
    }

    /** @return the second value of the oldest pair (the queue must not be empty) */
    long firstB() {
        check();
        return ring[2 * head + 1];
    }

    /** Drops the oldest pair (the queue must not be empty). */
    void removeFirst() {
        check();
        head = (head + 1) % (ring.length / 2);
        size--;
    }

    /**
     * Removes every pair whose first value is {@code a}, keeping the order of the others.
     *
     * @param a the first value
     * @return whether one was removed
     */
    boolean removeFirstValue(long a) {
        int pairs = ring.length / 2;
        int kept = 0;
        long[] out = null;
        boolean removed = false;
        for (int i = 0; i < size; i++) {
            int from = 2 * ((head + i) % pairs);
            if (ring[from] == a) {
                removed = true;
                continue;
            }
            if (out == null) {
                out = new long[ring.length];
            }
            out[2 * kept] = ring[from];
            out[2 * kept + 1] = ring[from + 1];
            kept++;
        }
        if (removed) {
            ring = out == null ? new long[ring.length] : out;
            head = 0;
            size = kept;
        }
        return removed;
    }

    private void check() {
        if (size == 0) {
            throw new java.util.NoSuchElementException("empty");
        }
    }

    @Override
    public String toString() {
        return "LongPairQueue{" + size + " pairs, ring " + Arrays.toString(ring) + "}";
    }
}
