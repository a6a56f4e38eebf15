package dev.kvtransfer.bench;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import dev.kvtransfer.api.transport.TransportProvider;
import dev.kvtransfer.core.plugin.Plugins;

import java.nio.file.Path;
import java.util.Map;

import static org.assertj.core.api.Assertions.assertThat;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

/**
 * {@code --peer process}: the transport level's far end in a child JVM ({@link TransportPeer}), over Aeron (UDP with
 * {@code aeron.ipc=false}, so the raw baseline runs on the same kind of channel), every message verified; the control
 * level's context instance in a child JVM ({@link ContextPeer}) over Aeron IPC on the host support's shared driver
 * and over UCX (shared memory between the processes), every element of every request verified; a backend without
 * {@code CROSS_PROCESS} is refused and says why.
 */
class BenchProcessPeerTest {
    /** Elements of one control request: the tiny shape's one 16-token block (16 KiB of fp16). */
    private static final double CONTROL_ELEMENTS = 8192;

    @Test
    void controlAndTransceiverLevelsWithTheContextInstanceInAChildJvmOverAeronIpcOnASharedDriver(@TempDir Path out)
            throws Exception {
        BenchOutputs o = BenchOutputs.run(out, "--backend=aeron,loopback", "--level=control,transceiver",
                "--peer=process", "--control-inflight=1,4", "--control-requests=8", "--control-warmup=1",
                "--model=tiny", "--blocks=3", "--inflight=2", "--requests=4", "--verify", "--repeat=1", "--no-memcpy",
                "--timeout-s=60");
        assertThat(o.exitCode).as("exit code; stderr:%n%s", o.stderr).isZero();
        o.checkConsistent(1);
        assertThat(o.stderr).contains("aeron host support: aeron media driver").contains("aeron:ipc");
        checkControlRows(o, "aeron");
        // The transceiver level the same way: 3-block requests, every element of the 4 timed and 2 warm-up ones.
        assertThat(o.runs("transceiver", "ours")).hasSize(1).allSatisfy(r -> {
            assertThat(r.get("source")).contains("in a child JVM (--peer process)");
            assertThat(BenchOutputs.num(r, "failures")).isZero();
            assertThat(BenchOutputs.num(r, "mismatches")).isZero();
            assertThat(BenchOutputs.num(r, "ops")).isEqualTo(4.0);
            assertThat(BenchOutputs.num(r, "verified_elements")).isEqualTo(3 * CONTROL_ELEMENTS * 6);
        });
        assertThat(o.runs("control", "raw")).anySatisfy(r -> {
            assertThat(r.get("backend")).isEqualTo("aeron");
            assertThat(r.get("source")).contains("aeron:ipc").contains("kvtransfer-aeron-");
        });
        assertThat(o.stderr).contains("loopback: control level ours not run: --peer process: loopback does not "
                + "declare CROSS_PROCESS").contains("loopback: transceiver level ours not run");
    }

    @Test
    void controlLevelWithTheContextInstanceInAChildJvmOverUcx(@TempDir Path out) throws Exception {
        TransportProvider ucx = Plugins.discover().transport("ucx");
        assumeTrue(ucx.isAvailable(), () -> "ucx backend not available: " + ucx.unavailabilityCause());
        BenchOutputs o = BenchOutputs.run(out, "--backend=ucx", "--level=control", "--peer=process", "--no-raw",
                "--control-inflight=1,4", "--control-requests=8", "--control-warmup=1", "--verify", "--repeat=1",
                "--timeout-s=60");
        assertThat(o.exitCode).as("exit code; stderr:%n%s", o.stderr).isZero();
        o.checkConsistent(1);
        checkControlRows(o, "ucx");
    }

    /** Both in-flight counts ran, the context side in the child, every element of every request checked once. */
    private static void checkControlRows(BenchOutputs o, String backend) {
        assertThat(o.runs("control", "ours")).hasSize(2).allSatisfy(r -> {
            assertThat(r.get("backend")).isEqualTo(backend);
            assertThat(r.get("source")).contains("in a child JVM (--peer process)");
            assertThat(BenchOutputs.num(r, "mismatches")).isZero();
            assertThat(BenchOutputs.num(r, "failures")).isZero();
            assertThat(r.get("note")).doesNotContain("background");
            assertThat(BenchOutputs.num(r, "heap_bytes_per_op")).isPositive();
            // Warm-up: one window (1 request at 1 in flight, 4 at 4), then the 8 timed requests.
            double warm = Double.parseDouble(r.get("inflight"));
            assertThat(BenchOutputs.num(r, "ops")).isEqualTo(8.0);
            assertThat(BenchOutputs.num(r, "verified_elements")).isEqualTo((8 + warm) * CONTROL_ELEMENTS);
        });
    }

    @Test
    void aeronBetweenThisJvmAndAChildJvmWithEveryMessageVerified(@TempDir Path out) throws Exception {
        BenchOutputs o = BenchOutputs.run(out, "--backend=aeron,loopback", "--level=transport", "--peer=process",
                "--sizes=4k,256k", "--total=1m", "--latency-samples=20", "--transport-set", "aeron.ipc=false",
                "--verify", "--repeat=1", "--timeout-s=60");
        assertThat(o.exitCode).as("exit code; stderr:%n%s", o.stderr).isZero();
        o.checkConsistent(1);
        assertThat(o.runs("transport", "ours")).hasSize(2).allSatisfy(r -> {
            assertThat(r.get("backend")).isEqualTo("aeron");
            assertThat(r.get("source")).contains("child JVM");
            assertThat(BenchOutputs.num(r, "mismatches")).isZero();
            long words = TransportBench.words((long) BenchOutputs.num(r, "size_bytes"));
            assertThat((long) BenchOutputs.num(r, "verified_elements"))
                    .isGreaterThanOrEqualTo(((long) BenchOutputs.num(r, "ops") + 10) * words);
        });
        for (Map<String, String> ours : o.runs("transport", "ours")) {
            assertThat(o.runs("transport", "raw")).anySatisfy(r -> {
                assertThat(r.get("size_bytes")).isEqualTo(ours.get("size_bytes"));
                assertThat(r.get("source")).contains("aeron:udp");
            });
        }
        assertThat(o.stderr).contains("loopback: transport level ours not run: --peer process: loopback does not "
                + "declare CROSS_PROCESS");
    }
}
