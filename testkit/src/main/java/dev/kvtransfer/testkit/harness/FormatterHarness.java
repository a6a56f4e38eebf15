package dev.kvtransfer.testkit.harness;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.KvTransferException;
import dev.kvtransfer.api.format.CacheFormatter;
import dev.kvtransfer.api.format.FormatterCapability;
import dev.kvtransfer.api.format.FormatterProvider;
import dev.kvtransfer.api.format.PeerPool;
import dev.kvtransfer.api.layout.BlockDistribution;
import dev.kvtransfer.api.layout.RankMapping;
import dev.kvtransfer.api.layout.TargetRanks;
import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.api.model.RecurrentStateShape;
import dev.kvtransfer.api.model.TransceiverState;
import dev.kvtransfer.api.transport.Connection;
import dev.kvtransfer.api.transport.ConnectionManager;
import dev.kvtransfer.api.transport.RegisteredRegion;
import dev.kvtransfer.api.transport.Tags;
import dev.kvtransfer.core.buffer.DefaultTransferBufferPool;
import dev.kvtransfer.core.cache.PagedKvCache;
import dev.kvtransfer.core.pattern.WindowPattern;
import dev.kvtransfer.core.timing.TransferTiming;
import dev.kvtransfer.core.transfer.DefaultTransferSession;
import dev.kvtransfer.testkit.KvPattern;
import dev.kvtransfer.testkit.LayoutPair;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Set;
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
 * <p>Modes ({@link HarnessOptions#mode()}): whole requests ({@code format} / {@code unformat}); layer ranges on both
 * sides ({@code format} / {@code unformat} of each global layer range, ascending, each side calling the ranges that
 * intersect its layers); a one-sided push of each context rank's layers ({@code push}), or of one range at a time.
 * For a push every generation rank registers, per request, exactly the bytes of its blocks after the reused prefix
 * with its loopback endpoint (every (layer, kv, segment) plane of each block, merged into runs per region, as core's
 * {@code CacheReceiver} does) and the context sessions get the {@link PeerPool}s; loopback emulates the writes. The
 * harness logs every entry written and checks it as core's receiver does: inside this request's grants, unchanged
 * since written (CRC32C of the source then against the memory now), no two entries overlapping, from a context rank
 * the generation rank picks, and together exactly the bytes of the blocks after the reused prefix
 * ({@link PairReport.RequestReport#writeViolations()}); then it revokes the grants. A mode whose capability the
 * formatter does not declare must be refused: every call of it has to throw {@link UnsupportedOperationException}.
 *
 * <p>{@link #run} does all of it once; benchmarks {@link #open} a harness, {@link #prepare()} once and
 * {@link #transfer()} repeatedly.
 */
public final class FormatterHarness implements AutoCloseable {
    private static final AtomicLong FABRICS = new AtomicLong();
    static final AtomicInteger THREADS = new AtomicInteger();
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
    private HarnessInstance ctx;
    private HarnessInstance gen;
    private RequestRun[] runs;
    private Throwable failure;
    private int transfers;
    private boolean closed;
    private Set<FormatterCapability> capabilities = Set.of();

    private FormatterHarness(FormatterProvider provider, LayoutPair pair, HarnessOptions options) {
        this.provider = Objects.requireNonNull(provider, "provider");
        Objects.requireNonNull(pair, "pair");
        this.options = Objects.requireNonNull(options, "options");
        // Ranks with an indexer-K pool declare it in their state, as an engine must (the formatter checks both).
        this.pair = options.indexerDim() == 0 ? pair : pair.with(pair.name(),
                pair.ctx().toBuilder().indexerKCache(options.indexerDim(), 0).build(),
                pair.gen().toBuilder().indexerKCache(options.indexerDim(), 0).build());
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
            report = new PairReport(pair, List.of(), h.failure, options.mode(), h.capabilities);
        }
        try {
            h.close();
        } catch (RuntimeException e) {
            if (report.failure() == null) {
                report = new PairReport(pair, report.requests(), e, report.mode(), report.capabilities());
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
        ctx = new HarnessInstance("ctx", pair.ctx(), 3, fabric, pair, options, provider, requests);
        gen = new HarnessInstance("gen", pair.gen(), 2, fabric, pair, options, provider, requests);
        capabilities = Set.copyOf(ctx.formatters[0].capabilities());
    }

    /** @return whether the run's mode needs a capability the formatter does not declare (it must refuse it) */
    private boolean refused() {
        HarnessOptions.Mode m = options.mode();
        return m.push() ? !capabilities.contains(FormatterCapability.PUSH)
                : m.layered() && !capabilities.contains(FormatterCapability.LAYER_RANGES);
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
        if (options.mode().push()) {
            for (RequestRun r : runs) {
                try {
                    r.finishPush(first == null && !refused());
                } catch (RuntimeException e) {
                    first = first == null ? e : first;
                }
            }
        }
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
        return new PairReport(pair, reports, failure, options.mode(), capabilities);
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
        for (HarnessInstance in : new HarnessInstance[] {ctx, gen}) {
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
        for (HarnessInstance in : new HarnessInstance[] {ctx, gen}) {
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
        /** Push: per generation rank, what was written into it, its grants and their memory, and the checks. */
        final WriteLog[] logs;
        final PeerPool[] genPools;
        final List<List<RegisteredRegion>> registrations = new ArrayList<>();
        final List<Map<Long, MemoryBuffer>> granted = new ArrayList<>();
        final long[] written;
        final long[] writtenEntries;
        final List<String> violations = new ArrayList<>();

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
            this.logs = new WriteLog[ng];
            this.genPools = new PeerPool[ng];
            this.written = new long[ng];
            this.writtenEntries = new long[ng];
            for (int g = 0; g < ng; g++) {
                registrations.add(new ArrayList<>());
                granted.add(new HashMap<>());
            }
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
                if (RecurrentStateShape.holdsState(ctxState, r)) {
                    KvPattern.fillRecurrent(ctx.caches[r].recurrentState(), ctxState, r, requestId);
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
                if (RecurrentStateShape.holdsState(genState, g)) {
                    // Allocated with the blocks; poisoned: every state element must be overwritten by the transfer.
                    KvPattern.fillRecurrent(gen.caches[g].recurrentState(), genState, g, requestId,
                            requestId + GEN_POISON);
                }
            }
        }

        /** A generation rank's whole recurrent state of the request: it receives all of it, whatever the reuse. */
        private long recurrentBytes(CacheState state, int rank) {
            if (!RecurrentStateShape.holdsState(state, rank)) {
                return 0;
            }
            RecurrentStateShape s = state.recurrentState();
            return s.recurrentLayerCount(state.ppRank(rank))
                    * (s.convBytesPerRank(state.tensorParallelism()) + s.ssmBytesPerRank(state.tensorParallelism()));
        }

        private int count(CacheState state, int rank) {
            return BlockDistribution.count(totalBlocks, state.contextParallelism(), state.cpRank(rank));
        }

        void sessions(int round, long deadline, List<Runnable> tasks) {
            int tag = Tags.FIRST_DATA_TAG + round * requests + index;
            HarnessOptions.Mode mode = options.mode();
            boolean refused = refused();
            if (mode.push()) {
                violations.clear();
                for (int g = 0; g < genBlocks.length; g++) {
                    written[g] = 0;
                    writtenEntries[g] = 0;
                    if (genBlocks[g] != null) {
                        logs[g] = new WriteLog(options.verify());
                        genPools[g] = new PeerPool(genState, g, genBlocks[g], gen.caches[g].blocksPerRegion(),
                                registerGrants(g));
                    }
                }
            }
            for (int r = 0; r < ctxBlocks.length; r++) {
                if (ctxBlocks[r] == null) {
                    continue;
                }
                ctxMessages[r] = new LongAdder();
                DefaultTransferSession s = session(true, ctx, ctxState, r, gen, genState, ctxBlocks, genBlocks, tag,
                        deadline, ctxMessages[r]);
                ctxSessions[r] = s;
                CacheFormatter f = ctx.formatters[r];
                int rank = r;
                if (!mode.layered() && !mode.push()) {
                    tasks.add(() -> {
                        try (s) {
                            f.format(s);
                        }
                    });
                } else if (refused) {
                    tasks.add(() -> {
                        try (s) {
                            expectRefusal(mode, rank, ctxState, () -> {
                                int pp = ctxState.ppRank(rank);
                                if (mode.push()) {
                                    f.push(s, ctxState.firstLayer(pp), ctxState.layerCount(pp));
                                } else {
                                    f.format(s, ctxState.firstLayer(pp), ctxState.layerCount(pp));
                                }
                            });
                        }
                    });
                } else if (mode.push() && !mode.layered()) {
                    tasks.add(() -> {
                        try (s) {
                            int pp = ctxState.ppRank(rank);
                            f.push(s, ctxState.firstLayer(pp), ctxState.layerCount(pp));
                        }
                    });
                } else {
                    tasks.add(() -> {
                        try (s) {
                            forEachRange(ctxState, rank, (first, n) -> {
                                if (mode.push()) {
                                    f.push(s, first, n);
                                } else {
                                    f.format(s, first, n);
                                }
                            });
                        }
                    });
                }
            }
            if (mode.push()) {
                return; // one-sided: the generation ranks take no part
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
                int rank = g;
                if (!mode.layered()) {
                    tasks.add(() -> {
                        try (s) {
                            f.unformat(s);
                        }
                    });
                } else if (refused) {
                    tasks.add(() -> {
                        try (s) {
                            expectRefusal(mode, rank, genState, () -> {
                                int pp = genState.ppRank(rank);
                                f.unformat(s, genState.firstLayer(pp), genState.layerCount(pp));
                            });
                        }
                    });
                } else {
                    tasks.add(() -> {
                        try (s) {
                            forEachRange(genState, rank, (first, n) -> f.unformat(s, first, n));
                        }
                    });
                }
            }
        }

        /** The global layer ranges of {@code options.layerStep()} that intersect a rank's layers, ascending. */
        private void forEachRange(CacheState state, int rank, RangeAction action) {
            int pp = state.ppRank(rank);
            int a0 = state.firstLayer(pp);
            int a1 = a0 + state.layerCount(pp);
            int step = options.layerStep();
            int layers = state.numLayers();
            for (int r0 = 0; r0 < layers; r0 += step) {
                int r1 = Math.min(layers, r0 + step);
                if (r0 < a1 && r1 > a0) {
                    action.run(r0, r1 - r0);
                }
            }
        }

        /** A rank holding layers must refuse the undeclared capability with UnsupportedOperationException. */
        private void expectRefusal(HarnessOptions.Mode mode, int rank, CacheState state, Runnable call) {
            if (state.layerCount(state.ppRank(rank)) == 0) {
                return;
            }
            try {
                call.run();
            } catch (UnsupportedOperationException expected) {
                return;
            }
            throw new AssertionError(provider.name() + " does not declare " + (mode.push() ? "PUSH" : "LAYER_RANGES")
                    + " (capabilities " + capabilities + ") but " + (mode.push() ? "push" : "a layer range")
                    + " on rank " + rank + " did not throw UnsupportedOperationException");
        }

        /** This request's grants on generation rank {@code g} ({@link PushChecks#registerGrants}). */
        private List<PeerPool.Grant> registerGrants(int g) {
            int firstGlobal = BlockDistribution.firstGlobalBlock(totalBlocks, genState.contextParallelism(),
                    genState.cpRank(g));
            return PushChecks.registerGrants(gen.caches[g], gen.managers[g], genBlocks[g], firstGlobal, reused,
                    registrations.get(g), granted.get(g));
        }

        /**
         * Push, after every context rank returned: checks what was written as core's receiver does (when
         * {@code check}), then revokes the grants.
         */
        void finishPush(boolean check) {
            try {
                if (check) {
                    for (int g = 0; g < genBlocks.length; g++) {
                        if (genBlocks[g] != null) {
                            checkWrites(g);
                        }
                    }
                }
            } finally {
                for (List<RegisteredRegion> regs : registrations) {
                    for (RegisteredRegion r : regs) {
                        r.close();
                    }
                    regs.clear();
                }
                for (Map<Long, MemoryBuffer> m : granted) {
                    m.clear();
                }
            }
        }

        private void checkWrites(int g) {
            TargetRanks t = RankMapping.targetRanks(ctxState, genState, g);
            boolean[] picked = new boolean[ctxBlocks.length];
            for (int p : gen.formatters[g].pickRecvConnections(genState, g, ctxState)) {
                picked[t.peerRanks().get(p)] = true;
            }
            long expected = 0;
            int first = BlockDistribution.firstGlobalBlock(totalBlocks, genState.contextParallelism(),
                    genState.cpRank(g));
            for (int i = 0; i < genBlocks[g].length; i++) {
                expected += first + i >= reused ? gen.caches[g].layout().blockBytes() : 0;
            }
            if (genState.windowGroups() != null) {
                expected = WindowPattern.movedBytes(genState, g, totalBlocks, reused);
            }
            written[g] = PushChecks.checkWrites(logs[g], granted.get(g), "request " + requestId + " gen rank " + g,
                    picked, expected, reused, violations);
            writtenEntries[g] = logs[g].size();
        }

        private DefaultTransferSession session(boolean sender, HarnessInstance self, CacheState selfState, int rank,
                                               HarnessInstance peer, CacheState peerState, int[][] selfBlocks,
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
            boolean push = sender && options.mode().push();
            PeerPool[] pools = push ? new PeerPool[t.size()] : null;
            for (int p = 0; p < conns.length; p++) {
                int peerRank = t.peerRanks().get(p);
                conns[p] = push ? new CountingConnection(all.get(peerRank), messages, bytes, logs[peerRank], rank)
                        : new CountingConnection(all.get(peerRank), messages, bytes);
                tags[p] = tag;
                peerIds[p] = peerBlocks[peerRank] == null ? null : peerBlocks[peerRank].clone();
                if (push) {
                    pools[p] = genPools[peerRank];
                }
            }
            DefaultTransferSession.Builder b = DefaultTransferSession.builder(requestId, sender)
                    .states(new TransceiverState(selfState, self.comm.withSelfIndex(rank)), peerState, t)
                    .blocks(selfBlocks[rank].clone(), totalBlocks)
                    .connections(conns, tags, options.chunkBytes())
                    .resources(self.pools[rank], self.memory, options.parallelPeers() ? executor : null)
                    .deadline(deadline, new TransferTiming(requestId, System.nanoTime()))
                    .reusedBlocks(reused)
                    .peerBlockIds(options.exchangeBlockIds() ? peerIds : null);
            if (push) {
                b.push(pools);
            }
            return b.build();
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
                DefaultTransferSession s = options.mode().push() ? null : genSessions[g];
                if (options.mode().push()) {
                    // One-sided: what the context ranks wrote into this rank (nothing to measure on this side).
                    received[g] = written[g];
                    genMeasured[g] = written[g];
                    genMsgs[g] = writtenEntries[g];
                }
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
                // Sliding windows: per layer only the blocks inside its window (after the reused prefix) move.
                long blockBytes = genState.windowGroups() == null ? fresh * perBlock
                        : WindowPattern.movedBytes(genState, g, totalBlocks, reused);
                expected[g] = blockBytes + recurrentBytes(genState, g);
                TargetRanks t = RankMapping.targetRanks(ctxState, genState, g);
                for (int p : gen.formatters[g].pickRecvConnections(genState, g, ctxState)) {
                    picked[t.peerRanks().get(p)] = true;
                }
                if (!zeroLayer[g] && options.verify()) {
                    verify.merge(genState.windowGroups() == null
                            ? KvPattern.verify(gen.caches[g], genBlocks[g], genState, g, requestId, totalBlocks)
                            : WindowPattern.verify(gen.caches[g], genBlocks[g], genState, g, requestId,
                            requestId + GEN_POISON, totalBlocks, reused));
                    if (options.indexerDim() > 0) {
                        verify.merge(KvPattern.verifyIndexer(gen.caches[g], genBlocks[g], genState, g, requestId,
                                totalBlocks));
                    }
                    if (RecurrentStateShape.holdsState(genState, g)) {
                        verify.merge(KvPattern.verifyRecurrent(gen.caches[g].recurrentState(), genState, g,
                                requestId));
                    }
                }
            }
            return new PairReport.RequestReport(index, requestId, promptLength, totalBlocks, ctxServing, sent,
                    ctxNeedSend.clone(), picked, genServing, received, expected, zeroLayer, verify, ctxMeasured,
                    genMeasured, reused, ctxMsgs, genMsgs, violations);
        }

        @Override
        public String toString() {
            return "request " + requestId + " (" + totalBlocks + " blocks, " + reused + " reused) ctx "
                    + Arrays.deepToString(ctxBlocks) + " gen " + Arrays.deepToString(genBlocks);
        }
    }

    /** One global layer range. */
    @FunctionalInterface
    private interface RangeAction {
        void run(int firstLayer, int layers);
    }
}
