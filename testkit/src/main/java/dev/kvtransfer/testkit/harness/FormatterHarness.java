package dev.kvtransfer.testkit.harness;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.KvTransferException;
import dev.kvtransfer.api.format.CacheFormatter;
import dev.kvtransfer.api.format.FormatterProvider;
import dev.kvtransfer.api.layout.BlockDistribution;
import dev.kvtransfer.api.layout.BlockLayout;
import dev.kvtransfer.api.layout.RankMapping;
import dev.kvtransfer.api.layout.TargetRanks;
import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.api.model.CommState;
import dev.kvtransfer.api.model.TransceiverState;
import dev.kvtransfer.api.transport.Connection;
import dev.kvtransfer.api.transport.ConnectionManager;
import dev.kvtransfer.api.transport.Tags;
import dev.kvtransfer.api.transport.TransportConfig;
import dev.kvtransfer.core.buffer.DefaultTransferBufferPool;
import dev.kvtransfer.core.cache.PagedKvCache;
import dev.kvtransfer.core.memory.HostBufferManager;
import dev.kvtransfer.testkit.KvPattern;
import dev.kvtransfer.testkit.LayoutPair;
import dev.kvtransfer.testkit.loopback.LoopbackTransportProvider;

import java.util.ArrayList;
import java.util.List;
import java.util.Objects;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.ThreadFactory;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;

/**
 * Runs a formatter over one {@link LayoutPair} inside one JVM, without core's protocol: every rank of the context
 * and generation instances gets its own {@link PagedKvCache}, {@link DefaultTransferBufferPool}, formatter and
 * loopback {@link ConnectionManager}; every request of the pair is filled with {@link KvPattern} on the context
 * ranks that hold it, then {@code format} runs on every context rank and {@code unformat} on every generation
 * rank, all requests and ranks concurrently, under one deadline. Afterwards every element of every generation
 * block is verified, the bytes each rank moved are reported, and every resource is closed (a leaked buffer fails
 * the run).
 *
 * <p>Attention DP: request {@code i} is served by DP rank {@code i % dpSize} of each side that has DP
 * ({@link LayoutPair#ctxFor}); only the ranks of that DP group hold it.
 */
public final class FormatterHarness {
    private static final AtomicLong FABRICS = new AtomicLong();
    private static final AtomicInteger THREADS = new AtomicInteger();
    /** First request id of a run; request {@code i} has id {@code FIRST_REQUEST_ID + i}. */
    public static final long FIRST_REQUEST_ID = 7001;

    private FormatterHarness() {
    }

    /**
     * Runs every request of a supported pair.
     *
     * @param provider the formatter under test
     * @param pair     the layouts and prompt lengths
     * @param options  deadline, chunking, staging
     * @return what happened; never throws for a formatter failure (it is in {@link PairReport#failure()})
     */
    public static PairReport run(FormatterProvider provider, LayoutPair pair, HarnessOptions options) {
        Objects.requireNonNull(provider, "provider");
        Objects.requireNonNull(pair, "pair");
        Objects.requireNonNull(options, "options");
        try (Run r = new Run(provider, pair, options)) {
            return r.execute();
        }
    }

    /** One side (instance) of a run: per-rank caches, pools, formatters and transport endpoints. */
    private static final class Instance implements AutoCloseable {
        final CacheState state;
        final HostBufferManager memory = new HostBufferManager();
        final PagedKvCache[] caches;
        final DefaultTransferBufferPool[] pools;
        final CacheFormatter[] formatters;
        final ConnectionManager[] managers;
        final CommState comm;

        Instance(String side, CacheState state, FormatterProvider provider, LayoutPair pair, HarnessOptions o,
                 String fabric) {
            this.state = state;
            int n = state.worldSize();
            caches = new PagedKvCache[n];
            pools = new DefaultTransferBufferPool[n];
            formatters = new CacheFormatter[n];
            managers = new ConnectionManager[n];
            int requests = pair.promptLengths().size();
            List<String> addresses = new ArrayList<>(n);
            LoopbackTransportProvider transport = new LoopbackTransportProvider();
            for (int r = 0; r < n; r++) {
                int blocks = 1;
                for (int len : pair.promptLengths()) {
                    int total = BlockDistribution.blocksFor(len, state.tokensPerBlock());
                    blocks += BlockDistribution.count(total, state.contextParallelism(), state.cpRank(r));
                }
                caches[r] = new PagedKvCache(memory, BlockLayout.of(state, r), blocks);
                pools[r] = new DefaultTransferBufferPool(memory, o.slotBytes(), requests, requests, true);
                formatters[r] = provider.create(caches[r], pools[r]);
                managers[r] = transport.create(TransportConfig.builder().name(side + "-rank-" + r)
                        .defaultTimeout(o.timeout())
                        .property(LoopbackTransportProvider.FABRIC_PROPERTY, fabric).build());
                addresses.add(managers[r].localAddress());
            }
            comm = new CommState(LoopbackTransportProvider.NAME, addresses, -1);
        }

        /** Closes everything; the memory manager last, so a leaked buffer shows up as its exception. */
        @Override
        public void close() {
            RuntimeException first = null;
            for (int r = 0; r < caches.length; r++) {
                first = closeQuietly(managers[r], first);
                first = closeQuietly(pools[r], first);
                first = closeQuietly(caches[r], first);
            }
            first = closeQuietly(memory, first);
            if (first != null) {
                throw first;
            }
        }

        private static RuntimeException closeQuietly(AutoCloseable c, RuntimeException first) {
            if (c == null) {
                return first;
            }
            try {
                c.close();
            } catch (Exception e) {
                RuntimeException r = e instanceof RuntimeException re ? re : new IllegalStateException(e);
                if (first == null) {
                    return r;
                }
                first.addSuppressed(r);
            }
            return first;
        }
    }

    /** One pair run. */
    private static final class Run implements AutoCloseable {
        final FormatterProvider provider;
        final LayoutPair pair;
        final HarnessOptions options;
        final ExecutorService executor;
        Instance ctx;
        Instance gen;

        Run(FormatterProvider provider, LayoutPair pair, HarnessOptions options) {
            this.provider = provider;
            this.pair = pair;
            this.options = options;
            ThreadFactory tf = task -> {
                Thread t = new Thread(task, "fmt-harness-" + THREADS.incrementAndGet());
                t.setDaemon(true);
                return t;
            };
            this.executor = Executors.newCachedThreadPool(tf);
        }

        PairReport execute() {
            List<PairReport.RequestReport> reports = new ArrayList<>();
            Throwable failure = null;
            long deadline = System.nanoTime() + options.timeout().toNanos();
            try {
                String fabric = "fmt-harness-" + FABRICS.incrementAndGet();
                ctx = new Instance("ctx", pair.ctx(), provider, pair, options, fabric);
                gen = new Instance("gen", pair.gen(), provider, pair, options, fabric);
                int requests = pair.promptLengths().size();
                RequestRun[] runs = new RequestRun[requests];
                List<Future<?>> futures = new ArrayList<>();
                for (int i = 0; i < requests; i++) {
                    runs[i] = new RequestRun(i, deadline);
                    runs[i].prepare();
                    runs[i].submit(futures);
                }
                failure = await(futures, deadline);
                for (RequestRun run : runs) {
                    reports.add(run.report());
                }
            } catch (RuntimeException | Error e) {
                failure = failure == null ? e : failure;
            }
            try {
                close();
            } catch (RuntimeException e) {
                if (failure == null) {
                    failure = e;
                } else {
                    failure.addSuppressed(e);
                }
            }
            return new PairReport(pair, reports, failure);
        }

        /** Waits for every task until the deadline; on expiry closes the transports so blocked calls wake. */
        private Throwable await(List<Future<?>> futures, long deadline) {
            Throwable first = null;
            for (Future<?> f : futures) {
                try {
                    long left = Math.max(0, deadline - System.nanoTime()) + TimeUnit.SECONDS.toNanos(2);
                    f.get(left, TimeUnit.NANOSECONDS);
                } catch (ExecutionException e) {
                    first = first == null ? e.getCause() : first;
                } catch (TimeoutException e) {
                    first = first == null ? new KvTransferException(ErrorCode.TIMEOUT, "pair " + pair.name()
                            + ": ranks still busy " + options.timeout() + " after the start") : first;
                    closeTransports();
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                    first = first == null ? e : first;
                    closeTransports();
                }
            }
            return first;
        }

        private void closeTransports() {
            for (Instance in : new Instance[] {ctx, gen}) {
                for (ConnectionManager m : in.managers) {
                    m.close();
                }
            }
        }

        /** One request: blocks, sessions and tasks on every rank that holds it. */
        final class RequestRun {
            final int index;
            final long requestId;
            final int promptLength;
            final int totalBlocks;
            final long deadline;
            final CacheState ctxState;
            final CacheState genState;
            final int[][] ctxBlocks;
            final int[][] genBlocks;
            final HarnessSession[] ctxSessions;
            final HarnessSession[] genSessions;
            final boolean[] ctxNeedSend;

            RequestRun(int index, long deadline) {
                this.index = index;
                this.requestId = FIRST_REQUEST_ID + index;
                this.promptLength = pair.promptLengths().get(index);
                this.totalBlocks = BlockDistribution.blocksFor(promptLength, pair.ctx().tokensPerBlock());
                this.deadline = deadline;
                this.ctxState = pair.ctxFor(index);
                this.genState = pair.genFor(index);
                this.ctxBlocks = new int[ctx.caches.length][];
                this.genBlocks = new int[gen.caches.length][];
                this.ctxSessions = new HarnessSession[ctx.caches.length];
                this.genSessions = new HarnessSession[gen.caches.length];
                this.ctxNeedSend = new boolean[ctx.caches.length];
            }

            void prepare() {
                int tag = Tags.FIRST_DATA_TAG + index;
                for (int r = 0; r < ctxBlocks.length; r++) {
                    if (!LayoutPair.serves(ctxState, r)) {
                        continue;
                    }
                    ctxBlocks[r] = allocate(ctx.caches[r], ctxState, r);
                    KvPattern.fill(ctx.caches[r], ctxBlocks[r], ctxState, r, requestId, totalBlocks);
                    ctxNeedSend[r] = ctx.formatters[r].needSendCache(ctxState, r, genState);
                    ctxSessions[r] = session(true, ctx, ctxState, r, gen, genState, ctxBlocks[r], tag);
                }
                for (int g = 0; g < genBlocks.length; g++) {
                    if (!LayoutPair.serves(genState, g)) {
                        continue;
                    }
                    genBlocks[g] = allocate(gen.caches[g], genState, g);
                    genSessions[g] = session(false, gen, genState, g, ctx, ctxState, genBlocks[g], tag);
                }
            }

            private int[] allocate(PagedKvCache cache, CacheState state, int rank) {
                int n = BlockDistribution.count(totalBlocks, state.contextParallelism(), state.cpRank(rank));
                return n == 0 ? new int[0] : cache.allocate(requestId, n);
            }

            private HarnessSession session(boolean sender, Instance self, CacheState selfState, int rank,
                                           Instance peer, CacheState peerState, int[] blocks, int tag) {
                TargetRanks t = RankMapping.targetRanks(peerState, selfState, rank);
                List<Integer> counterparts = self.formatters[rank].counterparts(selfState, rank, peerState);
                if (!counterparts.equals(t.peerRanks())) {
                    throw new AssertionError("rank " + rank + ": counterparts " + counterparts
                            + " differ from RankMapping.targetRanks " + t.peerRanks());
                }
                List<Connection> all = self.managers[rank].getConnections(peer.comm);
                Connection[] conns = new Connection[t.size()];
                for (int p = 0; p < conns.length; p++) {
                    conns[p] = all.get(t.peerRanks().get(p));
                }
                return new HarnessSession(requestId, sender, new TransceiverState(selfState,
                        self.comm.withSelfIndex(rank)), peerState, t, blocks, totalBlocks, conns, tag,
                        options.chunkBytes(), self.pools[rank], self.memory,
                        options.parallelPeers() ? executor : null, deadline);
            }

            void submit(List<Future<?>> futures) {
                for (int r = 0; r < ctxSessions.length; r++) {
                    HarnessSession s = ctxSessions[r];
                    if (s != null) {
                        CacheFormatter f = ctx.formatters[r];
                        futures.add(executor.submit(() -> {
                            try (s) {
                                f.format(s);
                            }
                        }));
                    }
                }
                for (int g = 0; g < genSessions.length; g++) {
                    HarnessSession s = genSessions[g];
                    if (s != null) {
                        CacheFormatter f = gen.formatters[g];
                        futures.add(executor.submit(() -> {
                            try (s) {
                                f.unformat(s);
                            }
                        }));
                    }
                }
            }

            PairReport.RequestReport report() {
                int nc = ctxSessions.length;
                int ng = genSessions.length;
                boolean[] ctxServing = new boolean[nc];
                long[] sent = new long[nc];
                boolean[] picked = new boolean[nc];
                long[] ctxMeasured = new long[nc];
                for (int r = 0; r < nc; r++) {
                    ctxServing[r] = ctxSessions[r] != null;
                    sent[r] = ctxServing[r] ? ctxSessions[r].movedBytes() : 0;
                    ctxMeasured[r] = ctxServing[r] ? ctxSessions[r].measuredBytes() : 0;
                }
                long[] genMeasured = new long[ng];
                boolean[] genServing = new boolean[ng];
                long[] received = new long[ng];
                long[] expected = new long[ng];
                boolean[] zeroLayer = new boolean[ng];
                KvPattern.Result verify = KvPattern.Result.empty();
                for (int g = 0; g < ng; g++) {
                    HarnessSession s = genSessions[g];
                    zeroLayer[g] = genState.layerCount(genState.ppRank(g)) == 0;
                    if (s == null) {
                        continue;
                    }
                    genServing[g] = true;
                    received[g] = s.movedBytes();
                    genMeasured[g] = s.measuredBytes();
                    expected[g] = genBlocks[g].length * gen.caches[g].layout().blockBytes();
                    List<Integer> picks = gen.formatters[g].pickRecvConnections(genState, g, ctxState);
                    for (int p : picks) {
                        picked[s.targets().peerRanks().get(p)] = true;
                    }
                    if (!zeroLayer[g]) {
                        verify.merge(KvPattern.verify(gen.caches[g], genBlocks[g], genState, g, requestId,
                                totalBlocks));
                    }
                }
                return new PairReport.RequestReport(index, requestId, promptLength, totalBlocks, ctxServing, sent,
                        ctxNeedSend.clone(), picked, genServing, received, expected, zeroLayer, verify, ctxMeasured,
                        genMeasured);
            }
        }

        @Override
        public void close() {
            executor.shutdownNow();
            try {
                if (!executor.awaitTermination(10, TimeUnit.SECONDS)) {
                    throw new IllegalStateException("harness threads of " + pair.name() + " did not end in 10 s");
                }
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
            RuntimeException first = null;
            for (Instance in : new Instance[] {ctx, gen}) {
                if (in == null) {
                    continue;
                }
                try {
                    in.close();
                } catch (RuntimeException e) {
                    if (first == null) {
                        first = e;
                    } else {
                        first.addSuppressed(e);
                    }
                }
            }
            ctx = null;
            gen = null;
            if (first != null) {
                throw first;
            }
        }
    }
}
