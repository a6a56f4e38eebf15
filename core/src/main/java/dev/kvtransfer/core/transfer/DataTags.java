package dev.kvtransfer.core.transfer;

import dev.kvtransfer.api.transport.Tags;

import java.util.concurrent.atomic.AtomicLong;

/**
 * Hands out per-transfer data tags of one generation rank: unique among its in-flight requests, and, because
 * the counter only moves forward through the ~2^31 tags of {@code [FIRST_DATA_TAG, Integer.MAX_VALUE]}, a tag
 * is reused only after two billion requests, so late messages of an abandoned (timed-out) transfer never reach
 * a new one.
 */
public final class DataTags {
    private static final long SPAN = (long) Integer.MAX_VALUE - Tags.FIRST_DATA_TAG + 1;

    private final AtomicLong next;
    /** Tags in use: an open-addressing set of ints (no boxing), guarded by itself; 0 marks a free cell. */
    private final IntSet inUse = new IntSet();

    /** Tags from the first data tag on. */
    public DataTags() {
        this(0);
    }

    /**
     * Tags from a starting point (random with authentication, so the next tag cannot be guessed).
     *
     * @param start where the counter starts, any value
     */
    public DataTags(long start) {
        this.next = new AtomicLong(start);
    }

    /** @return a tag no in-flight request of this rank holds */
    public int acquire() {
        while (true) {
            int tag = (int) (Tags.FIRST_DATA_TAG + Math.floorMod(next.getAndIncrement(), SPAN));
            boolean added;
            synchronized (inUse) {
                added = inUse.add(tag);
            }
            if (added) {
                return tag;
            }
        }
    }

    /** @param tag a tag from {@link #acquire()} that its request no longer uses */
    public void release(int tag) {
        synchronized (inUse) {
            inUse.remove(tag);
        }
    }

    /** @return tags held now */
    public int inUse() {
        synchronized (inUse) {
            return inUse.size;
        }
    }

    /**
     * Linear probing, backward-shift deletion; grows at half full. Tags are never 0 ({@code >= FIRST_DATA_TAG}).
     * Not thread-safe (the caller holds its monitor).
     */
    private static final class IntSet {
        private int[] cells = new int[64];
        private int size;

        private static int mix(int v) {
            int h = v * 0x9E3779B9;
            return h ^ (h >>> 16);
        }

        boolean add(int v) {
            int mask = cells.length - 1;
            int i = mix(v) & mask;
            while (cells[i] != 0) {
                if (cells[i] == v) {
                    return false;
                }
                i = (i + 1) & mask;
            }
            cells[i] = v;
            if (++size * 2 > cells.length) {
                grow();
            }
            return true;
        }

        void remove(int v) {
            int mask = cells.length - 1;
            int i = mix(v) & mask;
            while (cells[i] != v) {
                if (cells[i] == 0) {
                    return;
                }
                i = (i + 1) & mask;
            }
            cells[i] = 0;
            size--;
            // Shift later cells of the run back so every lookup still finds them.
            int j = i;
            while (true) {
                j = (j + 1) & mask;
                int c = cells[j];
                if (c == 0) {
                    return;
                }
                int home = mix(c) & mask;
                // c may move to the hole at i when its home is not within (i, j] (cyclically).
                if (i <= j ? (home <= i || home > j) : (home <= i && home > j)) {
                    cells[i] = c;
                    cells[j] = 0;
                    i = j;
                }
            }
        }

        private void grow() {
            int[] old = cells;
            cells = new int[old.length * 2];
            size = 0;
            for (int c : old) {
                if (c != 0) {
                    add(c);
                }
            }
        }
    }
}
