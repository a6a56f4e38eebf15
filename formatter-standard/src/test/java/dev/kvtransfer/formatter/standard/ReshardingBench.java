package dev.kvtransfer.formatter.standard;

import dev.kvtransfer.api.format.FormatterProvider;
import dev.kvtransfer.api.layout.BlockDistribution;
import dev.kvtransfer.api.layout.BlockLayout;
import dev.kvtransfer.api.layout.PoolLayout;
import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.memory.MemoryKind;
import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.api.model.DataType;
import dev.kvtransfer.core.memory.HostBufferManager;
import dev.kvtransfer.core.memory.MemoryAccess;
import dev.kvtransfer.testkit.LayoutPair;
import dev.kvtransfer.testkit.harness.FormatterHarness;
import dev.kvtransfer.testkit.harness.HarnessOptions;
import dev.kvtransfer.testkit.harness.PairReport;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Locale;

/**
 * One llama3-8b-shaped request (32 layers, 8 KV heads, head size 128, fp16) moved between a context and a
 * generation instance in one JVM, through the testkit's {@link FormatterHarness} (core's production session over
 * the loopback transport), next to a single-thread copy of the same bytes in the same run. Not a test: run it by
 * hand (formatter-standard/README.md has the command); it verifies every element of the last transfer of each case
 * with KvPattern.
 *
 * <p>Cases: TP1 to TP1, TP2 to TP1 and TP1 to TP2 between block pools (32 tokens per block), with the default
 * plan (rows on the side holding all heads; the other side gathers / scatters, a staged receive scattering on a
 * helper thread), the scatter inline, and both sides direct (one message per block, layer and kv); layer-nhd on
 * both sides at 16 tokens per block with and without the peers' block ids (coalescing); layer-nhd to block (a
 * transposing sender). Each case: 2 warm-up transfers, then 3 runs ({@code -Dbench.runs}) of (one copy of the
 * request's bytes with {@code BufferManager.copy} on one thread, one transfer, the same copy again); printed as
 * min / median / max over the runs, with the messages per request and the ratio of the transfer to the mean of the
 * two copies around it. The TP cases also run without the staging ring (messages at their stream offsets).
 *
 * <p>Arguments: {@code [tokens (default 4096)] [case name filter, a regular expression found in the name]}.
 */
public final class ReshardingBench {
    private static final int WARMUP = 2;
    /** Timed runs per case: {@code -Dbench.runs=N}, default 3. */
    private static final int RUNS = Integer.getInteger("bench.runs", 3);

    private ReshardingBench() {
    }

    private static CacheState llama(int tp, int tokensPerBlock, PoolLayout pool) {
        return CacheState.builder().uniformKvHeads(32, 8).sizePerHead(128).tokensPerBlock(tokensPerBlock)
                .dataType(DataType.FLOAT16).tensorParallelism(tp).poolLayout(pool).build();
    }

    /**
     * Runs the cases.
     *
     * @param args optional token count and case filter
     */
    public static void main(String[] args) {
        int tokens = args.length > 0 ? Integer.parseInt(args[0]) : 4096;
        String filter = args.length > 1 ? args[1] : "";
        List<String> out = new ArrayList<>();
        out.add(String.format(Locale.ROOT, "llama3-8b shape (32 layers, 8 KV heads, D128, fp16), %d tokens, loopback,"
                + " %d cores; min / median / max of %d runs", tokens, Runtime.getRuntime().availableProcessors(), RUNS));
        FormatterProvider standard = new StandardFormatterProvider();
        PoolLayout block = PoolLayout.BLOCK;
        PoolLayout nhd = PoolLayout.LAYER_NHD;
        long dflt = StandardCacheFormatter.DEFAULT_MIN_BOTH_DIRECT_BYTES;
        FormatterProvider inline = new PolicyFormatterProvider(dflt, false);
        FormatterProvider helpers = new PolicyFormatterProvider(dflt, true);
        FormatterProvider bothDirect = new PolicyFormatterProvider(0, true);
        FormatterProvider noRing = new PolicyFormatterProvider(dflt, true,
                StandardCacheFormatter.DEFAULT_MIN_DIRECT_ENTRY_BYTES,
                dev.kvtransfer.formatter.support.WritePlan.DEFAULT_STAGING_CHUNK, false);
        Case[] cases = {
            new Case("TP1 -> TP1 block, T32", llama(1, 32, block), llama(1, 32, block), true, standard),
            new Case("TP2 -> TP1 block, T32", llama(2, 32, block), llama(1, 32, block), true, standard),
            new Case("TP2 -> TP1 block, T32, helpers, no ring", llama(2, 32, block), llama(1, 32, block), true,
                    noRing),
            new Case("TP2 -> TP1 block, T32, scatter on helpers", llama(2, 32, block), llama(1, 32, block), true,
                    helpers),
            new Case("TP2 -> TP1 block, T32, scatter inline", llama(2, 32, block), llama(1, 32, block), true,
                    inline),
            new Case("TP2 -> TP1 block, T32, both direct", llama(2, 32, block), llama(1, 32, block), true,
                    bothDirect),
            new Case("TP1 -> TP2 block, T32", llama(1, 32, block), llama(2, 32, block), true, standard),
            new Case("TP1 -> TP2 block, T32, no ring", llama(1, 32, block), llama(2, 32, block), true,
                    noRing),
            new Case("TP1 -> TP2 block, T32, both direct", llama(1, 32, block), llama(2, 32, block), true,
                    bothDirect),
            new Case("TP1 nhd -> nhd T16, coalesced", llama(1, 16, nhd), llama(1, 16, nhd), true, standard),
            new Case("TP1 nhd -> nhd T16, per block", llama(1, 16, nhd), llama(1, 16, nhd), false, standard),
            new Case("TP1 nhd -> block T16", llama(1, 16, nhd), llama(1, 16, block), true, standard),
        };
        for (Case c : cases) {
            if (java.util.regex.Pattern.compile(filter).matcher(c.name).find()) {
                out.add(c.run(tokens));
                System.out.println(out.get(out.size() - 1));
            }
        }
        out.add("load average at the end: " + loadAverage());
        System.out.println(out.get(out.size() - 1));
        try {
            Files.writeString(Path.of(System.getProperty("bench.out", "formatter-standard/target/resharding-bench.txt")), String.join(System.lineSeparator(), out)
                    + System.lineSeparator());
        } catch (IOException e) {
            System.out.println("could not write the report: " + e);
        }
    }

    private static String loadAverage() {
        try {
            String[] f = Files.readString(Path.of("/proc/loadavg")).trim().split("\\s+");
            return f[0] + " " + f[1] + " " + f[2];
        } catch (IOException | RuntimeException e) {
            return "unknown (" + e.getMessage() + ")";
        }
    }

    /** One scenario. */
    private record Case(String name, CacheState ctx, CacheState gen, boolean exchangeIds, FormatterProvider provider) {
        String run(int tokens) {
            int blocks = BlockDistribution.blocksFor(tokens, ctx.tokensPerBlock());
            long bytes = (long) blocks * BlockLayout.of(gen, 0).blockBytes() * gen.worldSize();
            long share = bytes / Math.min(ctx.worldSize(), gen.worldSize());
            LayoutPair pair = new LayoutPair(name, ctx, gen, List.of(tokens), null);
            HarnessOptions options = HarnessOptions.defaults().withTimeout(Duration.ofSeconds(120))
                    .withSlotBytes(share).withFragmentBlocks(false).withExchangeBlockIds(exchangeIds)
                    .withVerify(false);
            double[] gbps = new double[RUNS];
            double[] copy = new double[RUNS];
            double[] ratio = new double[RUNS];
            long messages;
            HostBufferManager memory = new HostBufferManager();
            try (FormatterHarness h = FormatterHarness.open(provider, pair, options);
                 MemoryBuffer a = memory.allocate(bytes, MemoryKind.HOST);
                 MemoryBuffer b = memory.allocate(bytes, MemoryKind.HOST)) {
                MemoryAccess.preTouch(a.address(), bytes);
                MemoryAccess.preTouch(b.address(), bytes);
                h.prepare();
                for (int i = 0; i < WARMUP; i++) {
                    transfer(h);
                    memory.copy(a, 0, b, 0, bytes);
                }
                for (int i = 0; i < RUNS; i++) {
                    // The copy right before and right after the transfer: the machine's load changes within
                    // seconds, so the transfer is compared with the mean time of the two copies around it.
                    long t0 = System.nanoTime();
                    memory.copy(a, 0, b, 0, bytes);
                    long t1 = System.nanoTime();
                    long nanos = transfer(h);
                    long t2 = System.nanoTime();
                    memory.copy(b, 0, a, 0, bytes);
                    long t3 = System.nanoTime();
                    copy[i] = bytes / ((t1 - t0 + t3 - t2) / 2.0);
                    gbps[i] = bytes / (double) nanos;
                    ratio[i] = gbps[i] / copy[i];
                }
                PairReport r = h.report();
                messages = r.requests().get(0).messagesSent();
            } finally {
                memory.close();
            }
            verify(provider, pair, options);
            return String.format(Locale.ROOT, "%-32s %6.1f MiB %6d msgs  transfer %s GB/s  copy %s GB/s  ratio %s",
                    name, bytes / 1048576.0, messages, mmm(gbps, "%5.2f"), mmm(copy, "%5.2f"), mmm(ratio, "%4.2f"));
        }

        private static long transfer(FormatterHarness h) {
            long nanos = h.transfer();
            if (h.failure() != null) {
                throw new IllegalStateException(h.failure());
            }
            return nanos;
        }

        /** A fresh verified run (the timed harness skips verification to keep its runs short). */
        private static void verify(FormatterProvider provider, LayoutPair pair, HarnessOptions options) {
            PairReport r = FormatterHarness.run(provider, pair, options.withVerify(true));
            if (!r.completed() || !r.requests().get(0).verify().ok()) {
                throw new IllegalStateException(pair.name() + ": " + r.failure() + " "
                        + (r.requests().isEmpty() ? "" : r.requests().get(0).verify()));
            }
        }

        private static String mmm(double[] v, String f) {
            double[] s = v.clone();
            Arrays.sort(s);
            return String.format(Locale.ROOT, f + " / " + f + " / " + f, s[0], s[s.length / 2], s[s.length - 1]);
        }
    }
}
