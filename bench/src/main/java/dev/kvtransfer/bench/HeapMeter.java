package dev.kvtransfer.bench;

import java.lang.management.ManagementFactory;
import java.util.HashMap;
import java.util.Map;

/**
 * Heap bytes allocated by every thread of this JVM between {@link #start()} and {@link #stop()}
 * ({@code com.sun.management.ThreadMXBean#getThreadAllocatedBytes}, per thread id: threads started in between count
 * from zero; what a thread allocated before it ended inside the interval is lost, so the figure is a lower bound
 * when threads come and go). The meter's own snapshots cost a few hundred bytes, once per interval.
 */
public final class HeapMeter {
    private static final com.sun.management.ThreadMXBean THREADS = threads();
    private Map<Long, Long> before;

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

    /** Takes the starting snapshot. */
    public void start() {
        before = snapshot();
    }

    /** @return bytes allocated by all threads since {@link #start()}, or -1 when unsupported */
    public long stop() {
        if (THREADS == null || before == null) {
            return -1;
        }
        Map<Long, Long> after = snapshot();
        long sum = 0;
        for (Map.Entry<Long, Long> e : after.entrySet()) {
            sum += Math.max(0, e.getValue() - before.getOrDefault(e.getKey(), 0L));
        }
        return sum;
    }

    private static Map<Long, Long> snapshot() {
        if (THREADS == null) {
            return Map.of();
        }
        long[] ids = THREADS.getAllThreadIds();
        long[] bytes = THREADS.getThreadAllocatedBytes(ids);
        Map<Long, Long> m = new HashMap<>(ids.length * 2);
        for (int i = 0; i < ids.length; i++) {
            if (bytes[i] >= 0) {
                m.put(ids[i], bytes[i]);
            }
        }
        return m;
    }
}
