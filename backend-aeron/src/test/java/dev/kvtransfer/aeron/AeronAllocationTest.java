package dev.kvtransfer.aeron;

import dev.kvtransfer.api.transport.Connection;
import dev.kvtransfer.api.transport.ConnectionManager;
import dev.kvtransfer.api.transport.TransportConfig;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.lang.management.ManagementFactory;
import java.time.Duration;
import java.util.HashMap;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * Heap garbage of the data path is per message, not per byte or chunk: the bytes allocated by every thread this
 * test runs on or starts (callers, receive agents, drivers) per 16 MiB message (16 DATA chunks, 512 frames) stay
 * within the small constant of a few bookkeeping objects. Threads that were alive before it started (other test
 * classes' leftovers in the same JVM, closing their managers), and transceiver and common-pool threads started
 * meanwhile, are not counted: their allocation is not this path's.
 */
@Timeout(value = 60, unit = TimeUnit.SECONDS)
class AeronAllocationTest {
    @Test
    void largeMessagesAllocateAConstantFewHundredBytesEach() throws Exception {
        Assumptions.assumeTrue(ManagementFactory.getThreadMXBean() instanceof com.sun.management.ThreadMXBean,
                "needs com.sun.management.ThreadMXBean to count allocated bytes; this JVM has none");
        com.sun.management.ThreadMXBean tmx = (com.sun.management.ThreadMXBean) ManagementFactory.getThreadMXBean();
        java.util.Set<Long> earlier = new java.util.HashSet<>(allocatedByThread(tmx).keySet());
        earlier.remove(Thread.currentThread().getId());
        java.util.concurrent.ExecutorService senderThread = java.util.concurrent.Executors.newSingleThreadExecutor();
        long size = 16L << 20;
        int n = 40;
        Duration t = Duration.ofSeconds(30);
        AeronTransportProvider p = new AeronTransportProvider();
        try (ConnectionManager a = p.create(TransportConfig.builder().name("alloc-a").defaultTimeout(t).build());
             ConnectionManager b = p.create(TransportConfig.builder().name("alloc-b").defaultTimeout(t).build());
             OffHeapBuffer src = OffHeapBuffer.allocate(size);
             OffHeapBuffer dst = OffHeapBuffer.allocate(size)) {
            TestPattern.fill(src, 0, size, 9);
            Connection ab = a.connection(b.localAddress());
            CompletableFuture<Void> sender = CompletableFuture.runAsync(() -> {
                for (int i = 0; i < 8 * n; i++) {
                    ab.send(5000, src, 0, size);
                }
            }, senderThread); // a thread of its own, started after the snapshot: its allocation counts
            Connection ba = b.recvConnect(5000, dst, 0, size);
            // Warm-up (JIT, lazily created state): longer than the JIT needs on a loaded 2-core host, where compiled
            // code without allocations came late and every window still counted the interpreter's garbage.
            for (int i = 1; i < 3 * n; i++) {
                ba.recv(5000, dst, 0, size);
            }
            // Five windows of n messages; the least one counts: what other threads of this JVM (other test
            // classes' leftovers, JMX, the JIT's Java threads) allocate meanwhile only ever adds.
            long bytes = Long.MAX_VALUE;
            for (int w = 0; w < 5; w++) {
                Map<Long, Long> before = allocatedByThread(tmx);
                for (int i = 0; i < n; i++) {
                    ba.recv(5000, dst, 0, size);
                }
                Map<Long, Long> after = allocatedByThread(tmx);
                long window = 0;
                for (Map.Entry<Long, Long> e : before.entrySet()) {
                    if (earlier.contains(e.getKey()) || notThisPath(tmx, e.getKey())) {
                        continue;
                    }
                    Long v = after.get(e.getKey());
                    if (v != null) {
                        window += v - e.getValue();
                    }
                }
                bytes = Math.min(bytes, window);
            }
            sender.get(60, TimeUnit.SECONDS);
            TestPattern.assertPattern(dst, 0, size, 9);
            double perMessage = (double) bytes / n;
            System.out.printf("allocated per %d B message, all threads: %.0f B%n", size, perMessage);
            assertThat(perMessage).as("bytes allocated per 16 MiB message").isLessThan(4096);
        } finally {
            senderThread.shutdownNow();
        }
    }

    /**
     * Threads that other test classes' leftovers start after the snapshot: a transceiver's pools ({@code kvt-…}, their
     * request, info and sender threads time out and start again) and the common pool. A fresh clone's full run
     * once counted about 200 KB per window from them.
     */
    private static boolean notThisPath(com.sun.management.ThreadMXBean tmx, long id) {
        java.lang.management.ThreadInfo info = tmx.getThreadInfo(id);
        String name = info == null ? "" : info.getThreadName();
        return name.startsWith("kvt-") || name.startsWith("ForkJoinPool");
    }

    private static Map<Long, Long> allocatedByThread(com.sun.management.ThreadMXBean tmx) {
        Map<Long, Long> m = new HashMap<>();
        for (long id : tmx.getAllThreadIds()) {
            long v = tmx.getThreadAllocatedBytes(id);
            if (v >= 0) {
                m.put(id, v);
            }
        }
        return m;
    }
}
