package dev.kvtransfer.core.transfer;

import dev.kvtransfer.api.transport.Tags;

import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
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
    private final Set<Integer> inUse = ConcurrentHashMap.newKeySet();

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
            if (inUse.add(tag)) {
                return tag;
            }
        }
    }

    /** @param tag a tag from {@link #acquire()} that its request no longer uses */
    public void release(int tag) {
        inUse.remove(tag);
    }

    /** @return tags held now */
    public int inUse() {
        return inUse.size();
    }
}
