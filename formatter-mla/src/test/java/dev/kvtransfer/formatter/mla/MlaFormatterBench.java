package dev.kvtransfer.formatter.mla;

import dev.kvtransfer.api.layout.BlockDistribution;
import dev.kvtransfer.api.layout.BlockLayout;
import dev.kvtransfer.api.layout.PoolLayout;
import dev.kvtransfer.api.model.AttentionType;
import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.api.model.DataType;
import dev.kvtransfer.testkit.LayoutPair;
import dev.kvtransfer.testkit.harness.FormatterHarness;
import dev.kvtransfer.testkit.harness.HarnessOptions;
import dev.kvtransfer.testkit.harness.PairReport;

import java.time.Duration;
import java.util.Arrays;
import java.util.List;

/**
 * Measures one MLA request moved between one context and one generation instance in one JVM over the loopback
 * transport, through the testkit's {@link FormatterHarness} (core's production session), DeepSeek-V3-shaped (61
 * layers, latent 576 of which rope 64, BF16, 64 tokens per block, indexer-K 132 bytes per token): the time from the
 * start of {@code format}/{@code unformat} on every rank to the end of the last one, median of 9 runs after 5
 * warm-ups; the last run is verified with KvPattern. Not a test: run it by hand (the module README has the
 * command).
 *
 * <p>Arguments: {@code [tokens (default 2048)] [pull | push | both (default pull)]}: with {@code push} every
 * scenario without an indexer-K pool is also (or only) pushed, one-sided over loopback's emulated writes into the
 * generation pools' grants (an indexer-K pool is pulled: the formatter does not declare PUSH then).
 */
public final class MlaFormatterBench {
    private static final int LAYERS = 61;
    private static final int LATENT = 576;
    private static final int ROPE = 64;
    private static final int TOKENS_PER_BLOCK = 64;
    private static final int INDEXER_DIM = 132;
    private static final int WARMUPS = 5;
    private static final int RUNS = 9;

    private static boolean pullRuns = true;
    private static boolean pushRuns;

    private MlaFormatterBench() {
    }

    private static CacheState mla(int tp, int pp, int cp, PoolLayout pool) {
        return CacheState.builder().uniformKvHeads(LAYERS, 1).sizePerHead(LATENT).tokensPerBlock(TOKENS_PER_BLOCK)
                .tensorParallelism(tp).pipelineParallelism(pp).contextParallelism(cp).dataType(DataType.BFLOAT16)
                .attentionType(AttentionType.MLA).poolLayout(pool).build();
    }

    private static CacheState mla(int tp, int pp, int cp) {
        return mla(tp, pp, cp, PoolLayout.BLOCK);
    }

    /**
     * Runs the scenarios.
     *
     * @param args optional prompt length in tokens
     */
    public static void main(String[] args) {
        int tokens = args.length > 0 ? Integer.parseInt(args[0]) : 2048;
        String modes = args.length > 1 ? args[1] : "pull";
        if (!List.of("pull", "push", "both").contains(modes)) {
            throw new IllegalArgumentException("mode '" + modes + "': pull, push or both");
        }
        pullRuns = !modes.equals("push");
        pushRuns = !modes.equals("pull");
        System.out.printf("MLA L%d D%d BF16 T%d, prompt %d tokens, loopback transport, %d cores%n", LAYERS, LATENT,
                TOKENS_PER_BLOCK, tokens, Runtime.getRuntime().availableProcessors());
        long dflt = MlaCacheFormatter.DEFAULT_DIRECT_RUN_MIN_BYTES;
        long never = Long.MAX_VALUE;
        PoolLayout split = new PoolLayout(PoolLayout.Kind.LAYER_NHD, ROPE);
        run("TP1PP1 -> TP1PP1 (zero copy)", mla(1, 1, 1), mla(1, 1, 1), tokens, 0, dflt);
        run("TP1PP1 -> TP1PP2 (direct runs)", mla(1, 1, 1), mla(1, 2, 1), tokens, 0, dflt);
        run("TP1PP1 -> TP1PP2 (staged)", mla(1, 1, 1), mla(1, 2, 1), tokens, 0, never);
        run("TP1PP2 -> TP1PP1 (direct runs)", mla(1, 2, 1), mla(1, 1, 1), tokens, 0, dflt);
        run("TP1PP2 -> TP1PP1 (staged)", mla(1, 2, 1), mla(1, 1, 1), tokens, 0, never);
        run("TP1PP1 -> TP1PP1 CP2 (zero copy)", mla(1, 1, 1), mla(1, 1, 2), tokens, 0, dflt);
        run("TP4PP1 -> TP1PP1 (1 of 4 sends, zero copy)", mla(4, 1, 1), mla(1, 1, 1), tokens, 0, dflt);
        run("TP1PP1 -> TP1PP1 + indexer-K (zero copy)", mla(1, 1, 1), mla(1, 1, 1), tokens, INDEXER_DIM, dflt);
        run("TP1PP1 -> TP1PP2 + indexer-K (direct/staged)", mla(1, 1, 1), mla(1, 2, 1), tokens, INDEXER_DIM, dflt);
        run("split nhd -> split nhd (coalesced, zero copy)", mla(1, 1, 1, split), mla(1, 1, 1, split), tokens, 0,
                dflt);
        run("block -> split nhd (receiver direct runs)", mla(1, 1, 1), mla(1, 1, 1, split), tokens, 0, dflt);
        run("split nhd -> block (receiver direct blocks)", mla(1, 1, 1, split), mla(1, 1, 1), tokens, 0, dflt);
    }

    private static void run(String name, CacheState ctxState, CacheState genState, int tokens, int indexerDim,
                            long directRunMinBytes) {
        if (pullRuns) {
            run(name, ctxState, genState, tokens, indexerDim, directRunMinBytes, HarnessOptions.Mode.PULL);
        }
        if (pushRuns && indexerDim == 0 && directRunMinBytes != Long.MAX_VALUE) {
            run(name.replaceAll(" \\(.*\\)$", "") + " (push)", ctxState, genState, tokens, indexerDim,
                    directRunMinBytes, HarnessOptions.Mode.PUSH);
        }
    }

    private static void run(String name, CacheState ctxState, CacheState genState, int tokens, int indexerDim,
                            long directRunMinBytes, HarnessOptions.Mode mode) {
        int total = BlockDistribution.blocksFor(tokens, TOKENS_PER_BLOCK);
        long bytes = 0;
        for (int g = 0; g < genState.worldSize(); g++) {
            BlockLayout main = BlockLayout.of(genState, g);
            long per = main.blockBytes() + (long) main.localLayers() * TOKENS_PER_BLOCK * indexerDim;
            bytes += per * BlockDistribution.count(total, genState.contextParallelism(), genState.cpRank(g));
        }
        LayoutPair pair = new LayoutPair(name, ctxState, genState, List.of(tokens), null);
        HarnessOptions options = HarnessOptions.defaults().withTimeout(Duration.ofSeconds(60))
                .withSlotBytes(2 * bytes + 4096).withFragmentBlocks(false).withIndexerDim(indexerDim)
                .withVerify(false).withMode(mode);
        double[] ms = new double[RUNS];
        long messages = 0;
        try (FormatterHarness h = FormatterHarness.open(new ThresholdProvider(directRunMinBytes), pair, options)) {
            h.prepare();
            for (int it = 0; it < WARMUPS + RUNS; it++) {
                long nanos = h.transfer();
                if (h.failure() != null) {
                    throw new IllegalStateException(name + ": " + h.failure(), h.failure());
                }
                if (it >= WARMUPS) {
                    ms[it - WARMUPS] = nanos / 1e6;
                }
            }
            PairReport last = FormatterHarness.run(new ThresholdProvider(directRunMinBytes), pair,
                    options.withVerify(true));
            if (!last.completed() || !last.requests().get(0).verify().ok()
                    || !last.requests().get(0).writeViolations().isEmpty()) {
                throw new IllegalStateException(name + ": verification failed: " + last.failure() + " "
                        + (last.requests().isEmpty() ? "" : last.requests().get(0).verify() + " "
                        + last.requests().get(0).writeViolations()));
            }
            messages = h.report().requests().get(0).messagesSent();
        }
        Arrays.sort(ms);
        double median = ms[RUNS / 2];
        System.out.printf("%-48s %8.1f MB  median %7.2f ms  %6.2f GB/s  (min %.2f, max %.2f ms)  %d %s%n", name,
                bytes / 1e6, median, bytes / median / 1e6, ms[0], ms[RUNS - 1], messages,
                mode.push() ? "write entries" : "messages");
    }
}
