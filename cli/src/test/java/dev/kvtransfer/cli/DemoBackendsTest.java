package dev.kvtransfer.cli;

import dev.kvtransfer.api.transport.TransportProvider;
import dev.kvtransfer.core.plugin.Plugins;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;
import picocli.CommandLine;

import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.stream.Stream;

import static org.assertj.core.api.Assertions.assertThat;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

/**
 * The demo over the real transports, across processes: aeron and ucx run the generation instance in a child
 * JVM; mpi runs every rank as an mpirun process. Every received element is verified by the demo itself
 * (exit status 0 only when all match).
 */
class DemoBackendsTest {

    private static String run(int expectedExit, String... args) {
        ByteArrayOutputStream captured = new ByteArrayOutputStream();
        PrintStream old = System.out;
        System.setOut(new PrintStream(captured, true, StandardCharsets.UTF_8));
        int code;
        try {
            code = new CommandLine(new KvTransferCli()).execute(args);
        } finally {
            System.setOut(old);
        }
        String report = captured.toString(StandardCharsets.UTF_8);
        assertThat(code).as(report).isEqualTo(expectedExit);
        return report;
    }

    private static void assumeAvailable(String name) {
        TransportProvider p = Plugins.discover().transport(name);
        assumeTrue(p.isAvailable(), () -> "SKIPPED: transport " + name + " unavailable here: " + p.unavailabilityCause());
    }

    @Test
    @Timeout(value = 180, unit = TimeUnit.SECONDS)
    void aeronDemoAcrossTwoProcessesVerifiesAndDumps(@TempDir Path dir) throws Exception {
        assumeAvailable("aeron");
        // A local pull's default, the one-copy path: the context ranks write into the generation pool; the generation
        // ranks time the writers' done notices.
        String report = run(0, "demo", "--warmup=4", "--backend=aeron", "--requests=4", "--isl=50", "--ctx-tp=2",
                "--gen-pp=2", "--dump-dir=" + dir, "--timing-dir=" + dir.resolve("timing"));
        assertThat(report).contains("child JVM").contains("0 failed").contains("verify             OK");
        // By default both processes use one shared media driver (IPC through shared memory), and it says so.
        assertThat(report).containsPattern("host support +aeron media driver \\(pid \\d+\\) in \\S+, shared by");
        try (Stream<Path> files = Files.list(dir.resolve("gen-rank-1"))) {
            assertThat(files.map(p -> p.getFileName().toString()))
                    .containsExactlyInAnyOrder("request-1.bin", "request-2.bin", "request-3.bin", "request-4.bin");
        }
        // Context ranks write the send CSV, the generation process the receive CSV (TensorRT-LLM's columns).
        assertThat(dir.resolve("timing").resolve("rank_0_send.csv")).exists();
        List<String> recv = Files.readAllLines(dir.resolve("timing").resolve("rank_0_recv.csv"));
        assertThat(recv.get(0)).startsWith("RequestID,RequestInfo,Preparation,Preprocess,Transmissions,Postprocess");
        assertThat(recv).as("a receive row per request (warm-up and timed)").hasSizeGreaterThan(4);
    }

    @Test
    @Timeout(value = 180, unit = TimeUnit.SECONDS)
    void aeronDemoWithLayerPoolsReuseAndLayerWisePushAcrossTwoProcesses(@TempDir Path dir) throws Exception {
        assumeAvailable("aeron");
        String report = run(0, "demo", "--backend=aeron", "--requests=2", "--isl=100", "--ctx-pool-layout=layer-hnd",
                "--gen-pool-layout=layer-nhd", "--ctx-cp=2", "--gen-tp=2", "--gen-reuse-blocks=1", "--layerwise",
                "--prefill-ms-per-layer=1", "--mode=push", "--warmup=1", "--dump-dir=" + dir);
        assertThat(report).contains("child JVM").contains("0 failed").contains("verify             OK")
                .contains("reuse              1 of 7 blocks per request")
                .containsPattern("comparison run +2 requests without --layerwise, [1-9][0-9]* elements verified");
        for (int rank = 0; rank < 2; rank++) {
            try (Stream<Path> files = Files.list(dir.resolve("gen-rank-" + rank))) {
                assertThat(files.map(p -> p.getFileName().toString()).filter(f -> f.startsWith("request-2.")))
                        .hasSize(8).allMatch(f -> f.matches("request-2\\.region-[0-3]-[01]\\.bin"));
            }
        }
    }

    @Test
    @Timeout(value = 240, unit = TimeUnit.SECONDS)
    void aeronMovesAHybridModelsBlocksAndStatesTp2ToTp1AndPp2ToPp1AcrossTwoProcesses() {
        assumeAvailable("aeron");
        // The shape of Qwen3-Next: per request the 36 recurrent layers' conv and SSM states move with the KV of the
        // 12 attention layers; the child JVM checks every block and state element.
        for (String layout : new String[] {"--ctx-tp=2", "--ctx-pp=2"}) {
            String report = run(0, "demo", "--backend=aeron", "--model=qwen3-next-shape", "--requests=2",
                    "--isl=100", layout, "--warmup=0");
            assertThat(report).contains("child JVM").contains("recurrent{RRRA").contains("0 failed")
                    .contains("verify             OK");
            java.util.regex.Matcher m = java.util.regex.Pattern.compile("OK \\(([0-9]+) elements checked\\)")
                    .matcher(report);
            assertThat(m.find()).as(report).isTrue();
            assertThat(Long.parseLong(m.group(1))).as(report).isGreaterThan(2 * 36L * (8192 * 3 + 32 * 128 * 128));
        }
    }

    @Test
    @Timeout(value = 240, unit = TimeUnit.SECONDS)
    void aeronMovesOnlyTheWindowsBlocksOfASlidingWindowModelTp2ToTp1AndPp2ToPp1AcrossTwoProcesses() {
        assumeAvailable("aeron");
        // The shape of Gemma 3 cut to 12 layers of 2 KV heads of 16: a 2000-token prompt is 63 blocks, of which a
        // local layer (1024-token window) moves 33 and a global layer 63; the child JVM finds the pattern inside every
        // window and the poison before it.
        for (String layout : new String[] {"--ctx-tp=2", "--ctx-pp=2"}) {
            String report = run(0, "demo", "--backend=aeron", "--model=gemma3-shape", "--layers=12", "--kv-heads=2",
                    "--size-per-head=16", "--requests=2", "--isl=2000", layout, "--warmup=0");
            assertThat(report).contains("child JVM").contains("windows=[1024x5,full,1024x5,full]")
                    .contains("0 failed").contains("verify             OK");
            java.util.regex.Matcher m = java.util.regex.Pattern.compile("OK \\(([0-9]+) elements checked\\)")
                    .matcher(report);
            assertThat(m.find()).as(report).isTrue();
            assertThat(Long.parseLong(m.group(1))).as(report).isEqualTo(2L * 63 * 12 * 2 * 2 * 32 * 16);
            // 2 x (10 x 33 + 2 x 63) x 4096 bytes = 3.563 MiB, where every block of every layer would be 5.906 MiB.
            assertThat(report).as(report).containsPattern("bytes moved +3\\.563 MiB");
        }
    }

    @Test
    @Timeout(value = 180, unit = TimeUnit.SECONDS)
    void ucxDemoAcrossTwoProcessesVerifies() {
        assumeAvailable("ucx");
        String report = run(0, "demo", "--warmup=4", "--backend=ucx", "--requests=4", "--isl=40", "--gen-tp=2");
        assertThat(report).contains("child JVM").contains("0 failed").contains("verify             OK");
    }

    @Test
    @Timeout(value = 240, unit = TimeUnit.SECONDS)
    void mpiDemoOnTwoRanksVerifiesAndDumps(@TempDir Path dir) throws Exception {
        assumeAvailable("mpi");
        String report = run(0, "demo", "--backend=mpi", "--requests=3", "--isl=40", "--dump-dir=" + dir);
        assertThat(report).contains("1 context + 1 generation ranks under mpirun");
        try (Stream<Path> files = Files.list(dir.resolve("gen-rank-0"))) {
            assertThat(files.map(p -> p.getFileName().toString()))
                    .containsExactlyInAnyOrder("request-1.bin", "request-2.bin", "request-3.bin");
        }
    }

    @Test
    @Timeout(value = 240, unit = TimeUnit.SECONDS)
    void mpiDemoUnderMpirunVerifies() {
        assumeAvailable("mpi");
        String report = run(0, "demo", "--backend=mpi", "--requests=4", "--isl=40", "--ctx-tp=2", "--gen-pp=2");
        assertThat(report).contains("mpirun");
    }

    @Test
    @Timeout(value = 180, unit = TimeUnit.SECONDS)
    void mlaDemoWithAttentionDpAndGenerationCpVerifiesOncePerDpRank(@TempDir Path dir) throws Exception {
        String report = run(0, "demo", "--warmup=4", "--backend=loopback", "--attention=mla", "--ctx-tp=2", "--ctx-attention-dp",
                "--gen-tp=2", "--gen-attention-dp", "--gen-pp=2", "--requests=4", "--isl=40", "--dump-dir=" + dir);
        assertThat(report).contains("verify             OK");
        // gen TP2 DP2 PP2: ranks 0,1 (PP 0) and 2,3 (PP 1); request i is served by DP rank i % 2, i.e. TP rank.
        for (int rank = 0; rank < 4; rank++) {
            int dp = rank % 2;
            for (long id = 1; id <= 4; id++) {
                boolean served = (id - 1) % 2 == dp;
                assertThat(Files.exists(dir.resolve("gen-rank-" + rank).resolve("request-" + id + ".bin")))
                        .as("rank %d request %d", rank, id).isEqualTo(served);
            }
        }
    }
}
