package dev.kvtransfer.aeron;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.model.CommState;
import dev.kvtransfer.api.transport.Connection;
import dev.kvtransfer.api.transport.ConnectionManager;
import dev.kvtransfer.api.transport.TransportCapability;
import dev.kvtransfer.api.transport.TransportClosedException;
import dev.kvtransfer.api.transport.TransportConfig;
import dev.kvtransfer.api.transport.TransportException;
import dev.kvtransfer.api.transport.TransportProvider;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;
import org.junit.jupiter.params.provider.ValueSource;

import java.io.File;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.ServiceLoader;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.stream.LongStream;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;
import static org.awaitility.Awaitility.await;

/** Direct tests of the Aeron transport: two managers in one JVM talking UDP over loopback. */
@Timeout(value = 90, unit = TimeUnit.SECONDS)
class AeronTransportTest {
    private static final Duration T = Duration.ofSeconds(20);
    private final List<AutoCloseable> closeables = new ArrayList<>();
    private ExecutorService pool;
    private ConnectionManager a;
    private ConnectionManager b;

    @BeforeEach
    void start() {
        pool = Executors.newCachedThreadPool();
        a = manager("a", TransportConfig.builder());
        b = manager("b", TransportConfig.builder());
    }

    @AfterEach
    void stop() throws Exception {
        pool.shutdownNow();
        assertThat(pool.awaitTermination(20, TimeUnit.SECONDS)).as("test threads ended").isTrue();
        // managers first: nothing may write a buffer after it is freed
        for (AutoCloseable c : closeables) {
            if (c instanceof ConnectionManager) {
                c.close();
            }
        }
        for (AutoCloseable c : closeables) {
            c.close();
        }
        assertThat(EmbeddedDriver.running()).as("embedded drivers left running").isZero();
    }

    private ConnectionManager manager(String name, TransportConfig.Builder builder) {
        ConnectionManager m = new AeronTransportProvider().create(builder.name(name).defaultTimeout(T)
                .property(AeronSettings.PEER_TIMEOUT_MS, "1500").build());
        closeables.add(m);
        return m;
    }

    private OffHeapBuffer buffer(long size) {
        OffHeapBuffer buf = OffHeapBuffer.allocate(size);
        closeables.add(buf);
        return buf;
    }

    private <V> V get(Future<V> f) throws Exception {
        return f.get(60, TimeUnit.SECONDS);
    }

    @Test
    void providerIsDiscoveredWithItsCapabilities() {
        TransportProvider found = null;
        for (TransportProvider p : ServiceLoader.load(TransportProvider.class)) {
            if (p.name().equals("aeron")) {
                found = p;
            }
        }
        assertThat(found).isInstanceOf(AeronTransportProvider.class);
        assertThat(found.isAvailable()).as(String.valueOf(found.unavailabilityCause())).isTrue();
        assertThat(found.unavailabilityCause()).isNull();
        assertThat(found.capabilities()).containsExactlyInAnyOrder(TransportCapability.CROSS_PROCESS,
                TransportCapability.PEER_FAILURE_DETECTION, TransportCapability.ONE_SIDED_WRITE,
                TransportCapability.AUTHENTICATED);
    }

    @Test
    void localAddressIsTheBoundLoopbackPort() {
        // host:port of the UDP subscription, then the driver's identity and the IPC stream
        assertThat(a.localAddress()).matches("127\\.0\\.0\\.1:\\d+/inc/[0-9a-f]{16}/ipc/[0-9a-f-]+/\\d+");
        assertThat(a.localAddress()).isNotEqualTo(b.localAddress());
        assertThat(Address.parse(a.localAddress()).port()).isPositive();
        assertThat(Address.parse(a.localAddress()).driverId()).isEqualTo(Address.parse(b.localAddress()).driverId());
        assertThat(a.isRunning()).isTrue();
    }

    /** Sizes straddling the eager/rendezvous boundary, a multi-chunk message and a large one. */
    static LongStream sizes() {
        long eager = AeronSettings.from(TransportConfig.builder().build()).eagerLimit();
        return LongStream.of(0, 1, 7, 4096, eager - 1, eager, eager + 1, (1 << 20) + 3, 64L << 20);
    }

    @ParameterizedTest
    @MethodSource("sizes")
    void messagesOfEverySizeArriveWholeInBothDirections(long size) throws Exception {
        OffHeapBuffer src = buffer(size + 16);
        OffHeapBuffer dst = buffer(size + 16);
        TestPattern.fill(src, 5, size, size);
        TestPattern.clear(dst, 0, size + 16);
        Connection ab = a.connection(b.localAddress());
        Future<Connection> r = pool.submit(() -> b.recvConnect(2000, dst, 11, size, T));
        ab.send(2000, src, 5, size, T);
        Connection ba = get(r);
        assertThat(ba.peer()).isEqualTo(a.localAddress());
        TestPattern.assertPattern(dst, 11, size, size);
        // and back on the connection recvConnect returned
        TestPattern.fill(dst, 11, size, size + 1);
        Future<?> back = pool.submit(() -> ab.recv(2001, src, 5, size, T));
        ba.send(2001, dst, 11, size, T);
        get(back);
        TestPattern.assertPattern(src, 5, size, size + 1);
    }

    /**
     * {@code aeron.congestionControl} puts {@code cc=cubic} (the default: Aeron's CUBIC, for links whose bottleneck
     * queue is smaller than the window) or {@code cc=static} on the UDP subscription, and messages arrive whole
     * over UDP with either; another value is refused naming the key.
     */
    @Test
    void congestionControlIsCubicByDefaultAndStaticOnRequestAndBothCarryMessagesOverUdp() throws Exception {
        assertThat(((AeronConnectionManager) a).udpChannel()).endsWith("|cc=cubic");
        // c sends with Aeron's default MTU (1408: no IP fragmentation on a 1500-byte network), the smallest accepted
        ConnectionManager c = manager("c", TransportConfig.builder().property(AeronSettings.IPC, "false")
                .property(AeronSettings.CONGESTION_CONTROL, "STATIC").property(AeronSettings.MTU, "1408"));
        ConnectionManager d = manager("d", TransportConfig.builder().property(AeronSettings.IPC, "false"));
        assertThat(((AeronConnectionManager) c).udpChannel()).endsWith("|cc=static");
        long size = (16L << 20) + 5;
        OffHeapBuffer src = buffer(size);
        OffHeapBuffer dst = buffer(size);
        TestPattern.fill(src, 0, size, 77);
        TestPattern.clear(dst, 0, size);
        Connection cd = c.connection(d.localAddress());
        Future<Connection> r = pool.submit(() -> d.recvConnect(2002, dst, 0, size, T));
        cd.send(2002, src, 0, size, T);
        assertThat(get(r).peer()).isEqualTo(c.localAddress());
        TestPattern.assertPattern(dst, 0, size, 77);
        assertThatThrownBy(() -> AeronSettings.from(TransportConfig.builder()
                .property(AeronSettings.CONGESTION_CONTROL, "bbr").build()))
                .isInstanceOf(IllegalArgumentException.class)
                .hasMessageContaining("aeron.congestionControl = 'bbr'").hasMessageContaining("static or cubic");
        assertThatThrownBy(() -> AeronSettings.from(TransportConfig.builder().property(AeronSettings.MTU, "1376")
                .build())).isInstanceOf(IllegalArgumentException.class)
                .hasMessageContaining("aeron.mtu = 1376: must be a multiple of 32 in [1408, 65504]");
    }

    @Test
    void messagesSentBeforeTheReceiveIsPostedAreKeptInOrder() {
        OffHeapBuffer src = buffer(4 << 20);
        OffHeapBuffer dst = buffer(4 << 20);
        Connection ab = a.connection(b.localAddress());
        // small control messages and a large one, all before b posts anything
        for (int i = 0; i < 20; i++) {
            TestPattern.fill(src, i * 100, 100, 1000 + i);
            ab.send(19, src, i * 100, 100, T);
        }
        TestPattern.fill(src, 1 << 20, 2 << 20, 77);
        CompletableFuture<Void> large = CompletableFuture.runAsync(() -> ab.send(1024, src, 1 << 20, 2 << 20, T), pool);
        Connection ba = b.recvConnect(19, dst, 0, 100, T);
        TestPattern.assertPattern(dst, 0, 100, 1000);
        for (int i = 1; i < 20; i++) {
            ba.recv(19, dst, i * 100, 100, T);
            TestPattern.assertPattern(dst, i * 100, 100, 1000 + i);
        }
        ba.recv(1024, dst, 1 << 20, 2 << 20, T);
        large.orTimeout(30, TimeUnit.SECONDS).join();
        TestPattern.assertPattern(dst, 1 << 20, 2 << 20, 77);
        assertThat(((AeronConnectionManager) b).earlyBufferedBytes()).isZero();
    }

    @Test
    void tagsAreIndependentAndOrderIsKeptPerTag() throws Exception {
        OffHeapBuffer src = buffer(2 << 20);
        OffHeapBuffer dst = buffer(2 << 20);
        Connection ab = a.connection(b.localAddress());
        int n = 50;
        for (int i = 0; i < n; i++) {
            TestPattern.fill(src, i * 1000L, 1000, i);
            ab.send(3000, src, i * 1000L, 1000, T);
        }
        TestPattern.fill(src, 900_000, 333_333, 999);
        Future<?> other = pool.submit(() -> ab.send(3001, src, 900_000, 333_333, T));
        Connection ba = b.connection(a.localAddress());
        // tag 3001 first although 3000's messages came earlier
        ba.recv(3001, dst, 900_000, 333_333, T);
        get(other);
        TestPattern.assertPattern(dst, 900_000, 333_333, 999);
        for (int i = 0; i < n; i++) {
            ba.recv(3000, dst, i * 1000L, 1000, T);
            TestPattern.assertPattern(dst, i * 1000L, 1000, i);
        }
    }

    @Test
    void recvConnectTellsWhichPeerSentAndRepliesReachIt() throws Exception {
        ConnectionManager c = manager("c", TransportConfig.builder());
        OffHeapBuffer buf = buffer(64);
        TestPattern.fill(buf, 0, 8, 1);
        TestPattern.fill(buf, 8, 8, 2);
        c.connection(b.localAddress()).send(19, buf, 8, 8, T);
        Connection fromC = b.recvConnect(19, buf, 16, 8, T);
        assertThat(fromC.peer()).isEqualTo(c.localAddress());
        TestPattern.assertPattern(buf, 16, 8, 2);
        a.connection(b.localAddress()).send(19, buf, 0, 8, T);
        Connection fromA = b.recvConnect(19, buf, 24, 8, T);
        assertThat(fromA.peer()).isEqualTo(a.localAddress());
        TestPattern.assertPattern(buf, 24, 8, 1);
        assertThat(b.connection(a.localAddress())).isSameAs(fromA);
        assertThat(b.getConnections(new CommState("aeron", List.of(c.localAddress(), a.localAddress()), -1)))
                .containsExactly(fromC, fromA);
        Future<?> reply = pool.submit(() -> c.connection(b.localAddress()).recv(42, buf, 40, 1, T));
        TestPattern.fill(buf, 32, 1, 5);
        fromC.send(42, buf, 32, 1, T);
        get(reply);
        TestPattern.assertPattern(buf, 40, 1, 5);
    }

    @Test
    void concurrentSendersOnDifferentTagsAllArrive() throws Exception {
        int threads = 4;
        long size = 3 << 20;
        OffHeapBuffer src = buffer(size * threads);
        OffHeapBuffer dst = buffer(size * threads);
        Connection ab = a.connection(b.localAddress());
        Connection ba = b.connection(a.localAddress());
        List<Future<?>> all = new ArrayList<>();
        for (int t = 0; t < threads; t++) {
            long off = t * size;
            int tag = 5000 + t;
            TestPattern.fill(src, off, size, tag);
            all.add(pool.submit(() -> {
                for (int k = 0; k < 4; k++) {
                    ab.send(tag, src, off + k * (size / 4), size / 4, T);
                }
            }));
            all.add(pool.submit(() -> {
                for (int k = 0; k < 4; k++) {
                    ba.recv(tag, dst, off + k * (size / 4), size / 4, T);
                }
            }));
        }
        for (Future<?> f : all) {
            get(f);
        }
        for (int t = 0; t < threads; t++) {
            TestPattern.assertPattern(dst, t * size, size, 5000 + t);
        }
    }

    @ParameterizedTest
    @ValueSource(longs = {100, 1 << 20})
    void aReceiveOfAnotherLengthFailsMalformed(long size) throws Exception {
        OffHeapBuffer buf = buffer(4 << 20);
        Connection ab = a.connection(b.localAddress());
        Future<?> send = pool.submit(() -> ab.send(7000, buf, 0, size, T));
        assertThatThrownBy(() -> b.recvConnect(7000, buf, 2 << 20, size + 1, T))
                .isInstanceOfSatisfying(TransportException.class, e -> assertThat(e.code()).isEqualTo(ErrorCode.MALFORMED))
                .hasMessageContaining(String.valueOf(size));
        if (size > ((AeronConnectionManager) a).settings().eagerLimit()) {
            assertThatThrownBy(() -> get(send)).hasCauseInstanceOf(TransportException.class)
                    .cause().satisfies(e -> assertThat(((TransportException) e).code()).isEqualTo(ErrorCode.MALFORMED));
        } else {
            get(send);
        }
        // the pair still works afterwards
        TestPattern.fill(buf, 0, 64, 3);
        ab.send(7001, buf, 0, 64, T);
        b.connection(a.localAddress()).recv(7001, buf, 1024, 64, T);
        TestPattern.assertPattern(buf, 1024, 64, 3);
    }

    @Test
    void deadlinesFailWithTimeout() {
        OffHeapBuffer buf = buffer(1 << 20);
        Connection ba = b.connection(a.localAddress());
        long t0 = System.nanoTime();
        assertThatThrownBy(() -> ba.recv(8000, buf, 0, 10, Duration.ofMillis(300)))
                .isInstanceOfSatisfying(TransportException.class, e -> assertThat(e.code()).isEqualTo(ErrorCode.TIMEOUT));
        assertThatThrownBy(() -> a.recvConnect(8000, buf, 0, 10, Duration.ofMillis(300)))
                .isInstanceOfSatisfying(TransportException.class, e -> assertThat(e.code()).isEqualTo(ErrorCode.TIMEOUT));
        // a large send nobody receives
        assertThatThrownBy(() -> a.connection(b.localAddress()).send(8001, buf, 0, 1 << 20, Duration.ofMillis(300)))
                .isInstanceOfSatisfying(TransportException.class, e -> assertThat(e.code()).isEqualTo(ErrorCode.TIMEOUT));
        // nobody listens at this address
        assertThatThrownBy(() -> a.connection("127.0.0.1:9").send(8002, buf, 0, 8, Duration.ofMillis(300)))
                .isInstanceOfSatisfying(TransportException.class, e -> assertThat(e.code()).isEqualTo(ErrorCode.TIMEOUT));
        assertThat(System.nanoTime() - t0).isLessThan(TimeUnit.SECONDS.toNanos(10));
        // the cancelled large send does not linger: the next message of that tag is the next one sent
        TestPattern.fill(buf, 0, 2000, 8);
        a.connection(b.localAddress()).send(8001, buf, 0, 2000, T);
        b.connection(a.localAddress()).recv(8001, buf, 4096, 2000, T);
        TestPattern.assertPattern(buf, 4096, 2000, 8);
    }

    @Test
    void aShortDeadlineHoldsWhileAnotherSenderWaitsLongerForTheSamePeer() throws Exception {
        OffHeapBuffer buf = buffer(64);
        Connection nowhere = a.connection("127.0.0.1:9");
        Future<?> patient = pool.submit(() -> nowhere.send(1, buf, 0, 8, Duration.ofSeconds(5)));
        await().atMost(Duration.ofSeconds(5)).until(() -> Thread.getAllStackTraces().values().stream()
                .anyMatch(st -> java.util.Arrays.stream(st).anyMatch(f -> f.getMethodName().equals("establish"))));
        long t0 = System.nanoTime();
        assertThatThrownBy(() -> nowhere.send(2, buf, 0, 8, Duration.ofMillis(300)))
                .isInstanceOfSatisfying(TransportException.class, e -> assertThat(e.code()).isEqualTo(ErrorCode.TIMEOUT));
        assertThat(System.nanoTime() - t0).isLessThan(TimeUnit.SECONDS.toNanos(2));
        assertThatThrownBy(() -> get(patient)).cause().isInstanceOfSatisfying(TransportException.class,
                e -> assertThat(e.code()).isIn(ErrorCode.TIMEOUT, ErrorCode.PEER_LOST));
    }

    @Test
    void closeWakesBlockedCallsAndReleasesEverything() throws Exception {
        OffHeapBuffer buf = buffer(1 << 20);
        Connection ba = b.connection(a.localAddress());
        ba.send(1, buf, 0, 1, T); // establishes the pair
        a.recvConnect(1, buf, 0, 1, T);
        Future<?> blockedRecv = pool.submit(() -> ba.recv(9000, buf, 0, 10, Duration.ofSeconds(60)));
        Future<?> blockedAny = pool.submit(() -> b.recvConnect(9001, buf, 0, 10, Duration.ofSeconds(60)));
        Future<?> blockedSend = pool.submit(() -> ba.send(9002, buf, 0, 1 << 20, Duration.ofSeconds(60)));
        await().atMost(Duration.ofSeconds(10)).until(() -> threadsParkedIn("AeronConnectionManager") >= 3);
        long t0 = System.nanoTime();
        b.close();
        for (Future<?> f : List.of(blockedRecv, blockedAny, blockedSend)) {
            assertThatThrownBy(() -> f.get(5, TimeUnit.SECONDS)).hasCauseInstanceOf(TransportClosedException.class);
        }
        assertThat(System.nanoTime() - t0).isLessThan(TimeUnit.SECONDS.toNanos(5));
        assertThat(b.isRunning()).isFalse();
        b.close(); // idempotent
        assertThatThrownBy(() -> ba.send(1, buf, 0, 1, T)).isInstanceOf(TransportClosedException.class);
        assertThatThrownBy(() -> b.recvConnect(1, buf, 0, 1, T)).isInstanceOf(TransportClosedException.class);
        assertThatThrownBy(() -> b.connection(a.localAddress())).isInstanceOf(TransportClosedException.class);
        assertThat(AeronRuntime.running()).as("a still runs on the shared runtime").isEqualTo(1);
    }

    private static long threadsParkedIn(String cls) {
        return Thread.getAllStackTraces().entrySet().stream()
                .filter(e -> e.getKey().getState() == Thread.State.TIMED_WAITING)
                .filter(e -> java.util.Arrays.stream(e.getValue()).anyMatch(f -> f.getClassName().contains(cls)
                        && f.getMethodName().equals("await")))
                .count();
    }

    @Test
    void theLastManagerDeletesTheDriverDirectory() {
        File shm = new File("/dev/shm").isDirectory() ? new File("/dev/shm") : new File(System.getProperty("java.io.tmpdir"));
        long pid = ProcessHandle.current().pid();
        assertThat(EmbeddedDriver.running()).isEqualTo(1); // a and b share one driver
        a.close();
        assertThat(EmbeddedDriver.running()).isEqualTo(1);
        b.close();
        assertThat(EmbeddedDriver.running()).isZero();
        File[] left = shm.listFiles((d, n) -> n.startsWith("kvtransfer-aeron-" + pid + "-"));
        assertThat(left).isEmpty();
    }

    @Test
    void deviceMemoryIsRefused() {
        DeviceBuffer dev = new DeviceBuffer(1 << 20);
        Connection ab = a.connection(b.localAddress());
        assertThatThrownBy(() -> ab.send(1, dev, 0, 1024, T)).isInstanceOf(UnsupportedOperationException.class)
                .hasMessageContaining("DEVICE");
        assertThatThrownBy(() -> ab.recv(1, dev, 0, 1024, T)).isInstanceOf(UnsupportedOperationException.class);
        assertThatThrownBy(() -> b.recvConnect(1, dev, 0, 1024, T)).isInstanceOf(UnsupportedOperationException.class);
    }

    @Test
    void aClosedPeerFailsTheCallsWaitingOnItWithPeerLost() throws Exception {
        ConnectionManager c = manager("c", TransportConfig.builder());
        OffHeapBuffer buf = buffer(1 << 20);
        Connection cb = c.connection(b.localAddress());
        cb.send(1, buf, 0, 1, T);
        Connection bc = b.recvConnect(1, buf, 0, 1, T);
        Future<?> waiting = pool.submit(() -> bc.recv(10, buf, 0, 1 << 20, Duration.ofSeconds(60)));
        // An orderly close is told to the callers waiting on the peer, not logged as a loss.
        java.util.List<String> logged = new java.util.concurrent.CopyOnWriteArrayList<>();
        java.util.logging.Logger log = java.util.logging.Logger.getLogger("dev.kvtransfer.aeron");
        java.util.logging.Handler h = new java.util.logging.Handler() {
            @Override
            public void publish(java.util.logging.LogRecord r) {
                logged.add(r.getMessage());
            }

            @Override
            public void flush() {
            }

            @Override
            public void close() {
            }
        };
        log.addHandler(h);
        long t0 = System.nanoTime();
        try {
            c.close();
            assertThatThrownBy(() -> waiting.get(20, TimeUnit.SECONDS)).cause()
                    .isInstanceOfSatisfying(TransportException.class, e -> assertThat(e.code()).isEqualTo(
                            ErrorCode.PEER_LOST)).hasMessageContaining("it closed its stream");
        } finally {
            log.removeHandler(h);
        }
        assertThat(logged).as("lines logged while a peer closed").noneMatch(l -> l.contains(" lost: "));
        assertThat(System.nanoTime() - t0).isLessThan(TimeUnit.SECONDS.toNanos(10));
        assertThatThrownBy(() -> bc.send(1, buf, 0, 1, T))
                .isInstanceOfSatisfying(TransportException.class, e -> assertThat(e.code()).isEqualTo(ErrorCode.PEER_LOST));
        // b keeps serving others
        TestPattern.fill(buf, 0, 100, 4);
        a.connection(b.localAddress()).send(11, buf, 0, 100, T);
        b.recvConnect(11, buf, 1000, 100, T);
        TestPattern.assertPattern(buf, 1000, 100, 4);
    }

    @Test
    void earlyMessagesBeyondTheBoundWaitInsteadOfBeingLost() throws Exception {
        ConnectionManager small = manager("small", TransportConfig.builder()
                .property(AeronSettings.EARLY_BUFFER_BYTES, String.valueOf(64 << 10)));
        int n = 200;
        int size = 8 << 10;
        OffHeapBuffer src = buffer((long) n * size);
        OffHeapBuffer dst = buffer((long) n * size);
        Connection as = a.connection(small.localAddress());
        AtomicLong maxSeen = new AtomicLong();
        for (int i = 0; i < n; i++) {
            TestPattern.fill(src, (long) i * size, size, i);
            as.send(12, src, (long) i * size, size, T);
            maxSeen.accumulateAndGet(((AeronConnectionManager) small).earlyBufferedBytes(), Math::max);
        }
        assertThat(maxSeen.get()).isLessThanOrEqualTo(64 << 10);
        Connection sa = small.recvConnect(12, dst, 0, size, T);
        for (int i = 1; i < n; i++) {
            sa.recv(12, dst, (long) i * size, size, T);
            maxSeen.accumulateAndGet(((AeronConnectionManager) small).earlyBufferedBytes(), Math::max);
        }
        assertThat(maxSeen.get()).isLessThanOrEqualTo(64 << 10);
        for (int i = 0; i < n; i++) {
            TestPattern.assertPattern(dst, (long) i * size, size, i);
        }
    }

    @Test
    void aMessageLargerThanTwoGibibytesArrivesWhole() throws Exception {
        long size = (2L << 30) + 12_345;
        OffHeapBuffer src = buffer(size);
        OffHeapBuffer dst = buffer(size);
        TestPattern.fill(src, 0, size, 31);
        Future<Connection> r = pool.submit(() -> b.recvConnect(2048, dst, 0, size, Duration.ofSeconds(60)));
        a.connection(b.localAddress()).send(2048, src, 0, size, Duration.ofSeconds(60));
        get(r);
        TestPattern.assertPattern(dst, 0, size, 31);
    }
}
