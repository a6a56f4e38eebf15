package dev.kvtransfer.ucx;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.memory.MemoryBuffer;
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

import static dev.kvtransfer.ucx.UcxTestSupport.buffer;
import static dev.kvtransfer.ucx.UcxTestSupport.fill;
import static dev.kvtransfer.ucx.UcxTestSupport.verify;
import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/**
 * The caller-side progress ({@code ucx.callerPollMicros}): a blocked caller runs the progress agent's round itself
 * under the worker lock (one thread on the worker at a time, the agent's epoll sleep included) and completes its
 * own operation; every byte still arrives with several callers polling, deadlines still end waits, and with the
 * setting at 0 no caller touches the worker.
 */
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class UcxCallerPollTest {
    private static final Duration T = Duration.ofSeconds(20);
    private static final int TAG = 8100;
    private final List<ConnectionManager> managers = new ArrayList<>();
    private final List<MemoryBuffer> buffers = new ArrayList<>();
    private final ExecutorService pool = Executors.newCachedThreadPool(r -> {
        Thread t = new Thread(r, "ucx-poll-test");
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
        for (MemoryBuffer b : buffers) {
            b.close();
        }
    }

    private UcxConnectionManager manager(String name, long pollMicros) {
        TransportConfig c = TransportConfig.builder().name(name).defaultTimeout(T)
                .property(UcxSettings.CALLER_POLL_MICROS, Long.toString(pollMicros)).build();
        UcxConnectionManager m = (UcxConnectionManager) new UcxTransportProvider().create(c);
        managers.add(m);
        return m;
    }

    private MemoryBuffer buf(long size) {
        MemoryBuffer b = buffer(Math.max(1, size));
        buffers.add(b);
        return b;
    }

    /** Small and large messages both ways, every byte verified; callers ran rounds only with polling on. */
    @ParameterizedTest
    @ValueSource(longs = {0, 20_000})
    void pingPongCompletesOnTheCaller(long pollMicros) throws Exception {
        UcxConnectionManager a = manager("upoll-a", pollMicros);
        UcxConnectionManager b = manager("upoll-b", pollMicros);
        long[] sizes = {0, 64, 8192, 300_000, (1 << 20) + 3};
        int rounds = 25;
        long max = sizes[sizes.length - 1];
        MemoryBuffer out = buf(max);
        MemoryBuffer in = buf(max);
        MemoryBuffer echoBuf = buf(max);
        Connection toB = a.connection(b.localAddress());
        Connection toA = b.connection(a.localAddress());
        Future<?> echo = pool.submit(() -> {
            for (int r = 0; r < rounds; r++) {
                for (long size : sizes) {
                    long seed = r * 31L + size;
                    toA.recv(TAG, echoBuf, 0, size, T);
                    verify(echoBuf, 0, size, seed);
                    fill(echoBuf, 0, size, ~seed);
                    toA.send(TAG + 1, echoBuf, 0, size, T);
                }
            }
            return null;
        });
        for (int r = 0; r < rounds; r++) {
            for (long size : sizes) {
                long seed = r * 31L + size;
                fill(out, 0, size, seed);
                toB.send(TAG, out, 0, size, T);
                fill(in, 0, size, 12345);
                toB.recv(TAG + 1, in, 0, size, T);
                verify(in, 0, size, ~seed);
            }
        }
        echo.get(T.toSeconds(), TimeUnit.SECONDS);
        long byCaller = a.callerRounds() + b.callerRounds();
        if (pollMicros == 0) {
            assertThat(byCaller).as("no caller touches the worker with polling off").isZero();
        } else {
            assertThat(byCaller).as("rounds run by the waiting threads themselves").isPositive();
        }
    }

    /** Four receivers on one manager poll at once while four senders send: every message arrives intact. */
    @Test
    void manyPollingCallersOfOneManagerAreAllServed() throws Exception {
        UcxConnectionManager rx = manager("upoll-rx", 20_000);
        int senders = 4;
        int messages = 40;
        List<Future<?>> all = new ArrayList<>();
        for (int s = 0; s < senders; s++) {
            UcxConnectionManager tx = manager("upoll-tx" + s, 20_000);
            Connection out = tx.connection(rx.localAddress());
            Connection in = rx.connection(tx.localAddress());
            int tag = TAG + 10 + s;
            long size = s % 2 == 0 ? 512 : 200_000;
            MemoryBuffer src = buf(size);
            MemoryBuffer dst = buf(size);
            all.add(pool.submit(() -> {
                for (int i = 0; i < messages; i++) {
                    fill(src, 0, size, tag * 1000L + i);
                    out.send(tag, src, 0, size, T);
                }
                return null;
            }));
            all.add(pool.submit(() -> {
                for (int i = 0; i < messages; i++) {
                    in.recv(tag, dst, 0, size, T);
                    verify(dst, 0, size, tag * 1000L + i);
                }
                return null;
            }));
        }
        for (Future<?> f : all) {
            f.get(60, TimeUnit.SECONDS);
        }
    }

    /** A deadline shorter than the poll time ends the wait with TIMEOUT; the thread's next receive works. */
    @Test
    void deadlineEndsAPollingWait() {
        UcxConnectionManager a = manager("upoll-dl-a", 100_000);
        UcxConnectionManager b = manager("upoll-dl-b", 100_000);
        Connection toB = a.connection(b.localAddress());
        Connection toA = b.connection(a.localAddress());
        MemoryBuffer in = buf(256);
        assertThatThrownBy(() -> toA.recv(TAG + 20, in, 0, 256, Duration.ofMillis(30)))
                .isInstanceOfSatisfying(TransportException.class, e -> assertThat(e.code())
                        .isEqualTo(ErrorCode.TIMEOUT));
        MemoryBuffer src = buf(256);
        fill(src, 0, 256, 99);
        toB.send(TAG + 20, src, 0, 256, T);
        toA.recv(TAG + 20, in, 0, 256, T);
        verify(in, 0, 256, 99);
    }
}
