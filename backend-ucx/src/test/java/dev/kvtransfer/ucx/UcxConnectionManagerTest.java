package dev.kvtransfer.ucx;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.memory.MemoryKind;
import dev.kvtransfer.api.transport.Connection;
import dev.kvtransfer.api.transport.ConnectionManager;
import dev.kvtransfer.api.transport.TransportClosedException;
import dev.kvtransfer.api.transport.TransportCapability;
import dev.kvtransfer.api.transport.TransportConfig;
import dev.kvtransfer.api.transport.TransportException;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.lang.management.ManagementFactory;
import java.lang.management.ThreadMXBean;
import java.nio.ByteBuffer;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;

import static dev.kvtransfer.ucx.UcxTestSupport.buffer;
import static dev.kvtransfer.ucx.UcxTestSupport.config;
import static dev.kvtransfer.ucx.UcxTestSupport.fill;
import static dev.kvtransfer.ucx.UcxTestSupport.verify;
import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/** Direct tests of the UCX manager, two or more managers in this JVM over loopback. */
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class UcxConnectionManagerTest {
    private final List<ConnectionManager> managers = new ArrayList<>();
    private final ExecutorService pool = Executors.newCachedThreadPool(r -> {
        Thread t = new Thread(r, "ucx-test-worker");
        t.setDaemon(true);
        return t;
    });

    @AfterEach
    void tearDown() throws Exception {
        pool.shutdownNow();
        for (ConnectionManager m : managers) {
            m.close();
        }
        assertThat(pool.awaitTermination(30, TimeUnit.SECONDS)).isTrue();
    }

    private UcxConnectionManager manager(String name) {
        return manager(config(name));
    }

    private UcxConnectionManager manager(TransportConfig c) {
        UcxConnectionManager m = (UcxConnectionManager) new UcxTransportProvider().create(c);
        managers.add(m);
        return m;
    }

    private static <T> T get(Future<T> f) throws Exception {
        return f.get(60, TimeUnit.SECONDS);
    }

    @Test
    void localAddressIsHostAndBoundPort() {
        UcxConnectionManager a = manager("addr");
        assertThat(a.localAddress()).matches("127\\.0\\.0\\.1:[1-9][0-9]*");
        assertThat(a.isRunning()).isTrue();
    }

    @Test
    void sendAndReceiveEverySizeBothWaysByteExact() throws Exception {
        UcxConnectionManager a = manager("a");
        UcxConnectionManager b = manager("b");
        Connection ab = a.connection(b.localAddress());
        Connection ba = b.connection(a.localAddress());
        assertThat(ab.peer()).isEqualTo(b.localAddress());
        assertThat(ba.peer()).isEqualTo(a.localAddress());
        long[] sizes = {0, 1, 8, 4097, 65_537, 1 << 20, (16 << 20) + 5};
        for (long size : sizes) {
            for (Connection[] dir : new Connection[][] {{ab, ba}, {ba, ab}}) {
                MemoryBuffer src = buffer(size + 16);
                MemoryBuffer dst = buffer(size + 16);
                fill(src, 3, size, size ^ dir.hashCode());
                Future<?> sent = pool.submit(() -> dir[0].send(1024, src, 3, size));
                dir[1].recv(1024, dst, 7, size);
                get(sent);
                verify(dst, 7, size, size ^ dir.hashCode());
            }
        }
    }

    @Test
    void smallSendsCompleteBeforeTheReceiverExistsAndArriveInOrder() {
        UcxConnectionManager a = manager("eager-a");
        UcxConnectionManager b = manager("eager-b");
        Connection ab = a.connection(b.localAddress());
        MemoryBuffer src = buffer(4096);
        for (int i = 0; i < 20; i++) {
            fill(src, 0, 100 + i, 500 + i);
            ab.send(19, src, 0, 100 + i, Duration.ofSeconds(10));
        }
        Connection ba = b.connection(a.localAddress());
        MemoryBuffer dst = buffer(4096);
        for (int i = 0; i < 20; i++) {
            ba.recv(19, dst, 0, 100 + i);
            verify(dst, 0, 100 + i, 500 + i);
        }
    }

    @Test
    void recvConnectNamesTheSenderAndRepliesGoBack() throws Exception {
        UcxConnectionManager server = manager("server");
        List<UcxConnectionManager> clients = List.of(manager("c1"), manager("c2"), manager("c3"));
        MemoryBuffer out = buffer(64);
        for (UcxConnectionManager c : clients) {
            fill(out, 0, 64, c.localAddress().hashCode());
            c.connection(server.localAddress()).send(19, out, 0, 64);
        }
        MemoryBuffer in = buffer(64);
        List<String> seen = new ArrayList<>();
        for (int i = 0; i < clients.size(); i++) {
            Connection back = server.recvConnect(19, in, 0, 64, Duration.ofSeconds(30));
            verify(in, 0, 64, back.peer().hashCode());
            seen.add(back.peer());
            fill(out, 0, 32, back.peer().hashCode() + 1);
            back.send(42, out, 0, 32);
        }
        assertThat(seen).containsExactlyInAnyOrder(clients.stream().map(ConnectionManager::localAddress)
                .toArray(String[]::new));
        for (UcxConnectionManager c : clients) {
            MemoryBuffer reply = buffer(32);
            c.connection(server.localAddress()).recv(42, reply, 0, 32);
            verify(reply, 0, 32, c.localAddress().hashCode() + 1);
        }
    }

    @Test
    void crossedDialsShareOneConnectionPerPeerAndKeepOrder() throws Exception {
        UcxConnectionManager a = manager("x-a");
        UcxConnectionManager b = manager("x-b");
        int n = 200;
        List<Future<?>> fs = new ArrayList<>();
        for (UcxConnectionManager[] p : new UcxConnectionManager[][] {{a, b}, {b, a}}) {
            Connection out = p[0].connection(p[1].localAddress());
            Connection in = p[1].connection(p[0].localAddress());
            long seed = p[0] == a ? 10_000 : 20_000;
            fs.add(pool.submit(() -> {
                MemoryBuffer src = buffer(70_000);
                for (int i = 0; i < n; i++) {
                    int len = 1 + (i * 347) % 70_000;
                    fill(src, 0, len, seed + i);
                    out.send(2048, src, 0, len);
                }
                return null;
            }));
            fs.add(pool.submit(() -> {
                MemoryBuffer dst = buffer(70_000);
                for (int i = 0; i < n; i++) {
                    int len = 1 + (i * 347) % 70_000;
                    in.recv(2048, dst, 0, len);
                    verify(dst, 0, len, seed + i);
                }
                return null;
            }));
        }
        for (Future<?> f : fs) {
            get(f);
        }
        assertThat(a.connection(b.localAddress())).isSameAs(a.connection(b.localAddress()));
    }

    @Test
    void lengthMismatchIsMalformedAndTheConnectionStaysUsable() {
        UcxConnectionManager a = manager("len-a");
        UcxConnectionManager b = manager("len-b");
        Connection ab = a.connection(b.localAddress());
        Connection ba = b.connection(a.localAddress());
        MemoryBuffer src = buffer(256);
        MemoryBuffer dst = buffer(256);
        fill(src, 0, 100, 1);
        ab.send(7000, src, 0, 100);
        assertThatThrownBy(() -> ba.recv(7000, dst, 0, 64, Duration.ofSeconds(10)))
                .isInstanceOfSatisfying(TransportException.class,
                        e -> assertThat(e.code()).isEqualTo(ErrorCode.MALFORMED));
        fill(src, 0, 30, 2);
        ab.send(7000, src, 0, 30);
        assertThatThrownBy(() -> ba.recv(7000, dst, 0, 64, Duration.ofSeconds(10)))
                .isInstanceOfSatisfying(TransportException.class,
                        e -> assertThat(e.code()).isEqualTo(ErrorCode.MALFORMED)
                                .as(e.getMessage()).isNotNull());
        fill(src, 0, 50, 3);
        ab.send(7000, src, 0, 50);
        ba.recv(7000, dst, 0, 50);
        verify(dst, 0, 50, 3);
    }

    @Test
    void recvDeadlineIsTimeoutAndLaterMessagesStillArrive() {
        UcxConnectionManager a = manager("t-a");
        UcxConnectionManager b = manager("t-b");
        Connection ba = b.connection(a.localAddress());
        MemoryBuffer dst = buffer(8);
        long t0 = System.nanoTime();
        assertThatThrownBy(() -> ba.recv(7100, dst, 0, 8, Duration.ofMillis(300)))
                .isInstanceOfSatisfying(TransportException.class,
                        e -> assertThat(e.code()).isEqualTo(ErrorCode.TIMEOUT));
        long tookMs = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - t0);
        assertThat(tookMs).isBetween(295L, 3000L);
        assertThatThrownBy(() -> a.recvConnect(7101, dst, 0, 8, Duration.ofMillis(200)))
                .isInstanceOfSatisfying(TransportException.class,
                        e -> assertThat(e.code()).isEqualTo(ErrorCode.TIMEOUT));
        MemoryBuffer src = buffer(8);
        fill(src, 0, 8, 71);
        a.connection(b.localAddress()).send(7100, src, 0, 8);
        ba.recv(7100, dst, 0, 8);
        verify(dst, 0, 8, 71);
    }

    @Test
    void sendDeadlineWithAPeerThatDoesNotDiscardIsTimeoutBreaksTheConnectionAndANewOneWorks() {
        // The fallback of AbandonedSends (UcxAbandonedSendTest covers the exchange itself): a peer that ignores
        // the announcement of an abandoned send, as one without the protocol would, gets its connection closed
        // half the close grace later, and a fresh one works.
        UcxConnectionManager a = manager(TransportConfig.builder().name("st-a").defaultTimeout(Duration.ofSeconds(30))
                .property(UcxSettings.CLOSE_GRACE, "1000").build());
        UcxConnectionManager b = manager("st-b");
        b.ignoreAbandonedSendAnnouncementsForTest(true);
        Connection ab = a.connection(b.localAddress());
        Connection ba = b.connection(a.localAddress());
        MemoryBuffer big = buffer(16 << 20);
        fill(big, 0, 16 << 20, 9);
        // Rendezvous-sized and nobody receives: the send cannot complete.
        long t0 = System.nanoTime();
        assertThatThrownBy(() -> ab.send(5000, big, 0, 16 << 20, Duration.ofMillis(300)))
                .isInstanceOfSatisfying(TransportException.class,
                        e -> assertThat(e.code()).isEqualTo(ErrorCode.TIMEOUT));
        assertThat(TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - t0)).isBetween(795L, 3000L);
        assertThat(a.abandonedStateForTest()[1]).as("exchanges that fell back to closing").isEqualTo(1);
        MemoryBuffer small = buffer(64);
        assertThatThrownBy(() -> ab.send(5001, small, 0, 64, Duration.ofSeconds(5)))
                .isInstanceOfSatisfying(TransportException.class,
                        e -> assertThat(e.code()).isEqualTo(ErrorCode.NETWORK));
        // A fresh connection to the same peer works both ways; the peer drops its stale one.
        Connection ab2 = a.connection(b.localAddress());
        assertThat(ab2).isNotSameAs(ab);
        fill(small, 0, 64, 33);
        ab2.send(5002, small, 0, 64);
        Connection ba2 = b.recvConnect(5002, small, 0, 64, Duration.ofSeconds(10));
        verify(small, 0, 64, 33);
        assertThat(ba2.peer()).isEqualTo(a.localAddress());
        assertThat(ba2).isNotSameAs(ba);
        fill(small, 0, 64, 34);
        ba2.send(5003, small, 0, 64);
        MemoryBuffer in = buffer(64);
        ab2.recv(5003, in, 0, 64);
        verify(in, 0, 64, 34);
        assertThatThrownBy(() -> ba.recv(5004, in, 0, 64, Duration.ofSeconds(5)))
                .isInstanceOfSatisfying(TransportException.class,
                        e -> assertThat(e.code()).isEqualTo(ErrorCode.PEER_LOST));
    }

    @Test
    void closeWakesBlockedCallsAndLaterCallsFailClosed() throws Exception {
        UcxConnectionManager a = manager("cl-a");
        UcxConnectionManager b = manager("cl-b");
        Connection ba = b.connection(a.localAddress());
        MemoryBuffer d1 = buffer(8);
        MemoryBuffer d2 = buffer(8);
        CountDownLatch started = new CountDownLatch(2);
        Future<?> recv = pool.submit(() -> {
            started.countDown();
            ba.recv(7200, d1, 0, 8, Duration.ofSeconds(60));
            return null;
        });
        Future<?> accept = pool.submit(() -> {
            started.countDown();
            b.recvConnect(7201, d2, 0, 8, Duration.ofSeconds(60));
            return null;
        });
        assertThat(started.await(10, TimeUnit.SECONDS)).isTrue();
        b.close();
        b.close();
        for (Future<?> f : List.of(recv, accept)) {
            assertThatThrownBy(() -> get(f)).hasCauseInstanceOf(TransportClosedException.class);
        }
        assertThat(b.isRunning()).isFalse();
        assertThatThrownBy(() -> ba.send(7200, d1, 0, 8)).isInstanceOf(TransportClosedException.class);
        assertThatThrownBy(() -> b.connection(a.localAddress())).isInstanceOf(TransportClosedException.class);
        assertThatThrownBy(() -> b.recvConnect(1, d1, 0, 8)).isInstanceOf(TransportClosedException.class);
        assertThat(Thread.getAllStackTraces().keySet().stream()
                .filter(t -> t.getName().equals("ucx-progress-cl-b") && t.isAlive())).isEmpty();
        assertThat(a.isRunning()).isTrue();
    }

    @Test
    void peerCloseFailsBlockedReceiveWithPeerLost() throws Exception {
        UcxConnectionManager a = manager("pl-a");
        UcxConnectionManager b = manager("pl-b");
        Connection ba = b.connection(a.localAddress());
        // Make sure the connection is up first (a message each way).
        MemoryBuffer m = buffer(8);
        fill(m, 0, 8, 5);
        ba.send(1, m, 0, 8);
        a.recvConnect(1, m, 0, 8).send(2, m, 0, 8);
        ba.recv(2, m, 0, 8);
        CountDownLatch started = new CountDownLatch(1);
        Future<?> recv = pool.submit(() -> {
            started.countDown();
            ba.recv(7600, m, 0, 8, Duration.ofSeconds(60));
            return null;
        });
        assertThat(started.await(10, TimeUnit.SECONDS)).isTrue();
        long t0 = System.nanoTime();
        a.close();
        assertThatThrownBy(() -> get(recv)).cause().isInstanceOfSatisfying(TransportException.class,
                e -> assertThat(e.code()).isEqualTo(ErrorCode.PEER_LOST));
        assertThat(TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - t0)).isLessThan(10_000);
        assertThatThrownBy(() -> ba.recv(7601, m, 0, 8, Duration.ofSeconds(30)))
                .isInstanceOfSatisfying(TransportException.class,
                        e -> assertThat(e.code()).isEqualTo(ErrorCode.PEER_LOST));
        assertThat(b.isRunning()).isTrue();
    }

    @Test
    void dialingNobodyFailsWithPeerLostOrTimeout() {
        UcxConnectionManager a = manager("nobody");
        Connection c = a.connection("127.0.0.1:1");
        MemoryBuffer m = buffer(8);
        assertThatThrownBy(() -> c.send(1, m, 0, 8, Duration.ofSeconds(10)))
                .isInstanceOfSatisfying(TransportException.class,
                        e -> assertThat(e.code()).isIn(ErrorCode.PEER_LOST, ErrorCode.TIMEOUT));
        assertThat(a.isRunning()).isTrue();
    }

    @Test
    void explicitRegistrationMapsEachBufferOnceAndMovesBytes() throws Exception {
        TransportConfig c = TransportConfig.builder().name("reg-a")
                .property(UcxSettings.REGISTRATION, "explicit").build();
        UcxConnectionManager a = manager(c);
        UcxConnectionManager b = manager(TransportConfig.builder().name("reg-b")
                .property(UcxSettings.REGISTRATION, "explicit").build());
        roundTrips(a, b, 3000, 4 << 20, 3, 90);
        assertThat(a.explicitRegistrations()).isEqualTo(1);
        assertThat(b.explicitRegistrations()).isEqualTo(1);
    }

    @Test
    void badPropertiesAreRejectedByName() {
        assertThatThrownBy(() -> new UcxConnectionManager(TransportConfig.builder()
                .property(UcxSettings.REGISTRATION, "sometimes").build()))
                .isInstanceOf(IllegalArgumentException.class).hasMessageContaining("ucx.registration");
        assertThatThrownBy(() -> new UcxConnectionManager(TransportConfig.builder()
                .property(UcxSettings.SPIN_MICROS, "-1").build()))
                .isInstanceOf(IllegalArgumentException.class).hasMessageContaining("ucx.spinMicros = '-1'");
        assertThatThrownBy(() -> new UcxConnectionManager(TransportConfig.builder()
                .property(UcxSettings.ONE_SIDED, "software").build()))
                .isInstanceOf(IllegalArgumentException.class).hasMessageContaining("ucx.oneSided = 'software'")
                .hasMessageContaining("'auto', 'native' or 'emulated'");
        assertThatThrownBy(() -> new UcxConnectionManager(TransportConfig.builder()
                .property("ucx.spinMicro", "5").build()))
                .isInstanceOf(IllegalArgumentException.class)
                .hasMessage("unknown transport property ucx.spinMicro = '5'; known: " + String.join(", ",
                        new java.util.TreeSet<>(UcxSettings.knownKeys())) + ", ucx.config.<UCX setting>");
        assertThatThrownBy(() -> new UcxConnectionManager(TransportConfig.builder()
                .property("ucx.config.tls", "tcp").build()))
                .isInstanceOf(IllegalArgumentException.class).hasMessageContaining("ucx.config.tls = 'tcp'")
                .hasMessageContaining("UCX setting name");
    }

    @Test
    void pollConnectReturnsNullWithoutThrowingAndTakesAMessageThatIsAlreadyThere() throws Exception {
        UcxConnectionManager a = manager("poll-a");
        UcxConnectionManager b = manager("poll-b");
        MemoryBuffer m = buffer(64);
        long t0 = System.nanoTime();
        assertThat(a.pollConnect(7700, m, 0, 64, Duration.ZERO)).isNull();
        assertThat(a.pollConnect(7700, m, 0, 64, Duration.ofMillis(50))).isNull();
        assertThat(Duration.ofNanos(System.nanoTime() - t0)).isGreaterThanOrEqualTo(Duration.ofMillis(45));
        // Long waits do not overflow.
        fill(m, 0, 64, 77);
        b.connection(a.localAddress()).send(7700, m, 0, 64);
        MemoryBuffer in = buffer(64);
        Connection c = a.pollConnect(7700, in, 0, 64, Duration.ofSeconds(Long.MAX_VALUE));
        assertThat(c.peer()).isEqualTo(b.localAddress());
        verify(in, 0, 64, 77);
        // A message that is already here is taken by a non-blocking poll.
        b.connection(a.localAddress()).send(7701, m, 0, 64);
        Connection[] got = new Connection[1];
        org.awaitility.Awaitility.await().atMost(Duration.ofSeconds(10)).pollInterval(Duration.ofMillis(1))
                .until(() -> (got[0] = a.pollConnect(7701, in, 0, 64, Duration.ZERO)) != null);
        verify(in, 0, 64, 77);
        // A wrong length is MALFORMED, not null, and consumes the message.
        b.connection(a.localAddress()).send(7702, m, 0, 64);
        assertThatThrownBy(() -> a.pollConnect(7702, in, 0, 32, Duration.ofSeconds(10)))
                .isInstanceOfSatisfying(TransportException.class,
                        e -> assertThat(e.code()).isEqualTo(ErrorCode.MALFORMED));
        assertThat(a.pollConnect(7702, in, 0, 32, Duration.ofMillis(20))).isNull();
        assertThat(a.errorCount()).isZero();
    }

    @Test
    void withoutTheSpinWindowBytesStillMove() throws Exception {
        // ucx.spinMicros=0: the progress thread sleeps in epoll right after each piece of work.
        UcxConnectionManager a = manager(TransportConfig.builder().name("spin0-a")
                .property(UcxSettings.SPIN_MICROS, "0").build());
        UcxConnectionManager b = manager(TransportConfig.builder().name("spin0-b")
                .property(UcxSettings.SPIN_MICROS, "0").build());
        roundTrips(a, b, 3100, (1 << 20) + 3, 4, 120);
    }

    @Test
    void withoutCmaBytesStillMove() throws Exception {
        assertThat(manager("cma-default").settings().ucxConfig()).containsEntry("TLS", UcxSettings.SHM_TLS + ",cma");
        UcxConnectionManager a = manager(TransportConfig.builder().name("nocma-a").property(UcxSettings.CMA, "false")
                .build());
        UcxConnectionManager b = manager(TransportConfig.builder().name("nocma-b").property(UcxSettings.CMA, "false")
                .build());
        assertThat(a.settings().ucxConfig()).containsEntry("TLS", UcxSettings.SHM_TLS);
        roundTrips(a, b, 3200, (4 << 20) + 5, 3, 130);
    }

    @Test
    void smallSendsAreCopiedSoTheCallersBufferIsFreeAtOnceAndOrderHoldsWithLargeOnes() throws Exception {
        UcxConnectionManager a = manager("buf-a");
        UcxConnectionManager b = manager("buf-b");
        Connection ab = a.connection(b.localAddress());
        Connection ba = b.connection(a.localAddress());
        UcxTestSupport.exchange(a, b, 3300, 1); // established: small sends are buffered from here on
        MemoryBuffer src = buffer(1 << 20);
        int n = 300;
        Future<?> sender = pool.submit(() -> {
            for (int i = 0; i < n; i++) {
                long size = i % 10 == 9 ? (1 << 20) : 100 + i;
                fill(src, 0, size, 5000 + i);
                ab.send(3302, src, 0, size);
                fill(src, 0, size, -1); // overwrite at once: a buffered send already has its copy
            }
            return null;
        });
        MemoryBuffer dst = buffer(1 << 20);
        for (int i = 0; i < n; i++) {
            long size = i % 10 == 9 ? (1 << 20) : 100 + i;
            ba.recv(3302, dst, 0, size);
            verify(dst, 0, size, 5000 + i);
        }
        get(sender);
        assertThat(a.errorCount()).isZero();
    }

    /** {@code rounds} messages a → b on one tag, each with its own pattern, every byte verified. */
    private void roundTrips(UcxConnectionManager a, UcxConnectionManager b, int tag, long size, int rounds,
            long seed) throws Exception {
        Connection ab = a.connection(b.localAddress());
        Connection ba = b.connection(a.localAddress());
        MemoryBuffer src = buffer(size);
        MemoryBuffer dst = buffer(size);
        for (int i = 0; i < rounds; i++) {
            fill(src, 0, size, seed + i);
            Future<?> sent = pool.submit(() -> ab.send(tag, src, 0, size));
            ba.recv(tag, dst, 0, size);
            get(sent);
            verify(dst, 0, size, seed + i);
        }
    }

    @Test
    void deviceBuffersAreRefusedWhereUcxHasNoCudaSupport() {
        UcxConnectionManager a = manager("dev-a");
        Assumptions.assumeFalse(a.supportsDeviceMemory(), "skipped: this libucp reports CUDA memory support;"
                + " the refusal rule does not apply (the GPU test covers it)");
        Connection c = a.connection(a.localAddress());
        MemoryBuffer device = new FakeDeviceBuffer(64);
        assertThatThrownBy(() -> c.send(1, device, 0, 64)).isInstanceOf(UnsupportedOperationException.class)
                .hasMessageContaining("CUDA");
        assertThatThrownBy(() -> c.recv(1, device, 0, 64)).isInstanceOf(UnsupportedOperationException.class);
        assertThat(new UcxTransportProvider().capabilities())
                .doesNotContain(dev.kvtransfer.api.transport.TransportCapability.DEVICE_MEMORY);
    }

    /**
     * The manager's capabilities (what core asks per request) follow its settings: {@code NATIVE_ONE_SIDED_WRITE}
     * with {@code ucx.oneSided=native}, never with {@code emulated} nor with the default {@code auto} (which never
     * resolves to native: a revoked region must stay quiet);
     * {@code DEVICE_MEMORY} exactly where this UCX accepts CUDA memory.
     */
    @Test
    void managerCapabilitiesFollowItsSettings() {
        TransportCapability nativeWrite = TransportCapability.NATIVE_ONE_SIDED_WRITE;
        UcxConnectionManager dflt = manager("caps-default");
        UcxConnectionManager nat = manager(TransportConfig.builder().name("caps-native")
                .defaultTimeout(java.time.Duration.ofSeconds(20)).property(UcxSettings.ONE_SIDED, "native").build());
        UcxConnectionManager emu = manager(TransportConfig.builder().name("caps-emulated")
                .defaultTimeout(java.time.Duration.ofSeconds(20)).property(UcxSettings.ONE_SIDED, "emulated").build());
        assertThat(dflt.settings().sharedMemory()).isTrue();
        assertThat(dflt.settings().oneSidedRequested()).isEqualTo("auto");
        assertThat(dflt.settings().emulatedOneSided()).as(dflt.settings().oneSidedReason()).isTrue();
        assertThat(dflt.settings().oneSidedReason()).startsWith("emulated: shm mode");
        assertThat(dflt.capabilities()).contains(TransportCapability.CROSS_PROCESS,
                TransportCapability.PEER_FAILURE_DETECTION, TransportCapability.ONE_SIDED_WRITE,
                TransportCapability.AUTHENTICATED)
                .doesNotContain(nativeWrite);
        assertThat(nat.capabilities()).contains(TransportCapability.ONE_SIDED_WRITE, nativeWrite);
        assertThat(nat.settings().oneSidedReason()).startsWith("native");
        assertThat(emu.capabilities()).contains(TransportCapability.ONE_SIDED_WRITE).doesNotContain(nativeWrite);
        assertThat(nat.capabilities().contains(TransportCapability.DEVICE_MEMORY))
                .isEqualTo(nat.supportsDeviceMemory());
        // The provider declares what a default manager does: never native.
        assertThat(new UcxTransportProvider().capabilities()).doesNotContain(nativeWrite);
        assertThat(new UcxTransportProvider().capabilities()).containsAll(dflt.capabilities());
        assertThat(nat.capabilities()).isSameAs(nat.capabilities());
        // A descriptor of one path is refused, clearly, by a writer of the other (both sides must agree).
        UcxConnectionManager emuOwner = manager(TransportConfig.builder().name("caps-emu-owner")
                .defaultTimeout(java.time.Duration.ofSeconds(20)).property(UcxSettings.ONE_SIDED, "emulated").build());
        dev.kvtransfer.api.memory.MemoryBuffer target = UcxTestSupport.buffer(4096);
        dev.kvtransfer.api.memory.MemoryBuffer src = UcxTestSupport.buffer(4096);
        try (dev.kvtransfer.api.transport.RegisteredRegion r = emuOwner.register(target)) {
            dev.kvtransfer.api.transport.WriteBatch b = new dev.kvtransfer.api.transport.WriteBatch()
                    .add(src, 0, r.descriptor(), 0, 4096);
            assertThatThrownBy(() -> nat.connection(emuOwner.localAddress()).write(b, java.time.Duration.ofSeconds(10)))
                    .isInstanceOfSatisfying(dev.kvtransfer.api.transport.TransportException.class, e -> assertThat(
                            e.code()).isEqualTo(dev.kvtransfer.api.ErrorCode.UNAUTHORIZED))
                    .hasMessageContaining("ucx.oneSided");
        }
        target.close();
        src.close();
    }

    /**
     * The {@code auto} decision (a revoked region must stay quiet): emulated everywhere, also in net mode on a host
     * with an RDMA device and a TLS that admits rc/dc/ib, each time with the reason; {@code native} only when asked
     * for, its reason saying a stalled writer may write late.
     */
    @Test
    void autoOneSidedNeverChoosesNative() {
        List<String> ib = List.of("mlx5_0");
        assertThat(UcxSettings.autoOneSided(true, null, ib)).startsWith("emulated: shm mode");
        assertThat(UcxSettings.autoOneSided(false, null, List.of())).startsWith("emulated: net mode without");
        assertThat(UcxSettings.autoOneSided(false, "tcp", ib)).startsWith("emulated").contains("'tcp'");
        for (String tls : new String[] {null, "rc,tcp", "all", "rc_x", "dc_x,self", "^tcp"}) {
            assertThat(UcxSettings.autoOneSided(false, tls, ib)).as("TLS %s", tls).startsWith("emulated: net mode with"
                    + " RDMA device(s) [mlx5_0]").contains("ucx.oneSided=native");
        }
        for (String admits : new String[] {"dc_x,self", "rc_verbs", "ib", "^tcp", "^rc", "^dc_mlx5", " RC_X "}) {
            assertThat(UcxSettings.tlsAdmitsRdma(admits)).as(admits).isTrue();
        }
        for (String refuses : new String[] {"tcp", "self,sysv,posix,cma", "ud_v", "^ib", "^rc,dc", "^rc_verbs,rc_mlx5,dc"}) {
            assertThat(UcxSettings.tlsAdmitsRdma(refuses)).as(refuses).isFalse();
        }
        assertThat(UcxSettings.rdmaDevices(java.nio.file.Path.of("/nonexistent/infiniband"))).isEmpty();
        for (String transports : new String[] {"shm", "net"}) {
            UcxSettings auto = UcxSettings.from(TransportConfig.builder().name("auto-" + transports)
                    .property(UcxSettings.TRANSPORTS, transports).build());
            assertThat(auto.emulatedOneSided()).as(auto.oneSidedReason()).isTrue();
            assertThat(auto.toString()).contains("oneSided " + auto.oneSidedReason());
            UcxSettings nat = UcxSettings.from(TransportConfig.builder().name("native-" + transports)
                    .property(UcxSettings.TRANSPORTS, transports).property(UcxSettings.ONE_SIDED, "native").build());
            assertThat(nat.emulatedOneSided()).isFalse();
            assertThat(nat.oneSidedReason()).startsWith("native (ucx.oneSided=native)").contains("write late");
        }
    }

    @Test
    void deviceMemoryMovesAsCudaMemoryType() throws Exception {
        UcxConnectionManager a = manager("gpu-a");
        Assumptions.assumeTrue(a.supportsDeviceMemory(), "skipped: the installed libucp reports no CUDA memory"
                + " support (Debian libucx0 1.13 has no CUDA transports; this machine has no GPU), so DEVICE"
                + " buffers are refused (see deviceBuffersAreRefusedWhereUcxHasNoCudaSupport); run on a CUDA"
                + " machine with a CUDA-enabled UCX");
        CudaBufferManager cuda = CudaBufferManager.tryCreate();
        Assumptions.assumeTrue(cuda != null, "skipped: UCX reports CUDA support but JCuda cannot allocate here: "
                + CudaBufferManager.whyUnavailable());
        assertThat(new UcxTransportProvider().capabilities())
                .contains(dev.kvtransfer.api.transport.TransportCapability.DEVICE_MEMORY);
        UcxConnectionManager b = manager("gpu-b");
        long size = (1L << 20) + 3;
        MemoryBuffer hostSrc = buffer(size);
        MemoryBuffer hostDst = buffer(size);
        fill(hostSrc, 0, size, 123);
        try (MemoryBuffer d1 = cuda.allocate(size, MemoryKind.DEVICE);
             MemoryBuffer d2 = cuda.allocate(size, MemoryKind.DEVICE)) {
            cuda.copy(hostSrc, 0, d1, 0, size);
            cuda.synchronize();
            Connection ab = a.connection(b.localAddress());
            Future<?> sent = pool.submit(() -> ab.send(9000, d1, 0, size));
            b.connection(a.localAddress()).recv(9000, d2, 0, size);
            get(sent);
            cuda.copy(d2, 0, hostDst, 0, size);
            cuda.synchronize();
            verify(hostDst, 0, size, 123);
        }
        cuda.close();
    }

    @Test
    void idleProgressThreadSleeps() throws Exception {
        UcxConnectionManager a = manager("idle-a");
        UcxConnectionManager b = manager("idle-b");
        MemoryBuffer m = buffer(8);
        fill(m, 0, 8, 1);
        a.connection(b.localAddress()).send(1, m, 0, 8);
        b.connection(a.localAddress()).recv(1, m, 0, 8);
        ThreadMXBean mx = ManagementFactory.getThreadMXBean();
        Thread t = Thread.getAllStackTraces().keySet().stream()
                .filter(x -> x.getName().equals("ucx-progress-idle-a")).findFirst().orElseThrow();
        long cpu0 = mx.getThreadCpuTime(t.getId());
        long wall0 = System.nanoTime();
        // Measure an idle second: a blocking receive that times out keeps us from sleeping blindly.
        assertThatThrownBy(() -> a.recvConnect(99, m, 0, 8, Duration.ofSeconds(1)))
                .isInstanceOf(TransportException.class);
        long cpuMs = TimeUnit.NANOSECONDS.toMillis(mx.getThreadCpuTime(t.getId()) - cpu0);
        long wallMs = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - wall0);
        assertThat(cpuMs).as("progress thread CPU over %d ms idle", wallMs).isLessThan(100);
    }

    /** A device-kind buffer with no memory behind it. */
    private static final class FakeDeviceBuffer implements MemoryBuffer {
        private final long size;

        FakeDeviceBuffer(long size) {
            this.size = size;
        }

        @Override
        public long address() {
            return 0x1000_0000L;
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
            return new FakeDeviceBuffer(length);
        }

        @Override
        public ByteBuffer asByteBuffer() {
            throw new UnsupportedOperationException("device memory");
        }

        @Override
        public void close() {
        }
    }
}
