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
import dev.kvtransfer.formatter.support.WritePlan;
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
 * Push (one-sided writes into the generation pools, loopback's emulated writes) against pull (two-sided parts) for
 * one llama3-8b-shaped request (32 layers, 8 KV heads, head size 128, fp16) between a context and a generation
 * instance in one JVM, through the testkit's {@link FormatterHarness} (core's production session), next to a
 * single-thread copy of the same bytes in the same run. Not a test: run it by hand (formatter-standard/README.md has
 * the command); the last transfer of each case is verified element by element with KvPattern (and, for a push,
 * checked as core's receiver checks the writes).
 *
 * <p>Cases: TP1 to TP1, TP2 to TP1 and TP1 to TP2, block pools (32 tokens per block) and layer-nhd pools (16 tokens
 * per block) on both sides; each pulled and pushed with the default policies, and pushed with every part written
 * straight from the pool ({@code minDirectEntryBytes} 0) and staged wherever that needs fewer entries
 * ({@code Long.MAX_VALUE}) where the two differ. Per case: 2 warm-up transfers, then 3 runs of (one copy of the
 * request's bytes with {@code BufferManager.copy} on one thread, one transfer); printed as min / median / max over the
 * runs, with the messages (pull) or write entries (push) per request and the ratio to the copy of the same run.
 *
 * <p>Arguments: {@code [tokens (default 4096)] [case name filter]}.
 */
public final class PushPullBench {
    private static final int WARMUP = 2;
    private static final int RUNS = 3;

    private PushPullBench() {
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
                + " %d cores, load %s; min / median / max of %d runs", tokens,
                Runtime.getRuntime().availableProcessors(), loadAverage(), RUNS));
        System.out.println(out.get(0));
        FormatterProvider standard = new StandardFormatterProvider();
        long dflt = StandardCacheFormatter.DEFAULT_MIN_BOTH_DIRECT_BYTES;
        FormatterProvider direct = new PolicyFormatterProvider(dflt, true, 0, WritePlan.DEFAULT_STAGING_CHUNK);
        FormatterProvider staged = new PolicyFormatterProvider(dflt, true, Long.MAX_VALUE,
                WritePlan.DEFAULT_STAGING_CHUNK);
        HarnessOptions.Mode pull = HarnessOptions.Mode.PULL;
        HarnessOptions.Mode push = HarnessOptions.Mode.PUSH;
        List<Case> cases = new ArrayList<>();
        for (PoolLayout pool : new PoolLayout[] {PoolLayout.BLOCK, PoolLayout.LAYER_NHD}) {
            int t = pool.equals(PoolLayout.BLOCK) ? 32 : 16;
            String kind = pool.equals(PoolLayout.BLOCK) ? "block" : "nhd";
            for (int[] tp : new int[][] {{1, 1}, {2, 1}, {1, 2}}) {
                String name = "TP" + tp[0] + " -> TP" + tp[1] + " " + kind + " T" + t;
                CacheState ctx = llama(tp[0], t, pool);
                CacheState gen = llama(tp[1], t, pool);
                cases.add(new Case(name + " pull", ctx, gen, pull, standard));
                cases.add(new Case(name + " push", ctx, gen, push, standard));
                if (tp[0] < tp[1]) {
                    // The head share is strided in the source: written per (block, layer, kv) or token, or staged.
                    cases.add(new Case(name + " push, all direct", ctx, gen, push, direct));
                    cases.add(new Case(name + " push, staged", ctx, gen, push, staged));
                }
            }
        }
        for (Case c : cases) {
            if (c.name.contains(filter)) {
                out.add(c.run(tokens));
                System.out.println(out.get(out.size() - 1));
            }
        }
        out.add("load average at the end: " + loadAverage());
        System.out.println(out.get(out.size() - 1));
        try {
            Files.writeString(Path.of(System.getProperty("bench.out", "formatter-standard/target/push-pull-bench.txt")),
                    String.join(System.lineSeparator(), out) + System.lineSeparator());
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
    private record Case(String name, CacheState ctx, CacheState gen, HarnessOptions.Mode mode,
                        FormatterProvider provider) {
        String run(int tokens) {
            int blocks = BlockDistribution.blocksFor(tokens, ctx.tokensPerBlock());
            long bytes = (long) blocks * BlockLayout.of(gen, 0).blockBytes() * gen.worldSize();
            long share = bytes / Math.min(ctx.worldSize(), gen.worldSize());
            LayoutPair pair = new LayoutPair(name, ctx, gen, List.of(tokens), null);
            HarnessOptions options = HarnessOptions.defaults().withTimeout(Duration.ofSeconds(300))
                    .withSlotBytes(share).withFragmentBlocks(false).withExchangeBlockIds(true).withVerify(false)
                    .withMode(mode);
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
                    long t0 = System.nanoTime();
                    memory.copy(a, 0, b, 0, bytes);
                    long t1 = System.nanoTime();
                    long nanos = transfer(h);
                    copy[i] = bytes / (double) (t1 - t0);
                    gbps[i] = bytes / (double) nanos;
                    ratio[i] = gbps[i] / copy[i];
                }
                PairReport r = h.report();
                messages = r.requests().get(0).messagesSent();
            } finally {
                memory.close();
            }
            verify(provider, pair, options);
            return String.format(Locale.ROOT, "%-36s %6.1f MiB %7d %s  transfer %s GB/s  copy %s GB/s  ratio %s",
                    name, bytes / 1048576.0, messages, mode.push() ? "entries" : "msgs   ", mmm(gbps, "%5.2f"),
                    mmm(copy, "%5.2f"), mmm(ratio, "%4.2f"));
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
            if (!r.completed() || !r.requests().get(0).verify().ok()
                    || !r.requests().get(0).writeViolations().isEmpty()) {
                throw new IllegalStateException(pair.name() + ": " + r.failure() + " "
                        + (r.requests().isEmpty() ? "" : r.requests().get(0).verify() + " "
                        + r.requests().get(0).writeViolations()));
            }
        }

        private static String mmm(double[] v, String f) {
            double[] s = v.clone();
            Arrays.sort(s);
            return String.format(Locale.ROOT, f + " / " + f + " / " + f, s[0], s[s.length / 2], s[s.length - 1]);
        }
    }
}
