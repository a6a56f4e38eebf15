package dev.kvtransfer.formatter.mla;

import dev.kvtransfer.api.format.CacheFormatter;
import dev.kvtransfer.api.layout.BlockDistribution;
import dev.kvtransfer.api.layout.BlockLayout;
import dev.kvtransfer.api.layout.RankMapping;
import dev.kvtransfer.api.layout.TargetRanks;
import dev.kvtransfer.api.model.AttentionType;
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

import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;

/**
 * Measures one MLA request moved between one context and one generation instance in one JVM over the loopback
 * transport, DeepSeek-V3-shaped (61 layers, latent 576, BF16, 64 tokens per block, indexer-K 132 bytes per
 * token): the time from the start of {@code format}/{@code unformat} on every rank to the end of the last one,
 * median of 9 runs after 5 warm-ups; the last run is verified with KvPattern. Not a test: run it by hand (the
 * module README has the command).
 *
 * <p>Arguments: {@code [tokens (default 2048)]}.
 */
public final class MlaFormatterBench {
    private static final int LAYERS = 61;
    private static final int LATENT = 576;
    private static final int TOKENS_PER_BLOCK = 64;
    private static final int INDEXER_DIM = 132;
    private static final int WARMUPS = 5;
    private static final int RUNS = 9;

    private MlaFormatterBench() {
    }

    private static CacheState mla(int tp, int pp, int cp) {
        return CacheState.builder().uniformKvHeads(LAYERS, 1).sizePerHead(LATENT).tokensPerBlock(TOKENS_PER_BLOCK)
                .tensorParallelism(tp).pipelineParallelism(pp).contextParallelism(cp).dataType(DataType.BFLOAT16)
                .attentionType(AttentionType.MLA).build();
    }

    /**
     * Runs the scenarios.
     *
     * @param args optional prompt length in tokens
     * @throws Exception on failure
     */
    public static void main(String[] args) throws Exception {
        int tokens = args.length > 0 ? Integer.parseInt(args[0]) : 2048;
        System.out.printf("MLA L%d D%d BF16 T%d, prompt %d tokens, loopback transport, %d cores%n", LAYERS, LATENT,
                TOKENS_PER_BLOCK, tokens, Runtime.getRuntime().availableProcessors());
        long dflt = MlaCacheFormatter.DEFAULT_DIRECT_RUN_MIN_BYTES;
        long never = Long.MAX_VALUE;
        run("TP1PP1 -> TP1PP1 (zero copy)", mla(1, 1, 1), mla(1, 1, 1), tokens, 0, dflt);
        run("TP1PP1 -> TP1PP2 (direct runs)", mla(1, 1, 1), mla(1, 2, 1), tokens, 0, dflt);
        run("TP1PP1 -> TP1PP2 (staged)", mla(1, 1, 1), mla(1, 2, 1), tokens, 0, never);
        run("TP1PP2 -> TP1PP1 (direct runs)", mla(1, 2, 1), mla(1, 1, 1), tokens, 0, dflt);
        run("TP1PP2 -> TP1PP1 (staged)", mla(1, 2, 1), mla(1, 1, 1), tokens, 0, never);
        run("TP1PP1 -> TP1PP1 CP2 (zero copy)", mla(1, 1, 1), mla(1, 1, 2), tokens, 0, dflt);
        run("TP4PP1 -> TP1PP1 (1 of 4 sends, zero copy)", mla(4, 1, 1), mla(1, 1, 1), tokens, 0, dflt);
        run("TP1PP1 -> TP1PP1 + indexer-K (zero copy)", mla(1, 1, 1), mla(1, 1, 1), tokens, INDEXER_DIM, dflt);
        run("TP1PP1 -> TP1PP2 + indexer-K (direct/staged)", mla(1, 1, 1), mla(1, 2, 1), tokens, INDEXER_DIM, dflt);
    }

    private static final class Side implements AutoCloseable {
        final CacheState state;
        final HostBufferManager memory = new HostBufferManager();
        final PagedKvCache[] caches;
        final DefaultTransferBufferPool[] pools;
        final CacheFormatter[] formatters;
        final ConnectionManager[] managers;
        final int[][] blocks;
        final CommState comm;

        Side(String name, CacheState state, int totalBlocks, int indexerDim, long directRunMinBytes) {
            this.state = state;
            int n = state.worldSize();
            caches = new PagedKvCache[n];
            pools = new DefaultTransferBufferPool[n];
            formatters = new CacheFormatter[n];
            managers = new ConnectionManager[n];
            blocks = new int[n][];
            List<String> addresses = new ArrayList<>();
            for (int r = 0; r < n; r++) {
                BlockLayout main = BlockLayout.of(state, r);
                BlockLayout idx = indexerDim > 0
                        ? new BlockLayout(main.localLayers(), 1, 1, TOKENS_PER_BLOCK, indexerDim, 1) : null;
                int count = BlockDistribution.count(totalBlocks, state.contextParallelism(), state.cpRank(r));
                caches[r] = new PagedKvCache(memory, main, idx, Math.max(1, count));
                blocks[r] = count == 0 ? new int[0] : caches[r].allocate(1, count);
                long slot = count * (main.blockBytes() + (idx == null ? 0 : idx.blockBytes()));
                // Two slots per direction: the testkit's HarnessSession takes a slot per stagingBuffers call (core's
                // session carves both passes from one).
                pools[r] = new DefaultTransferBufferPool(memory, Math.max(4096, slot), 2, 2, true);
                formatters[r] = new MlaCacheFormatter(caches[r], pools[r], directRunMinBytes);
                managers[r] = new LoopbackTransportProvider().create(TransportConfig.builder()
                        .name(name + "-" + r).defaultTimeout(Duration.ofSeconds(60))
                        .property(LoopbackTransportProvider.FABRIC_PROPERTY, "bench").build());
                addresses.add(managers[r].localAddress());
            }
            comm = new CommState(LoopbackTransportProvider.NAME, addresses, -1);
        }

        @Override
        public void close() {
            for (int r = 0; r < caches.length; r++) {
                managers[r].close();
                pools[r].close();
                caches[r].close();
            }
            memory.close();
        }
    }

    private static void run(String name, CacheState ctxState, CacheState genState, int tokens, int indexerDim,
                            long directRunMinBytes) throws Exception {
        int total = BlockDistribution.blocksFor(tokens, TOKENS_PER_BLOCK);
        ExecutorService exec = Executors.newCachedThreadPool();
        try (Side ctx = new Side("ctx", ctxState, total, indexerDim, directRunMinBytes);
             Side gen = new Side("gen", genState, total, indexerDim, directRunMinBytes)) {
            for (int r = 0; r < ctx.caches.length; r++) {
                KvPattern.fill(ctx.caches[r], ctx.blocks[r], ctxState, r, 1, total);
                if (indexerDim > 0) {
                    KvPattern.fillIndexer(ctx.caches[r], ctx.blocks[r], ctxState, r, 1, total);
                }
            }
            long bytes = 0;
            for (int g = 0; g < gen.caches.length; g++) {
                long per = gen.caches[g].layout().blockBytes();
                if (indexerDim > 0) {
                    per += gen.caches[g].indexerKCache().layout().blockBytes();
                }
                bytes += per * gen.blocks[g].length;
            }
            double[] ms = new double[RUNS];
            for (int it = 0; it < WARMUPS + RUNS; it++) {
                int tag = Tags.FIRST_DATA_TAG + it;
                long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
                List<HarnessSession> sessions = new ArrayList<>();
                List<Runnable> work = new ArrayList<>();
                for (int r = 0; r < ctx.caches.length; r++) {
                    HarnessSession s = session(true, ctx, r, gen, tag, total, exec, deadline);
                    CacheFormatter f = ctx.formatters[r];
                    sessions.add(s);
                    work.add(() -> f.format(s));
                }
                for (int g = 0; g < gen.caches.length; g++) {
                    HarnessSession s = session(false, gen, g, ctx, tag, total, exec, deadline);
                    CacheFormatter f = gen.formatters[g];
                    sessions.add(s);
                    work.add(() -> f.unformat(s));
                }
                long start = System.nanoTime();
                List<Future<?>> futures = new ArrayList<>();
                for (Runnable w : work) {
                    futures.add(exec.submit(w));
                }
                for (Future<?> f : futures) {
                    f.get(60, TimeUnit.SECONDS);
                }
                long end = System.nanoTime();
                sessions.forEach(HarnessSession::close);
                if (it >= WARMUPS) {
                    ms[it - WARMUPS] = (end - start) / 1e6;
                }
            }
            for (int g = 0; g < gen.caches.length; g++) {
                KvPattern.verify(gen.caches[g], gen.blocks[g], genState, g, 1, total).assertOk();
                if (indexerDim > 0) {
                    KvPattern.verifyIndexer(gen.caches[g], gen.blocks[g], genState, g, 1, total).assertOk();
                }
            }
            Arrays.sort(ms);
            double median = ms[RUNS / 2];
            System.out.printf("%-46s %8.1f MB  median %7.2f ms  %6.2f GB/s  (min %.2f, max %.2f ms)%n", name,
                    bytes / 1e6, median, bytes / median / 1e6, ms[0], ms[RUNS - 1]);
        } finally {
            exec.shutdownNow();
        }
    }

    private static HarnessSession session(boolean sender, Side self, int rank, Side peer, int tag, int total,
                                          ExecutorService exec, long deadline) {
        CacheState peerState = peer.state;
        TargetRanks t = RankMapping.targetRanks(peerState, self.state, rank);
        List<Connection> all = self.managers[rank].getConnections(peer.comm);
        Connection[] conns = new Connection[t.size()];
        for (int p = 0; p < conns.length; p++) {
            conns[p] = all.get(t.peerRanks().get(p));
        }
        return new HarnessSession(1, sender, new TransceiverState(self.state, self.comm.withSelfIndex(rank)),
                peerState, t, self.blocks[rank], total, conns, tag, 0, self.pools[rank], self.memory, exec, deadline);
    }
}
