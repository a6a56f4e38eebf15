package dev.kvtransfer.aeron;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.transport.Connection;
import dev.kvtransfer.testkit.process.ChildJvm;
import dev.kvtransfer.api.transport.ConnectionManager;
import dev.kvtransfer.api.transport.TransportConfig;
import dev.kvtransfer.api.transport.TransportException;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/** The parent JVM against peers in child JVMs ({@link AeronPeerMain}): bytes verified, and a killed peer. */
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class AeronCrossProcessTest {
    private static final Duration T = Duration.ofSeconds(30);
    private static final String PEER_TIMEOUT = AeronSettings.PEER_TIMEOUT_MS + "=2000";
    private final List<AutoCloseable> closeables = new ArrayList<>();
    private ExecutorService pool;
    private ConnectionManager parent;

    @BeforeEach
    void start() {
        pool = Executors.newCachedThreadPool();
        parent = new AeronTransportProvider().create(TransportConfig.builder().name("parent").defaultTimeout(T)
                .property(AeronSettings.PEER_TIMEOUT_MS, "2000").build());
    }

    @AfterEach
    void stop() throws Exception {
        for (AutoCloseable c : closeables) {
            if (c instanceof ChildJvm) {
                c.close();
            }
        }
        pool.shutdownNow();
        assertThat(pool.awaitTermination(20, TimeUnit.SECONDS)).isTrue();
        parent.close();
        for (AutoCloseable c : closeables) {
            c.close();
        }
    }

    private ChildJvm child(String... args) throws Exception {
        List<String> a = new ArrayList<>(List.of(args));
        a.add(PEER_TIMEOUT);
        ChildJvm c = ChildJvm.start(AeronPeerMain.class, "384m", a);
        closeables.add(c);
        return c;
    }

    private OffHeapBuffer buffer(long size) {
        OffHeapBuffer b = OffHeapBuffer.allocate(size);
        closeables.add(b);
        return b;
    }

    /** Sends each size to an echo child, which verifies it and answers with another pattern; both checked. */
    private void echoRoundTrips(long... sizes) throws Exception {
        StringBuilder list = new StringBuilder();
        long max = 0;
        for (long s : sizes) {
            list.append(list.length() == 0 ? "" : ",").append(s);
            max = Math.max(max, s);
        }
        ChildJvm echo = child("echo", parent.localAddress(), "6000", list.toString());
        String address = echo.awaitLine("ADDRESS", T);
        Connection c = parent.connection(address);
        OffHeapBuffer out = buffer(max);
        OffHeapBuffer in = buffer(max);
        for (int i = 0; i < sizes.length; i++) {
            TestPattern.fill(out, 0, sizes[i], i);
            TestPattern.clear(in, 0, sizes[i]);
            c.send(6000, out, 0, sizes[i], T);
            c.recv(6001, in, 0, sizes[i], T);
            TestPattern.assertPattern(in, 0, sizes[i], 1000 + i);
        }
        echo.awaitLine("DONE", T);
        assertThat(echo.awaitExit(T)).as("child exit code; printed %s", echo.seen()).isZero();
    }

    @Test
    void messagesCrossProcessesByteExactInBothDirections() throws Exception {
        long eager = AeronSettings.from(TransportConfig.builder().build()).eagerLimit();
        echoRoundTrips(0, 1, 4096, eager, eager + 1, (16L << 20) + 5, 64L << 20, 3);
    }

    @Test
    void aKilledSenderFailsTheBlockedReceiveAndTheParentServesANewPeer() throws Exception {
        long size = 32L << 20;
        ChildJvm source = child("source", parent.localAddress(), "6100", Long.toString(size), "1000");
        source.awaitLine("ADDRESS", T);
        OffHeapBuffer in = buffer(size);
        Connection c = parent.recvConnect(6100, in, 0, size, T);
        TestPattern.assertPattern(in, 0, size, 0);
        c.recv(6100, in, 0, size, T);
        TestPattern.assertPattern(in, 0, size, 1);
        // The child streams the next messages; kill it while the parent waits for one.
        Future<?> blocked = pool.submit(() -> {
            for (int i = 2; ; i++) {
                c.recv(6100, in, 0, size, Duration.ofSeconds(60));
                TestPattern.assertPattern(in, 0, size, i);
            }
        });
        source.awaitLine("SENT 3", T);
        long t0 = System.nanoTime();
        source.process().destroyForcibly();
        assertThatThrownBy(() -> blocked.get(30, TimeUnit.SECONDS)).cause()
                .isInstanceOfSatisfying(TransportException.class,
                        e -> assertThat(e.code()).isIn(ErrorCode.PEER_LOST, ErrorCode.TIMEOUT));
        long tookMs = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - t0);
        System.out.println("killed peer noticed after " + tookMs + " ms");
        assertThat(tookMs).as("failure noticed within the peer timeout and slack").isLessThan(10_000);
        assertThat(parent.isRunning()).isTrue();
        // the same parent manager still serves a new peer
        echoRoundTrips(100, (2L << 20) + 1);
    }
}
