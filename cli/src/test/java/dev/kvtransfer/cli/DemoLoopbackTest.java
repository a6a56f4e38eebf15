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
                "--dump-dir=" + dir);
        String report = captured.toString(StandardCharsets.UTF_8);
        assertThat(code).as(report).isZero();
        assertThat(report).contains("verify").contains("OK").contains("0 failed");
        // Four untimed warm-up requests ran first, verified, and are not in the dump.
        assertThat(report).containsPattern("warm-up +4 requests before the measured ones \\(untimed\\): 0 failed, "
                + "[1-9][0-9]* elements verified");
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
    void unsupportedLayoutFailsTheRunWithTheReason() {
        ByteArrayOutputStream captured = new ByteArrayOutputStream();
        // The standard formatter refuses CP above 1 on both sides when they differ.
        int code = run(new PrintStream(captured, true, StandardCharsets.UTF_8), "demo", "--backend=loopback",
                "--requests=2", "--isl=32", "--layers=2", "--kv-heads=2", "--size-per-head=4",
                "--tokens-per-block=8", "--ctx-cp=2", "--gen-cp=4", "--timeout-s=20");
        String report = captured.toString(StandardCharsets.UTF_8);
        assertThat(code).as(report).isNotZero();
        assertThat(report).contains("2 failed").containsIgnoringCase("first error");
        assertThat(report).containsPattern("warm-up +4 requests .*: 4 failed").contains("warm-up error");
    }
}
