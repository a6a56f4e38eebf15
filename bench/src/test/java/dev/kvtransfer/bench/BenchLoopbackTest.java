package dev.kvtransfer.bench;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import picocli.CommandLine;

import java.io.OutputStream;
import java.io.PrintStream;
import java.io.PrintWriter;
import java.io.StringWriter;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.stream.Collectors;

import static org.assertj.core.api.Assertions.assertThat;

/** A short bench on the in-JVM loopback test transport (testkit): every level, both modes, CRC on and off. */
class BenchLoopbackTest {
    @Test
    void shortRunOnLoopbackWritesConsistentParseableOutputs(@TempDir Path out) throws Exception {
        BenchOutputs o = BenchOutputs.run(out, "--backend=loopback", "--sizes=4k,100000", "--total=512k",
                "--latency-samples=20", "--model=tiny", "--blocks=3", "--inflight=2", "--requests=4",
                "--control-inflight=1,4", "--control-requests=8", "--mode=pull,push", "--crc-compare", "--verify",
                "--repeat=2", "--timeout-s=60");
        assertThat(o.exitCode).as("exit code; stderr:%n%s", o.stderr).isZero();
        o.checkConsistent(2);

        // Transport: ours and memcpy for both sizes (one not a power of two), no raw (loopback offers none).
        assertThat(o.runs("transport", "ours")).hasSize(4);
        assertThat(o.runs("transport", "memcpy")).hasSize(4);
        assertThat(o.runs("transport", "raw")).isEmpty();
        assertThat(o.stderr).contains("loopback: no raw baseline");
        for (Map<String, String> r : o.runs("transport", "ours")) {
            // --verify: every message checked word by word (4 KiB = 512 words, 100000 B = 12500): at least the
            // timed messages, two warm-up messages and 8 round trips, and whole messages only.
            long words = TransportBench.words((long) BenchOutputs.num(r, "size_bytes"));
            long verified = (long) BenchOutputs.num(r, "verified_elements");
            assertThat(verified % words).isZero();
            assertThat(verified / words).isGreaterThanOrEqualTo((long) BenchOutputs.num(r, "ops") + 2 + 8);
            assertThat(r.get("note")).contains("--verify");
        }
        // Control: one-block requests at 1 and 4 in flight; transceiver: 3-block requests; each pull/push x crc.
        List<Map<String, String>> control = o.runs("control", "ours");
        assertThat(control).hasSize(2 * 2 * 2 * 2);
        assertThat(control).allSatisfy(r -> {
            assertThat(r.get("blocks")).isEqualTo("1");
            assertThat(BenchOutputs.num(r, "size_bytes")).isEqualTo(16384.0); // tiny: one 16-token block
            // Every element of every request, the default warm-up included: 8 timed + min(20000, 10 x 8) warm-up
            // requests of one block of 8192 elements.
            assertThat(BenchOutputs.num(r, "ops")).isEqualTo(8.0);
            assertThat(BenchOutputs.num(r, "verified_elements")).isEqualTo((8 + 80) * 8192.0);
        });
        assertThat(control.stream().map(r -> r.get("inflight")).collect(Collectors.toSet()))
                .isEqualTo(Set.of("1", "4"));
        List<Map<String, String>> big = o.runs("transceiver", "ours");
        assertThat(big).hasSize(2 * 2 * 2);
        assertThat(big.stream().map(r -> r.get("mode") + "/" + r.get("checksums")).collect(Collectors.toSet()))
                .isEqualTo(Set.of("pull/on", "pull/off", "push/on", "push/off"));
        assertThat(big).allSatisfy(r -> {
            assertThat(BenchOutputs.num(r, "size_bytes")).isEqualTo(3 * 16384.0);
            assertThat(BenchOutputs.num(r, "ops")).isEqualTo(4.0);
            // Every element of every request, warm-up included: 3 blocks x 8192 elements x (4 + 2 warm-up).
            assertThat(BenchOutputs.num(r, "verified_elements")).isEqualTo(3 * 8192.0 * 6);
            assertThat(BenchOutputs.num(r, "bytes")).isEqualTo(4 * 3 * 16384.0);
            // The copy ledger (both instances in this JVM): loopback makes one pass, part checksums one per side.
            assertThat(BenchOutputs.num(r, "transport_per_byte")).as("%s", r).isEqualTo(1.0);
            assertThat(BenchOutputs.num(r, "checksum_per_byte")).as("%s", r)
                    .isEqualTo(r.get("checksums").equals("on") ? 2.0 : 0.0);
            assertThat(BenchOutputs.num(r, "staged_per_byte")).as("%s", r).isBetween(0.0, 2.0);
        });
        // Push rows say how many requests were really pushed when any fell back to pull (loopback can write
        // one-sided; whether the formatter can push decides), pull rows never mention it.
        assertThat(o.runs.stream().filter(r -> "push".equals(r.get("mode")))).isNotEmpty().allSatisfy(r -> {
            if (r.get("note").contains("pulled")) {
                assertThat(r.get("note"))
                        .containsPattern("push asked: \\d+ of \\d+ requests pushed, the rest pulled");
            }
        });
        assertThat(o.runs.stream().filter(r -> "pull".equals(r.get("mode"))))
                .allSatisfy(r -> assertThat(r.get("note")).doesNotContain("push asked"));
        assertThat(o.runs("transceiver", "memcpy")).hasSize(2);
        assertThat(o.stdout).contains("part checksums (CRC32C) on vs off").contains("two CRC32C passes at");
        assertThat(o.stdout).contains("added to the critical path would give");
        @SuppressWarnings("unchecked")
        Map<String, Object> info = (Map<String, Object>) o.json.get("run");
        assertThat(((Number) info.get("crc32c_gbps")).doubleValue()).isPositive();
        // Ratio to memcpy is known for every ours configuration.
        assertThat(o.summary.stream().filter(s -> s.get("impl").equals("ours")))
                .allSatisfy(s -> assertThat(BenchOutputs.num(s, "ratio_to_memcpy_median")).isPositive());
    }

    @Test
    void unknownBackendIsReportedAndTheExitCodeSaysNothingRan(@TempDir Path out) throws Exception {
        BenchOutputs o = BenchOutputs.run(out, "--backend=nosuch", "--level=transport", "--sizes=4k", "--total=64k",
                "--repeat=1", "--no-memcpy");
        assertThat(o.exitCode).isEqualTo(1);
        assertThat(o.stderr).contains("no transport named 'nosuch'").contains("loopback");
        assertThat(o.runs).isEmpty();
    }

    @Test
    void aControlWarmupBelowOneIsRefusedNamingTheOption(@TempDir Path out) throws Exception {
        StringWriter err = new StringWriter();
        PrintStream quiet = new PrintStream(OutputStream.nullOutputStream());
        CommandLine cl = new CommandLine(new BenchCommand(quiet, quiet));
        cl.setErr(new PrintWriter(err, true));
        int code = cl.execute("--backend=loopback", "--level=control", "--control-warmup=0", "--repeat=1",
                "--no-memcpy", "--out=" + out);
        assertThat(code).isNotZero();
        assertThat(err.toString()).contains("--control-warmup must be positive");
        assertThat(out.resolve("runs.csv")).doesNotExist();
    }
}
