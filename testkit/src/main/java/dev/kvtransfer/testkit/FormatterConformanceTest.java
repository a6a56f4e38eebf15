package dev.kvtransfer.testkit;

import dev.kvtransfer.api.format.CacheFormatter;
import dev.kvtransfer.api.format.FormatterCapability;
import dev.kvtransfer.api.format.FormatterProvider;
import dev.kvtransfer.api.format.Support;
import dev.kvtransfer.api.layout.BlockDistribution;
import dev.kvtransfer.api.layout.BlockLayout;
import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.core.buffer.DefaultTransferBufferPool;
import dev.kvtransfer.core.cache.PagedKvCache;
import dev.kvtransfer.core.memory.HostBufferManager;
import dev.kvtransfer.testkit.harness.FormatterHarness;
import dev.kvtransfer.testkit.harness.HarnessOptions;
import dev.kvtransfer.testkit.harness.PairReport;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInstance;

import java.io.PrintWriter;
import java.io.StringWriter;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicInteger;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * The conformance suite every cache formatter passes. A formatter's test is a subclass supplying
 * {@link #provider()} (and, for another attention type, {@link #grid()}).
 *
 * <p>Every supported pair of the grid runs through {@link FormatterHarness}: one {@code PagedKvCache} (in the
 * pair's pool layouts), staging pool, formatter and loopback endpoint per rank, core's production
 * {@code DefaultTransferSession} per request and rank (with the peers' block ids, holes between them, and the
 * pair's prefix reuse), the requests of the pair (prompt lengths that do not fill the last block) filled with
 * {@link KvPattern} on the context side (poison in the reused prefix) and the reused prefix pre-filled on the
 * generation side (poison elsewhere), {@code format} on every context rank and {@code unformat} on every
 * generation rank concurrently under a deadline, then every element of every generation block verified. The grid
 * runs once per test class (pairs in parallel on {@link #parallelPairs()} threads); the rules below check
 * different properties of that run. A failure names the pair.
 *
 * <p>The default grid is {@link LayoutGrid#standardFull()}: block pools, no reuse, which a formatter written
 * before pool layouts passes. A formatter that handles pool layouts and reuse runs a grid with them (e.g.
 * {@link LayoutGrid#standardConformance()}).
 *
 * <p>Rules:
 * <ol>
 * <li>every supported pair moves every element exactly (KvPattern over all generation blocks);</li>
 * <li>of a duplicate-head group only the designated rank sends: a context rank sends bytes exactly when a
 *     generation rank picks it ({@code pickRecvConnections}), and {@code needSendCache} says so;</li>
 * <li>every generation rank receives exactly the bytes of its blocks, and what is sent is what is received;</li>
 * <li>a rank whose PP stage owns no layer neither sends nor receives and has no counterparts;</li>
 * <li>an unsupported pair is refused both ways with a reason naming the offending field;</li>
 * <li>a supported pair is accepted both ways;</li>
 * <li>counterparts are symmetric, picks are distinct positions of the counterpart list;</li>
 * <li>the provider names itself and handles the grid's attention types;</li>
 * <li>parts split into small messages and received sequentially move the same bytes;</li>
 * <li>a formatter serves concurrent requests (every pair's requests run at once on one formatter per rank);</li>
 * <li>every byte moved is reported through {@code recordMeasure} (the timing CSV depends on it);</li>
 * <li>nothing leaks: the harness closes every buffer manager (a leaked buffer fails the pair, rule 1) and no
 *     thread started during the run outlives it;</li>
 * <li>every message a context rank sends is received (the two sides agree on the message plan);</li>
 * <li>reused blocks are neither sent nor written: a request whose blocks are all reused moves no message, and
 *     the generation ranks receive exactly their blocks after the reused prefix (rules 1 and 3 verify the bytes:
 *     the context side's prefix holds poison);</li>
 * <li>a formatter declaring {@link FormatterCapability#PUSH} writes, one-sided into the generation ranks' registered
 *     pools ({@link #pushGrid()}: half the pairs pushed whole, half one layer at a time), every element exactly
 *     (KvPattern), and what it wrote is what core's receiver accepts: every entry inside this request's grants,
 *     every non-reused byte written exactly once (no overlap, no byte changed after its write, exactly the bytes of
 *     the blocks after the reused prefix), only by the designated rank of a duplicate group, every byte measured,
 *     nothing for an all-reused request; one that does not declare it throws
 *     {@link UnsupportedOperationException} from {@code push};</li>
 * <li>a formatter declaring {@link FormatterCapability#LAYER_RANGES} moves the same bytes layer range by layer range
 *     ({@link #layerGrid()}: ranges of one global layer as core calls them, and of two on every other pair) as in the
 *     whole transfer: every element exact, every rank the same byte counts as in the grid run, every message
 *     received, every byte measured, nothing reused moved; one that does not declare it throws
 *     {@link UnsupportedOperationException} from a layer range.</li>
 * </ol>
 */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
@RuleBound(seconds = 600, suiteSeconds = 1200)
public abstract class FormatterConformanceTest {
    private List<PairReport> gridRun;
    private Set<Thread> threadsBeforeGridRun;

    /** @return the formatter plugin under test */
    protected abstract FormatterProvider provider();

    /** @return the layout pairs to check; {@link LayoutGrid#standardFull()} unless overridden */
    protected LayoutGrid grid() {
        return LayoutGrid.standardFull();
    }

    /** @return how pairs are run (deadline, chunking, staging); {@link HarnessOptions#defaults()} */
    protected HarnessOptions harnessOptions() {
        return HarnessOptions.defaults();
    }

    /**
     * @return the pairs rule 15 pushes; by default every {@code n}-th supported pair of {@link #grid()}, about 12
     *         pairs (a formatter's test picks a representative part plus every pool-layout pair on a few shapes)
     */
    protected LayoutGrid pushGrid() {
        return grid().sample(Math.max(1, grid().supported().size() / 12));
    }

    /** @return the pairs rule 16 moves layer by layer; by default those of {@link #pushGrid()} */
    protected LayoutGrid layerGrid() {
        return pushGrid();
    }

    /** @return pairs run at once (2 to 4 by core count) */
    protected int parallelPairs() {
        return Math.min(4, Math.max(2, Runtime.getRuntime().availableProcessors()));
    }

    /** @return the deadline of the whole grid run */
    protected Duration gridTimeout() {
        return Duration.ofMinutes(5);
    }

    /** Runs the grid's supported pairs once per test class and keeps the reports. */
    protected final synchronized List<PairReport> gridRun() {
        if (gridRun == null) {
            threadsBeforeGridRun = LeakChecks.liveThreads();
            gridRun = runPairs(grid().supported(), harnessOptions());
        }
        return gridRun;
    }

    /**
     * Runs pairs through the harness on {@link #parallelPairs()} threads.
     *
     * @param pairs   the pairs
     * @param options harness options
     * @return one report per pair, in order
     */
    protected final List<PairReport> runPairs(List<LayoutPair> pairs, HarnessOptions options) {
        FormatterProvider provider = provider();
        AtomicInteger n = new AtomicInteger();
        ExecutorService pool = Executors.newFixedThreadPool(parallelPairs(), r -> {
            Thread t = new Thread(r, "fmt-conformance-" + n.incrementAndGet());
            t.setDaemon(true);
            return t;
        });
        try {
            List<Future<PairReport>> futures = new ArrayList<>();
            for (LayoutPair p : pairs) {
                futures.add(pool.submit(() -> FormatterHarness.run(provider, p, options)));
            }
            long deadline = System.nanoTime() + gridTimeout().toNanos();
            List<PairReport> out = new ArrayList<>();
            for (int i = 0; i < futures.size(); i++) {
                try {
                    out.add(futures.get(i).get(Math.max(0, deadline - System.nanoTime()), TimeUnit.NANOSECONDS));
                } catch (ExecutionException e) {
                    out.add(new PairReport(pairs.get(i), List.of(), e.getCause()));
                } catch (TimeoutException e) {
                    out.add(new PairReport(pairs.get(i), List.of(), new AssertionError("grid run exceeded "
                            + gridTimeout())));
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                    throw new AssertionError("interrupted", e);
                }
            }
            return out;
        } finally {
            pool.shutdownNow();
        }
    }

    @Test
    public void required_spec5_01_everyGridPairMovesBytesExactly() {
        List<String> failures = new ArrayList<>();
        long checked = 0;
        for (PairReport r : gridRun()) {
            if (!r.completed()) {
                failures.add(r.pair().name() + ": " + describe(r.failure()));
                continue;
            }
            for (PairReport.RequestReport q : r.requests()) {
                long expectedElements = 0;
                CacheState gen = r.pair().genFor(q.index());
                for (int g = 0; g < q.genServing().length; g++) {
                    if (q.genServing()[g] && !q.genZeroLayer()[g]) {
                        BlockLayout l = BlockLayout.of(gen, g);
                        int blocks = BlockDistribution.count(q.totalBlocks(), gen.contextParallelism(), gen.cpRank(g));
                        expectedElements += blocks * l.blockBytes() / l.elementBytes();
                        // An indexer-K pool (uint8, one head): layers x tokens x indexerDim elements per block.
                        expectedElements += (long) blocks * l.localLayers() * l.tokensPerBlock()
                                * harnessOptions().indexerDim();
                    }
                    expectedElements += q.genServing()[g] ? MovedChecks.recurrent(gen, g, false) : 0;
                }
                if (!q.verify().ok()) {
                    failures.add(r.pair().name() + " request " + q.requestId() + " (prompt " + q.promptLength()
                            + "): " + q.verify());
                } else if (q.verify().checkedElements() != expectedElements) {
                    failures.add(r.pair().name() + " request " + q.requestId() + ": checked "
                            + q.verify().checkedElements() + " elements, the generation blocks hold "
                            + expectedElements);
                }
                checked += q.verify().checkedElements();
            }
        }
        assertThat(failures).as("pairs that failed (of %d supported)", gridRun().size()).isEmpty();
        assertThat(checked).as("elements verified").isPositive();
    }

    @Test
    public void required_spec5_02_onlyTheDesignatedRankOfADuplicateGroupSends() {
        List<String> failures = new ArrayList<>();
        for (PairReport r : completedRuns()) {
            for (PairReport.RequestReport q : r.requests()) {
                CacheState ctx = r.pair().ctxFor(q.index());
                for (int c = 0; c < q.ctxServing().length; c++) {
                    if (!q.ctxServing()[c]) {
                        continue;
                    }
                    boolean picked = q.ctxPickedByGen()[c];
                    boolean sent = q.ctxSentBytes()[c] > 0;
                    // A context CP rank may hold none of a short request's blocks, or only reused ones: picked,
                    // but nothing to send.
                    int first = BlockDistribution.firstGlobalBlock(q.totalBlocks(), ctx.contextParallelism(),
                            ctx.cpRank(c));
                    int count = BlockDistribution.count(q.totalBlocks(), ctx.contextParallelism(), ctx.cpRank(c));
                    boolean holdsBlocks = first + count > q.reusedBlocks() && count > 0;
                    // A hybrid model's recurrent states are split over every TP rank, never duplicated: each rank
                    // holding them sends them (and its KV only when designated).
                    long states = MovedChecks.recurrent(ctx, c, true);
                    boolean sentKv = q.ctxSentBytes()[c] > states;
                    boolean needSend = picked || states > 0;
                    if (needSend != q.ctxNeedSend()[c] || !picked && sentKv || picked && holdsBlocks && !sentKv
                            || q.ctxSentBytes()[c] < states) {
                        failures.add(r.pair().name() + " request " + q.requestId() + " ctx rank " + c
                                + ": picked by a generation rank = " + picked + ", needSendCache = "
                                + q.ctxNeedSend()[c] + ", sent " + q.ctxSentBytes()[c] + " bytes");
                    }
                }
            }
        }
        assertThat(failures).isEmpty();
    }

    @Test
    public void required_spec5_03_everyGenerationRankReceivesExactlyItsBlocks() {
        List<String> failures = new ArrayList<>();
        for (PairReport r : completedRuns()) {
            for (PairReport.RequestReport q : r.requests()) {
                for (int g = 0; g < q.genServing().length; g++) {
                    if (q.genServing()[g] && q.genReceivedBytes()[g] != q.genExpectedBytes()[g]) {
                        failures.add(r.pair().name() + " request " + q.requestId() + " gen rank " + g + ": received "
                                + q.genReceivedBytes()[g] + " bytes, its blocks hold " + q.genExpectedBytes()[g]);
                    }
                }
                if (q.totalSent() != q.totalReceived()) {
                    failures.add(r.pair().name() + " request " + q.requestId() + ": sent " + q.totalSent()
                            + " bytes, received " + q.totalReceived());
                }
            }
        }
        assertThat(failures).isEmpty();
    }

    @Test
    public void required_spec5_04_zeroLayerRanksNeitherSendNorReceive() {
        List<String> failures = new ArrayList<>();
        int zeroLayerRanks = 0;
        CacheFormatter f = anyFormatter();
        for (PairReport r : completedRuns()) {
            for (PairReport.RequestReport q : r.requests()) {
                CacheState ctx = r.pair().ctxFor(q.index());
                CacheState gen = r.pair().genFor(q.index());
                for (int c = 0; c < q.ctxServing().length; c++) {
                    if (q.ctxServing()[c] && ctx.layerCount(ctx.ppRank(c)) == 0) {
                        zeroLayerRanks++;
                        if (q.ctxSentBytes()[c] != 0 || !f.counterparts(ctx, c, gen).isEmpty()
                                || f.needSendCache(ctx, c, gen)) {
                            failures.add(r.pair().name() + " ctx rank " + c + " owns no layer but sent "
                                    + q.ctxSentBytes()[c] + " bytes / has counterparts "
                                    + f.counterparts(ctx, c, gen));
                        }
                    }
                }
                for (int g = 0; g < q.genServing().length; g++) {
                    if (q.genServing()[g] && q.genZeroLayer()[g]) {
                        zeroLayerRanks++;
                        if (q.genReceivedBytes()[g] != 0 || !f.counterparts(gen, g, ctx).isEmpty()
                                || !f.pickRecvConnections(gen, g, ctx).isEmpty()) {
                            failures.add(r.pair().name() + " gen rank " + g + " owns no layer but received "
                                    + q.genReceivedBytes()[g] + " bytes / has counterparts "
                                    + f.counterparts(gen, g, ctx));
                        }
                    }
                }
            }
        }
        assertThat(failures).isEmpty();
        if (grid().supported().stream().anyMatch(FormatterConformanceTest::hasZeroLayerRank)) {
            assertThat(zeroLayerRanks).as("zero-layer ranks seen in the run").isPositive();
        }
    }

    @Test
    public void required_spec5_05_unsupportedPairsAreRefusedNamingTheField() {
        CacheFormatter f = anyFormatter();
        List<String> failures = new ArrayList<>();
        for (LayoutPair p : grid().unsupported()) {
            for (boolean ctxAsks : new boolean[] {true, false}) {
                Support s = ctxAsks ? f.inquireSupport(p.ctx(), p.gen()) : f.inquireSupport(p.gen(), p.ctx());
                String who = ctxAsks ? "asked by the context side" : "asked by the generation side";
                if (s.supported()) {
                    failures.add(p.name() + " " + who + ": accepted, expected a refusal naming "
                            + p.rejectedField());
                } else if (!s.reason().contains(p.rejectedField())) {
                    failures.add(p.name() + " " + who + ": reason '" + s.reason() + "' does not name "
                            + p.rejectedField());
                }
            }
        }
        assertThat(failures).isEmpty();
    }

    @Test
    public void required_spec5_06_supportedPairsAreAcceptedBothWays() {
        CacheFormatter f = anyFormatter();
        List<String> failures = new ArrayList<>();
        for (LayoutPair p : grid().supported()) {
            for (int i = 0; i < p.promptLengths().size(); i++) {
                CacheState ctx = p.ctxFor(i);
                CacheState gen = p.genFor(i);
                Support a = f.inquireSupport(ctx, gen);
                Support b = f.inquireSupport(gen, ctx);
                if (!a.supported() || !b.supported()) {
                    failures.add(p.name() + ": refused: " + a.reason() + " / " + b.reason());
                }
            }
        }
        assertThat(failures).isEmpty();
    }

    @Test
    public void required_spec5_07_counterpartsAreSymmetricAndPicksAreCounterpartPositions() {
        CacheFormatter f = anyFormatter();
        List<String> failures = new ArrayList<>();
        for (LayoutPair p : grid().supported()) {
            for (int i = 0; i < Math.min(2, p.promptLengths().size()); i++) {
                CacheState ctx = p.ctxFor(i);
                CacheState gen = p.genFor(i);
                for (int c = 0; c < ctx.worldSize(); c++) {
                    if (!LayoutPair.serves(ctx, c)) {
                        continue;
                    }
                    List<Integer> cc = f.counterparts(ctx, c, gen);
                    for (int g : cc) {
                        if (!LayoutPair.serves(gen, g) || !f.counterparts(gen, g, ctx).contains(c)) {
                            failures.add(p.name() + ": ctx rank " + c + " lists gen rank " + g
                                    + " but not the other way round");
                        }
                    }
                }
                for (int g = 0; g < gen.worldSize(); g++) {
                    if (!LayoutPair.serves(gen, g)) {
                        continue;
                    }
                    List<Integer> gc = f.counterparts(gen, g, ctx);
                    for (int c : gc) {
                        if (!f.counterparts(ctx, c, gen).contains(g)) {
                            failures.add(p.name() + ": gen rank " + g + " lists ctx rank " + c
                                    + " but not the other way round");
                        }
                    }
                    List<Integer> picks = f.pickRecvConnections(gen, g, ctx);
                    Set<Integer> seen = new HashSet<>();
                    for (int pos : picks) {
                        if (pos < 0 || pos >= gc.size() || !seen.add(pos)) {
                            failures.add(p.name() + ": gen rank " + g + " picks " + picks + " of " + gc.size()
                                    + " counterparts");
                            break;
                        }
                    }
                    if (!gc.isEmpty() && picks.isEmpty()) {
                        failures.add(p.name() + ": gen rank " + g + " picks no counterpart of " + gc);
                    }
                }
            }
        }
        assertThat(failures).isEmpty();
    }

    @Test
    public void required_spec5_08_providerNamesItselfAndHandlesTheGridsAttentionTypes() {
        FormatterProvider p = provider();
        assertThat(p.name()).as("provider name").isNotBlank();
        for (LayoutPair pair : grid().supported()) {
            assertThat(p.handles(pair.ctx().attentionType()))
                    .as("%s handles %s (%s)", p.name(), pair.ctx().attentionType(), pair.name()).isTrue();
        }
        assertThat(anyFormatter()).isNotNull();
    }

    @Test
    public void required_spec5_09_chunkedMessagesAndSequentialPeersMoveTheSameBytes() {
        List<LayoutPair> some = new ArrayList<>();
        List<LayoutPair> all = grid().supported();
        int step = Math.max(1, all.size() / 8);
        for (int i = 0; i < all.size(); i += step) {
            some.add(all.get(i));
        }
        // Also without the peers' block ids and with consecutive ids: the per-block fallback plan.
        HarnessOptions chunked = harnessOptions().withChunkBytes(1000).withParallelPeers(false).withSlotBytes(0)
                .withExchangeBlockIds(false).withFragmentBlocks(false);
        List<String> failures = new ArrayList<>();
        for (PairReport r : runPairs(some, chunked)) {
            if (!r.completed()) {
                failures.add(r.pair().name() + ": " + describe(r.failure()));
                continue;
            }
            for (PairReport.RequestReport q : r.requests()) {
                if (!q.verify().ok() || q.verify().checkedElements() == 0 && q.totalReceived() > 0) {
                    failures.add(r.pair().name() + " request " + q.requestId() + ": " + q.verify());
                }
            }
        }
        assertThat(failures).isEmpty();
    }

    @Test
    public void required_spec5_10_concurrentRequestsShareOneFormatterPerRank() {
        // Every pair of the grid run moved all its requests at once through one formatter per rank.
        List<String> failures = new ArrayList<>();
        int concurrentPairs = 0;
        for (PairReport r : gridRun()) {
            if (r.pair().promptLengths().size() > 1) {
                concurrentPairs++;
                if (!r.completed() || r.requests().size() != r.pair().promptLengths().size()
                        || r.requests().stream().anyMatch(q -> !q.verify().ok())) {
                    failures.add(r.pair().name() + ": " + (r.completed() ? "a request failed to verify"
                            : describe(r.failure())));
                }
            }
        }
        assertThat(failures).isEmpty();
        assertThat(concurrentPairs).as("pairs with several concurrent requests").isPositive();
    }

    @Test
    public void required_spec5_11_everyMovedByteIsRecordedAsAMeasure() {
        List<String> failures = new ArrayList<>();
        for (PairReport r : completedRuns()) {
            for (PairReport.RequestReport q : r.requests()) {
                for (int c = 0; c < q.ctxSentBytes().length; c++) {
                    if (q.ctxMeasuredBytes()[c] != q.ctxSentBytes()[c]) {
                        failures.add(r.pair().name() + " request " + q.requestId() + " ctx rank " + c + ": sent "
                                + q.ctxSentBytes()[c] + " bytes, measured " + q.ctxMeasuredBytes()[c]);
                    }
                }
                for (int g = 0; g < q.genReceivedBytes().length; g++) {
                    if (q.genMeasuredBytes()[g] != q.genReceivedBytes()[g]) {
                        failures.add(r.pair().name() + " request " + q.requestId() + " gen rank " + g
                                + ": received " + q.genReceivedBytes()[g] + " bytes, measured "
                                + q.genMeasuredBytes()[g]);
                    }
                }
            }
        }
        assertThat(failures).isEmpty();
    }

    @Test
    public void required_spec5_12_noThreadOutlivesTheGridRun() {
        gridRun();
        LeakChecks.assertNoNewThreads(threadsBeforeGridRun, Duration.ofSeconds(10));
    }

    @Test
    public void required_spec5_13_everyMessageSentIsReceived() {
        List<String> failures = new ArrayList<>();
        long messages = 0;
        for (PairReport r : completedRuns()) {
            for (PairReport.RequestReport q : r.requests()) {
                messages += q.messagesSent();
                if (q.messagesSent() != q.messagesReceived()) {
                    failures.add(r.pair().name() + " request " + q.requestId() + ": the context ranks sent "
                            + q.messagesSent() + " messages, the generation ranks received " + q.messagesReceived());
                }
            }
        }
        assertThat(failures).isEmpty();
        assertThat(messages).as("messages moved by the grid").isPositive();
    }

    @Test
    public void required_spec5_14_reusedBlocksAreNeitherSentNorWritten() {
        List<String> failures = new ArrayList<>();
        int requests = 0;
        for (PairReport r : completedRuns()) {
            for (PairReport.RequestReport q : r.requests()) {
                requests++;
                long expected = 0;
                for (long b : q.genExpectedBytes()) {
                    expected += b;
                }
                boolean all = q.reusedBlocks() == q.totalBlocks();
                // A hybrid model's recurrent states always move whole: they are not blocks, reuse does not cover them.
                long states = 0;
                CacheState gen = r.pair().genFor(q.index());
                for (int g = 0; g < q.genServing().length; g++) {
                    states += q.genServing()[g] ? MovedChecks.recurrent(gen, g, true) : 0;
                }
                if (all && states == 0 && (q.totalSent() != 0 || q.messagesSent() != 0 || q.totalReceived() != 0)) {
                    failures.add(r.pair().name() + " request " + q.requestId() + ": every block reused, yet "
                            + q.totalSent() + " bytes in " + q.messagesSent() + " messages were sent");
                }
                if (all && states > 0 && (q.totalSent() != states || q.totalReceived() != states)) {
                    failures.add(r.pair().name() + " request " + q.requestId() + ": every block reused, yet "
                            + q.totalSent() + " bytes were sent and " + q.totalReceived() + " received where the"
                            + " recurrent states hold " + states);
                }
                if (q.totalReceived() != expected) {
                    failures.add(r.pair().name() + " request " + q.requestId() + " (" + q.reusedBlocks() + " of "
                            + q.totalBlocks() + " blocks reused): received " + q.totalReceived() + " bytes, the blocks"
                            + " after the reused prefix hold " + expected);
                }
            }
        }
        assertThat(failures).isEmpty();
        assertThat(requests).as("requests checked").isPositive();
    }

    @Test
    public void required_spec5_15_pushWritesEveryElementExactlyOnce() {
        List<PairReport> runs = runSplit(pushGrid().supported(), harnessOptions().withMode(HarnessOptions.Mode.PUSH),
                harnessOptions().withMode(HarnessOptions.Mode.PUSH_LAYERS));
        List<String> failures = pushFailures(runs);
        assertThat(failures).as("push runs that failed (of %d)", runs.size()).isEmpty();
        assertThat(runs).as("pairs pushed").isNotEmpty();
        assertMovedSomething(runs);
    }

    @Test
    public void required_spec5_16_layerRangesMatchTheWholeTransfer() {
        List<PairReport> runs = runSplit(layerGrid().supported(),
                harnessOptions().withMode(HarnessOptions.Mode.PULL_LAYERS),
                harnessOptions().withMode(HarnessOptions.Mode.PULL_LAYERS).withLayerStep(2));
        List<String> failures = layerFailures(runs);
        assertThat(failures).as("layer-wise runs that failed (of %d)", runs.size()).isEmpty();
        assertThat(runs).as("pairs moved layer by layer").isNotEmpty();
        assertMovedSomething(runs);
    }

    /** Unless the capability was refused (as it must be when undeclared), the runs moved bytes. */
    private static void assertMovedSomething(List<PairReport> runs) {
        long moved = 0;
        boolean refused = true;
        for (PairReport r : runs) {
            refused &= r.refusedUndeclared();
            for (PairReport.RequestReport q : r.requests()) {
                moved += q.totalReceived();
            }
        }
        if (!refused) {
            assertThat(moved).as("bytes moved by the runs").isPositive();
        }
    }

    /** Runs the even-indexed pairs with one option set and the odd-indexed ones with another. */
    private List<PairReport> runSplit(List<LayoutPair> pairs, HarnessOptions even, HarnessOptions odd) {
        List<LayoutPair> a = new ArrayList<>();
        List<LayoutPair> b = new ArrayList<>();
        for (int i = 0; i < pairs.size(); i++) {
            (i % 2 == 0 ? a : b).add(pairs.get(i));
        }
        List<PairReport> out = new ArrayList<>(runPairs(a, even));
        out.addAll(runPairs(b, odd));
        return out;
    }

    /**
     * Rule 15's checks of push runs: a formatter that writes a byte twice, writes outside its grants, or skips one
     * fails them. Public so a formatter's own tests can check their runs the same way.
     *
     * @param runs reports of {@link HarnessOptions.Mode#PUSH} or {@link HarnessOptions.Mode#PUSH_LAYERS} runs
     * @return one line per failure, naming the pair and request
     */
    public final List<String> pushFailures(List<PairReport> runs) {
        List<String> failures = new ArrayList<>();
        for (PairReport r : runs) {
            if (r.refusedUndeclared()) {
                if (!r.completed()) {
                    failures.add(r.pair().name() + " (" + r.mode() + ", PUSH not declared): " + describe(r.failure()));
                }
                continue;
            }
            if (!r.completed()) {
                failures.add(r.pair().name() + " (" + r.mode() + "): " + describe(r.failure()));
                continue;
            }
            for (PairReport.RequestReport q : r.requests()) {
                String at = r.pair().name() + " (" + r.mode() + ") request " + q.requestId();
                for (String v : q.writeViolations()) {
                    failures.add(r.pair().name() + " (" + r.mode() + "): " + v);
                }
                MovedChecks.check(r, q, at, harnessOptions().indexerDim(), failures);
            }
        }
        return failures;
    }

    /**
     * Rule 16's checks of layer-wise runs, against the grid run's reports of the same pairs where it has them.
     *
     * @param runs reports of {@link HarnessOptions.Mode#PULL_LAYERS} runs
     * @return one line per failure
     */
    public final List<String> layerFailures(List<PairReport> runs) {
        Map<String, PairReport> whole = new HashMap<>();
        for (PairReport r : completedRuns()) {
            whole.put(r.pair().name(), r);
        }
        List<String> failures = new ArrayList<>();
        for (PairReport r : runs) {
            if (r.refusedUndeclared()) {
                if (!r.completed()) {
                    failures.add(r.pair().name() + " (LAYER_RANGES not declared): " + describe(r.failure()));
                }
                continue;
            }
            if (!r.completed()) {
                failures.add(r.pair().name() + " (" + r.mode() + "): " + describe(r.failure()));
                continue;
            }
            PairReport w = whole.get(r.pair().name());
            for (PairReport.RequestReport q : r.requests()) {
                String at = r.pair().name() + " (layer ranges) request " + q.requestId();
                MovedChecks.check(r, q, at, harnessOptions().indexerDim(), failures);
                if (w != null && q.index() < w.requests().size()) {
                    PairReport.RequestReport wq = w.requests().get(q.index());
                    if (!java.util.Arrays.equals(q.ctxSentBytes(), wq.ctxSentBytes())
                            || !java.util.Arrays.equals(q.genReceivedBytes(), wq.genReceivedBytes())) {
                        failures.add(at + ": per-rank bytes sent " + java.util.Arrays.toString(q.ctxSentBytes())
                                + " / received " + java.util.Arrays.toString(q.genReceivedBytes())
                                + " differ from the whole transfer's " + java.util.Arrays.toString(wq.ctxSentBytes())
                                + " / " + java.util.Arrays.toString(wq.genReceivedBytes()));
                    }
                }
            }
        }
        return failures;
    }

    /**
     * @return the pairs of rule 17: one pair of {@link #grid()} whose sides have the same parallelism, in every
     *         pool-layout combination the grid uses, its heads widened to blocks of at least 2 MiB per rank (a layer
     *         pool's plane of a block 256 KiB or more), so a formatter's own thresholds let it move runs of blocks
     *         straight from and into the pools; reuse of 0 and 1 blocks in rotation, which with the default prompts
     *         puts holes of one side inside runs of the other
     */
    protected LayoutGrid largeBlockGrid() {
        return grid().onePairPerPoolLayoutCombination().withReuse(0, 1).withBlocksOfAtLeast(2L << 20);
    }

    /**
     * Rule 17: blocks large enough to move directly, with block ids fragmented differently on the two sides (the
     * harness's default), move every element exactly, so a plan built from the wrong view of the peer's ids (runs
     * joined across a hole of one side) cannot pass on grids whose blocks are all staged.
     */
    @Test
    public void required_spec5_17_largeBlocksWithBlockIdsFragmentedDifferentlyMoveExactly() {
        List<String> failures = new ArrayList<>();
        long checked = 0;
        for (PairReport r : runPairs(largeBlockGrid().supported(), harnessOptions())) {
            if (!r.completed()) {
                failures.add(r.pair().name() + ": " + describe(r.failure()));
                continue;
            }
            for (PairReport.RequestReport q : r.requests()) {
                if (!q.verify().ok()) {
                    failures.add(r.pair().name() + " request " + q.requestId() + ": " + q.verify());
                }
                checked += q.verify().checkedElements();
            }
        }
        assertThat(failures).as("large-block pairs that failed").isEmpty();
        assertThat(checked).as("elements verified").isPositive();
    }

    /** @return the reports of pairs that completed (failures are reported by rule 1) */
    protected final List<PairReport> completedRuns() {
        return gridRun().stream().filter(PairReport::completed).toList();
    }

    /** A formatter for the stateless calls (support, counterparts, picks), over a one-block throwaway cache. */
    private CacheFormatter anyFormatter() {
        HostBufferManager memory = new HostBufferManager();
        try (PagedKvCache cache = new PagedKvCache(memory, new BlockLayout(1, 2, 1, 1, 1, 1), 1);
             DefaultTransferBufferPool pool = new DefaultTransferBufferPool(memory, 0, 1, 1, true)) {
            return provider().create(cache, pool);
        } finally {
            memory.close();
        }
    }

    private static boolean hasZeroLayerRank(LayoutPair p) {
        return p.ctx().attentionLayersPerPp().contains(0) || p.gen().attentionLayersPerPp().contains(0);
    }

    private static String describe(Throwable t) {
        if (t == null) {
            return "ok";
        }
        StringWriter w = new StringWriter();
        t.printStackTrace(new PrintWriter(w));
        String s = w.toString();
        return s.length() > 4000 ? s.substring(0, 4000) + "..." : s;
    }
}
