package dev.kvtransfer.bench;

import dev.kvtransfer.api.transport.TransportProvider;
import dev.kvtransfer.core.plugin.Plugins;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.nio.file.Path;
import java.util.Map;

import static org.assertj.core.api.Assertions.assertThat;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

/**
 * A short bench over UCX (two endpoints of this JVM) with {@code ucx_perftest} as the raw baseline in the same run.
 * Needs libucx (jucx loads it) and ucx-utils; skipped, saying so, without them.
 */
class BenchUcxTest {
    @Test
    void ucxRunHasPerftestBesideOursAtEverySize(@TempDir Path out) throws Exception {
        TransportProvider ucx = Plugins.discover().transport("ucx");
        assumeTrue(ucx.isAvailable(), () -> "ucx backend not available: " + ucx.unavailabilityCause());
        assumeTrue(UcxPerftestBaseline.find("ucx_perftest") != null, "ucx_perftest not installed (ucx-utils)");

        BenchOutputs o = BenchOutputs.run(out, "--backend=ucx", "--level=transport", "--sizes=4k,256k",
                "--total=1m", "--latency-samples=20", "--verify", "--repeat=1", "--timeout-s=60");
        assertThat(o.exitCode).as("exit code; stderr:%n%s", o.stderr).isZero();
        o.checkConsistent(1);
        assertThat(o.runs("transport", "ours")).hasSize(2);
        for (Map<String, String> ours : o.runs("transport", "ours")) {
            assertThat(BenchOutputs.num(ours, "verified_elements")).isPositive();
            assertThat(BenchOutputs.num(ours, "mismatches")).isZero();
            assertThat(o.runs("transport", "raw")).as("raw beside %s", ours).anySatisfy(r -> {
                assertThat(r.get("size_bytes")).isEqualTo(ours.get("size_bytes"));
                assertThat(r.get("source")).contains("ucx_perftest");
            });
        }
        assertThat(o.summary.stream().filter(s -> s.get("impl").equals("ours")))
                .allSatisfy(s -> assertThat(BenchOutputs.num(s, "ratio_to_raw_median")).isPositive());
    }
}
