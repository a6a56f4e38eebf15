package dev.kvtransfer.ucx;

import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.transport.Connection;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.time.Duration;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;

import static dev.kvtransfer.ucx.UcxTestSupport.buffer;
import static dev.kvtransfer.ucx.UcxTestSupport.config;
import static dev.kvtransfer.ucx.UcxTestSupport.fill;
import static dev.kvtransfer.ucx.UcxTestSupport.verify;
import static org.assertj.core.api.Assertions.assertThat;

/**
 * Crossed dials: both managers open their connection to the other at the same moment (one to send, one to
 * receive), as two ranks starting together do. Each round must join the two handshakes into one connection per
 * side and move the message; a round that refuses ("dial again") or loses the message fails. Found by the
 * conformance rule 16 and 19 flaking under load (1 in ~6 runs).
 */
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class UcxCrossedDialTest {
    private static final int ROUNDS = 60;

    @Test
    void bothSidesDialingAtOnceGetOneWorkingConnection() throws Exception {
        ExecutorService pool = Executors.newFixedThreadPool(2);
        try {
            for (int round = 0; round < ROUNDS; round++) {
                try (UcxConnectionManager a = new UcxConnectionManager(config("crossed-a-" + round));
                     UcxConnectionManager b = new UcxConnectionManager(config("crossed-b-" + round))) {
                    int size = round % 2 == 0 ? 1 << 16 : 64;
                    MemoryBuffer src = buffer(size);
                    MemoryBuffer dst = buffer(size);
                    fill(src, 0, size, round);
                    int tag = 9100 + round;
                    CompletableFuture<Void> sent = CompletableFuture.runAsync(
                            () -> a.connection(b.localAddress()).send(tag, src, 0, size), pool);
                    // The second dial lands at a different point of the first one's handshake each round
                    // (before the hello, between hello and confirm, after): a jitter, not a wait for a state.
                    long jitterNanos = (round % 10) * 150_000L;
                    CompletableFuture<Void> received = CompletableFuture.runAsync(() -> {
                        java.util.concurrent.locks.LockSupport.parkNanos(jitterNanos);
                        b.connection(a.localAddress()).recv(tag, dst, 0, size, Duration.ofSeconds(20));
                    }, pool);
                    received.get(30, TimeUnit.SECONDS);
                    sent.get(30, TimeUnit.SECONDS);
                    verify(dst, 0, size, round);
                    // and back, on the joined connections
                    fill(src, 0, size, round + 1);
                    Connection ba = b.connection(a.localAddress());
                    CompletableFuture<Void> back = CompletableFuture.runAsync(() -> ba.send(tag, src, 0, size), pool);
                    a.connection(b.localAddress()).recv(tag, dst, 0, size, Duration.ofSeconds(20));
                    back.get(30, TimeUnit.SECONDS);
                    verify(dst, 0, size, round + 1);
                }
            }
        } finally {
            pool.shutdownNow();
            assertThat(pool.awaitTermination(30, TimeUnit.SECONDS)).isTrue();
        }
    }
}
