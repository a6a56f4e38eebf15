package dev.kvtransfer.core.transfer;

import java.util.Arrays;

/**
 * A FIFO of (long, long) pairs in one growing ring of longs: what an {@code ArrayDeque<long[]>} held, without an
 * array per element (the context side queued one per request header). Not thread-safe: the owner
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
