package dev.kvtransfer.testkit;

import dev.kvtransfer.api.memory.BufferManager;
import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.memory.MemoryKind;
import dev.kvtransfer.api.transport.ConnectionManager;
import dev.kvtransfer.api.transport.TransportConfig;
import dev.kvtransfer.api.transport.TransportProvider;
import dev.kvtransfer.core.memory.HostBufferManager;
import dev.kvtransfer.core.memory.MemoryAccess;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.fail;

/**
 * The fixture of the transport suite ({@link TransportConformanceTest}): the hooks a backend overrides, managers
 * and host buffers closed and leak-checked after each rule, test threads, and the byte pattern every payload
 * carries. The rules are split by family over {@link TransportDeliveryRules}, {@link TransportLifecycleRules} and
 * {@link TransportConformanceTest} (one-sided writes), each extending the one before, as Netty's testsuite splits
 * its socket tests; a backend extends only {@link TransportConformanceTest}.
 */
@RuleBound(seconds = 180, suiteSeconds = 420)
@org.junit.jupiter.api.extension.ExtendWith(LeakCheckExtension.class)
public abstract class TransportSuiteSupport {
    /** Largest message the suite expects to complete before the receiver posts (control messages). */
    protected static final int EAGER_BYTES = 4096;

    private static final long SEED_MULT = 0x9E3779B97F4A7C15L;

    private final List<ConnectionManager> managers = new ArrayList<>();
    private final List<MemoryBuffer> buffers = java.util.Collections.synchronizedList(new ArrayList<>());
    protected final List<ExecutorService> executors = new ArrayList<>();
    private HostBufferManager memory;
    private int managerCount;

    /** @return the transport under test */
    protected abstract TransportProvider provider();

    /**
     * The configuration of the {@code n}-th manager a test creates. Override to set ports or properties.
     *
     * @param name a name unique within the test, e.g. {@code "conformance-1"}
     * @return the configuration
     */
    protected TransportConfig config(String name) {
        return TransportConfig.builder().name(name).defaultTimeout(Duration.ofSeconds(30)).build();
    }

    /** @return how soon a blocked receive must fail once its peer is gone (PEER_FAILURE_DETECTION) */
    protected Duration peerLossBound() {
        return Duration.ofSeconds(10);
    }

    /** @return how late past its deadline a receive may report TIMEOUT */
    protected Duration timeoutSlack() {
        return Duration.ofSeconds(3);
    }

    /** @return how long a closed manager's threads may take to end */
    protected Duration threadEndBound() {
        return Duration.ofSeconds(15);
    }

    /**
     * Device memory for the DEVICE_MEMORY rules, for providers that declare it.
     *
     * @return a manager allocating {@link MemoryKind#DEVICE}, or {@code null} when this machine has no device
     *         (the device rule is then skipped, saying so)
     */
    protected BufferManager deviceBufferManager() {
        return null;
    }

    /** @return the largest message size the suite sends (64 MiB) */
    protected long largestMessage() {
        return 64L << 20;
    }

    @BeforeEach
    void setUpConformance() {
        memory = new HostBufferManager();
    }

    @AfterEach
    void tearDownConformance() {
        for (ExecutorService e : executors) {
            e.shutdownNow();
        }
        for (ConnectionManager m : managers) {
            m.close();
        }
        for (ExecutorService e : executors) {
            try {
                assertThat(e.awaitTermination(30, TimeUnit.SECONDS)).as("test threads ended").isTrue();
            } catch (InterruptedException ie) {
                Thread.currentThread().interrupt();
            }
        }
        synchronized (buffers) {
            for (MemoryBuffer b : buffers) {
                b.close();
            }
        }
        LeakChecks.assertNoOutstandingBuffers(memory);
        memory.close();
    }

    /**
     * Creates a manager closed after the test.
     *
     * @return a running manager
     */
    protected final ConnectionManager newManager() {
        return newManager(b -> { });
    }

    /**
     * Creates a manager from {@link #config} changed by {@code change}, closed after the test.
     *
     * @param change adjusts the configuration (e.g. a short default timeout, an error handler)
     * @return a running manager
     */
    protected final ConnectionManager newManager(java.util.function.Consumer<TransportConfig.Builder> change) {
        TransportConfig.Builder b = config("conformance-" + (++managerCount)).toBuilder();
        change.accept(b);
        ConnectionManager m = provider().create(b.build());
        managers.add(m);
        assertThat(m.isRunning()).as("a new manager runs").isTrue();
        return m;
    }

    /**
     * A host buffer closed after the test.
     *
     * @param bytes size
     * @return the buffer
     */
    protected final MemoryBuffer buffer(long bytes) {
        MemoryBuffer b = memory.allocate(bytes, MemoryKind.HOST);
        buffers.add(b);
        return b;
    }

    protected final ExecutorService threads(int n) {
        ExecutorService e = Executors.newFixedThreadPool(n, r -> {
            Thread t = new Thread(r, "conformance-test-" + executors.size());
            t.setDaemon(true);
            return t;
        });
        executors.add(e);
        return e;
    }

    /**
     * Gives threads that were started to block a bounded chance to park in the call under test, so that a
     * close really interrupts a wait (a transport that busy-polls never parks: then this returns after 2 s and
     * the close still has to wake it).
     */
    protected static void awaitParked(List<Thread> threads) {
        try {
            org.awaitility.Awaitility.await().pollInSameThread().pollInterval(Duration.ofMillis(5))
                    .atMost(Duration.ofSeconds(2)).until(() -> threads.stream().allMatch(t -> {
                        Thread.State st = t.getState();
                        return st == Thread.State.WAITING || st == Thread.State.TIMED_WAITING
                                || st == Thread.State.BLOCKED;
                    }));
        } catch (org.awaitility.core.ConditionTimeoutException e) {
            // Busy-polling transport: proceed, the rule holds either way.
        }
    }

    protected static <T> T get(Future<T> f) throws Exception {
        try {
            return f.get(120, TimeUnit.SECONDS);
        } catch (ExecutionException e) {
            if (e.getCause() instanceof Exception) {
                throw (Exception) e.getCause();
            }
            throw e;
        } catch (TimeoutException e) {
            throw new AssertionError("operation did not finish within 120 s", e);
        }
    }

    // ---- payload pattern: every byte depends on (seed, index) ----

    /**
     * Fills a range with the pattern of a seed.
     *
     * @param b      buffer
     * @param offset first byte
     * @param length bytes
     * @param seed   message identity
     */
    protected static void fill(MemoryBuffer b, long offset, long length, long seed) {
        long a = b.address() + offset;
        long i = 0;
        for (; i + 8 <= length; i += 8) {
            MemoryAccess.putLong(a + i, word(seed, i >>> 3));
        }
        long w = word(seed, i >>> 3);
        for (int k = 0; i < length; i++, k++) {
            MemoryAccess.putByte(a + i, (byte) (w >>> (8 * k)));
        }
    }

    /**
     * Checks every byte of a range against the pattern of a seed.
     *
     * @param b      buffer
     * @param offset first byte
     * @param length bytes
     * @param seed   message identity
     */
    protected static void verify(MemoryBuffer b, long offset, long length, long seed) {
        long a = b.address() + offset;
        long i = 0;
        for (; i + 8 <= length; i += 8) {
            long expect = word(seed, i >>> 3);
            long got = MemoryAccess.getLong(a + i);
            if (got != expect) {
                fail("message " + seed + " of " + length + " bytes differs at word " + (i >>> 3) + " (byte " + i
                        + "): expected 0x" + Long.toHexString(expect) + ", found 0x" + Long.toHexString(got));
            }
        }
        long w = word(seed, i >>> 3);
        for (int k = 0; i < length; i++, k++) {
            byte expect = (byte) (w >>> (8 * k));
            byte got = MemoryAccess.getByte(a + i);
            if (got != expect) {
                fail("message " + seed + " of " + length + " bytes differs at byte " + i + ": expected " + expect
                        + ", found " + got);
            }
        }
    }

    private static long word(long seed, long index) {
        return KvPattern.mix(seed * SEED_MULT + index);
    }

    protected final long[] sizes() {
        return new long[] {0, 1, 7, 4097, 65_537, 1L << 20, largestMessage()};
    }
}
