package dev.kvtransfer.core.memory;

import java.util.concurrent.atomic.AtomicLong;

/**
 * JVM-wide counts of what core hands out and must get back: host buffers, staging pools and the slots held in
 * them, transceivers. Tests (the testkit's leak extension) compare them before and after a test class, so a
 * leak fails the class that leaked, whoever forgot to close. Counting costs one atomic add per event.
 */
public final class LiveResources {
    private static final AtomicLong BUFFERS = new AtomicLong();
    private static final AtomicLong POOLS = new AtomicLong();
    private static final AtomicLong SLOTS = new AtomicLong();
    private static final AtomicLong TRANSCEIVERS = new AtomicLong();

    private LiveResources() {
    }

    /** @return host buffers allocated by any {@link HostBufferManager} and not closed */
    public static long buffers() {
        return BUFFERS.get();
    }

    /** @return staging pools created and not closed */
    public static long pools() {
        return POOLS.get();
    }

    /** @return staging slots taken and not given back */
    public static long slots() {
        return SLOTS.get();
    }

    /** @return transceivers created and not closed */
    public static long transceivers() {
        return TRANSCEIVERS.get();
    }

    /** @return a one-line snapshot */
    public static String snapshot() {
        return "buffers=" + buffers() + " pools=" + pools() + " slots=" + slots() + " transceivers=" + transceivers();
    }

    /**
     * Internal: a resource was handed out (+1) or given back (-1).
     *
     * @param kind  0 buffer, 1 pool, 2 slot, 3 transceiver
     * @param delta +1 or -1
     */
    public static void count(int kind, int delta) {
        switch (kind) {
            case 0 -> BUFFERS.addAndGet(delta);
            case 1 -> POOLS.addAndGet(delta);
            case 2 -> SLOTS.addAndGet(delta);
            case 3 -> TRANSCEIVERS.addAndGet(delta);
            default -> throw new IllegalArgumentException("kind " + kind);
        }
    }
}
