package dev.kvtransfer.formatter.standard;

import dev.kvtransfer.api.format.CacheFormatter;
import dev.kvtransfer.api.layout.BlockDistribution;
import dev.kvtransfer.api.layout.BlockLayout;
import dev.kvtransfer.api.layout.RankMapping;
import dev.kvtransfer.api.layout.TargetRanks;
import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.memory.MemoryKind;
import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.api.model.CommState;
import dev.kvtransfer.api.model.DataType;
import dev.kvtransfer.api.model.TransceiverState;
import dev.kvtransfer.api.transport.Connection;
import dev.kvtransfer.api.transport.ConnectionManager;
import dev.kvtransfer.api.transport.Tags;
import dev.kvtransfer.api.transport.TransportConfig;
import dev.kvtransfer.core.buffer.DefaultTransferBufferPool;
import dev.kvtransfer.core.cache.PagedKvCache;
import dev.kvtransfer.core.memory.HostBufferManager;
import dev.kvtransfer.testkit.KvPattern;
import dev.kvtransfer.testkit.harness.HarnessSession;
import dev.kvtransfer.testkit.loopback.LoopbackTransportProvider;
import org.junit.jupiter.api.Test;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Locale;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * Throughput of format + unformat for one llama3-8b-shaped request (32 layers, 8 KV heads, head size 128, fp16,
 * 32 tokens per block, 4096 tokens = 512 MiB), context TP1 -> generation TP1 (zero copy) and TP2 -> TP1 (split and
 * concat), over the in-JVM loopback transport, next to a plain bulk copy of the same bytes in the same JVM. It
 * prints the numbers (and writes {@code target/throughput.txt}); it asserts only that the bytes arrived intact,
 * never a speed. Override the token count with {@code -Dkvtransfer.bench.tokens=N}.
 */
class StandardFormatterThroughputTest {
    private static final int WARMUP = 2;
    private static final int RUNS = 7;
    private static final long REQUEST = 1;

    private static CacheState llama3(int tp) {
        return CacheState.builder().uniformKvHeads(32, 8).sizePerHead(128).tokensPerBlock(32)
                .dataType(DataType.FLOAT16).tensorParallelism(tp).build();
    }

    @Test
    void llama3_8b_tp1ToTp1_and_tp2ToTp1() throws Exception {
        int tokens = Integer.getInteger("kvtransfer.bench.tokens", 4096);
        List<String> lines = new ArrayList<>();
        lines.add(String.format(Locale.ROOT, "request: llama3-8b shape, %d tokens, %s, cores %d", tokens,
                "fp16 T32 D128 32 layers 8 KV heads", Runtime.getRuntime().availableProcessors()));
        lines.add(bulkCopy(llama3(1), tokens));
        lines.add(run("TP1 -> TP1 (zero copy)", llama3(1), llama3(1), tokens));
        lines.add(run("TP2 -> TP1 (split/concat)", llama3(2), llama3(1), tokens));
        lines.add("load average (1, 5, 15 min) at the end: " + loadAverage());
        String out = String.join(System.lineSeparator(), lines);
        System.out.println(out);
        try {
            Files.writeString(Path.of("target", "throughput.txt"), out + System.lineSeparator());
        } catch (IOException e) {
            System.out.println("could not write target/throughput.txt: " + e);
        }
    }

    /** Other work on the machine skews every number above; the load average says how much there was. */
    private static String loadAverage() {
        try {
            String[] f = Files.readString(Path.of("/proc/loadavg")).trim().split("\\s+");
            return f[0] + " " + f[1] + " " + f[2];
        } catch (IOException | RuntimeException e) {
            return "unknown (" + e.getMessage() + ")";
        }
    }

    /** A plain copy of the request's bytes between two off-heap buffers, the ceiling for any host transfer. */
    private static String bulkCopy(CacheState s, int tokens) {
        long bytes = (long) BlockDistribution.blocksFor(tokens, s.tokensPerBlock()) * BlockLayout.of(s, 0).blockBytes();
        HostBufferManager memory = new HostBufferManager();
        double[] gbps = new double[RUNS];
        try (MemoryBuffer a = memory.allocate(bytes, MemoryKind.HOST);
             MemoryBuffer b = memory.allocate(bytes, MemoryKind.HOST)) {
            for (int i = 0; i < WARMUP + RUNS; i++) {
                long t0 = System.nanoTime();
                memory.copy(a, 0, b, 0, bytes);
                long t1 = System.nanoTime();
                if (i >= WARMUP) {
                    gbps[i - WARMUP] = bytes / ((t1 - t0) / 1e9) / 1e9;
                }
            }
        } finally {
            memory.close();
        }
        return line("bulk copy (BufferManager.copy)", bytes, gbps);
    }

    private static String line(String what, long bytes, double[] gbps) {
        double[] sorted = gbps.clone();
        Arrays.sort(sorted);
        return String.format(Locale.ROOT, "%-28s %8.1f MiB  median %6.2f GB/s  best %6.2f GB/s  (%d runs)", what,
                bytes / 1048576.0, sorted[sorted.length / 2], sorted[sorted.length - 1], sorted.length);
    }

    private static String run(String what, CacheState ctx, CacheState gen, int tokens) throws Exception {
        int n = BlockDistribution.blocksFor(tokens, ctx.tokensPerBlock());
        HostBufferManager memory = new HostBufferManager();
        LoopbackTransportProvider transport = new LoopbackTransportProvider();
        String fabric = "throughput-" + System.nanoTime();
        List<AutoCloseable> open = new ArrayList<>();
        ExecutorService exec = Executors.newCachedThreadPool(r -> {
            Thread t = new Thread(r, "throughput");
            t.setDaemon(true);
            return t;
        });
        try {
            Side c = new Side(ctx, n, memory, transport, fabric, "ctx", open);
            Side g = new Side(gen, n, memory, transport, fabric, "gen", open);
            for (int r = 0; r < c.caches.length; r++) {
                KvPattern.fill(c.caches[r], c.ids[r], ctx, r, REQUEST, n);
            }
            long bytes = (long) n * BlockLayout.of(gen, 0).blockBytes();
            double[] gbps = new double[RUNS];
            for (int i = 0; i < WARMUP + RUNS; i++) {
                int tag = Tags.FIRST_DATA_TAG + i;
                long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
                List<HarnessSession> sessions = new ArrayList<>();
                List<Runnable> tasks = new ArrayList<>();
                for (int r = 0; r < c.caches.length; r++) {
                    HarnessSession s = c.session(r, g, true, tag, deadline, exec);
                    sessions.add(s);
                    CacheFormatter f = c.formatters[r];
                    tasks.add(() -> f.format(s));
                }
                for (int r = 0; r < g.caches.length; r++) {
                    HarnessSession s = g.session(r, c, false, tag, deadline, exec);
                    sessions.add(s);
                    CacheFormatter f = g.formatters[r];
                    tasks.add(() -> f.unformat(s));
                }
                long t0 = System.nanoTime();
                List<Future<?>> futures = new ArrayList<>();
                for (Runnable t : tasks) {
                    futures.add(exec.submit(t));
                }
                for (Future<?> f : futures) {
                    f.get(Math.max(1, deadline - System.nanoTime()), TimeUnit.NANOSECONDS);
                }
                long t1 = System.nanoTime();
                sessions.forEach(HarnessSession::close);
                if (i >= WARMUP) {
                    gbps[i - WARMUP] = bytes / ((t1 - t0) / 1e9) / 1e9;
                }
            }
            for (int r = 0; r < g.caches.length; r++) {
                KvPattern.verify(g.caches[r], g.ids[r], gen, r, REQUEST, n).assertOk();
            }
            assertThat(bytes).isPositive();
            return line(what, bytes, gbps);
        } finally {
            exec.shutdownNow();
            assertThat(exec.awaitTermination(10, TimeUnit.SECONDS)).isTrue();
            for (int i = open.size() - 1; i >= 0; i--) {
                open.get(i).close();
            }
            memory.close();
        }
    }

    /** One instance: per-rank caches (the request's blocks allocated), pools, formatters, endpoints. */
    private static final class Side {
        final CacheState state;
        final int totalBlocks;
        final PagedKvCache[] caches;
        final int[][] ids;
        final DefaultTransferBufferPool[] pools;
        final CacheFormatter[] formatters;
        final ConnectionManager[] managers;
        final HostBufferManager memory;
        CommState comm;

        Side(CacheState state, int n, HostBufferManager memory, LoopbackTransportProvider transport, String fabric,
             String name, List<AutoCloseable> open) {
            this.state = state;
            this.totalBlocks = n;
            this.memory = memory;
            int w = state.worldSize();
            caches = new PagedKvCache[w];
            ids = new int[w][];
            pools = new DefaultTransferBufferPool[w];
            formatters = new CacheFormatter[w];
            managers = new ConnectionManager[w];
            List<String> addresses = new ArrayList<>();
            StandardFormatterProvider provider = new StandardFormatterProvider();
            for (int r = 0; r < w; r++) {
                BlockLayout layout = BlockLayout.of(state, r);
                caches[r] = new PagedKvCache(memory, layout, n);
                open.add(caches[r]);
                ids[r] = caches[r].allocate(REQUEST, n);
                // Staging pre-allocated once, as upstream does, big enough for the rank's whole share.
                pools[r] = new DefaultTransferBufferPool(memory, n * layout.blockBytes(), 1, 1, true);
                open.add(pools[r]);
                formatters[r] = provider.create(caches[r], pools[r]);
                managers[r] = transport.create(TransportConfig.builder().name(name + r)
                        .defaultTimeout(Duration.ofSeconds(60))
                        .property(LoopbackTransportProvider.FABRIC_PROPERTY, fabric).build());
                open.add(managers[r]);
                addresses.add(managers[r].localAddress());
            }
            comm = new CommState(LoopbackTransportProvider.NAME, addresses, -1);
        }

        HarnessSession session(int r, Side peer, boolean sender, int tag, long deadline, ExecutorService exec) {
            TargetRanks t = RankMapping.targetRanks(peer.state, state, r);
            List<Connection> all = managers[r].getConnections(peer.comm);
            Connection[] conns = new Connection[t.size()];
            for (int p = 0; p < conns.length; p++) {
                conns[p] = all.get(t.peerRanks().get(p));
            }
            return new HarnessSession(REQUEST, sender, new TransceiverState(state, comm.withSelfIndex(r)),
                    peer.state, t, ids[r], totalBlocks, conns, tag, 0, pools[r], memory, exec, deadline);
        }
    }
}
