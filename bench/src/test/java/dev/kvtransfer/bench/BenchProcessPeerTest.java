package dev.kvtransfer.bench;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.nio.file.Path;
import java.util.Map;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * {@code --peer process}: the transport level's far end in a child JVM ({@link TransportPeer}), over Aeron (two
 * embedded drivers: UDP, so the raw baseline runs with {@code aeron.ipc=false} on the same kind of channel), every
 * message verified; a backend without {@code CROSS_PROCESS} is refused and says why.
 */
class BenchProcessPeerTest {
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
