package dev.kvtransfer.testkit.harness;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.KvTransferException;
import dev.kvtransfer.api.format.CacheFormatter;
import dev.kvtransfer.api.format.FormatterProvider;
import dev.kvtransfer.api.layout.BlockDistribution;
import dev.kvtransfer.api.layout.BlockLayout;
import dev.kvtransfer.api.layout.RankMapping;
import dev.kvtransfer.api.layout.TargetRanks;
import dev.kvtransfer.api.memory.MemoryKind;
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
import dev.kvtransfer.core.timing.TransferTiming;
import dev.kvtransfer.core.transfer.DefaultTransferSession;
import dev.kvtransfer.testkit.KvPattern;
import dev.kvtransfer.testkit.LayoutPair;
import dev.kvtransfer.testkit.loopback.LoopbackTransportProvider;

import java.util.ArrayList;
import java.util.Arrays;
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
import java.util.concurrent.atomic.LongAdder;

/**
 * Runs a formatter over one {@link LayoutPair} inside one JVM through the production session: every rank of the
 * context and generation instances gets its own {@link PagedKvCache} (in its state's pool layout),
 * {@link DefaultTransferBufferPool}, formatter and loopback {@link ConnectionManager}, and every request on every
 * rank gets core's {@link DefaultTransferSession} (built as core builds it: one staging slot re-carved per
 * {@code stagingBuffers} call, parts chunked, deadlines), over connections that count messages. So a formatter that
 * passes here cannot fail in the engine for a reason of the session.
 *
 * <p>Per request ({@link #prepare()}): the blocks are allocated (with holes between the ids when
 * {@link HarnessOptions#fragmentBlocks()}, at different places on the two sides, so coalesced runs split); the
 * context ranks hold the {@link KvPattern} of the request in every block the generation side lacks, and a
 * <em>poison</em> pattern (another request id) in the reused prefix; the generation ranks hold the request's
 * pattern in the reused prefix (what their prefix cache holds) and poison everywhere else. Then
 * ({@link #transfer()}) {@code format} runs on every context rank and {@code unformat} on every generation rank, all
 * requests and ranks concurrently, under one deadline; the sessions get the reused-block count and, with
 * {@link HarnessOptions#exchangeBlockIds()}, each other's block ids. {@link #report()} verifies every element of
 * every generation block against the request's pattern: a formatter that moved a reused block writes poison over
 * the prefix, one that skipped a block leaves poison, and the byte counts must equal the non-reused blocks.
 *
 * <p>Attention DP: request {@code i} is served by DP rank {@code i % dpSize} of each side that has DP
 * ({@link LayoutPair#ctxFor}); only the ranks of that DP group hold it.
 *
 * <p>{@link #run} does all of it once; benchmarks {@link #open} a harness, {@link #prepare()} once and
 * {@link #transfer()} repeatedly.
 */
public final class FormatterHarness implements AutoCloseable {
    private static final AtomicLong FABRICS = new AtomicLong();
    private static final AtomicInteger THREADS = new AtomicInteger();
    /** First request id of a run; request {@code i} has id {@code FIRST_REQUEST_ID + i}. */
    public static final long FIRST_REQUEST_ID = 7001;
    /** Added to a request id for the poison pattern of the context side's reused prefix. */
    public static final long CTX_POISON = 1_000_000;
    /** Added to a request id for the poison pattern of the generation side's blocks to be received. */
    public static final long GEN_POISON = 2_000_000;

    private final FormatterProvider provider;
    private final LayoutPair pair;
    private final HarnessOptions options;
    private final ExecutorService executor;
    private final int requests;
    private Instance ctx;
    private Instance gen;
    private RequestRun[] runs;
    private Throwable failure;
    private int transfers;
    private boolean closed;

    private FormatterHarness(FormatterProvider provider, LayoutPair pair, HarnessOptions options) {
        this.provider = Objects.requireNonNull(provider, "provider");
        this.pair = Objects.requireNonNull(pair, "pair");
        this.options = Objects.requireNonNull(options, "options");
        this.requests = pair.promptLengths().size();
        ThreadFactory tf = task -> {
            Thread t = new Thread(task, "fmt-harness-" + THREADS.incrementAndGet());
            t.setDaemon(true);
            return t;
        };
        this.executor = Executors.newCachedThreadPool(tf);
    }

    /**
     * Runs every request of a supported pair once: {@link #open}, {@link #prepare()}, {@link #transfer()},
     * {@link #report()}, {@link #close()}.
     *
     * @param provider the formatter under test
     * @param pair     the layouts and prompt lengths
     * @param options  deadline, chunking, staging, block ids
     * @return what happened; never throws for a formatter failure (it is in {@link PairReport#failure()})
     */
    public static PairReport run(FormatterProvider provider, LayoutPair pair, HarnessOptions options) {
        FormatterHarness h = new FormatterHarness(provider, pair, options);
        PairReport report;
        try {
            h.instances();
            h.prepare();
            h.transfer();
            report = h.report();
        } catch (RuntimeException | Error e) {
            h.fail(e);
            report = new PairReport(pair, List.of(), h.failure);
        }
        try {
            h.close();
        } catch (RuntimeException e) {
            if (report.failure() == null) {
                report = new PairReport(pair, report.requests(), e);
            } else {
                report.failure().addSuppressed(e);
            }
        }
        return report;
    }

    /**
     * Creates both instances of a pair (caches sized for its requests), for repeated transfers.
     *
     * @param provider the formatter under test
     * @param pair     the layouts and prompt lengths
     * @param options  deadline (of each transfer), chunking, staging, block ids
     * @return the harness; close it
     */
    public static FormatterHarness open(FormatterProvider provider, LayoutPair pair, HarnessOptions options) {
        FormatterHarness h = new FormatterHarness(provider, pair, options);
        try {
            h.instances();
        } catch (RuntimeException | Error e) {
            try {
                h.close();
            } catch (RuntimeException c) {
                e.addSuppressed(c);
            }
            throw e;
        }
        return h;
    }

    private void instances() {
        String fabric = "fmt-harness-" + FABRICS.incrementAndGet();
        ctx = new Instance("ctx", pair.ctx(), 3, fabric);
        gen = new Instance("gen", pair.gen(), 2, fabric);
    }

    /** Allocates and fills the blocks of every request (see the class comment). */
    public void prepare() {
        if (runs != null) {
            throw new IllegalStateException("already prepared");
        }
        runs = new RequestRun[requests];
        for (int i = 0; i < requests; i++) {
            runs[i] = new RequestRun(i);
        }
        ctx.freeFillers();
        gen.freeFillers();
    }

    /**
     * Moves every request once, all ranks concurrently; a failure is kept for {@link #report()} (and rethrown by
     * later transfers' callers through {@link #failure()}).
     *
     * @return wall time from the first session's start to the last one's end, in nanoseconds
     */
    public long transfer() {
        if (runs == null) {
            throw new IllegalStateException("prepare() first");
        }
        long deadline = System.nanoTime() + options.timeout().toNanos();
        int round = transfers++;
        List<Future<?>> futures = new ArrayList<>();
        List<Runnable> tasks = new ArrayList<>();
        for (RequestRun r : runs) {
            r.sessions(round, deadline, tasks);
        }
        long t0 = System.nanoTime();
        for (Runnable t : tasks) {
            futures.add(executor.submit(t));
        }
        Throwable first = await(futures, deadline);
        long t1 = System.nanoTime();
        if (first != null) {
            fail(first);
        }
        return t1 - t0;
    }

    /** @return the first failure so far, or {@code null} */
    public Throwable failure() {
        return failure;
    }

    /** @return the instances' caches: index 0 context, 1 generation; per rank */
    public PagedKvCache[][] caches() {
        return new PagedKvCache[][] {ctx.caches.clone(), gen.caches.clone()};
    }

    /**
     * What the last {@link #transfer()} did, verified with KvPattern when {@link HarnessOptions#verify()}.
     *
     * @return the report
     */
    public PairReport report() {
        List<PairReport.RequestReport> reports = new ArrayList<>();
        if (runs != null) {
            for (RequestRun r : runs) {
                reports.add(r.report());
            }
        }
        return new PairReport(pair, reports, failure);
    }

    private void fail(Throwable t) {
        if (failure == null) {
            failure = t;
        } else if (failure != t) {
            failure.addSuppressed(t);
        }
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
                if (m != null) {
                    m.close();
                }
            }
        }
    }

    /** Ends the threads and closes everything; a leaked buffer fails here. */
    @Override
    public void close() {
        if (closed) {
            return;
        }
        closed = true;
        executor.shutdownNow();
        RuntimeException first = null;
        try {
            if (!executor.awaitTermination(10, TimeUnit.SECONDS)) {
                first = new IllegalStateException("harness threads of " + pair.name() + " did not end in 10 s");
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
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
        if (first != null) {
            throw first;
        }
    }

    /** One side (instance) of a run: per-rank caches, pools, formatters and transport endpoints. */
    private final class Instance implements AutoCloseable {
        final CacheState state;
        final HostBufferManager memory = new HostBufferManager();
        final PagedKvCache[] caches;
        final DefaultTransferBufferPool[] pools;
        final CacheFormatter[] formatters;
        final ConnectionManager[] managers;
        final int holeEvery;
        final int[] allocated;
        CommState comm;

        Instance(String side, CacheState state, int holeEvery, String fabric) {
            this.state = state;
            this.holeEvery = holeEvery;
            int n = state.worldSize();
            caches = new PagedKvCache[n];
            pools = new DefaultTransferBufferPool[n];
            formatters = new CacheFormatter[n];
            managers = new ConnectionManager[n];
            allocated = new int[n];
            List<String> addresses = new ArrayList<>(n);
            LoopbackTransportProvider transport = new LoopbackTransportProvider();
            for (int r = 0; r < n; r++) {
                int blocks = 1;
                for (int len : pair.promptLengths()) {
                    int total = BlockDistribution.blocksFor(len, state.tokensPerBlock());
                    blocks += BlockDistribution.count(total, state.contextParallelism(), state.cpRank(r));
                }
                if (options.fragmentBlocks()) {
                    blocks *= 2; // room for the fillers between the requests' blocks
                }
                if (options.indexerDim() > 0) {
                    BlockLayout main = BlockLayout.of(state, r);
                    BlockLayout idx = new BlockLayout(main.localLayers(), 1, 1, state.tokensPerBlock(),
                            options.indexerDim(), 1);
                    caches[r] = new PagedKvCache(memory, main, state.poolLayout(), MemoryKind.HOST, idx, blocks);
                } else {
                    caches[r] = PagedKvCache.of(memory, state, r, blocks);
                }
                // Slots of the direction this side uses for every concurrent request, one of the other.
                boolean sender = side.equals("ctx");
                pools[r] = new DefaultTransferBufferPool(memory, options.slotBytes(), sender ? requests : 1,
                        sender ? 1 : requests, true);
                formatters[r] = provider.create(caches[r], pools[r]);
                managers[r] = transport.create(TransportConfig.builder().name(side + "-rank-" + r)
                        .defaultTimeout(options.timeout())
                        .property(LoopbackTransportProvider.FABRIC_PROPERTY, fabric).build());
                addresses.add(managers[r].localAddress());
            }
            comm = new CommState(LoopbackTransportProvider.NAME, addresses, -1);
        }

        /** Blocks for a request, with a filler after every {@code holeEvery}-th block when fragmenting. */
        int[] allocate(int rank, long requestId, int count) {
            if (count == 0) {
                return new int[0];
            }
            if (!options.fragmentBlocks()) {
                return caches[rank].allocate(requestId, count);
            }
            int[] ids = new int[count];
            for (int i = 0; i < count; i++) {
                ids[i] = caches[rank].allocate(requestId, 1)[0];
                if (++allocated[rank] % holeEvery == 0) {
                    caches[rank].allocate(fillerId(rank), 1);
                }
            }
            return ids;
        }

        private long fillerId(int rank) {
            return -1 - rank;
        }

        void freeFillers() {
            for (int r = 0; r < caches.length; r++) {
                caches[r].free(fillerId(r));
            }
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

        private RuntimeException closeQuietly(AutoCloseable c, RuntimeException first) {
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

    /** One request: blocks, and the sessions of the latest transfer on every rank that holds it. */
    private final class RequestRun {
        final int index;
        final long requestId;
        final int promptLength;
        final int totalBlocks;
        final int reused;
        final CacheState ctxState;
        final CacheState genState;
        final int[][] ctxBlocks;
        final int[][] genBlocks;
        final boolean[] ctxNeedSend;
        final DefaultTransferSession[] ctxSessions;
        final DefaultTransferSession[] genSessions;
        final LongAdder[] ctxMessages;
        final LongAdder[] genMessages;

        RequestRun(int index) {
            this.index = index;
            this.requestId = FIRST_REQUEST_ID + index;
            this.promptLength = pair.promptLengths().get(index);
            this.totalBlocks = BlockDistribution.blocksFor(promptLength, pair.ctx().tokensPerBlock());
            this.reused = pair.reusedBlocks(index, totalBlocks);
            this.ctxState = pair.ctxFor(index);
            this.genState = pair.genFor(index);
            int nc = ctx.caches.length;
            int ng = gen.caches.length;
            this.ctxBlocks = new int[nc][];
            this.genBlocks = new int[ng][];
            this.ctxNeedSend = new boolean[nc];
            this.ctxSessions = new DefaultTransferSession[nc];
            this.genSessions = new DefaultTransferSession[ng];
            this.ctxMessages = new LongAdder[nc];
            this.genMessages = new LongAdder[ng];
            for (int r = 0; r < nc; r++) {
                if (!LayoutPair.serves(ctxState, r)) {
                    continue;
                }
                ctxBlocks[r] = ctx.allocate(r, requestId, count(ctxState, r));
                KvPattern.fill(ctx.caches[r], ctxBlocks[r], ctxState, r, requestId + CTX_POISON, totalBlocks, 0,
                        reused);
                KvPattern.fill(ctx.caches[r], ctxBlocks[r], ctxState, r, requestId, totalBlocks, reused,
                        totalBlocks);
                if (options.indexerDim() > 0) {
                    KvPattern.fillIndexer(ctx.caches[r], ctxBlocks[r], ctxState, r, requestId + CTX_POISON,
                            totalBlocks, 0, reused);
                    KvPattern.fillIndexer(ctx.caches[r], ctxBlocks[r], ctxState, r, requestId, totalBlocks, reused,
                            totalBlocks);
                }
                ctxNeedSend[r] = ctx.formatters[r].needSendCache(ctxState, r, genState);
            }
            for (int g = 0; g < ng; g++) {
                if (!LayoutPair.serves(genState, g)) {
                    continue;
                }
                genBlocks[g] = gen.allocate(g, requestId, count(genState, g));
                KvPattern.fill(gen.caches[g], genBlocks[g], genState, g, requestId, totalBlocks, 0, reused);
                KvPattern.fill(gen.caches[g], genBlocks[g], genState, g, requestId + GEN_POISON, totalBlocks, reused,
                        totalBlocks);
                if (options.indexerDim() > 0) {
                    KvPattern.fillIndexer(gen.caches[g], genBlocks[g], genState, g, requestId, totalBlocks, 0,
                            reused);
                    KvPattern.fillIndexer(gen.caches[g], genBlocks[g], genState, g, requestId + GEN_POISON,
                            totalBlocks, reused, totalBlocks);
                }
            }
        }

        private int count(CacheState state, int rank) {
            return BlockDistribution.count(totalBlocks, state.contextParallelism(), state.cpRank(rank));
        }

        void sessions(int round, long deadline, List<Runnable> tasks) {
            int tag = Tags.FIRST_DATA_TAG + round * requests + index;
            for (int r = 0; r < ctxBlocks.length; r++) {
                if (ctxBlocks[r] == null) {
                    continue;
                }
                ctxMessages[r] = new LongAdder();
                DefaultTransferSession s = session(true, ctx, ctxState, r, gen, genState, ctxBlocks, genBlocks, tag,
                        deadline, ctxMessages[r]);
                ctxSessions[r] = s;
                CacheFormatter f = ctx.formatters[r];
                tasks.add(() -> {
                    try (s) {
                        f.format(s);
                    }
                });
            }
            for (int g = 0; g < genBlocks.length; g++) {
                if (genBlocks[g] == null) {
                    continue;
                }
                genMessages[g] = new LongAdder();
                DefaultTransferSession s = session(false, gen, genState, g, ctx, ctxState, genBlocks, ctxBlocks, tag,
                        deadline, genMessages[g]);
                genSessions[g] = s;
                CacheFormatter f = gen.formatters[g];
                tasks.add(() -> {
                    try (s) {
                        f.unformat(s);
                    }
                });
            }
        }

        private DefaultTransferSession session(boolean sender, Instance self, CacheState selfState, int rank,
                                               Instance peer, CacheState peerState, int[][] selfBlocks,
                                               int[][] peerBlocks, int tag, long deadline, LongAdder messages) {
            TargetRanks t = RankMapping.targetRanks(peerState, selfState, rank);
            List<Integer> counterparts = self.formatters[rank].counterparts(selfState, rank, peerState);
            if (!counterparts.equals(t.peerRanks())) {
                throw new AssertionError("rank " + rank + ": counterparts " + counterparts
                        + " differ from RankMapping.targetRanks " + t.peerRanks());
            }
            List<Connection> all = self.managers[rank].getConnections(peer.comm);
            Connection[] conns = new Connection[t.size()];
            int[] tags = new int[t.size()];
            int[][] peerIds = new int[t.size()][];
            LongAdder bytes = new LongAdder();
            for (int p = 0; p < conns.length; p++) {
                int peerRank = t.peerRanks().get(p);
                conns[p] = new CountingConnection(all.get(peerRank), messages, bytes);
                tags[p] = tag;
                peerIds[p] = peerBlocks[peerRank] == null ? null : peerBlocks[peerRank].clone();
            }
            return DefaultTransferSession.builder(requestId, sender)
                    .states(new TransceiverState(selfState, self.comm.withSelfIndex(rank)), peerState, t)
                    .blocks(selfBlocks[rank].clone(), totalBlocks)
                    .connections(conns, tags, options.chunkBytes())
                    .resources(self.pools[rank], self.memory, options.parallelPeers() ? executor : null)
                    .deadline(deadline, new TransferTiming(requestId, System.nanoTime()))
                    .reusedBlocks(reused)
                    .peerBlockIds(options.exchangeBlockIds() ? peerIds : null)
                    .build();
        }

        PairReport.RequestReport report() {
            int nc = ctxBlocks.length;
            int ng = genBlocks.length;
            boolean[] ctxServing = new boolean[nc];
            long[] sent = new long[nc];
            boolean[] picked = new boolean[nc];
            long[] ctxMeasured = new long[nc];
            long[] ctxMsgs = new long[nc];
            for (int r = 0; r < nc; r++) {
                ctxServing[r] = ctxBlocks[r] != null;
                if (ctxSessions[r] != null) {
                    sent[r] = ctxSessions[r].movedBytes();
                    ctxMeasured[r] = ctxSessions[r].timing().measuredBytes();
                    ctxMsgs[r] = ctxMessages[r].sum();
                }
            }
            long[] genMeasured = new long[ng];
            boolean[] genServing = new boolean[ng];
            long[] received = new long[ng];
            long[] expected = new long[ng];
            long[] genMsgs = new long[ng];
            boolean[] zeroLayer = new boolean[ng];
            KvPattern.Result verify = KvPattern.Result.empty();
            for (int g = 0; g < ng; g++) {
                zeroLayer[g] = genState.layerCount(genState.ppRank(g)) == 0;
                if (genBlocks[g] == null) {
                    continue;
                }
                genServing[g] = true;
                DefaultTransferSession s = genSessions[g];
                if (s != null) {
                    received[g] = s.movedBytes();
                    genMeasured[g] = s.timing().measuredBytes();
                    genMsgs[g] = genMessages[g].sum();
                }
                int first = BlockDistribution.firstGlobalBlock(totalBlocks, genState.contextParallelism(),
                        genState.cpRank(g));
                int fresh = 0;
                for (int i = 0; i < genBlocks[g].length; i++) {
                    fresh += first + i >= reused ? 1 : 0;
                }
                long perBlock = gen.caches[g].layout().blockBytes();
                if (gen.caches[g].indexerKCache() != null) {
                    perBlock += gen.caches[g].indexerKCache().layout().blockBytes();
                }
                expected[g] = fresh * perBlock;
                TargetRanks t = RankMapping.targetRanks(ctxState, genState, g);
                for (int p : gen.formatters[g].pickRecvConnections(genState, g, ctxState)) {
                    picked[t.peerRanks().get(p)] = true;
                }
                if (!zeroLayer[g] && options.verify()) {
                    verify.merge(KvPattern.verify(gen.caches[g], genBlocks[g], genState, g, requestId, totalBlocks));
                    if (options.indexerDim() > 0) {
                        verify.merge(KvPattern.verifyIndexer(gen.caches[g], genBlocks[g], genState, g, requestId,
                                totalBlocks));
                    }
                }
            }
            return new PairReport.RequestReport(index, requestId, promptLength, totalBlocks, ctxServing, sent,
                    ctxNeedSend.clone(), picked, genServing, received, expected, zeroLayer, verify, ctxMeasured,
                    genMeasured, reused, ctxMsgs, genMsgs);
        }

        @Override
        public String toString() {
            return "request " + requestId + " (" + totalBlocks + " blocks, " + reused + " reused) ctx "
                    + Arrays.deepToString(ctxBlocks) + " gen " + Arrays.deepToString(genBlocks);
        }
    }
}
