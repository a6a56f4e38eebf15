package dev.kvtransfer.aeron;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.transport.Connection;
import dev.kvtransfer.api.transport.ConnectionManager;
import dev.kvtransfer.api.transport.TransportConfig;
import dev.kvtransfer.api.transport.TransportException;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/**
 * The caller-side poll ({@code aeron.callerPollMicros}): a blocked caller runs its manager's duty cycle itself
 * (one thread at a time, a try-lock shared with the agent thread) and completes its own receive; every message
 * still arrives intact with several callers polling one manager, eager and rendezvous sizes alike, deadlines and
 * peer loss still end the wait, and with the setting at 0 no caller runs the cycle.
 */
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class AeronCallerPollTest {
    private static final Duration T = Duration.ofSeconds(20);
    private static final int TAG = 7300;
    private final List<AutoCloseable> closeables = new ArrayList<>();
    private final ExecutorService pool = Executors.newCachedThreadPool();

    @AfterEach
    void stop() throws Exception {
        pool.shutdownNow();
        assertThat(pool.awaitTermination(20, TimeUnit.SECONDS)).as("test threads ended").isTrue();
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

    private AeronConnectionManager manager(String name, long pollMicros) {
        AeronConnectionManager m = (AeronConnectionManager) new AeronTransportProvider().create(TransportConfig
                .builder().name(name).defaultTimeout(T).property(AeronSettings.PEER_TIMEOUT_MS, "1500")
                .property(AeronSettings.CALLER_POLL_MICROS, Long.toString(pollMicros)).build());
        closeables.add(m);
        return m;
    }

    private OffHeapBuffer buffer(long size) {
        OffHeapBuffer b = OffHeapBuffer.allocate(Math.max(1, size));
        closeables.add(b);
        return b;
    }

    /**
     * Ping-pong of eager and rendezvous messages: every byte verified both ways; with polling on, the callers
     * completed receives in their own cycles (the counter), with it off never.
     */
    @ParameterizedTest
    @ValueSource(longs = {0, 20_000})
    void pingPongCompletesOnTheCaller(long pollMicros) throws Exception {
        AeronConnectionManager a = manager("poll-a", pollMicros);
        AeronConnectionManager b = manager("poll-b", pollMicros);
        long eager = a.settings().eagerLimit();
        long[] sizes = {0, 64, eager, eager + 1, (1 << 20) + 3};
        int rounds = 40;
        OffHeapBuffer out = buffer(sizes[sizes.length - 1]);
        OffHeapBuffer in = buffer(sizes[sizes.length - 1]);
        OffHeapBuffer echoBuf = buffer(sizes[sizes.length - 1]);
        Connection toB = a.connection(b.localAddress());
        Connection toA = b.connection(a.localAddress());
        Future<?> echo = pool.submit(() -> {
            for (int r = 0; r < rounds; r++) {
                for (long size : sizes) {
                    long seed = r * 31L + size;
                    toA.recv(TAG, echoBuf, 0, size, T);
                    TestPattern.assertPattern(echoBuf, 0, size, seed);
                    TestPattern.fill(echoBuf, 0, size, ~seed);
                    toA.send(TAG + 1, echoBuf, 0, size, T);
                }
            }
            return null;
        });
        for (int r = 0; r < rounds; r++) {
            for (long size : sizes) {
                long seed = r * 31L + size;
                TestPattern.fill(out, 0, size, seed);
                toB.send(TAG, out, 0, size, T);
                TestPattern.clear(in, 0, size);
                toB.recv(TAG + 1, in, 0, size, T);
                TestPattern.assertPattern(in, 0, size, ~seed);
            }
        }
        echo.get(T.toSeconds(), TimeUnit.SECONDS);
        long byCaller = a.counters().get("opsCompletedByCaller") + b.counters().get("opsCompletedByCaller");
        if (pollMicros == 0) {
            assertThat(byCaller).as("no caller runs the duty cycle with polling off").isZero();
        } else {
            assertThat(byCaller).as("receives completed by the waiting thread itself").isPositive();
        }
        assertThat(a.errorCount() + b.errorCount()).isZero();
    }

    /**
     * Four callers of one manager wait on four senders at once, each polling when it gets the duty: nobody's
     * messages starve, every one arrives in order and intact.
     */
    @Test
    void manyPollingCallersOfOneManagerAreAllServed() throws Exception {
        AeronConnectionManager rx = manager("poll-rx", 20_000);
        int senders = 4;
        int messages = 60;
        long eager = rx.settings().eagerLimit();
        List<Future<?>> all = new ArrayList<>();
        for (int s = 0; s < senders; s++) {
            AeronConnectionManager tx = manager("poll-tx" + s, 20_000);
            Connection out = tx.connection(rx.localAddress());
            Connection in = rx.connection(tx.localAddress());
            int tag = TAG + 10 + s;
            long size = s % 2 == 0 ? 512 : eager + 4096;
            OffHeapBuffer src = buffer(size);
            OffHeapBuffer dst = buffer(size);
            all.add(pool.submit(() -> {
                for (int i = 0; i < messages; i++) {
                    TestPattern.fill(src, 0, size, tag * 1000L + i);
                    out.send(tag, src, 0, size, T);
                }
                return null;
            }));
            all.add(pool.submit(() -> {
                for (int i = 0; i < messages; i++) {
                    TestPattern.clear(dst, 0, size);
                    in.recv(tag, dst, 0, size, T);
                    TestPattern.assertPattern(dst, 0, size, tag * 1000L + i);
                }
                return null;
            }));
        }
        for (Future<?> f : all) {
            f.get(60, TimeUnit.SECONDS);
        }
        assertThat(rx.counters().get("messagesReceived")).isEqualTo((long) senders * messages);
        assertThat(rx.errorCount()).isZero();
    }

    /** A deadline shorter than the poll time ends the wait with TIMEOUT; the thread's next receive works. */
    @Test
    void deadlineEndsAPollingWait() throws Exception {
        AeronConnectionManager a = manager("poll-dl-a", 100_000);
        AeronConnectionManager b = manager("poll-dl-b", 100_000);
        Connection toB = a.connection(b.localAddress());
        Connection toA = b.connection(a.localAddress());
        OffHeapBuffer buf = buffer(256);
        assertThatThrownBy(() -> toA.recv(TAG + 20, buf, 0, 256, Duration.ofMillis(30)))
                .isInstanceOfSatisfying(TransportException.class, e -> assertThat(e.code())
                        .isEqualTo(ErrorCode.TIMEOUT));
        OffHeapBuffer src = buffer(256);
        TestPattern.fill(src, 0, 256, 99);
        toB.send(TAG + 20, src, 0, 256, T);
        toA.recv(TAG + 20, buf, 0, 256, T);
        TestPattern.assertPattern(buf, 0, 256, 99);
    }

    /** The peer closes while the receiver polls with a long poll time: the wait fails PEER_LOST, not TIMEOUT. */
    @Test
    void peerLossEndsAPollingWait() throws Exception {
        AeronConnectionManager a = manager("poll-pl-a", 100_000);
        AeronConnectionManager b = manager("poll-pl-b", 100_000);
        Connection toB = a.connection(b.localAddress());
        Connection toA = b.connection(a.localAddress());
        OffHeapBuffer buf = buffer(64);
        TestPattern.fill(buf, 0, 64, 5);
        toB.send(TAG + 30, buf, 0, 64, T); // b now knows a's stream
        toA.recv(TAG + 30, buf, 0, 64, T);
        TestPattern.assertPattern(buf, 0, 64, 5);
        Future<?> waiting = pool.submit(() -> {
            toA.recv(TAG + 31, buf, 0, 64, T);
            return null;
        });
        a.close();
        assertThatThrownBy(() -> waiting.get(T.toSeconds(), TimeUnit.SECONDS))
                .hasCauseInstanceOf(TransportException.class)
                .satisfies(e -> assertThat(((TransportException) e.getCause()).code())
                        .isEqualTo(ErrorCode.PEER_LOST));
    }

    /**
     * A poll or receive whose wait is zero still takes a message that has already arrived: the first such call
     * returns it. Before, the op was withdrawn before the agent took it off the command queue, so once the agent
     * thread had parked (nothing wakes it for a zero wait) no zero-wait call ever saw the message.
     */
    @ParameterizedTest
    @ValueSource(longs = {0, 20_000})
    void aZeroWaitCallTakesAMessageThatAlreadyArrived(long pollMicros) throws Exception {
        AeronConnectionManager a = manager("zero-a", pollMicros);
        AeronConnectionManager b = manager("zero-b", pollMicros);
        OffHeapBuffer src = buffer(64);
        OffHeapBuffer dst = buffer(64);
        Connection toA = b.connection(a.localAddress());
        Connection fromB = a.connection(b.localAddress());
        for (int round = 0; round < 20; round++) {
            // Two messages on one stream arrive in order: once the second is received, the first is here.
            TestPattern.fill(src, 0, 64, round);
            toA.send(TAG + 1, src, 0, 64);
            toA.send(TAG + 2, src, 0, 8);
            fromB.recv(TAG + 2, dst, 0, 8, T);
            Connection got = a.pollConnect(TAG + 1, dst, 0, 64, Duration.ZERO);
            assertThat(got).as("round %d: a zero-wait poll of a message that arrived", round).isNotNull();
            assertThat(got.peer()).isEqualTo(b.localAddress());
            TestPattern.assertPattern(dst, 0, 64, round);
            // The same for a zero-deadline receive on the connection.
            TestPattern.fill(src, 0, 64, ~round);
            toA.send(TAG + 3, src, 0, 64);
            toA.send(TAG + 2, src, 0, 8);
            fromB.recv(TAG + 2, dst, 0, 8, T);
            fromB.recv(TAG + 3, dst, 0, 64, Duration.ZERO);
            TestPattern.assertPattern(dst, 0, 64, ~round);
        }
    }
}
