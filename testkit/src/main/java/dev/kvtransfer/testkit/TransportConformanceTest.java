package dev.kvtransfer.testkit;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.memory.BufferManager;
import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.memory.MemoryKind;
import dev.kvtransfer.api.model.CommState;
import dev.kvtransfer.api.transport.Connection;
import dev.kvtransfer.api.transport.ConnectionManager;
import dev.kvtransfer.api.transport.TransportCapability;
import dev.kvtransfer.api.transport.TransportClosedException;
import dev.kvtransfer.api.transport.TransportConfig;
import dev.kvtransfer.api.transport.TransportException;
import dev.kvtransfer.api.transport.TransportProvider;
import dev.kvtransfer.api.transport.RegionDescriptor;
import dev.kvtransfer.api.transport.RegisteredRegion;
import dev.kvtransfer.api.transport.WriteBatch;
import dev.kvtransfer.core.memory.HostBufferManager;
import dev.kvtransfer.core.memory.MemoryAccess;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

import java.nio.ByteBuffer;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;
import static org.assertj.core.api.Assertions.fail;

/**
 * The conformance suite every transport passes. A backend's test is a short subclass:
 *
 * <pre>{@code
 * class AeronTransportConformanceTest extends TransportConformanceTest {
 *     protected TransportProvider provider() { return new AeronTransportProvider(); }
 * }
 * }</pre>
 *
 * <p>Test names carry the clause of {@code testkit/SPEC.md} they check ({@code required_spec1_NN_...} for every
 * transport, {@code optional_specS_NN_...} for capabilities): a failing test names the sentence that broke. A
 * capability the provider does not declare is not skipped: the suite asserts the documented refusal instead.
 * Each test creates its managers with {@link #newManager}; they and the host buffers are closed and checked
 * for leaks after the test. Every payload is filled with a pattern and verified byte by byte.
 *
 * <p>Every rule runs under {@link RuleBound} (180 s per rule; once one hung, 420 s for the class): a transport that
 * ignores deadlines and interrupts fails the rule that hung, naming the call, instead of hanging the build.
 */
@RuleBound(seconds = 180, suiteSeconds = 420)
@org.junit.jupiter.api.extension.ExtendWith(LeakCheckExtension.class)
public abstract class TransportConformanceTest {
    /** Largest message the suite expects to complete before the receiver posts (control messages). */
    protected static final int EAGER_BYTES = 4096;

    private static final long SEED_MULT = 0x9E3779B97F4A7C15L;

    private final List<ConnectionManager> managers = new ArrayList<>();
    private final List<MemoryBuffer> buffers = java.util.Collections.synchronizedList(new ArrayList<>());
    private final List<ExecutorService> executors = new ArrayList<>();
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

    private ExecutorService threads(int n) {
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
    private static void awaitParked(List<Thread> threads) {
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

    private static <T> T get(Future<T> f) throws Exception {
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

    private long[] sizes() {
        return new long[] {0, 1, 7, 4097, 65_537, 1L << 20, largestMessage()};
    }

    // ---- required rules ----

    @Test
    public void required_spec1_01_sendThenRecvDeliversExactBytes() throws Exception {
        ConnectionManager a = newManager();
        ConnectionManager b = newManager();
        Connection ab = a.connection(b.localAddress());
        Connection ba = b.connection(a.localAddress());
        ExecutorService ex = threads(1);
        int tag = 1 << 10;
        for (long size : sizes()) {
            MemoryBuffer src = buffer(size + 16);
            MemoryBuffer dst = buffer(size + 16);
            fill(src, 3, size, size);
            // Started before the receive is posted; large sends may wait for it (rendezvous), so on a thread.
            Future<?> sent = ex.submit(() -> ab.send(tag, src, 3, size));
            ba.recv(tag, dst, 5, size);
            get(sent);
            verify(dst, 5, size, size);
        }
    }

    @Test
    public void required_spec1_02_recvPostedBeforeSendDeliversExactBytes() throws Exception {
        ConnectionManager a = newManager();
        ConnectionManager b = newManager();
        Connection ab = a.connection(b.localAddress());
        Connection ba = b.connection(a.localAddress());
        ExecutorService ex = threads(1);
        for (long size : sizes()) {
            MemoryBuffer src = buffer(size);
            MemoryBuffer dst = buffer(size);
            fill(src, 0, size, ~size);
            CountDownLatch posting = new CountDownLatch(1);
            Future<?> received = ex.submit(() -> {
                posting.countDown();
                ba.recv(2000, dst, 0, size);
                return null;
            });
            assertThat(posting.await(30, TimeUnit.SECONDS)).isTrue();
            ab.send(2000, src, 0, size);
            get(received);
            verify(dst, 0, size, ~size);
        }
    }

    @Test
    public void required_spec1_03_smallSendCompletesBeforeTheReceiveIsPosted() throws Exception {
        ConnectionManager a = newManager();
        ConnectionManager b = newManager();
        Connection ab = a.connection(b.localAddress());
        MemoryBuffer src = buffer(EAGER_BYTES);
        MemoryBuffer dst = buffer(EAGER_BYTES);
        // The protocol's id / info / ready messages go out before the peer receives them.
        long[] sizes = {8, 1, EAGER_BYTES};
        int tag = 19;
        for (int i = 0; i < sizes.length; i++) {
            fill(src, 0, sizes[i], 100 + i);
            ab.send(tag, src, 0, sizes[i], Duration.ofSeconds(10));
        }
        Connection ba = b.connection(a.localAddress());
        for (int i = 0; i < sizes.length; i++) {
            ba.recv(tag, dst, 0, sizes[i]);
            verify(dst, 0, sizes[i], 100 + i);
        }
    }

    @Test
    public void required_spec1_04_messagesOfOneConnectionAndTagArriveInOrder() throws Exception {
        ConnectionManager a = newManager();
        ConnectionManager b = newManager();
        Connection ab = a.connection(b.localAddress());
        Connection ba = b.connection(a.localAddress());
        int n = 500;
        ExecutorService ex = threads(1);
        Future<?> sender = ex.submit(() -> {
            MemoryBuffer src = buffer(1000 + n);
            for (int i = 0; i < n; i++) {
                fill(src, 0, 1000 + i, 7000 + i);
                ab.send(3000, src, 0, 1000 + i);
            }
            return null;
        });
        MemoryBuffer dst = buffer(1000 + n);
        for (int i = 0; i < n; i++) {
            ba.recv(3000, dst, 0, 1000 + i);
            verify(dst, 0, 1000 + i, 7000 + i);
        }
        get(sender);
    }

    @Test
    public void required_spec1_05_tagsDoNotMix() throws Exception {
        ConnectionManager a = newManager();
        ConnectionManager b = newManager();
        Connection ab = a.connection(b.localAddress());
        Connection ba = b.connection(a.localAddress());
        int perTag = 20;
        int size = 256;
        ExecutorService ex = threads(1);
        Future<?> sender = ex.submit(() -> {
            MemoryBuffer src = buffer(size);
            for (int i = 0; i < perTag; i++) {
                for (int tag : new int[] {4001, 4002}) {
                    fill(src, 0, size, tag * 1000L + i);
                    ab.send(tag, src, 0, size);
                }
            }
            return null;
        });
        MemoryBuffer dst = buffer(size);
        // Reverse order: everything of the second tag first, then the first tag.
        for (int tag : new int[] {4002, 4001}) {
            for (int i = 0; i < perTag; i++) {
                ba.recv(tag, dst, 0, size);
                verify(dst, 0, size, tag * 1000L + i);
            }
        }
        get(sender);
    }

    @Test
    public void required_spec1_06_recvConnectReturnsTheSendersConnectionWhichCanReply() throws Exception {
        ConnectionManager server = newManager();
        ConnectionManager c1 = newManager();
        ConnectionManager c2 = newManager();
        MemoryBuffer msg = buffer(64);
        MemoryBuffer in = buffer(64);
        for (ConnectionManager client : List.of(c2, c1)) {
            fill(msg, 0, 64, client.localAddress().hashCode());
            client.connection(server.localAddress()).send(19, msg, 0, 64);
            Connection back = server.recvConnect(19, in, 0, 64);
            verify(in, 0, 64, client.localAddress().hashCode());
            assertThat(back.peer()).isEqualTo(client.localAddress());
            fill(msg, 0, 64, 42);
            back.send(42, msg, 0, 8);
            MemoryBuffer reply = buffer(8);
            client.connection(server.localAddress()).recv(42, reply, 0, 8);
            verify(reply, 0, 8, 42);
        }
    }

    @Test
    public void required_spec1_07_manyConcurrentSendersToOneReceiver() throws Exception {
        ConnectionManager receiver = newManager();
        int managersCount = 4;
        int threadsPerManager = 2;
        int perThread = 50;
        int size = 4096 + 13;
        List<ConnectionManager> senders = new ArrayList<>();
        for (int i = 0; i < managersCount; i++) {
            senders.add(newManager());
        }
        ExecutorService ex = threads(managersCount * threadsPerManager);
        List<Future<?>> sends = new ArrayList<>();
        for (int m = 0; m < managersCount; m++) {
            for (int t = 0; t < threadsPerManager; t++) {
                Connection c = senders.get(m).connection(receiver.localAddress());
                int tag = 5000 + t;
                long seedBase = (m * 10L + t) * 1_000_000L;
                sends.add(ex.submit(() -> {
                    MemoryBuffer src = buffer(size);
                    for (int i = 0; i < perThread; i++) {
                        fill(src, 0, size, seedBase + i);
                        c.send(tag, src, 0, size);
                    }
                    return null;
                }));
            }
        }
        // Each (sender, tag) stream is received in order, streams interleaved round-robin.
        MemoryBuffer dst = buffer(size);
        for (int i = 0; i < perThread; i++) {
            for (int m = 0; m < managersCount; m++) {
                Connection c = receiver.connection(senders.get(m).localAddress());
                for (int t = 0; t < threadsPerManager; t++) {
                    c.recv(5000 + t, dst, 0, size);
                    verify(dst, 0, size, (m * 10L + t) * 1_000_000L + i);
                }
            }
        }
        for (Future<?> f : sends) {
            get(f);
        }
    }

    @Test
    public void required_spec1_08_recvConnectAcceptsManyConcurrentSenders() throws Exception {
        ConnectionManager receiver = newManager();
        int n = 8;
        List<ConnectionManager> senders = new ArrayList<>();
        for (int i = 0; i < n; i++) {
            senders.add(newManager());
        }
        ExecutorService ex = threads(n);
        List<Future<?>> sends = new ArrayList<>();
        for (int i = 0; i < n; i++) {
            Connection c = senders.get(i).connection(receiver.localAddress());
            long seed = 900 + i;
            sends.add(ex.submit(() -> {
                MemoryBuffer src = buffer(24);
                fill(src, 0, 24, seed);
                c.send(19, src, 0, 24);
                return null;
            }));
        }
        MemoryBuffer dst = buffer(24);
        Set<String> seen = new java.util.HashSet<>();
        for (int i = 0; i < n; i++) {
            Connection c = receiver.recvConnect(19, dst, 0, 24, Duration.ofSeconds(30));
            int idx = -1;
            for (int k = 0; k < n; k++) {
                if (senders.get(k).localAddress().equals(c.peer())) {
                    idx = k;
                }
            }
            assertThat(idx).as("peer %s is one of the senders", c.peer()).isNotNegative();
            verify(dst, 0, 24, 900 + idx);
            assertThat(seen.add(c.peer())).isTrue();
        }
        for (Future<?> f : sends) {
            get(f);
        }
    }

    @Test
    public void required_spec1_09_bothDirectionsAtOnce() throws Exception {
        ConnectionManager a = newManager();
        ConnectionManager b = newManager();
        ExecutorService ex = threads(4);
        int n = 50;
        int size = 100_003;
        List<Future<?>> fs = new ArrayList<>();
        for (ConnectionManager[] pair : new ConnectionManager[][] {{a, b}, {b, a}}) {
            Connection out = pair[0].connection(pair[1].localAddress());
            Connection in = pair[1].connection(pair[0].localAddress());
            long seed = pair[0] == a ? 1 : 2;
            fs.add(ex.submit(() -> {
                MemoryBuffer src = buffer(size);
                for (int i = 0; i < n; i++) {
                    fill(src, 0, size, seed * 1000 + i);
                    out.send(6000, src, 0, size);
                }
                return null;
            }));
            fs.add(ex.submit(() -> {
                MemoryBuffer dst = buffer(size);
                for (int i = 0; i < n; i++) {
                    in.recv(6000, dst, 0, size);
                    verify(dst, 0, size, seed * 1000 + i);
                }
                return null;
            }));
        }
        for (Future<?> f : fs) {
            get(f);
        }
    }

    @Test
    public void required_spec1_10_lengthMismatchIsMalformed() throws Exception {
        ConnectionManager a = newManager();
        ConnectionManager b = newManager();
        Connection ab = a.connection(b.localAddress());
        Connection ba = b.connection(a.localAddress());
        MemoryBuffer src = buffer(128);
        MemoryBuffer dst = buffer(128);
        fill(src, 0, 100, 5);
        ab.send(7000, src, 0, 100);
        assertThatThrownBy(() -> ba.recv(7000, dst, 0, 64, Duration.ofSeconds(30)))
                .isInstanceOfSatisfying(TransportException.class,
                        e -> assertThat(e.code()).isEqualTo(ErrorCode.MALFORMED));
        // The connection stays usable.
        fill(src, 0, 50, 6);
        ab.send(7000, src, 0, 50);
        ba.recv(7000, dst, 0, 50);
        verify(dst, 0, 50, 6);
    }

    @Test
    public void required_spec1_11_recvDeadlineIsTimeout() {
        ConnectionManager a = newManager();
        ConnectionManager b = newManager();
        Connection ba = b.connection(a.localAddress());
        MemoryBuffer dst = buffer(8);
        Duration deadline = Duration.ofMillis(300);
        long t0 = System.nanoTime();
        assertThatThrownBy(() -> ba.recv(7100, dst, 0, 8, deadline))
                .isInstanceOfSatisfying(TransportException.class,
                        e -> assertThat(e.code()).isEqualTo(ErrorCode.TIMEOUT));
        Duration took = Duration.ofNanos(System.nanoTime() - t0);
        assertThat(took).isGreaterThanOrEqualTo(deadline.minusMillis(5)).isLessThan(deadline.plus(timeoutSlack()));
        // A message sent after the timeout is still delivered to the next receive.
        Connection ab = a.connection(b.localAddress());
        MemoryBuffer src = buffer(8);
        fill(src, 0, 8, 71);
        ab.send(7100, src, 0, 8);
        ba.recv(7100, dst, 0, 8);
        verify(dst, 0, 8, 71);
    }

    @Test
    public void required_spec1_12_recvConnectDeadlineIsTimeout() {
        ConnectionManager a = newManager();
        MemoryBuffer dst = buffer(8);
        Duration deadline = Duration.ofMillis(300);
        long t0 = System.nanoTime();
        assertThatThrownBy(() -> a.recvConnect(19, dst, 0, 8, deadline))
                .isInstanceOfSatisfying(TransportException.class,
                        e -> assertThat(e.code()).isEqualTo(ErrorCode.TIMEOUT));
        Duration took = Duration.ofNanos(System.nanoTime() - t0);
        assertThat(took).isGreaterThanOrEqualTo(deadline.minusMillis(5)).isLessThan(deadline.plus(timeoutSlack()));
    }

    @Test
    public void required_spec1_13_closeWakesBlockedCallsWithTransportClosed() throws Exception {
        ConnectionManager a = newManager();
        ConnectionManager b = newManager();
        Connection ba = b.connection(a.localAddress());
        MemoryBuffer d1 = buffer(8);
        MemoryBuffer d2 = buffer(8);
        ExecutorService ex = threads(2);
        CountDownLatch started = new CountDownLatch(2);
        List<Thread> blocked = java.util.Collections.synchronizedList(new ArrayList<>());
        Future<?> recv = ex.submit(() -> {
            blocked.add(Thread.currentThread());
            started.countDown();
            ba.recv(7200, d1, 0, 8, Duration.ofSeconds(60));
            return null;
        });
        Future<?> accept = ex.submit(() -> {
            blocked.add(Thread.currentThread());
            started.countDown();
            b.recvConnect(7201, d2, 0, 8); // the untimed form: waits until close
            return null;
        });
        assertThat(started.await(30, TimeUnit.SECONDS)).isTrue();
        awaitParked(new ArrayList<>(blocked));
        // Closing must wake them whether they are already waiting or about to.
        b.close();
        for (Future<?> f : List.of(recv, accept)) {
            long t0 = System.nanoTime();
            assertThatThrownBy(() -> get(f)).isInstanceOf(TransportClosedException.class);
            assertThat(Duration.ofNanos(System.nanoTime() - t0)).isLessThan(Duration.ofSeconds(30));
        }
    }

    @Test
    public void required_spec1_14_afterCloseNothingRunsAndCallsFail() {
        ConnectionManager a = newManager();
        ConnectionManager b = newManager();
        Connection ab = a.connection(b.localAddress());
        MemoryBuffer buf = buffer(8);
        a.close();
        a.close(); // idempotent
        assertThat(a.isRunning()).isFalse();
        assertThatThrownBy(() -> ab.send(7300, buf, 0, 8)).isInstanceOf(TransportClosedException.class);
        assertThatThrownBy(() -> ab.recv(7300, buf, 0, 8, Duration.ofSeconds(5)))
                .isInstanceOf(TransportClosedException.class);
        assertThatThrownBy(() -> a.recvConnect(7300, buf, 0, 8, Duration.ofSeconds(5)))
                .isInstanceOf(TransportClosedException.class);
        assertThat(b.isRunning()).isTrue();
    }

    @Test
    public void required_spec1_15_getConnectionsReturnsOnePerRankInOrder() throws Exception {
        ConnectionManager self = newManager();
        List<ConnectionManager> peers = List.of(newManager(), newManager(), newManager());
        List<String> addrs = new ArrayList<>();
        for (ConnectionManager p : peers) {
            addrs.add(p.localAddress());
        }
        List<Connection> cs = self.getConnections(new CommState(provider().name(), addrs, 0));
        assertThat(cs).hasSize(3);
        MemoryBuffer src = buffer(16);
        MemoryBuffer dst = buffer(16);
        for (int i = 0; i < 3; i++) {
            assertThat(cs.get(i).peer()).isEqualTo(addrs.get(i));
            fill(src, 0, 16, 10 + i);
            cs.get(i).send(7400, src, 0, 16);
            peers.get(i).connection(self.localAddress()).recv(7400, dst, 0, 16);
            verify(dst, 0, 16, 10 + i);
        }
    }

    @Test
    public void required_spec1_16_noThreadOutlivesClose() throws Exception {
        Set<Thread> before = LeakChecks.liveThreads();
        ConnectionManager a = provider().create(config("leak-a"));
        ConnectionManager b = provider().create(config("leak-b"));
        try {
            MemoryBuffer src = buffer(1 << 16);
            MemoryBuffer dst = buffer(1 << 16);
            fill(src, 0, 1 << 16, 3);
            Connection ab = a.connection(b.localAddress());
            CompletableFuture<Void> sent = CompletableFuture.runAsync(() -> ab.send(7500, src, 0, 1 << 16),
                    threads(1));
            b.connection(a.localAddress()).recv(7500, dst, 0, 1 << 16);
            sent.get(60, TimeUnit.SECONDS);
            verify(dst, 0, 1 << 16, 3);
        } finally {
            a.close();
            b.close();
        }
        for (ExecutorService e : executors) {
            e.shutdownNow();
            assertThat(e.awaitTermination(30, TimeUnit.SECONDS)).isTrue();
        }
        LeakChecks.assertNoNewThreads(before, threadEndBound());
    }

    @Test
    public void required_spec1_17_untimedRecvConnectOutlivesTheDefaultTimeout() throws Exception {
        Duration shortDefault = Duration.ofMillis(300);
        ConnectionManager a = newManager(b -> b.defaultTimeout(shortDefault));
        ConnectionManager b = newManager();
        MemoryBuffer dst = buffer(16);
        ExecutorService ex = threads(1);
        Future<Connection> accepted = ex.submit(() -> a.recvConnect(7800, dst, 0, 16));
        // The untimed form waits until a message arrives or close: never the default timeout.
        org.awaitility.Awaitility.await().during(shortDefault.multipliedBy(4)).atMost(shortDefault.multipliedBy(20))
                .until(() -> !accepted.isDone());
        MemoryBuffer src = buffer(16);
        fill(src, 0, 16, 78);
        b.connection(a.localAddress()).send(7800, src, 0, 16);
        Connection c = get(accepted);
        assertThat(c.peer()).isEqualTo(b.localAddress());
        verify(dst, 0, 16, 78);
        assertThat(a.connection(b.localAddress()).defaultTimeout()).isEqualTo(shortDefault);
        assertThat(a.defaultTimeout()).isEqualTo(shortDefault);
    }

    @Test
    public void required_spec1_18_pollConnectReturnsNullWhenNothingArrivedAndNeverThrowsATimeout() throws Exception {
        ConnectionManager a = newManager();
        ConnectionManager b = newManager();
        MemoryBuffer dst = buffer(24);
        long t0 = System.nanoTime();
        assertThat(a.pollConnect(7900, dst, 0, 24, Duration.ZERO)).as("non-blocking poll, nothing sent").isNull();
        assertThat(Duration.ofNanos(System.nanoTime() - t0)).isLessThan(timeoutSlack());
        Duration wait = Duration.ofMillis(200);
        t0 = System.nanoTime();
        assertThat(a.pollConnect(7900, dst, 0, 24, wait)).isNull();
        assertThat(Duration.ofNanos(System.nanoTime() - t0)).isGreaterThanOrEqualTo(wait.minusMillis(5))
                .isLessThan(wait.plus(timeoutSlack()));
        MemoryBuffer src = buffer(24);
        fill(src, 0, 24, 79);
        b.connection(a.localAddress()).send(7900, src, 0, 24);
        Connection[] got = new Connection[1];
        org.awaitility.Awaitility.await().atMost(Duration.ofSeconds(30)).pollInterval(Duration.ofMillis(1))
                .until(() -> (got[0] = a.pollConnect(7900, dst, 0, 24, Duration.ZERO)) != null);
        assertThat(got[0].peer()).isEqualTo(b.localAddress());
        verify(dst, 0, 24, 79);
        a.close();
        assertThatThrownBy(() -> a.pollConnect(7900, dst, 0, 24, Duration.ZERO))
                .isInstanceOf(TransportClosedException.class);
    }

    @Test
    public void required_spec1_19_tagsUseAllThirtyTwoBits() throws Exception {
        ConnectionManager a = newManager();
        ConnectionManager b = newManager();
        Connection ab = a.connection(b.localAddress());
        Connection ba = b.connection(a.localAddress());
        // Tags that agree in their low 16 (and low 24) bits, and the extremes.
        int[] tags = {Integer.MAX_VALUE, Integer.MAX_VALUE - 1, 0x0001_1234, 0x0002_1234, 0x0101_1234, 1 << 30, 1024};
        MemoryBuffer src = buffer(64L * tags.length);
        MemoryBuffer dst = buffer(64L * tags.length);
        for (int i = 0; i < tags.length; i++) {
            fill(src, 64L * i, 64, 100 + i);
            ab.send(tags[i], src, 64L * i, 64);
        }
        for (int i = tags.length - 1; i >= 0; i--) {
            ba.recv(tags[i], dst, 64L * i, 64, Duration.ofSeconds(30));
            verify(dst, 64L * i, 64, 100 + i);
        }
        MemoryBuffer one = buffer(8);
        fill(src, 0, 8, 7);
        ab.send(Integer.MAX_VALUE, src, 0, 8);
        Connection c = b.recvConnect(Integer.MAX_VALUE, one, 0, 8, Duration.ofSeconds(30));
        assertThat(c.peer()).isEqualTo(a.localAddress());
        verify(one, 0, 8, 7);
    }

    @Test
    public void required_spec1_20_closeReleasesEveryFileDescriptor() throws Exception {
        java.nio.file.Path fds = java.nio.file.Path.of("/proc/self/fd");
        Assumptions.assumeTrue(java.nio.file.Files.isDirectory(fds), "skipped: no /proc/self/fd on this OS");
        cycle(); // loads classes and opens the jars they come from, which stay open
        int before = openFds(fds);
        for (int i = 0; i < 4; i++) {
            cycle();
        }
        // A manager that leaks even one descriptor per close leaks 8 here; the JVM itself may open one or two.
        org.awaitility.Awaitility.await().atMost(threadEndBound()).pollInterval(Duration.ofMillis(50))
                .untilAsserted(() -> assertThat(openFds(fds)).as("open file descriptors after 4 open/use/close"
                        + " cycles of two managers (before: %d)", before).isLessThanOrEqualTo(before + 2));
    }

    private void cycle() throws Exception {
        ConnectionManager a = provider().create(config("fd-a"));
        ConnectionManager b = provider().create(config("fd-b"));
        try {
            MemoryBuffer src = buffer(4096);
            MemoryBuffer dst = buffer(4096);
            fill(src, 0, 4096, 9);
            a.connection(b.localAddress()).send(8000, src, 0, 4096);
            b.connection(a.localAddress()).recv(8000, dst, 0, 4096, Duration.ofSeconds(30));
            verify(dst, 0, 4096, 9);
        } finally {
            a.close();
            b.close();
        }
    }

    private static int openFds(java.nio.file.Path fds) throws java.io.IOException {
        try (var s = java.nio.file.Files.list(fds)) {
            return (int) s.count();
        }
    }

    @Test
    public void required_spec1_21_providerIsFoundThroughServiceLoader() {
        List<TransportProvider> found = java.util.ServiceLoader.load(TransportProvider.class).stream()
                .map(java.util.ServiceLoader.Provider::get).toList();
        assertThat(found).as("providers registered in META-INF/services")
                .anySatisfy(p -> {
                    assertThat(p.name()).isEqualTo(provider().name());
                    assertThat(p.getClass()).isEqualTo(provider().getClass());
                });
        TransportProvider p = found.stream().filter(x -> x.name().equals(provider().name())).findFirst()
                .orElseThrow();
        assertThat(p.isAvailable()).isEqualTo(provider().isAvailable());
        assertThat(p.capabilities()).isEqualTo(provider().capabilities());
    }

    @Test
    public void required_spec1_22_unknownPropertiesOfTheTransportsOwnPrefixAreRefused() {
        String key = provider().name() + ".noSuchSetting";
        assertThatThrownBy(() -> provider().create(config("typo").toBuilder().property(key, "1").build()))
                .isInstanceOf(IllegalArgumentException.class)
                .hasMessageContaining(key).hasMessageContaining("known");
        // Properties of other transports are left alone: one map may configure them all.
        newManager(b -> b.property("someothertransport.setting", "x"));
    }

    @Test
    public void required_spec1_23_crossProcessWhenDeclared() throws Exception {
        boolean declared = provider().capabilities().contains(TransportCapability.CROSS_PROCESS);
        TransportConfig base = config("cross");
        List<String> args = new ArrayList<>();
        args.add(provider().name());
        args.add(base.host());
        base.properties().forEach((k, v) -> args.add(k + "=" + v));
        try (dev.kvtransfer.testkit.process.ChildJvm child = dev.kvtransfer.testkit.process.ChildJvm.start(
                dev.kvtransfer.testkit.process.TransportEchoMain.class, "256m", args)) {
            String address = child.awaitLine("ADDRESS ", Duration.ofSeconds(60));
            ConnectionManager self = newManager();
            MemoryBuffer len = buffer(8);
            if (!declared) {
                // Not declared: a manager of another process is unreachable, and the send says so.
                len.asByteBuffer().putLong(0, 1);
                assertThatThrownBy(() -> self.connection(address).send(
                        dev.kvtransfer.testkit.process.TransportEchoMain.ECHO_TAG, len, 0, 8, Duration.ofSeconds(5)))
                        .as("send to a manager in another process without CROSS_PROCESS")
                        .isInstanceOf(TransportException.class);
                return;
            }
            Connection c = self.connection(address);
            for (long n : new long[] {1, 4097, (1L << 20) + 13}) {
                MemoryBuffer src = buffer(n);
                MemoryBuffer dst = buffer(n);
                fill(src, 0, n, 230 + n);
                len.asByteBuffer().putLong(0, n);
                c.send(dev.kvtransfer.testkit.process.TransportEchoMain.ECHO_TAG, len, 0, 8);
                ExecutorService ex = threads(1);
                Future<?> sent = ex.submit(() -> c.send(dev.kvtransfer.testkit.process.TransportEchoMain.DATA_TAG,
                        src, 0, n));
                c.recv(dev.kvtransfer.testkit.process.TransportEchoMain.DATA_TAG, dst, 0, n, Duration.ofSeconds(60));
                get(sent);
                ByteBuffer s = src.asByteBuffer();
                ByteBuffer d = dst.asByteBuffer();
                for (int i = 0; i < n; i++) {
                    if (d.get(i) != (byte) (s.get(i) + 1)) {
                        fail("byte " + i + " of the " + n + "-byte echo from the other process: expected "
                                + (byte) (s.get(i) + 1) + ", found " + d.get(i));
                    }
                }
            }
            if (provider().capabilities().contains(TransportCapability.PEER_FAILURE_DETECTION)) {
                child.process().destroyForcibly();
                long t0 = System.nanoTime();
                assertThatThrownBy(() -> c.recv(dev.kvtransfer.testkit.process.TransportEchoMain.DATA_TAG, len, 0,
                        8, peerLossBound().multipliedBy(3))).isInstanceOfSatisfying(TransportException.class,
                        e -> assertThat(e.code()).as("receive from a killed process: %s", e)
                                .isEqualTo(ErrorCode.PEER_LOST));
                assertThat(Duration.ofNanos(System.nanoTime() - t0)).isLessThan(peerLossBound());
            }
        }
    }

    // ---- optional rules: asserted when declared, the documented refusal asserted when not ----

    @Test
    public void optional_spec1_24_peerFailureDetection() throws Exception {
        ConnectionManager a = newManager();
        ConnectionManager b = newManager();
        Connection ba = b.connection(a.localAddress());
        MemoryBuffer dst = buffer(8);
        boolean declared = provider().capabilities().contains(TransportCapability.PEER_FAILURE_DETECTION);
        if (!declared) {
            // Without detection, a receive from a dead peer must still end by its deadline.
            a.close();
            assertThatThrownBy(() -> ba.recv(7600, dst, 0, 8, Duration.ofMillis(500)))
                    .isInstanceOfSatisfying(TransportException.class,
                            e -> assertThat(e.code()).isIn(ErrorCode.TIMEOUT, ErrorCode.PEER_LOST));
            return;
        }
        ExecutorService ex = threads(1);
        CountDownLatch started = new CountDownLatch(1);
        Thread[] blocked = new Thread[1];
        Future<?> recv = ex.submit(() -> {
            blocked[0] = Thread.currentThread();
            started.countDown();
            ba.recv(7600, dst, 0, 8, peerLossBound().multipliedBy(3));
            return null;
        });
        assertThat(started.await(30, TimeUnit.SECONDS)).isTrue();
        awaitParked(List.of(blocked[0]));
        long t0 = System.nanoTime();
        a.close();
        assertThatThrownBy(() -> get(recv)).isInstanceOfSatisfying(TransportException.class,
                e -> assertThat(e.code()).as("code of %s", e).isEqualTo(ErrorCode.PEER_LOST));
        assertThat(Duration.ofNanos(System.nanoTime() - t0)).isLessThan(peerLossBound());
        // Later calls to the dead peer fail the same way, fast.
        assertThatThrownBy(() -> ba.recv(7601, dst, 0, 8, peerLossBound().multipliedBy(3)))
                .isInstanceOfSatisfying(TransportException.class,
                        e -> assertThat(e.code()).isEqualTo(ErrorCode.PEER_LOST));
        assertThat(b.isRunning()).isTrue();
    }

    @Test
    public void optional_spec1_25_deviceMemory() throws Exception {
        ConnectionManager a = newManager();
        ConnectionManager b = newManager();
        Connection ab = a.connection(b.localAddress());
        Connection ba = b.connection(a.localAddress());
        if (!provider().capabilities().contains(TransportCapability.DEVICE_MEMORY)) {
            MemoryBuffer device = new FakeDeviceBuffer(64);
            assertThatThrownBy(() -> ab.send(7700, device, 0, 64))
                    .isInstanceOf(UnsupportedOperationException.class);
            assertThatThrownBy(() -> ba.recv(7700, device, 0, 64, Duration.ofSeconds(5)))
                    .isInstanceOf(UnsupportedOperationException.class);
            return;
        }
        BufferManager dev = deviceBufferManager();
        Assumptions.assumeTrue(dev != null, "skipped: " + provider().name() + " declares DEVICE_MEMORY but this"
                + " machine or test supplies no device BufferManager (no GPU / JCuda): override"
                + " deviceBufferManager() to run it");
        long size = (1L << 20) + 3;
        MemoryBuffer hostSrc = buffer(size);
        MemoryBuffer hostDst = buffer(size);
        fill(hostSrc, 0, size, 77);
        try (MemoryBuffer d1 = dev.allocate(size, MemoryKind.DEVICE);
             MemoryBuffer d2 = dev.allocate(size, MemoryKind.DEVICE)) {
            dev.copy(hostSrc, 0, d1, 0, size);
            dev.synchronize();
            ExecutorService ex = threads(1);
            Future<?> sent = ex.submit(() -> ab.send(7701, d1, 0, size));
            ba.recv(7701, d2, 0, size);
            get(sent);
            dev.copy(d2, 0, hostDst, 0, size);
            dev.synchronize();
            verify(hostDst, 0, size, 77);
        }
    }

    // ---- one-sided writes (ONE_SIDED_WRITE) ----

    private static final int GUARD = 4096;
    private static final byte SENTINEL = (byte) 0xA5;

    private boolean oneSided() {
        return provider().capabilities().contains(TransportCapability.ONE_SIDED_WRITE);
    }

    /** A region with guard zones of sentinel bytes on both sides, all sentinel to start with. */
    private MemoryBuffer guarded(long regionBytes) {
        MemoryBuffer whole = buffer(regionBytes + 2 * GUARD);
        ByteBuffer b = whole.asByteBuffer();
        for (int i = 0; i < b.capacity(); i++) {
            b.put(i, SENTINEL);
        }
        return whole;
    }

    private static void assertSentinel(MemoryBuffer whole, long from, long to, String what) {
        ByteBuffer b = whole.asByteBuffer();
        for (long i = from; i < to; i++) {
            if (b.get((int) i) != SENTINEL) {
                fail(what + ": byte " + i + " was written (" + b.get((int) i) + ")");
            }
        }
    }

    @Test
    public void optional_spec2_01_oneSidedWriteLandsExactlyAndOnlyWhereAsked() throws Exception {
        ConnectionManager owner = newManager();
        ConnectionManager writer = newManager();
        if (!oneSided()) {
            MemoryBuffer m = buffer(64);
            assertThatThrownBy(() -> owner.register(m)).isInstanceOf(UnsupportedOperationException.class)
                    .hasMessageContaining("ONE_SIDED_WRITE");
            assertThatThrownBy(() -> writer.connection(owner.localAddress()).write(new WriteBatch(), Duration.ofSeconds(5)))
                    .isInstanceOf(UnsupportedOperationException.class).hasMessageContaining("ONE_SIDED_WRITE");
            return;
        }
        long size = (1L << 20) + 4096;
        MemoryBuffer whole = guarded(size);
        try (RegisteredRegion region = owner.register(whole.slice(GUARD, size))) {
            RegionDescriptor d = region.descriptor();
            assertThat(d.owner()).isEqualTo(owner.localAddress());
            assertThat(d.length()).isEqualTo(size);
            RegionDescriptor back = RegionDescriptor.readFrom(dev.kvtransfer.api.wire.WireReader.raw(
                    serialize(d)));
            assertThat(back).as("a descriptor survives its wire form").isEqualTo(d);
            MemoryBuffer src = buffer(size);
            fill(src, 0, size, 303);
            long[][] entries = {{3, 5, 1}, {11, 4099, 65537}, {70000, 70000, 0}, {size - 9, size - 7, 7},
                {200_000, 300_000, 500_000}};
            WriteBatch batch = new WriteBatch(2);
            for (long[] e : entries) {
                batch.add(src, e[0], back, e[1], e[2]);
            }
            Connection toOwner = writer.connection(owner.localAddress());
            toOwner.write(batch, Duration.ofSeconds(60));
            // A notification sent after the write returned never overtakes the bytes.
            MemoryBuffer note = buffer(8);
            toOwner.send(8100, note, 0, 8);
            owner.connection(writer.localAddress()).recv(8100, note, 0, 8, Duration.ofSeconds(30));
            boolean[] written = new boolean[(int) size];
            ByteBuffer s = src.asByteBuffer();
            ByteBuffer w = whole.asByteBuffer();
            for (long[] e : entries) {
                for (long i = 0; i < e[2]; i++) {
                    written[(int) (e[1] + i)] = true;
                    byte want = s.get((int) (e[0] + i));
                    byte got = w.get((int) (GUARD + e[1] + i));
                    if (want != got) {
                        fail("region byte " + (e[1] + i) + " (entry src " + e[0] + " dst " + e[1] + " len " + e[2]
                                + "): expected " + want + ", found " + got);
                    }
                }
            }
            for (int i = 0; i < size; i++) {
                if (!written[i] && w.get(GUARD + i) != SENTINEL) {
                    fail("region byte " + i + " was not asked for but was written");
                }
            }
            assertSentinel(whole, 0, GUARD, "guard before the region");
            assertSentinel(whole, GUARD + size, size + 2 * GUARD, "guard after the region");
            // The batch is reusable after clear().
            batch.clear();
            assertThat(batch.size()).isZero();
            toOwner.write(batch, Duration.ofSeconds(5));
        }
    }

    private void assertRefusesOneSided() {
        ConnectionManager m = newManager();
        MemoryBuffer b = buffer(64);
        assertThatThrownBy(() -> m.register(b)).isInstanceOf(UnsupportedOperationException.class)
                .hasMessageContaining("ONE_SIDED_WRITE");
    }

    private static byte[] serialize(RegionDescriptor d) {
        dev.kvtransfer.api.wire.WireWriter w = dev.kvtransfer.api.wire.WireWriter.raw();
        d.writeTo(w);
        return w.toByteArray();
    }

    @Test
    public void optional_spec2_02_oneSidedWritesOutsideTheRegionOrWithAForgedDescriptorAreRefused() throws Exception {
        if (!oneSided()) {
            assertRefusesOneSided();
            return;
        }
        List<Throwable> reported = java.util.Collections.synchronizedList(new ArrayList<>());
        ConnectionManager owner = newManager(b -> b.errorHandler(reported::add));
        ConnectionManager writer = newManager();
        long size = 64 * 1024;
        MemoryBuffer whole = guarded(size);
        MemoryBuffer src = buffer(2 * size);
        fill(src, 0, 2 * size, 404);
        Connection toOwner = writer.connection(owner.localAddress());
        try (RegisteredRegion region = owner.register(whole.slice(GUARD, size))) {
            RegionDescriptor d = region.descriptor();
            // Outside the descriptor: refused before anything moves.
            assertThatThrownBy(() -> new WriteBatch().add(src, 0, d, size - 10, 11))
                    .isInstanceOf(IndexOutOfBoundsException.class).hasMessageContaining("leaves region");
            assertThatThrownBy(() -> new WriteBatch().add(src, 0, d, -1, 1))
                    .isInstanceOf(IndexOutOfBoundsException.class);
            // Forged descriptors: a longer region, a shifted address, another key, an id never issued.
            byte[] otherKey = d.key();
            otherKey[0] ^= 0x5a;
            List<RegionDescriptor> forged = List.of(
                    new RegionDescriptor(d.owner(), d.regionId(), d.address(), d.length() + GUARD, d.key()),
                    new RegionDescriptor(d.owner(), d.regionId(), d.address() + 64, d.length(), d.key()),
                    new RegionDescriptor(d.owner(), d.regionId(), d.address(), d.length(), otherKey),
                    new RegionDescriptor(d.owner(), d.regionId() + 1_000_000, d.address(), d.length(), d.key()));
            for (RegionDescriptor f : forged) {
                long off = f.length() > size ? size : 0;
                long len = f.length() > size ? GUARD : 4096;
                WriteBatch b = new WriteBatch().add(src, 0, f, off, len);
                assertThatThrownBy(() -> toOwner.write(b, Duration.ofSeconds(30)))
                        .as("write with forged %s", f)
                        .isInstanceOfSatisfying(TransportException.class, e -> assertThat(e.code())
                                .as("code of %s", e).isIn(ErrorCode.UNAUTHORIZED, ErrorCode.MALFORMED));
            }
            assertSentinel(whole, 0, size + 2 * GUARD, "region and guards after refused writes");
            // The transport keeps serving: a genuine write still lands.
            toOwner.write(new WriteBatch().add(src, 0, d, 0, size), Duration.ofSeconds(30));
            ByteBuffer s = src.asByteBuffer();
            ByteBuffer w = whole.asByteBuffer();
            for (int i = 0; i < size; i++) {
                assertThat(w.get(GUARD + i)).isEqualTo(s.get(i));
            }
            assertSentinel(whole, GUARD + size, size + 2 * GUARD, "guard after the region");
        }
        if (!provider().capabilities().contains(TransportCapability.NATIVE_ONE_SIDED_WRITE)) {
            // The owner of an emulated write saw every refusal: they reached its error handler.
            org.awaitility.Awaitility.await().atMost(Duration.ofSeconds(10))
                    .untilAsserted(() -> assertThat(reported).hasSizeGreaterThanOrEqualTo(4));
        }
    }

    @Test
    public void optional_spec2_03_writesIntoADeregisteredRegionAreRefusedAndTouchNothing() throws Exception {
        if (!oneSided()) {
            assertRefusesOneSided();
            return;
        }
        ConnectionManager owner = newManager();
        ConnectionManager writer = newManager();
        long size = 64 * 1024;
        MemoryBuffer whole = guarded(size);
        MemoryBuffer src = buffer(size);
        fill(src, 0, size, 505);
        Connection toOwner = writer.connection(owner.localAddress());
        RegisteredRegion region = owner.register(whole.slice(GUARD, size));
        RegionDescriptor d = region.descriptor();
        toOwner.write(new WriteBatch().add(src, 0, d, 0, 16), Duration.ofSeconds(30)); // the writer knows it
        ByteBuffer w = whole.asByteBuffer();
        for (int i = 0; i < size + 2 * GUARD; i++) {
            w.put(i, SENTINEL);
        }
        region.close();
        region.close(); // idempotent
        assertThatThrownBy(() -> toOwner.write(new WriteBatch().add(src, 0, d, 0, size), Duration.ofSeconds(30)))
                .isInstanceOfSatisfying(TransportException.class, e -> assertThat(e.code()).as("code of %s", e)
                        .isIn(ErrorCode.CANCELLED, ErrorCode.UNAUTHORIZED));
        assertSentinel(whole, 0, size + 2 * GUARD, "memory of a deregistered region");
    }

    @Test
    public void optional_spec2_04_peerLossAndCloseEndAOneSidedWrite() throws Exception {
        if (!oneSided()) {
            assertRefusesOneSided();
            return;
        }
        ConnectionManager owner = newManager();
        ConnectionManager writer = newManager();
        long size = 32L << 20;
        MemoryBuffer target = buffer(size);
        MemoryBuffer src = buffer(size);
        fill(src, 0, size, 606);
        RegisteredRegion region = owner.register(target);
        RegionDescriptor d = region.descriptor();
        Connection toOwner = writer.connection(owner.localAddress());
        toOwner.write(new WriteBatch().add(src, 0, d, 0, 8), Duration.ofSeconds(30));
        // The owner goes away while (or before) a large write runs: the write ends, in bound, with an error.
        WriteBatch big = new WriteBatch();
        for (long off = 0; off < size; off += 1 << 20) {
            big.add(src, off, d, off, 1 << 20);
        }
        ExecutorService ex = threads(1);
        Future<?> w = ex.submit(() -> {
            toOwner.write(big, peerLossBound().multipliedBy(3));
            return null;
        });
        long t0 = System.nanoTime();
        owner.close();
        try {
            get(w);
        } catch (TransportException e) {
            assertThat(e.code()).as("code of %s", e).isIn(ErrorCode.PEER_LOST, ErrorCode.NETWORK,
                    ErrorCode.CANCELLED, ErrorCode.TIMEOUT);
        }
        assertThat(Duration.ofNanos(System.nanoTime() - t0)).isLessThan(peerLossBound().multipliedBy(3)
                .plus(timeoutSlack()));
        // The writer's own close fails its later writes at once.
        writer.close();
        assertThatThrownBy(() -> toOwner.write(new WriteBatch().add(src, 0, d, 0, 8), Duration.ofSeconds(5)))
                .isInstanceOf(TransportClosedException.class);
        if (provider().capabilities().contains(TransportCapability.NATIVE_ONE_SIDED_WRITE)) {
            assertThat(provider().capabilities()).contains(TransportCapability.ONE_SIDED_WRITE);
        }
    }

    /** A device-kind buffer with no memory behind it, to check that undeclared device support refuses. */
    private static final class FakeDeviceBuffer implements MemoryBuffer {
        private final long size;

        FakeDeviceBuffer(long size) {
            this.size = size;
        }

        @Override
        public long address() {
            return 0x1000_0000L; // never dereferenced: the transport must refuse the kind first
        }

        @Override
        public long size() {
            return size;
        }

        @Override
        public MemoryKind kind() {
            return MemoryKind.DEVICE;
        }

        @Override
        public MemoryBuffer slice(long offset, long length) {
            java.util.Objects.checkFromIndexSize(offset, length, size);
            return new FakeDeviceBuffer(length);
        }

        @Override
        public ByteBuffer asByteBuffer() {
            throw new UnsupportedOperationException("device memory");
        }

        @Override
        public void close() {
            // Owns nothing.
        }
    }
}
