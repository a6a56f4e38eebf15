package dev.kvtransfer.aeron;

import dev.kvtransfer.api.transport.Connection;
import dev.kvtransfer.api.transport.ConnectionManager;
import dev.kvtransfer.api.transport.TransportConfig;
import org.junit.jupiter.api.AfterEach;
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

/**
 * A large send's clear-to-send that reaches the agent before the send's own wait does. A sender queues its wait
 * before it offers the RTS, but the command queue is many-to-one: a producer that claimed an earlier slot and was
 * descheduled before filling it hides every later command until it does, so on a loaded host the receiver's CTS
 * can be read first. It used to be dropped as the answer to a sender that gave up, and the transfer waited out its
 * deadline on both sides (one 32 MiB request in about a thousand, two processes, host load 20). The hook makes the
 * order certain: the wait is posted only once its CTS was read.
 */
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class AeronEarlyClearTest {
    private static final Duration T = Duration.ofSeconds(10);
    private static final int TAG = 7700;
    private final List<AutoCloseable> closeables = new ArrayList<>();
    private final ExecutorService pool = Executors.newCachedThreadPool();

    @AfterEach
    void stop() throws Exception {
        AeronConnection.waitAfterClearForTest = false;
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

    private AeronConnectionManager manager(String name) {
        AeronConnectionManager m = (AeronConnectionManager) new AeronTransportProvider().create(TransportConfig
                .builder().name(name).defaultTimeout(T).build());
        closeables.add(m);
        return m;
    }

    private OffHeapBuffer buffer(long size) {
        OffHeapBuffer b = OffHeapBuffer.allocate(size);
        closeables.add(b);
        return b;
    }

    @Test
    void aClearToSendReadBeforeItsWaitStillCompletesTheSend() throws Exception {
        AeronConnectionManager a = manager("early-clear-a");
        AeronConnectionManager b = manager("early-clear-b");
        long size = (1 << 20) + 3;
        int rounds = 5;
        OffHeapBuffer out = buffer(size);
        OffHeapBuffer in = buffer(size);
        Connection toB = a.connection(b.localAddress());
        Connection toA = b.connection(a.localAddress());
        // Warm the stream both ways first, so the hook below only reorders the large sends.
        toB.send(TAG - 1, out, 0, 8, T);
        toA.recv(TAG - 1, in, 0, 8, T);
        AeronConnection.waitAfterClearForTest = true;
        Future<?> rx = pool.submit(() -> {
            for (int r = 0; r < rounds; r++) {
                TestPattern.clear(in, 0, size);
                toA.recv(TAG, in, 0, size, T);
                TestPattern.assertPattern(in, 0, size, 77L + r);
            }
            return null;
        });
        for (int r = 0; r < rounds; r++) {
            TestPattern.fill(out, 0, size, 77L + r);
            toB.send(TAG, out, 0, size, T); // TIMEOUT when the early CTS is dropped
        }
        rx.get(T.toSeconds() * 2, TimeUnit.SECONDS);
        Peer peerB = ((AeronConnection) toB).peer;
        assertThat(peerB.strayClears).as("every CTS came before its wait").isEqualTo(rounds);
        assertThat(peerB.earlyClears).as("each taken by its wait").isEmpty();
        assertThat(a.errorCount() + b.errorCount()).isZero();
    }
}
