package dev.kvtransfer.bench;

import org.junit.jupiter.api.Test;

import java.util.List;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/** Sizes, presets, summaries and the text formats, without running anything. */
class UnitsTest {
    @Test
    void sizesParseBinarySuffixesAndLabelBack() {
        assertThat(Sizes.parse("4k")).isEqualTo(4096);
        assertThat(Sizes.parse("64M")).isEqualTo(64L << 20);
        assertThat(Sizes.parse("1gib")).isEqualTo(1L << 30);
        assertThat(Sizes.parse("100000")).isEqualTo(100000);
        assertThat(Sizes.label(4096)).isEqualTo("4 KiB");
        assertThat(Sizes.label(64L << 20)).isEqualTo("64 MiB");
        assertThat(Sizes.label(100000)).isEqualTo("97.7 KiB");
        assertThatThrownBy(() -> Sizes.parse("0")).hasMessageContaining("positive");
        assertThatThrownBy(() -> Sizes.parse("12x")).hasMessageContaining("12x");
        assertThatThrownBy(() -> Sizes.parse("99999999999g")).hasMessageContaining("99999999999g");
    }

    @Test
    void presetsGiveKvBytesPerTokenFromTheShape() {
        assertThat(BenchModel.byId("llama3-8b").kvBytesPerToken()).isEqualTo(32L * 2 * 8 * 128 * 2); // 128 KiB
        assertThat(BenchModel.byId("deepseek-v3").kvBytesPerToken()).isEqualTo(61L * 576 * 2); // K only
        assertThat(BenchModel.byId("TINY").kvBytesPerToken() * 16).isEqualTo(16384);
        assertThatThrownBy(() -> BenchModel.byId("gpt-9")).hasMessageContaining("llama3-8b");
    }

    private static Measurement run(String impl, String backend, int repeat, long nanos, double p50) {
        return new Measurement("transport", backend, impl, impl, "-", "-", 4096, 0, impl.equals("ours") ? 1 : 0,
                repeat, 100, 409600, nanos, p50, p50 * 2, p50 * 3, p50 * 4, Double.NaN, 0, 0, 0, "");
    }

    @Test
    void summariesFoldRepeatsAndTakeRatiosPerRepeat() {
        List<Measurement> all = List.of(
                run("ours", "aeron", 1, 1000, 10), run("raw", "aeron", 1, 500, 5), run("memcpy", "host", 1, 100, 1),
                run("ours", "aeron", 2, 4000, 30), run("raw", "aeron", 2, 1000, 6), run("memcpy", "host", 2, 100, 1),
                run("ours", "aeron", 3, 2000, 20), run("raw", "aeron", 3, 2000, 4), run("memcpy", "host", 3, 200, 1));
        List<Summary> s = Summary.of(all);
        assertThat(s).hasSize(3);
        Summary ours = s.get(0);
        assertThat(ours.runs()).isEqualTo(3);
        assertThat(ours.gbps().median()).isEqualTo(409600 / 2000.0);
        assertThat(ours.gbps().min()).isEqualTo(409600 / 4000.0);
        assertThat(ours.gbps().max()).isEqualTo(409600 / 1000.0);
        // ours / raw per repeat: 0.5, 0.25, 1.0
        assertThat(ours.toRaw()).isEqualTo(new Summary.Stat(0.25, 0.5, 1.0));
        // p50 ours / raw per repeat: 2, 5, 5
        assertThat(ours.p50ToRaw()).isEqualTo(new Summary.Stat(2.0, 5.0, 5.0));
        // ours / memcpy per repeat: 0.1, 0.025, 0.1
        assertThat(ours.toMemcpy().median()).isEqualTo(0.1);
        assertThat(s.get(1).toRaw().present()).isFalse();
        assertThat(Summary.Stat.of(new double[] {4, 1, Double.NaN, 2})).isEqualTo(new Summary.Stat(1, 2, 4));
        assertThat(Summary.Stat.of(new double[] {4, 1, 3, 2}).median()).isEqualTo(2.5);
    }

    @Test
    void csvTextIsQuotedOnlyWhenNeeded() {
        assertThat(Reports.csvText("plain")).isEqualTo("plain");
        assertThat(Reports.csvText("a, \"b\"")).isEqualTo("\"a, \"\"b\"\"\"");
        assertThat(BenchOutputs.fields("x," + Reports.csvText("a, \"b\"") + ",")).containsExactly("x", "a, \"b\"", "");
    }

    @Test
    void jsonStringsEscapeControlCharacters() {
        StringBuilder b = new StringBuilder();
        Reports.string(b, "q\"\\\n\u0001");
        assertThat(Json.parse(b.toString())).isEqualTo("q\"\\\n\u0001");
    }

    @Test
    void svgOfNoRunsIsStillAWellFormedDocument() throws Exception {
        String svg = SvgPlot.render(List.of(), "empty <run> & \"quotes\"");
        assertThat(javax.xml.parsers.DocumentBuilderFactory.newInstance().newDocumentBuilder()
                .parse(new java.io.ByteArrayInputStream(svg.getBytes(java.nio.charset.StandardCharsets.UTF_8)))
                .getDocumentElement().getTagName()).isEqualTo("svg");
    }

    @Test
    void ucxPerftestFinalLineIsRead() {
        String out = """
                +--------------+--------------+----------+---------+---------+----------+----------+-----------+-----------+
                |    Stage     | # iterations | 50.0%ile | average | overall |  average |  overall |  average  |  overall  |
                +--------------+--------------+----------+---------+---------+----------+----------+-----------+-----------+
                Final:                   200      0.150  1158.171  1158.171      863.43     863.43         863         863
                """;
        double[] v = UcxPerftestBaseline.parseFinal(out);
        assertThat(v).containsExactly(200, 0.150, 1158.171, 1158.171, 863.43, 863.43, 863, 863);
        assertThatThrownBy(() -> UcxPerftestBaseline.parseFinal("no table")).hasMessageContaining("Final:");
        // C's inf / nan (an interval that took no measurable time) are read, not a NumberFormatException.
        double[] odd = UcxPerftestBaseline.parseFinal("Final:  200  0.000  inf  1158.171  nan  863.43  -nan  863\n");
        assertThat(odd[2]).isInfinite();
        assertThat(odd[4]).isNaN();
        assertThat(odd[5]).isEqualTo(863.43);
        assertThatThrownBy(() -> UcxPerftestBaseline.parseFinal("Final: 1 2 3 4 x 6 7 8\n"))
                .hasMessageContaining("'x' is not a number");
    }

    @Test
    void mpiOutputIsRead() {
        Baseline.Result r = MpiBaseline.parse("noise\nBW 4096 100 2000000\nLAT 3 1000 3000 2000\n", 4096, "mpi");
        assertThat(r.messages()).isEqualTo(100);
        assertThat(r.nanos()).isEqualTo(2_000_000);
        assertThat(r.latency().p50Us()).isEqualTo(2.0, org.assertj.core.api.Assertions.within(0.01));
        assertThat(r.latency().maxUs()).isEqualTo(3.0, org.assertj.core.api.Assertions.within(0.01));
        assertThatThrownBy(() -> MpiBaseline.parse("LAT 3 1 2\n", 4096, "mpi")).hasMessageContaining("announced 3");
        assertThatThrownBy(() -> MpiBaseline.parse("BW 1 1 1\n", 4096, "mpi")).hasMessageContaining("no BW and LAT");
    }

    @Test
    void copyBaselineTimesEveryCopy() {
        CopyBaseline.Result r = CopyBaseline.measure(1 << 16, 50);
        assertThat(r.copies()).isEqualTo(50);
        assertThat(r.copyNanos()).hasSize(50);
        assertThat(java.util.Arrays.stream(r.copyNanos()).min().orElseThrow()).isPositive();
        assertThat(r.bytes()).isEqualTo(50L << 16);
        assertThat(CopyBaseline.gigabytesPerSecond(8L << 20, 1 << 20)).isPositive();
    }

    @Test
    void crc32cBaselineAndTheBoundOfTwoChecksumPasses() {
        assertThat(CopyBaseline.crc32cGigabytesPerSecond(1 << 16, 3L << 20)).isPositive();
        assertThatThrownBy(() -> CopyBaseline.crc32cGigabytesPerSecond(0, 1)).hasMessageContaining("pieceBytes = 0");
        // 6 GB/s without checksums, CRC32C at 12 GB/s on both sides: 1 / (1/6 + 2/12) = 3 GB/s.
        assertThat(CopyBaseline.withTwoChecksumPasses(6, 12)).isEqualTo(3.0, org.assertj.core.api.Assertions.within(1e-9));
    }

    @Test
    void transportCheckFindsAFlippedByteInTheTailAndAStaleMessage() {
        try (dev.kvtransfer.core.memory.HostBufferManager mm = new dev.kvtransfer.core.memory.HostBufferManager()) {
            dev.kvtransfer.api.memory.MemoryBuffer b = mm.allocate(1003, dev.kvtransfer.api.memory.MemoryKind.HOST);
            try {
                TransportBench.fill(b, 7);
                assertThat(TransportBench.check(b, 7)).containsExactly(TransportBench.words(1003), 0);
                assertThat(TransportBench.words(1003)).isEqualTo(125 + 3);
                // The previous message's bytes (the other seed) fail nearly every word.
                assertThat(TransportBench.check(b, 8)[1]).isGreaterThan(100);
                java.nio.ByteBuffer bb = b.asByteBuffer();
                bb.put(1001, (byte) (bb.get(1001) ^ 1));
                assertThat(TransportBench.check(b, 7)[1]).isEqualTo(1);
                bb.put(1001, (byte) (bb.get(1001) ^ 1));
                bb.put(8, (byte) (bb.get(8) ^ 0x80));
                assertThat(TransportBench.check(b, 7)[1]).isEqualTo(1);
            } finally {
                b.close();
            }
        }
    }

    @Test
    void childToolsDoNotInheritTheSingletonMpiVariablesButKeepTransportChoices() {
        java.util.Map<String, String> env = new java.util.HashMap<>(java.util.Map.of("PATH", "/usr/bin",
                "PMIX_RANK", "0", "OMPI_MCA_ess", "singleton", "OMPI_MCA_pmix", "^s1", "OMPI_APP_CTX_NUM_PROCS", "1",
                "OMPI_MCA_btl", "self,vader", "OMPI_MCA_btl_tcp_if_include", "lo", "OMPI_ALLOW_RUN_AS_ROOT", "1",
                "UCX_TLS", "sm"));
        Processes.withoutLauncherVariables(env);
        assertThat(env).containsOnlyKeys("PATH", "OMPI_MCA_btl", "OMPI_MCA_btl_tcp_if_include",
                "OMPI_ALLOW_RUN_AS_ROOT", "UCX_TLS");
    }

    @Test
    void baselinesAreFoundPerBackendOrSayWhyNot() {
        dev.kvtransfer.core.plugin.Plugins plugins = dev.kvtransfer.core.plugin.Plugins.discover();
        dev.kvtransfer.api.transport.TransportConfig cfg = dev.kvtransfer.api.transport.TransportConfig.builder()
                .build();
        Baselines.Found aeron = Baselines.find("aeron", plugins, cfg);
        assertThat(aeron.baseline()).isPresent();
        assertThat(aeron.baseline().get().describe()).contains("plain Aeron");
        Baselines.Found loopback = Baselines.find("loopback", plugins, cfg);
        assertThat(loopback.baseline()).isEmpty();
        assertThat(loopback.missing()).contains("offers none");
        Baselines.Found ucx = Baselines.find("ucx", plugins, cfg, "no-such-ucx_perftest", "mpicc", "mpirun");
        assertThat(ucx.baseline()).isEmpty();
        assertThat(ucx.missing()).contains("no-such-ucx_perftest not installed");
    }

    /** Sink for the allocation the meter must see (kept reachable so the JIT cannot drop it). */
    static volatile byte[] sink;

    @Test
    void heapMeterDoesNotCountItself() {
        org.junit.jupiter.api.Assumptions.assumeTrue(HeapMeter.supported(), "no per-thread allocation counters");
        long least = Long.MAX_VALUE;
        for (int i = 0; i < 5; i++) {
            HeapMeter m = new HeapMeter();
            m.start();
            least = Math.min(least, m.stop());
        }
        // An empty interval: nothing of the meter's own snapshots (the least of 5, in case another thread allocated).
        assertThat(least).isBetween(0L, 256L);
        HeapMeter m = new HeapMeter();
        m.start();
        sink = new byte[1 << 20];
        assertThat(m.stop()).isGreaterThanOrEqualTo(1 << 20);
    }
}
