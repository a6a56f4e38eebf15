package dev.kvtransfer.bench;

import dev.kvtransfer.api.transport.TransportProvider;
import dev.kvtransfer.core.plugin.Plugins;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.nio.file.Path;
import java.util.Map;

import static org.assertj.core.api.Assertions.assertThat;

/** A short bench over Aeron with its raw baseline reached through the SPI, in the same run. */
class BenchAeronTest {
    @Test
    void aeronRunHasItsRawBaselineBesideOursAtEverySize(@TempDir Path out) throws Exception {
        TransportProvider aeron = Plugins.discover().transport("aeron");
        assertThat(aeron.rawBaseline()).as("aeron offers a raw baseline through the SPI").isPresent();

        BenchOutputs o = BenchOutputs.run(out, "--backend=aeron", "--sizes=4k,256k", "--total=1m",
                "--latency-samples=20", "--model=tiny", "--blocks=4", "--requests=4", "--control-inflight=2",
                "--control-requests=8", "--verify", "--repeat=2", "--timeout-s=60");
        assertThat(o.exitCode).as("exit code; stderr:%n%s", o.stderr).isZero();
        o.checkConsistent(2);
        for (String level : new String[] {"transport", "control", "transceiver"}) {
            assertThat(o.runs(level, "ours")).as(level).isNotEmpty();
            for (Map<String, String> ours : o.runs(level, "ours")) {
                // A raw run of the same level, size and repeat exists for each of ours.
                assertThat(o.runs(level, "raw")).as("raw beside %s", ours).anySatisfy(r -> {
                    assertThat(r.get("size_bytes")).isEqualTo(ours.get("size_bytes"));
                    assertThat(r.get("repeat")).isEqualTo(ours.get("repeat"));
                    assertThat(r.get("source")).contains("plain Aeron").contains("aeron:ipc");
                    assertThat(BenchOutputs.num(r, "p50_us")).isPositive();
                });
            }
        }
        assertThat(o.summary.stream().filter(s -> s.get("impl").equals("ours")))
                .allSatisfy(s -> assertThat(BenchOutputs.num(s, "ratio_to_raw_median")).isPositive());
        assertThat(o.svgText()).contains("transport aeron raw");
    }
}
