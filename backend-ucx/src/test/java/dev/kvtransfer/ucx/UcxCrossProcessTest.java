package dev.kvtransfer.ucx;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.transport.Connection;
import dev.kvtransfer.api.transport.ConnectionManager;
import dev.kvtransfer.api.transport.TransportException;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.nio.ByteBuffer;
import java.time.Duration;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.fail;

/** Two JVMs over UCX: byte-exact both ways, and a peer killed mid-transfer. */
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class UcxCrossProcessTest {
    private ConnectionManager parent;

    @BeforeEach
    void setUp() {
        parent = new UcxTransportProvider().create(UcxTestSupport.config("parent"));
    }

    @AfterEach
    void tearDown() {
        parent.close();
    }

    static boolean matches(MemoryBuffer b, long size, long seed) {
        ByteBuffer bb = b.asByteBuffer();
        for (long i = 0; i < size; i++) {
            if (bb.get((int) i) != UcxTestSupport.patternByte(seed, i)) {
                return false;
            }
        }
        return true;
    }

    static void command(Connection c, int op, long size, long count, long seed) {
        MemoryBuffer h = UcxTestSupport.buffer(32);
        ByteBuffer b = h.asByteBuffer();
        b.putInt(0, op).putInt(4, 0).putLong(8, size).putLong(16, count).putLong(24, seed);
        c.send(UcxPeerMain.CTRL_TAG, h, 0, 32);
    }

    /** Runs an ECHO round with a child: our messages verified there, its answers verified here. */
    static void echo(Connection child, long size, int count, long seed) {
        command(child, UcxPeerMain.ECHO, size, count, seed);
        MemoryBuffer data = UcxTestSupport.buffer(Math.max(size, 8));
        for (int i = 0; i < count; i++) {
            UcxTestSupport.fill(data, 0, size, seed + i);
            child.send(UcxPeerMain.DATA_IN, data, 0, size);
        }
        MemoryBuffer status = UcxTestSupport.buffer(8);
        child.recv(UcxPeerMain.STATUS, status, 0, 8);
        assertThat(status.asByteBuffer().getLong(0)).as("messages the child verified (negative: first bad)")
                .isEqualTo(count);
        for (int i = 0; i < count; i++) {
            child.recv(UcxPeerMain.DATA_OUT, data, 0, size);
            UcxTestSupport.verify(data, 0, size, UcxPeerMain.REPLY_SEED ^ (seed + i));
        }
    }

    @Test
    void bothDirectionsAcrossProcessesByteExact() throws Exception {
        try (UcxPeerMain.Child child = UcxPeerMain.fork()) {
            Connection c = parent.connection(child.address);
            assertThat(c.peer()).isEqualTo(child.address);
            long seed = 1000;
            for (long size : new long[] {0, 1, 4097, 1 << 20, (16 << 20) + 3}) {
                echo(c, size, 3, seed);
                seed += 100;
            }
            command(c, UcxPeerMain.EXIT, 0, 0, 0);
            assertThat(child.process.waitFor(30, TimeUnit.SECONDS)).isTrue();
            assertThat(child.process.exitValue()).isZero();
        }
    }

    @Test
    void killedPeerFailsTheBlockedReceiveAndTheManagerServesANewPeer() throws Exception {
        long size = 16 << 20;
        MemoryBuffer data = UcxTestSupport.buffer(size);
        Connection c;
        try (UcxPeerMain.Child child = UcxPeerMain.fork()) {
            c = parent.connection(child.address);
            command(c, UcxPeerMain.STREAM, size, 1_000_000, 77);
            // The child is streaming: take two messages, then kill it while the next ones are in flight.
            for (int i = 0; i < 2; i++) {
                c.recv(UcxPeerMain.DATA_OUT, data, 0, size);
                UcxTestSupport.verify(data, 0, size, 77);
            }
            Connection conn = c;
            CompletableFuture<Throwable> blocked = CompletableFuture.supplyAsync(() -> {
                try {
                    while (true) {
                        conn.recv(UcxPeerMain.DATA_OUT, data, 0, size, Duration.ofSeconds(20));
                    }
                } catch (TransportException e) {
                    return e;
                }
            });
            child.process.destroyForcibly();
            long t0 = System.nanoTime();
            Throwable t = blocked.get(60, TimeUnit.SECONDS);
            long ms = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - t0);
            System.out.println("kill test: blocked receive ended " + ms + " ms after the kill with " + t);
            assertThat(t).isInstanceOf(TransportException.class);
            assertThat(((TransportException) t).code()).as("%s", t).isIn(ErrorCode.PEER_LOST, ErrorCode.TIMEOUT);
            assertThat(ms).as("failure after the kill, ms").isLessThan(25_000);
            assertThat(child.process.waitFor(30, TimeUnit.SECONDS)).isTrue();
        }
        assertThat(parent.isRunning()).isTrue();
        try (UcxPeerMain.Child fresh = UcxPeerMain.fork()) {
            Connection c2 = parent.connection(fresh.address);
            echo(c2, (1 << 20) + 1, 2, 4242);
            command(c2, UcxPeerMain.EXIT, 0, 0, 0);
            if (!fresh.process.waitFor(30, TimeUnit.SECONDS)) {
                fail("fresh child did not exit");
            }
        }
    }
}
