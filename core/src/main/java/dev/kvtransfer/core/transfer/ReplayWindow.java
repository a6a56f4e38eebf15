package dev.kvtransfer.core.transfer;

/**
 * The nonces seen within the replay window, each with its expiry: an open-addressing table of primitives (linear
 * probing), so remembering a nonce allocates nothing (a {@code ConcurrentHashMap<Nonce, Long>} made a key record,
 * a boxed expiry and a node per request). A nonce is kept until a purge finds its expiry passed,
 * exactly as before: purges run at most once a second and delete in place (backward-shift deletion, the scan
 * started after an empty slot so no probe run wraps across it), so they allocate nothing either; the table only
 * grows (doubling at half full). Thread-safe: one lock, held for a probe or a purge.
 */
final class ReplayWindow {
    private long[] keys = new long[2 * 1024]; // (high, low) per slot
    private long[] expiry = new long[1024]; // 0 = empty slot
    private int size;
    private long nextPurge;

    /** @return nonces remembered */
    synchronized int size() {
        return size;
    }

    /**
     * Remembers a nonce unless it is remembered already.
     *
     * @param high    its first 8 bytes
     * @param low     its last 8 bytes
     * @param expires when it may be forgotten (epoch ms, positive)
     * @return true when it was new
     */
    synchronized boolean addIfAbsent(long high, long low, long expires) {
        if (expires <= 0) {
            throw new IllegalArgumentException("expires = " + expires + ": must be positive");
        }
        if (2 * (size + 1) > expiry.length) {
            grow();
        }
        int mask = expiry.length - 1;
        int i = slot(high, low, mask);
        while (expiry[i] != 0) {
            if (keys[2 * i] == high && keys[2 * i + 1] == low) {
                return false;
            }
            i = (i + 1) & mask;
        }
        keys[2 * i] = high;
        keys[2 * i + 1] = low;
        expiry[i] = expires;
        size++;
        return true;
    }

    /**
     * @param high its first 8 bytes
     * @param low  its last 8 bytes
     * @return whether the nonce is remembered
     */
    synchronized boolean contains(long high, long low) {
        int mask = expiry.length - 1;
        for (int i = slot(high, low, mask); expiry[i] != 0; i = (i + 1) & mask) {
            if (keys[2 * i] == high && keys[2 * i + 1] == low) {
                return true;
            }
        }
        return false;
    }

    /**
     * Forgets every nonce whose expiry is before {@code now}, at most once a second (earlier calls return at once).
     *
     * @param now epoch ms
     */
    synchronized void purge(long now) {
        if (now < nextPurge) {
            return;
        }
        nextPurge = now + 1_000;
        purgeNow(now);
    }

    /** {@link #purge} without the once-a-second limit. */
    synchronized void purgeNow(long now) {
        if (size == 0) {
            return;
        }
        int n = expiry.length;
        int mask = n - 1;
        int empty = 0;
        while (expiry[empty] != 0) {
            empty++; // exists: the table is at most half full
        }
        // Scan every slot once, starting after an empty one: no probe run crosses the start, so an entry moved back
        // by a deletion always comes from a slot not scanned yet, and the slot is looked at again.
        int i = (empty + 1) & mask;
        for (int scanned = 0; scanned < n; ) {
            if (expiry[i] != 0 && expiry[i] < now) {
                delete(i, mask);
                continue; // slot i may hold an entry moved back: look again
            }
            i = (i + 1) & mask;
            scanned++;
        }
    }

    /** Deletes slot {@code hole} and moves later entries of its probe run back (Knuth's algorithm R). */
    private void delete(int hole, int mask) {
        int j = hole;
        while (true) {
            j = (j + 1) & mask;
            if (expiry[j] == 0) {
                break;
            }
            int home = slot(keys[2 * j], keys[2 * j + 1], mask);
            // The entry at j may move to the hole unless its home lies cyclically in (hole, j].
            boolean stays = hole <= j ? hole < home && home <= j : hole < home || home <= j;
            if (!stays) {
                keys[2 * hole] = keys[2 * j];
                keys[2 * hole + 1] = keys[2 * j + 1];
                expiry[hole] = expiry[j];
                hole = j;
            }
        }
        expiry[hole] = 0;
        keys[2 * hole] = 0;
        keys[2 * hole + 1] = 0;
        size--;
    }

    private void grow() {
        long[] oldKeys = keys;
        long[] oldExpiry = expiry;
        keys = new long[oldKeys.length * 2];
        expiry = new long[oldExpiry.length * 2];
        int mask = expiry.length - 1;
        for (int s = 0; s < oldExpiry.length; s++) {
            if (oldExpiry[s] == 0) {
                continue;
            }
            int i = slot(oldKeys[2 * s], oldKeys[2 * s + 1], mask);
            while (expiry[i] != 0) {
                i = (i + 1) & mask;
            }
            keys[2 * i] = oldKeys[2 * s];
            keys[2 * i + 1] = oldKeys[2 * s + 1];
            expiry[i] = oldExpiry[s];
        }
    }

    private static int slot(long high, long low, int mask) {
        long h = high * 0x9E3779B97F4A7C15L ^ low * 0xC2B2AE3D27D4EB4FL;
        h ^= h >>> 31;
        return (int) h & mask;
    }
}
