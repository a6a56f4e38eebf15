package dev.kvtransfer.aeron;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.transport.Connection;
import dev.kvtransfer.api.transport.TransportConfig;
import dev.kvtransfer.api.transport.TransportException;
import dev.kvtransfer.testkit.process.ChildJvm;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.nio.ByteBuffer;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;
import static org.awaitility.Awaitility.await;

/**
 * A peer process stopped for longer than the driver timeout: {@code kill -STOP} of a child JVM for
 * 12 s (a GC pause that long is the same). The parent's call waiting on it fails with {@code PEER_LOST} within its
 * bound; when the child resumes, its Aeron client has closed (the driver timed it out, 10 s); the child notices,
 * rebuilds the client, listens again on the same address, and the pair serves verified transfers afterwards.
 */
@Timeout(value = 3, unit = TimeUnit.MINUTES)
class AeronStallTest {
    private static final int TAG = 4200;
    private static final Duration T = Duration.ofSeconds(20);

    private static void signal(Process p, String sig) throws Exception {
        Process k = new ProcessBuilder("kill", "-" + sig, Long.toString(p.pid())).inheritIO().start();
        assertThat(k.waitFor(10, TimeUnit.SECONDS)).isTrue();
        assertThat(k.exitValue()).as("kill -%s", sig).isZero();
    }

    /** One echo exchange of {@code n} bytes, verified. */
    private static void echo(Connection c, OffHeapBuffer len, OffHeapBuffer src, OffHeapBuffer dst, int n,
                             long seed, Duration timeout) {
        TestPattern.fill(src, 0, n, seed);
        len.asByteBuffer().putLong(0, n);
        c.send(TAG, len, 0, 8, timeout);
        c.send(TAG + 1, src, 0, n, timeout);
        c.recv(TAG + 1, dst, 0, n, timeout);
        ByteBuffer s = src.asByteBuffer();
        ByteBuffer d = dst.asByteBuffer();
        for (int i = 0; i < n; i++) {
            if (d.get(i) != (byte) (s.get(i) + 1)) {
                throw new AssertionError("byte " + i + " of the echo: expected " + (byte) (s.get(i) + 1) + ", found "
                        + d.get(i));
            }
        }
    }

    @Test
    void aPeerStoppedPastTheDriverTimeoutRecoversAndServesAgain() throws Exception {
        List<String> args = new ArrayList<>(List.of("serve", "-", Integer.toString(TAG),
                AeronSettings.IPC + "=false", AeronSettings.PEER_TIMEOUT_MS + "=2000"));
        try (ChildJvm child = ChildJvm.start(AeronPeerMain.class, "256m", args);
             AeronConnectionManager parent = (AeronConnectionManager) new AeronTransportProvider().create(
                     TransportConfig.builder().name("parent").defaultTimeout(T)
                             .property(AeronSettings.IPC, "false").property(AeronSettings.PEER_TIMEOUT_MS, "2000")
                             .build());
             OffHeapBuffer len = OffHeapBuffer.allocate(8);
             OffHeapBuffer src = OffHeapBuffer.allocate(1 << 20);
             OffHeapBuffer dst = OffHeapBuffer.allocate(1 << 20)) {
            String address = child.awaitLine("ADDRESS", Duration.ofSeconds(60));
            echo(parent.connection(address), len, src, dst, 1 << 20, 1, T);
            child.awaitLine("SERVED", T);

            signal(child.process(), "STOP");
            long t0 = System.nanoTime();
            // A request in flight to the stopped peer fails in bound.
            Connection c = parent.connection(address);
            assertThatThrownBy(() -> echo(c, len, src, dst, 1000, 2, Duration.ofSeconds(30)))
                    .isInstanceOfSatisfying(TransportException.class,
                            e -> assertThat(e.code()).as("%s", e).isEqualTo(ErrorCode.PEER_LOST));
            long lostMs = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - t0);
            assertThat(lostMs).as("PEER_LOST after the stop, ms").isLessThan(10_000);
            // Keep it stopped 12 s in all: past the driver's client timeout (10 s).
            long left = TimeUnit.SECONDS.toNanos(12) - (System.nanoTime() - t0);
            await().pollDelay(Duration.ofNanos(Math.max(1, left))).atMost(Duration.ofSeconds(15)).until(() -> true);
            signal(child.process(), "CONT");
            long resumed = System.nanoTime();

            String recovered = child.awaitLine("RECOVERIES", Duration.ofSeconds(60));
            assertThat(Long.parseLong(recovered)).isPositive();
            // The pair serves again: a fresh connection to the same address moves verified bytes.
            long[] seed = {10};
            await().atMost(Duration.ofSeconds(60)).pollInterval(Duration.ofMillis(200))
                    .conditionEvaluationListener(e -> {
                        if (e.getRemainingTimeInMS() <= 200) {
                            System.out.println("child printed: " + child.seen());
                        }
                    }).until(() -> {
                try {
                    echo(parent.connection(address), len, src, dst, 1 << 20, seed[0]++, Duration.ofSeconds(5));
                    return true;
                } catch (TransportException e) {
                    return false;
                }
            });
            System.out.printf("stall: PEER_LOST %d ms after SIGSTOP; serving again %d ms after SIGCONT%n", lostMs,
                    TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - resumed));
            for (int i = 0; i < 3; i++) {
                echo(parent.connection(address), len, src, dst, 1 << 20, 100 + i, T);
            }
        }
    }
}
