package dev.kvtransfer.bench;

import java.lang.management.ManagementFactory;

/**
 * Heap bytes allocated by every thread of this JVM between {@link #start()} and {@link #stop()}
 * ({@code com.sun.management.ThreadMXBean#getThreadAllocatedBytes}, per thread id: threads started in between count
 * from zero; what a thread allocated before it ended inside the interval is lost, so the figure is a lower bound
 * when threads come and go).
 *
 * <p>The meter does not count itself: the snapshots are two plain {@code long[]} (no map, no boxing), and what the
 * measuring thread allocates inside {@link #stop()} (the JDK's id and result arrays) is taken out by reading that
 * thread's own counter, which allocates nothing, before the snapshot. So an interval in which nothing else
 * allocates measures 0 ({@code UnitsTest.heapMeterDoesNotCountItself}); before this the meter's own
 * {@code HashMap} snapshots were 3–4 KB of every one-request control window.
 */
public final class HeapMeter {
    private static final com.sun.management.ThreadMXBean THREADS = threads();
    private long[] ids;
    private long[] bytes;
    private long selfId;
    private long selfAtStart;

    private static com.sun.management.ThreadMXBean threads() {
        java.lang.management.ThreadMXBean t = ManagementFactory.getThreadMXBean();
        if (t instanceof com.sun.management.ThreadMXBean s && s.isThreadAllocatedMemorySupported()) {
            if (!s.isThreadAllocatedMemoryEnabled()) {
                s.setThreadAllocatedMemoryEnabled(true);
            }
            return s;
        }
        return null;
    }

    /** @return whether this JVM reports allocated bytes per thread */
    public static boolean supported() {
        return THREADS != null;
    }

    /** @return bytes this thread allocated so far (allocates nothing), or -1 when unsupported */
    public static long currentThreadAllocated() {
        return THREADS == null ? -1 : THREADS.getCurrentThreadAllocatedBytes();
    }

    /** Takes the starting snapshot. */
    public void start() {
        if (THREADS == null) {
            return;
        }
        selfId = Thread.currentThread().getId();
        ids = THREADS.getAllThreadIds();
        bytes = THREADS.getThreadAllocatedBytes(ids);
        // Last: everything the snapshot itself allocated on this thread is before this reading.
        selfAtStart = THREADS.getCurrentThreadAllocatedBytes();
    }

    /** @return bytes allocated by all threads since {@link #start()}, or -1 when unsupported */
    public long stop() {
        if (THREADS == null || ids == null) {
            return -1;
        }
        // First: this thread's counter before the snapshot arrays below are allocated.
        long selfNow = THREADS.getCurrentThreadAllocatedBytes();
        long[] afterIds = THREADS.getAllThreadIds();
        long[] after = THREADS.getThreadAllocatedBytes(afterIds);
        long sum = 0;
        for (int i = 0; i < afterIds.length; i++) {
            if (after[i] < 0) {
                continue;
            }
            long id = afterIds[i];
            if (id == selfId && Thread.currentThread().getId() == selfId) {
                sum += Math.max(0, selfNow - selfAtStart);
                continue;
            }
            long was = 0;
            for (int j = 0; j < ids.length; j++) {
                if (ids[j] == id) {
                    was = Math.max(0, bytes[j]);
                    break;
                }
            }
            sum += Math.max(0, after[i] - was);
        }
        return sum;
    }
}
