package dev.kvtransfer.cli;

import dev.kvtransfer.api.layout.BlockLayout;
import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.core.cache.PagedKvCache;
import dev.kvtransfer.core.memory.HostBufferManager;
import dev.kvtransfer.testkit.KvPattern;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import picocli.CommandLine;

import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;

import static org.assertj.core.api.Assertions.assertThat;

/** The demo on the in-JVM loopback transport: exit status, report, and the fixed dump format. */
class DemoLoopbackTest {

    private static int run(PrintStream out, String... args) {
        PrintStream old = System.out;
        System.setOut(out);
        try {
            return new CommandLine(new KvTransferCli()).execute(args);
        } finally {
            System.setOut(old);
        }
    }

    @Test
    void reshardingDemoVerifiesAndDumpsEveryGenerationRank(@TempDir Path dir) throws Exception {
        ByteArrayOutputStream captured = new ByteArrayOutputStream();
        int code = run(new PrintStream(captured, true, StandardCharsets.UTF_8), "demo", "--backend=loopback",
                "--requests=3", "--isl=30", "--layers=4", "--kv-heads=4", "--size-per-head=8",
                "--tokens-per-block=16", "--dtype=fp16", "--ctx-tp=2", "--gen-pp=2", "--gen-tp=1",
                "--dump-dir=" + dir, "--warmup-ms=300");
        String report = captured.toString(StandardCharsets.UTF_8);
        assertThat(code).as(report).isZero();
        assertThat(report).contains("verify").contains("OK").contains("0 failed");
        // The default warm-up: untimed requests for --warmup-ms (at least 4), verified, and not in the dump.
        assertThat(report).containsPattern("warm-up +([4-9]|[1-9][0-9]+) requests before the measured ones "
                + "\\(untimed, [0-9]+\\.[0-9] s\\): 0 failed, [1-9][0-9]* elements verified");
        try (var files = Files.list(dir.resolve("gen-rank-0"))) {
            assertThat(files.map(f -> f.getFileName().toString()).sorted())
                    .containsExactly("request-1.bin", "request-2.bin", "request-3.bin");
        }

        // Every generation rank wrote each request's blocks in block order, exactly as stored.
        CacheState gen = CacheState.builder().uniformKvHeads(4, 4).sizePerHead(8).tokensPerBlock(16)
                .pipelineParallelism(2).build();
        int totalBlocks = 2; // 30 tokens in blocks of 16
        for (int rank = 0; rank < gen.worldSize(); rank++) {
            BlockLayout layout = BlockLayout.of(gen, rank);
            for (long id = 1; id <= 3; id++) {
                Path file = dir.resolve("gen-rank-" + rank).resolve("request-" + id + ".bin");
                assertThat(file).exists();
                byte[] bytes = Files.readAllBytes(file);
                assertThat((long) bytes.length).isEqualTo(totalBlocks * layout.blockBytes());
                try (HostBufferManager mm = new HostBufferManager();
                     PagedKvCache expected = new PagedKvCache(mm, layout, totalBlocks)) {
                    int[] blocks = expected.allocate(id, totalBlocks);
                    KvPattern.fill(expected, blocks, gen, rank, id, totalBlocks);
                    for (int b = 0; b < totalBlocks; b++) {
                        ByteBuffer want = expected.block(blocks[b]).asByteBuffer();
                        ByteBuffer got = ByteBuffer.wrap(bytes, (int) (b * layout.blockBytes()), (int) layout.blockBytes());
                        assertThat(got.compareTo(want)).as("rank %d request %d block %d", rank, id, b).isZero();
                    }
                    expected.free(id);
                }
            }
        }
    }

    @Test
    void theHybridPresetMovesBlocksAndRecurrentStatesVerified() {
        // The shape of Qwen3-Next: 12 attention layers (2 KV heads) and 36 recurrent layers whose conv and SSM
        // states move with the KV of the same request; TP4 (above the 2 KV heads) -> PP2 re-splits the states'
        // channels, heads and layers.
        ByteArrayOutputStream captured = new ByteArrayOutputStream();
        int code = run(new PrintStream(captured, true, StandardCharsets.UTF_8), "demo", "--backend=loopback",
                "--model=qwen3-next-shape", "--requests=2", "--isl=100", "--ctx-tp=4", "--gen-pp=2", "--warmup=0");
        String report = captured.toString(StandardCharsets.UTF_8);
        assertThat(code).as(report).isZero();
        assertThat(report).contains("qwen3-next-shape").contains("recurrent{RRRA").contains("0 failed");
        // Per request the generation ranks hold 36 layers x (8192 x 3 + 32 x 128 x 128) state elements, all checked
        // besides the KV elements.
        long states = 36L * (8192 * 3 + 32 * 128 * 128);
        java.util.regex.Matcher m = java.util.regex.Pattern.compile("OK \\(([0-9]+) elements checked\\)")
                .matcher(report);
        assertThat(m.find()).as(report).isTrue();
        assertThat(Long.parseLong(m.group(1))).as(report).isGreaterThan(2 * states);

        // Every block already held by the generation side (a prefix hit of both 64-token blocks): the states, which
        // are per request, still move and are checked.
        captured.reset();
        code = run(new PrintStream(captured, true, StandardCharsets.UTF_8), "demo", "--backend=loopback",
                "--model=qwen3-next-shape", "--requests=2", "--isl=100", "--gen-reuse-blocks=2", "--gen-pp=2",
                "--warmup=0");
        report = captured.toString(StandardCharsets.UTF_8);
        assertThat(code).as(report).isZero();
        assertThat(report).contains("0 failed").contains("verify             OK");
    }

    @Test
    void theSlidingWindowPresetMovesOnlyTheBlocksInsideEachWindowVerified() {
        // The shape of Gemma 3 (5 local layers with a 1024-token window : 1 global), cut to 12 layers of 2 KV heads of
        // 16 so a 2000-token prompt stays small: 63 blocks of 32 tokens, of which a local layer moves the last
        // ceil(1024 / 32) + 1 = 33 and a global layer all 63. TP2 -> PP2; the check finds the pattern inside every
        // window and the poison in the local layers' 30 blocks before it.
        ByteArrayOutputStream captured = new ByteArrayOutputStream();
        int code = run(new PrintStream(captured, true, StandardCharsets.UTF_8), "demo", "--backend=loopback",
                "--model=gemma3-shape", "--layers=12", "--kv-heads=2", "--size-per-head=16", "--requests=2",
                "--isl=2000", "--ctx-tp=2", "--gen-pp=2", "--warmup=0");
        String report = captured.toString(StandardCharsets.UTF_8);
        assertThat(code).as(report).isZero();
        assertThat(report).contains("gemma3-shape").contains("windows=[1024x5,full,1024x5,full]")
                .contains("0 failed").contains("verify             OK");
        // Every element of the 63 blocks is checked (12 layers x K,V x 2 heads x 32 tokens x 16 per block).
        java.util.regex.Matcher m = java.util.regex.Pattern.compile("OK \\(([0-9]+) elements checked\\)")
                .matcher(report);
        assertThat(m.find()).as(report).isTrue();
        assertThat(Long.parseLong(m.group(1))).as(report).isEqualTo(2L * 63 * 12 * 2 * 2 * 32 * 16);
        // Moved: 2 requests x (10 local layers x 33 blocks + 2 global layers x 63 blocks) x 4096 bytes a layer of a
        // block = 3735552 bytes = 3.563 MiB, where every block of every layer would be 5.906 MiB.
        assertThat(report).containsPattern("bytes moved +3\\.563 MiB");
    }

    @Test
    void unsupportedLayoutFailsTheRunWithTheReason() {
        ByteArrayOutputStream captured = new ByteArrayOutputStream();
        // The standard formatter refuses CP above 1 on both sides when they differ.
        int code = run(new PrintStream(captured, true, StandardCharsets.UTF_8), "demo", "--backend=loopback",
                "--requests=2", "--isl=32", "--layers=2", "--kv-heads=2", "--size-per-head=4",
                "--tokens-per-block=8", "--ctx-cp=2", "--gen-cp=4", "--timeout-s=20", "--warmup=4");
        String report = captured.toString(StandardCharsets.UTF_8);
        assertThat(code).as(report).isNotZero();
        assertThat(report).contains("2 failed").containsIgnoringCase("first error");
        assertThat(report).containsPattern("warm-up +4 requests .*: 4 failed").contains("warm-up error");
    }

    @Test
    void layerPoolsDumpOneFilePerRegionAndReuseSkipsTheHeldPrefix(@TempDir Path dir) throws Exception {
        ByteArrayOutputStream captured = new ByteArrayOutputStream();
        int code = run(new PrintStream(captured, true, StandardCharsets.UTF_8), "demo", "--backend=loopback",
                "--requests=2", "--isl=80", "--layers=2", "--kv-heads=4", "--size-per-head=8",
                "--tokens-per-block=16", "--dtype=fp16", "--ctx-pool-layout=layer-nhd", "--gen-pool-layout=layer-hnd",
                "--gen-tp=2", "--gen-reuse-blocks=2", "--warmup=1", "--dump-dir=" + dir);
        String report = captured.toString(StandardCharsets.UTF_8);
        assertThat(code).as(report).isZero();
        assertThat(report).contains("layer-nhd -> gen TP2 PP1 layer-hnd")
                .containsPattern("messages +[0-9.]+ per request")
                .contains("reuse              2 of 5 blocks per request already held on the generation side");
        CacheState gen = CacheState.builder().uniformKvHeads(2, 4).sizePerHead(8).tokensPerBlock(16)
                .tensorParallelism(2).blockReuse(true).poolLayout(dev.kvtransfer.api.layout.PoolLayout.LAYER_HND)
                .build();
        int totalBlocks = 5;
        for (int rank = 0; rank < 2; rank++) {
            try (var files = Files.list(dir.resolve("gen-rank-" + rank))) {
                assertThat(files.map(f -> f.getFileName().toString()).filter(f -> f.startsWith("request-1."))
                        .sorted()).containsExactly("request-1.region-0-0.bin", "request-1.region-0-1.bin",
                        "request-1.region-1-0.bin", "request-1.region-1-1.bin");
            }
            assertRegionsMatchPattern(dir, gen, rank, 1, totalBlocks);
        }
    }

    @Test
    void splitLatentDumpsNopeAndRopeSegments(@TempDir Path dir) throws Exception {
        ByteArrayOutputStream captured = new ByteArrayOutputStream();
        int code = run(new PrintStream(captured, true, StandardCharsets.UTF_8), "demo", "--backend=loopback",
                "--requests=1", "--isl=40", "--layers=2", "--size-per-head=24", "--tokens-per-block=16",
                "--attention=mla", "--ctx-pool-layout=block", "--gen-pool-layout=layer-nhd", "--mla-rope-dim=8",
                "--gen-tp=2", "--warmup=0", "--dump-dir=" + dir);
        String report = captured.toString(StandardCharsets.UTF_8);
        assertThat(code).as(report).isZero();
        CacheState gen = CacheState.builder().uniformKvHeads(2, 1).sizePerHead(24).tokensPerBlock(16)
                .tensorParallelism(2).attentionType(dev.kvtransfer.api.model.AttentionType.MLA)
                .poolLayout(new dev.kvtransfer.api.layout.PoolLayout(dev.kvtransfer.api.layout.PoolLayout.Kind.LAYER_NHD,
                        8)).build();
        try (var files = Files.list(dir.resolve("gen-rank-1"))) {
            assertThat(files.map(f -> f.getFileName().toString()).sorted()).containsExactly(
                    "request-1.region-0-nope.bin", "request-1.region-0-rope.bin", "request-1.region-1-nope.bin",
                    "request-1.region-1-rope.bin");
        }
        for (int rank = 0; rank < 2; rank++) {
            assertRegionsMatchPattern(dir, gen, rank, 1, 3);
        }
    }

    /** Each region file holds the request's blocks' slices of that plane segment, in block order, as stored. */
    private static void assertRegionsMatchPattern(Path dir, CacheState gen, int rank, long id, int totalBlocks)
            throws Exception {
        int blocks = dev.kvtransfer.api.layout.BlockDistribution.count(totalBlocks, gen.contextParallelism(),
                gen.cpRank(rank));
        try (HostBufferManager mm = new HostBufferManager();
             PagedKvCache expected = PagedKvCache.of(mm, gen, rank, blocks)) {
            int[] ids = expected.allocate(id, blocks);
            KvPattern.fill(expected, ids, gen, rank, id, totalBlocks);
            dev.kvtransfer.api.layout.PoolGeometry g = expected.geometry();
            for (int layer = 0; layer < expected.layout().localLayers(); layer++) {
                for (int kv = 0; kv < expected.layout().kvFactor(); kv++) {
                    for (int seg = 0; seg < g.segments(); seg++) {
                        String k = gen.poolLayout().splitLatent() ? (seg == 0 ? "nope" : "rope") : Integer.toString(kv);
                        Path file = dir.resolve("gen-rank-" + rank).resolve("request-" + id + ".region-" + layer + "-"
                                + k + ".bin");
                        byte[] bytes = Files.readAllBytes(file);
                        int slice = (int) g.segmentPlaneBytes(seg);
                        assertThat(bytes.length).as("%s", file).isEqualTo(blocks * slice);
                        for (int b = 0; b < blocks; b++) {
                            ByteBuffer want = expected.planeSegment(ids[b], layer, kv, seg).asByteBuffer();
                            ByteBuffer got = ByteBuffer.wrap(bytes, b * slice, slice);
                            assertThat(got.compareTo(want)).as("%s block %d", file, b).isZero();
                        }
                    }
                }
            }
            expected.free(id);
        }
    }

    @Test
    void layerWiseWithSimulatedPrefillReportsOverlapAgainstTheWholeRequestRun() {
        ByteArrayOutputStream captured = new ByteArrayOutputStream();
        int code = run(new PrintStream(captured, true, StandardCharsets.UTF_8), "demo", "--backend=loopback",
                "--requests=2", "--isl=64", "--layers=4", "--kv-heads=2", "--size-per-head=8",
                "--tokens-per-block=16", "--layerwise", "--prefill-ms-per-layer=1", "--warmup=1", "--mode=push");
        String report = captured.toString(StandardCharsets.UTF_8);
        assertThat(code).as(report).isZero();
        assertThat(report).contains("prefill            4 layers x 1.00 ms = 4.0 ms per request")
                .containsPattern("exposed +[0-9.]+ ms per request after the last layer's prefill ended \\(layer-wise\\); "
                        + "[0-9.]+ ms handing the whole request over after prefill")
                .containsPattern("overlap +[0-9.]+ % of transfer time hidden behind prefill")
                .containsPattern("comparison run +2 requests without --layerwise, [1-9][0-9]* elements verified");
    }
}
