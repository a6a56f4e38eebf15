package dev.kvtransfer.testkit;

import dev.kvtransfer.core.memory.HostBufferManager;
import org.awaitility.Awaitility;
import org.awaitility.core.ConditionTimeoutException;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.stream.Collectors;

/**
 * Leak checks for tests: threads that outlive what started them, and host buffers never closed.
 *
 * <p>Threads are compared by identity, not name (names repeat). Threads of the test harness itself (JUnit,
 * Awaitility, the common fork-join pool, the JVM's own) are ignored; callers may ignore more prefixes.
 */
public final class LeakChecks {
    /** Name prefixes of threads that are not the code under test's. */
    public static final List<String> HARNESS_THREAD_PREFIXES = List.of("awaitility", "ForkJoinPool.commonPool",
            "junit", "surefire", "Attach Listener", "process reaper", "Common-Cleaner", "Reference Handler",
            "Finalizer", "Signal Dispatcher", "Notification Thread", "Cleaner-", "Timer-");

    private LeakChecks() {
    }

    /** @return the live threads now */
    public static Set<Thread> liveThreads() {
        return Thread.getAllStackTraces().keySet();
    }

    /**
     * Waits (bounded) until every live thread not in {@code before} and not ignored has ended.
     *
     * @param before         {@link #liveThreads()} taken before the code under test started
     * @param bound          how long the threads may take to end
     * @param ignoredPrefixes further thread-name prefixes to ignore
     * @throws AssertionError naming the leaked threads and where each one is
     */
    public static void assertNoNewThreads(Set<Thread> before, Duration bound, String... ignoredPrefixes) {
        List<String> ignored = new ArrayList<>(HARNESS_THREAD_PREFIXES);
        ignored.addAll(Arrays.asList(ignoredPrefixes));
        try {
            Awaitility.await("threads started by the code under test to end").atMost(bound)
                    .pollInSameThread().pollInterval(Duration.ofMillis(20))
                    .until(() -> leaked(before, ignored).isEmpty());
        } catch (ConditionTimeoutException e) {
            Map<String, String> where = new TreeMap<>();
            for (Thread t : leaked(before, ignored)) {
                StackTraceElement[] st = t.getStackTrace();
                where.put(t.getName() + " (id " + t.getId() + ", " + t.getState() + ")",
                        Arrays.stream(st).limit(6).map(String::valueOf).collect(Collectors.joining(" <- ")));
            }
            throw new AssertionError("threads still alive " + bound + " after close: " + where);
        }
    }

    private static List<Thread> leaked(Set<Thread> before, List<String> ignored) {
        List<Thread> out = new ArrayList<>();
        for (Thread t : liveThreads()) {
            if (!t.isAlive() || before.contains(t) || t == Thread.currentThread()) {
                continue;
            }
            String n = t.getName();
            if (ignored.stream().noneMatch(n::startsWith)) {
                out.add(t);
            }
        }
        return out;
    }

    /**
     * Fails when a host buffer manager still has buffers open.
     *
     * @param buffers the manager
     * @throws AssertionError listing the outstanding buffers
     */
    public static void assertNoOutstandingBuffers(HostBufferManager buffers) {
        if (buffers.outstandingBuffers() != 0) {
            throw new AssertionError(buffers.outstandingBuffers() + " host buffer(s), " + buffers.outstandingBytes()
                    + " bytes, still open:\n" + buffers.describeOutstanding());
        }
    }
}
