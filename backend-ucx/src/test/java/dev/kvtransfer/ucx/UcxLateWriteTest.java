package dev.kvtransfer.ucx;

import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.transport.Connection;
import dev.kvtransfer.api.transport.ConnectionManager;
import dev.kvtransfer.api.transport.RegisteredRegion;
import dev.kvtransfer.api.transport.TransportConfig;
import dev.kvtransfer.api.wire.WireWriter;
import dev.kvtransfer.testkit.process.ChildJvm;
import org.awaitility.Awaitility;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.HexFormat;
import java.util.List;
import java.util.concurrent.TimeUnit;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * Late writes into reused memory: a revoked region must take no write, even from a writer that stalled. A writer
 * process writes a registered region of ours in a loop and is {@code SIGSTOP}ped mid-batch; we revoke the region (it
 * cannot acknowledge, so the revocation gives up on it after the default timeout and closes its connection), reuse the
 * memory (fill it with another pattern) and {@code SIGCONT} the writer, which then fails and exits. Every byte of the
 * reused memory must still hold our pattern afterwards: 0 late writes.
 *
 * <p>The default ({@code ucx.oneSided=auto}) never resolves to UCX's native RMA, whose puts a revocation cannot
 * stop here ({@link UcxSettings#autoOneSided}): it is the emulated path, whose owner receives every entry itself
 * and posts no receive into a revoked region, so nothing lands once the region is closed. {@link #main} measures
 * each path (the native one is where a stalled writer's late puts landed in reused memory).
 */
@Timeout(value = 180, unit = TimeUnit.SECONDS)
class UcxLateWriteTest {
    static final long REGION_BYTES = 4L << 20;
    static final long SEED = 0x1A7E;
    static final long REUSE_SEED = 0x5E5E;

    @Test
    void aStalledWritersLateWritesNeverLandInRevokedAndReusedMemory() throws Exception {
        Assumptions.assumeTrue(Files.isExecutable(Path.of("/bin/kill")) || Files.isExecutable(Path.of("/usr/bin/kill")),
                "needs kill(1) for SIGSTOP");
        assertThat(UcxSettings.from(TransportConfig.builder().name("late-auto").build()).emulatedOneSided())
                .as("auto resolves to the emulated path").isTrue();
        long late = lateBytes("shm", "auto");
        assertThat(late).as("bytes a SIGSTOPped writer wrote into revoked, reused memory after SIGCONT").isZero();
    }

    /**
     * One round: the region is written by a writer child, the child is stopped, the region revoked and reused, the
     * child resumed until it exits; returns the bytes of the reused memory that no longer hold our pattern.
     *
     * @param transports {@code ucx.transports} of owner and writer
     * @param oneSided   {@code ucx.oneSided} of owner and writer
     */
    static long lateBytes(String transports, String oneSided) throws Exception {
        try (ConnectionManager m = new UcxTransportProvider().create(TransportConfig.builder().name("late-owner")
                .defaultTimeout(Duration.ofSeconds(2)).property(UcxSettings.TRANSPORTS, transports)
                .property(UcxSettings.ONE_SIDED, oneSided).errorHandler(e -> { }).build())) {
            MemoryBuffer target = UcxTestSupport.buffer(REGION_BYTES);
            MemoryBuffer hello = UcxTestSupport.buffer(8);
            RegisteredRegion region = m.register(target);
            WireWriter w = WireWriter.raw();
            region.descriptor().writeTo(w);
            try (ChildJvm writer = ChildJvm.start(UcxKilledWriterCloseTest.WriterMain.class, "256m",
                    List.of(m.localAddress(), HexFormat.of().formatHex(w.toByteArray()), transports, oneSided,
                            Long.toString(SEED), "loop", "5000"))) {
                long t0 = System.nanoTime();
                awaitHello(m, hello);
                writer.awaitLine("WRITING", Duration.ofSeconds(60));
                long t1 = System.nanoTime();
                // The writer's first batch covered the region and completed (remote completion): every byte.
                UcxTestSupport.verify(target, 0, REGION_BYTES, SEED);
                long pid = writer.process().pid();
                signal("STOP", pid);
                try {
                    // The stopped writer cannot acknowledge: after the default timeout its connection is closed.
                    region.close();
                    UcxTestSupport.fill(target, 0, REGION_BYTES, REUSE_SEED); // the engine reuses the blocks
                } finally {
                    signal("CONT", pid);
                }
                long t2 = System.nanoTime();
                // Resumed, the writer meets its lost connection or its 5 s write deadline and exits (1: it failed).
                writer.awaitExit(Duration.ofSeconds(60));
                System.out.println("late-write round (" + transports + ", " + oneSided + "): writer up in "
                        + TimeUnit.NANOSECONDS.toMillis(t1 - t0) + " ms, revoked and reused in "
                        + TimeUnit.NANOSECONDS.toMillis(t2 - t1) + " ms, writer exited "
                        + TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - t2) + " ms after SIGCONT");
            }
            // What the writer sent before it exited is handled by our progress agent within moments; watch a while.
            long[] late = new long[1];
            Awaitility.await().pollDelay(Duration.ZERO).during(Duration.ofSeconds(2)).atMost(Duration.ofSeconds(10))
                    .until(() -> {
                        late[0] = Math.max(late[0], differing(target, REUSE_SEED));
                        return true;
                    });
            hello.close();
            target.close();
            return late[0];
        }
    }

    /** Bytes of {@code b} that do not hold pattern {@code seed}. */
    static long differing(MemoryBuffer b, long seed) {
        ByteBuffer bb = b.asByteBuffer();
        long n = 0;
        for (int i = 0; i < b.size(); i++) {
            if (bb.get(i) != UcxTestSupport.patternByte(seed, i)) {
                n++;
            }
        }
        return n;
    }

    private static Connection awaitHello(ConnectionManager m, MemoryBuffer hello) {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
        while (System.nanoTime() < deadline) {
            Connection c = m.pollConnect(UcxKilledWriterCloseTest.HELLO, hello, 0, 8, Duration.ofMillis(500));
            if (c != null) {
                return c;
            }
        }
        throw new IllegalStateException("no writer's hello within 60 s");
    }

    private static void signal(String sig, long pid) throws Exception {
        Process p = new ProcessBuilder("kill", "-" + sig, Long.toString(pid)).inheritIO().start();
        assertThat(p.waitFor(10, TimeUnit.SECONDS)).isTrue();
        assertThat(p.exitValue()).isZero();
    }

    /**
     * Measures late writes per path: {@code java … dev.kvtransfer.ucx.UcxLateWriteTest ROUNDS TRANSPORTS:ONESIDED…}
     * (e.g. {@code shm:native net:native shm:auto}).
     *
     * @param args rounds, then {@code ucx.transports:ucx.oneSided} pairs to measure
     * @throws Exception a failed round
     */
    public static void main(String[] args) throws Exception {
        int rounds = Integer.parseInt(args[0]);
        for (int a = 1; a < args.length; a++) {
            String[] mode = args[a].split(":");
            for (int r = 0; r < rounds; r++) {
                long late = lateBytes(mode[0], mode[1]);
                System.out.println("\nucx.transports=" + mode[0] + " ucx.oneSided=" + mode[1] + " round " + r
                        + ": late bytes " + late + " of " + REGION_BYTES);
                System.out.flush();
            }
        }
        System.exit(0);
    }
}
