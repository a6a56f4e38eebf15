package dev.kvtransfer.testkit;

import dev.kvtransfer.testkit.TransferFixture.Transfer;
import static dev.kvtransfer.testkit.TransferFixture.assertExact;
import static dev.kvtransfer.testkit.TransferFixture.free;
import static dev.kvtransfer.testkit.TransferFixture.prepare;
import static dev.kvtransfer.testkit.TransferFixture.request;
import static dev.kvtransfer.testkit.TransferFixture.respond;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.KvTransferException;
import dev.kvtransfer.api.format.FormatterProvider;
import dev.kvtransfer.api.layout.BlockDistribution;
import dev.kvtransfer.api.model.AttentionType;
import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.api.model.ContextPhaseParams;
import dev.kvtransfer.api.transport.TransportConfig;
import dev.kvtransfer.api.transport.TransportProvider;
import dev.kvtransfer.core.RequestState;
import dev.kvtransfer.core.TransceiverConfig;
import dev.kvtransfer.core.TransferRequest;
import dev.kvtransfer.core.TransferStatus;
import dev.kvtransfer.core.local.LocalInstance;
import dev.kvtransfer.core.plugin.Plugins;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.DynamicTest;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestFactory;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.OptionalInt;
import java.util.Set;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.stream.Stream;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

/**
 * The conformance suite of the whole transfer path — {@code CacheTransceiver} over a transport, with the
 * formatter the class path provides for the grid's attention type ({@code ServiceLoader}) — run with a context
 * and a generation {@link LocalInstance} (ranks as threads). A transport's (or formatter's) test is a short
 * subclass supplying {@link #provider()}. Rules:
 * <ol>
 * <li>every supported pair of {@link #grid()} moves every element byte-exact (verified with
 *     {@link KvPattern}), attention-DP pairs served by their DP groups;</li>
 * <li>200 concurrent requests all arrive byte-exact;</li>
 * <li>a context-side cancel before the ready signal cancels both sides; after dispatch it is refused and the
 *     transfer completes;</li>
 * <li>a generation-side cancel before the request infos go out cancels; after, it is refused and the transfer
 *     completes;</li>
 * <li>an unsupported pair fails on both sides with {@code UNSUPPORTED_LAYOUT} and a reason naming the field,
 *     and the same context instance keeps serving;</li>
 * <li>a request the context side never makes ready times out on the generation side, one no generation rank
 *     asks for times out on the context side ({@code TIMEOUT});</li>
 * <li>one failing request (block counts that disagree) fails on both sides and the others complete;</li>
 * <li>status checks agree across the status group and report each request once;</li>
 * <li>after close no buffer (every buffer manager closes), connection or thread remains;</li>
 * <li>pulls that two context ranks serve in opposite orders both arrive, on one receive slot (rule 17), and,
 *     where the transport posts receives, with one generation request thread (clause 3.18, optional).</li>
 * </ol>
 * Every test closes its instances; a leaked buffer fails the close.
 */
@RuleBound(seconds = 300, suiteSeconds = 600)
@org.junit.jupiter.api.extension.ExtendWith(LeakCheckExtension.class)
public abstract class TransceiverConformanceTest {

    private final List<LocalInstance> instances = new CopyOnWriteArrayList<>();
    private final List<Throwable> backgroundErrors = new CopyOnWriteArrayList<>();
    private Set<Thread> threadsBefore;

    /** @return the transport under test */
    protected abstract TransportProvider provider();

    /**
     * @return the layout pairs of rule 1 (and the unsupported ones of rule 5): {@link LayoutGrid#standardSmall()} with
     *         the three pool layouts in rotation on both sides and prefix reuse {@code [0, 1, all, 2]} over the
     *         prompts
     */
    protected LayoutGrid grid() {
        return LayoutGrid.standardSmall().withPoolLayouts(LayoutGrid.standardPoolLayouts())
                .withReuse(0, 1, LayoutPair.ALL_BLOCKS, 2);
    }

    /**
     * The formatter every instance of the suite uses: found through {@code ServiceLoader} ({@link Plugins}) as the
     * one handling the attention type of the grid's first supported pair, so unsupported pairs (e.g. an MLA pair
     * in a standard grid) meet the formatter under test and are refused by it.
     *
     * @return the formatter provider
     */
    protected FormatterProvider formatterProvider() {
        List<LayoutPair> s = grid().supported();
        AttentionType type = s.isEmpty() ? AttentionType.DEFAULT : s.get(0).ctx().attentionType();
        return Plugins.discover().formatterFor(type);
    }

    /** @return the transport settings every rank starts from */
    protected TransportConfig baseConfig() {
        return TransportConfig.builder().build();
    }

    /**
     * Whether a pull between this suite's instances (every rank on one host) moves as one-sided writes into the
     * generation pool, a push underneath ({@code ConnectionManager.oneCopyWritesFrom}); the rules that look at how a
     * pull moved expect it then.
     *
     * @return false by default
     */
    protected boolean localPullWrites() {
        return false;
    }

    /**
     * @return the transport settings of the rule about large messages (3.16): {@link #baseConfig()}, or, where a
     *         pull would move without messages ({@link #localPullWrites()}), settings that keep it on messages
     */
    protected TransportConfig messageConfig() {
        return baseConfig();
    }

    /** @return transceiver settings of the tests (small staging, chunked messages, 30 s deadline) */
    protected TransceiverConfig.Builder transceiverConfig() {
        return TransceiverConfig.builder().backend(provider().name()).transferBufferBytes(256 << 10)
                .chunkBytes(48 << 10).sendConcurrency(2).recvSlots(2).kvTransferTimeout(Duration.ofSeconds(30))
                .senderFutureTimeout(Duration.ofMillis(500));
    }

    /** @return how long any single wait of the suite may take */
    protected Duration bound() {
        return Duration.ofSeconds(60);
    }

    /** @return KV blocks per rank */
    protected int blocksPerRank() {
        return 512;
    }

    @BeforeEach
    void recordThreads() {
        threadsBefore = LeakChecks.liveThreads();
        backgroundErrors.clear();
    }

    @AfterEach
    void closeInstances() {
        List<Throwable> failures = new ArrayList<>();
        for (LocalInstance i : instances) {
            try {
                i.close();
            } catch (RuntimeException e) {
                failures.add(e);
            }
        }
        instances.clear();
        assertThat(failures).as("closing the instances (leaked buffers?)").isEmpty();
        LeakChecks.assertNoNewThreads(threadsBefore, Duration.ofSeconds(15));
    }

    /**
     * Starts an instance of this suite's transport that the test closes.
     *
     * @param name   instance name
     * @param state  cache state
     * @param config transceiver settings
     * @return the running instance
     */
    protected final LocalInstance start(String name, CacheState state, TransceiverConfig config) {
        return start(name, state, config, blocksPerRank());
    }

    private LocalInstance start(String name, CacheState state, TransceiverConfig config, int blocks) {
        return start(name, state, config, blocks, baseConfig());
    }

    private LocalInstance start(String name, CacheState state, TransceiverConfig config, int blocks,
                                TransportConfig transport) {
        LocalInstance i = LocalInstance.builder(name, state).transport(provider(), transport)
                .formatter(formatterProvider()).config(config)
                .blocksPerRank(blocks).errorHandler(backgroundErrors::add).start();
        instances.add(i);
        return i;
    }

    /** Waits (bounded) until every handle of the transfers ended. */
    protected final void awaitEnded(List<Transfer> ts) {
        TransferFixture.awaitEnded(ts, bound());
    }

    @TestFactory
    public Stream<DynamicTest> required_spec3_01_everyGridPairMovesEveryElementExactly() {
        return grid().supported().stream().map(p -> DynamicTest.dynamicTest(p.name(), () -> {
            TransceiverConfig c = transceiverConfig().build();
            LocalInstance ctx = start("ctx", p.ctx(), c);
            LocalInstance gen = start("gen", p.gen(), c);
            List<Transfer> ts = new ArrayList<>();
            for (int i = 0; i < p.promptLengths().size(); i++) {
                int prompt = p.promptLengths().get(i);
                int total = dev.kvtransfer.api.layout.BlockDistribution.blocksFor(prompt, p.ctx().tokensPerBlock());
                Transfer t = prepare(ctx, gen, p.ctxFor(i), p.genFor(i), prompt, prompt, p.reusedBlocks(i, total));
                ts.add(t);
                if (i % 2 == 0) {
                    respond(ctx, t);
                    request(gen, t);
                } else {
                    request(gen, t);
                    respond(ctx, t);
                }
            }
            awaitEnded(ts);
            for (Transfer t : ts) {
                assertExact(gen, t);
                free(ctx, gen, t);
            }
            assertThat(backgroundErrors).isEmpty();
            closeInstances();
        }));
    }

    /** @return the pair of rules 2-4 and 6-8: the grid's first pair with several ranks, else its first */
    protected LayoutPair workhorsePair() {
        List<LayoutPair> s = grid().supported();
        return s.stream().filter(p -> p.ctx().worldSize() > 1 && !p.ctx().attentionDpEnabled()
                        && !p.gen().attentionDpEnabled()).findFirst().orElse(s.get(0));
    }

    @Test
    public void required_spec3_02_twoHundredConcurrentRequestsArriveExactly() throws Exception {
        LayoutPair p = workhorsePair();
        TransceiverConfig c = transceiverConfig().requestThreadsPerPeerInstance(8).build();
        LocalInstance ctx = start("ctx", p.ctx(), c);
        LocalInstance gen = start("gen", p.gen(), c);
        List<Transfer> ts = new ArrayList<>();
        for (int i = 0; i < 200; i++) {
            ts.add(prepare(ctx, gen, p.ctx(), p.gen(), 1 + (i * 13) % 40, 1 + (i * 13) % 40));
        }
        ExecutorService ex = Executors.newFixedThreadPool(4);
        try {
            List<Future<?>> fs = new ArrayList<>();
            for (Transfer t : ts) {
                fs.add(ex.submit(() -> {
                    request(gen, t);
                    respond(ctx, t);
                }));
            }
            for (Future<?> f : fs) {
                f.get(bound().toSeconds(), TimeUnit.SECONDS);
            }
        } finally {
            ex.shutdownNow();
        }
        awaitEnded(ts);
        for (Transfer t : ts) {
            assertExact(gen, t);
        }
        assertThat(backgroundErrors).isEmpty();
    }

    @Test
    public void required_spec3_03_contextCancelBeforeReadyCancelsBothSides() {
        LayoutPair p = workhorsePair();
        LocalInstance ctx = start("ctx", p.ctx(), transceiverConfig().build());
        LocalInstance gen = start("gen", p.gen(), transceiverConfig().build());
        Transfer t = prepare(ctx, gen, p.ctx(), p.gen(), 40, 40);
        respond(ctx, t);
        for (int i = 0; i < t.ctx.size(); i++) {
            assertThat(ctx.transceiver(t.ctxRanks.get(i)).cancelRequest(t.ctx.get(i))).isTrue();
        }
        request(gen, t);
        awaitEnded(List.of(t));
        for (TransferRequest r : t.all()) {
            assertThat(r.state()).as("%s", r).isEqualTo(RequestState.CANCELLED);
            assertThat(r.error().orElseThrow().code()).isEqualTo(ErrorCode.CANCELLED);
        }
    }

    @Test
    public void required_spec3_04_contextCancelAfterDispatchIsRefusedAndTheTransferCompletes() {
        LayoutPair p = workhorsePair();
        LocalInstance ctx = start("ctx", p.ctx(), transceiverConfig().build());
        LocalInstance gen = start("gen", p.gen(), transceiverConfig().build());
        Transfer t = prepare(ctx, gen, p.ctx(), p.gen(), 64, 64);
        respond(ctx, t);
        request(gen, t);
        await().atMost(bound()).until(() -> t.ctx.stream().allMatch(r -> r.transferStart().isPresent()));
        for (int i = 0; i < t.ctx.size(); i++) {
            assertThat(ctx.transceiver(t.ctxRanks.get(i)).cancelRequest(t.ctx.get(i))).isFalse();
        }
        awaitEnded(List.of(t));
        assertExact(gen, t);
    }

    @Test
    public void required_spec3_05_generationCancelBeforeSendingCancelsAndAfterIsRefused() {
        LayoutPair p = workhorsePair();
        // Ready signals awaited by request threads: A holds each rank's only one, so B queues before its infos leave.
        // Posted ready signals hold no thread, so there infos leave at once: the end checks the plugin's own config.
        TransceiverConfig c = transceiverConfig().requestThreadsPerPeerInstance(1).postedReady(false).build();
        LocalInstance ctx = start("ctx", p.ctx(), c);
        LocalInstance gen = start("gen", p.gen(), c);
        Transfer warm = prepare(ctx, gen, p.ctx(), p.gen(), 5, 5);
        respond(ctx, warm); // starts the context responders
        request(gen, warm);
        awaitEnded(List.of(warm));
        Transfer a = prepare(ctx, gen, p.ctx(), p.gen(), 20, 20);
        Transfer b = prepare(ctx, gen, p.ctx(), p.gen(), 20, 20);
        request(gen, a); // the context side is not ready: A holds each rank's only request thread
        await().atMost(bound()).until(() -> a.ctxRanks.stream()
                .allMatch(r -> ctx.transceiver(r).contextRequestsAwaitingDispatch() >= 1));
        for (int i = 0; i < a.gen.size(); i++) {
            assertThat(gen.transceiver(a.genRanks.get(i)).cancelRequest(a.gen.get(i))).as("infos are out").isFalse();
        }
        request(gen, b);
        for (int i = 0; i < b.gen.size(); i++) {
            assertThat(gen.transceiver(b.genRanks.get(i)).cancelRequest(b.gen.get(i))).as("still queued").isTrue();
            assertThat(b.gen.get(i).state()).isEqualTo(RequestState.CANCELLED);
        }
        respond(ctx, a);
        awaitEnded(List.of(a));
        assertExact(gen, a);

        // The plugin's own configuration (posted ready signals where it turns them on): infos out, cancel refused.
        LocalInstance ctx2 = start("ctx-default", p.ctx(), transceiverConfig().build());
        LocalInstance gen2 = start("gen-default", p.gen(), transceiverConfig().build());
        Transfer warm2 = prepare(ctx2, gen2, p.ctx(), p.gen(), 5, 5);
        respond(ctx2, warm2); // starts the context responders
        request(gen2, warm2);
        awaitEnded(List.of(warm2));
        Transfer d = prepare(ctx2, gen2, p.ctx(), p.gen(), 20, 20);
        request(gen2, d);
        await().atMost(bound()).until(() -> d.ctxRanks.stream()
                .allMatch(r -> ctx2.transceiver(r).contextRequestsAwaitingDispatch() >= 1));
        for (int i = 0; i < d.gen.size(); i++) {
            assertThat(gen2.transceiver(d.genRanks.get(i)).cancelRequest(d.gen.get(i))).as("infos are out").isFalse();
        }
        respond(ctx2, d);
        awaitEnded(List.of(d));
        assertExact(gen2, d);
    }

    @Test
    public void required_spec3_06_unsupportedPairsFailBothSidesNamingTheFieldAndServingContinues() {
        // A side with different head counts per layer has no block layout (BlockLayout.of needs uniform heads),
        // so no instance of it can start; the formatter suite checks that refusal without instances.
        List<LayoutPair> bad = grid().unsupported().stream()
                .filter(p -> p.ctx().uniformHeads() && p.gen().uniformHeads()).toList();
        org.junit.jupiter.api.Assumptions.assumeFalse(bad.isEmpty(),
                "the grid has no unsupported pair both of whose sides can start, so there is nothing to refuse");
        for (LayoutPair p : bad) {
            TransceiverConfig c = transceiverConfig().build();
            LocalInstance ctx = start("ctx", p.ctx(), c);
            LocalInstance gen = start("gen", p.gen(), c);
            Transfer t = prepare(ctx, gen, p.ctx(), p.gen(), 30, 30);
            respond(ctx, t);
            request(gen, t);
            awaitEnded(List.of(t));
            for (TransferRequest r : t.all()) {
                assertThat(r.state()).as("%s: %s", p.name(), r).isEqualTo(RequestState.TRANS_ERROR);
                KvTransferException e = r.error().orElseThrow();
                assertThat(e.code()).as("%s: %s", p.name(), e.getMessage()).isEqualTo(ErrorCode.UNSUPPORTED_LAYOUT);
                assertThat(e.getMessage()).as(p.name()).contains(p.rejectedField());
            }
            if (!formatterProvider().handles(p.ctx().attentionType())) {
                closeInstances();
                continue; // the context layout itself is outside this formatter: nothing it could serve
            }
            // The same context instance still serves a generation instance of its own layout.
            LocalInstance good = start("gen-ok", p.ctx(), c);
            Transfer ok = prepare(ctx, good, p.ctx(), p.ctx(), 30, 30);
            respond(ctx, ok);
            request(good, ok);
            awaitEnded(List.of(ok));
            assertExact(good, ok);
            closeInstances();
        }
    }

    @Test
    public void required_spec3_07_aRequestWithoutItsCounterpartTimesOutOnTheWaitingSide() {
        LayoutPair p = workhorsePair();
        TransceiverConfig c = transceiverConfig().kvTransferTimeout(Duration.ofMillis(800)).build();
        LocalInstance ctx = start("ctx", p.ctx(), c);
        LocalInstance gen = start("gen", p.gen(), c);
        Transfer neverReady = prepare(ctx, gen, p.ctx(), p.gen(), 16, 16);
        Transfer neverAsked = prepare(ctx, gen, p.ctx(), p.gen(), 16, 16);
        respond(ctx, neverAsked);
        request(gen, neverReady);
        await().atMost(bound()).until(() -> neverReady.gen.stream().allMatch(TransferRequest::isDone)
                && neverAsked.ctx.stream().allMatch(TransferRequest::isDone));
        for (TransferRequest r : neverReady.gen) {
            assertThat(r.state()).isEqualTo(RequestState.TRANS_ERROR);
            assertThat(r.error().orElseThrow().code()).as("%s", r).isEqualTo(ErrorCode.TIMEOUT);
        }
        for (TransferRequest r : neverAsked.ctx) {
            assertThat(r.state()).isEqualTo(RequestState.TRANS_ERROR);
            assertThat(r.error().orElseThrow().code()).as("%s", r).isEqualTo(ErrorCode.TIMEOUT);
        }
        // The asked-for entries expire too: nothing stays tracked.
        await().atMost(bound()).until(() -> neverAsked.ctxRanks.stream()
                .allMatch(r -> ctx.transceiver(r).contextRequestsAwaitingDispatch() == 0));
    }

    @Test
    public void required_spec3_08_oneFailingRequestDoesNotAffectTheOthers() {
        LayoutPair p = workhorsePair();
        TransceiverConfig c = transceiverConfig().build();
        LocalInstance ctx = start("ctx", p.ctx(), c);
        LocalInstance gen = start("gen", p.gen(), c);
        int tpb = p.ctx().tokensPerBlock();
        List<Transfer> good = new ArrayList<>();
        Transfer bad = null;
        for (int i = 0; i < 6; i++) {
            Transfer t = i == 2
                    // The generation side asks for two blocks more than the context request has.
                    ? prepare(ctx, gen, p.ctx(), p.gen(), tpb * 2, tpb * 4)
                    : prepare(ctx, gen, p.ctx(), p.gen(), tpb * 2 + i, tpb * 2 + i);
            if (i == 2) {
                bad = t;
            } else {
                good.add(t);
            }
            respond(ctx, t);
            request(gen, t);
        }
        List<Transfer> all = new ArrayList<>(good);
        all.add(bad);
        awaitEnded(all);
        for (TransferRequest r : bad.all()) {
            assertThat(r.state()).as("%s", r).isEqualTo(RequestState.TRANS_ERROR);
            assertThat(r.error().orElseThrow().code()).isEqualTo(ErrorCode.MALFORMED);
            assertThat(r.error().orElseThrow().getMessage()).contains("blocks");
        }
        for (Transfer t : good) {
            assertExact(gen, t);
        }
    }

    @Test
    public void required_spec3_09_statusChecksAgreeAcrossTheGroupAndReportEachRequestOnce() throws Exception {
        LayoutPair p = workhorsePair();
        TransceiverConfig c = transceiverConfig().build();
        LocalInstance ctx = start("ctx", p.ctx(), c);
        LocalInstance gen = start("gen", p.gen(), c);
        List<Transfer> ts = new ArrayList<>();
        for (int i = 0; i < 8; i++) {
            Transfer t = prepare(ctx, gen, p.ctx(), p.gen(), 10 + 9 * i, 10 + 9 * i);
            ts.add(t);
            respond(ctx, t);
            request(gen, t);
        }
        awaitEnded(ts);
        List<Long> ids = ts.stream().map(t -> t.id).toList();
        for (TransferStatus s : statusOnEveryRank(ctx, true, OptionalInt.of(0))) {
            assertThat(s.completed()).containsExactlyInAnyOrderElementsOf(ids);
            assertThat(s.failed()).isEmpty();
        }
        for (TransferStatus s : statusOnEveryRank(gen, false, OptionalInt.empty())) {
            assertThat(s.completed()).containsExactlyInAnyOrderElementsOf(ids);
        }
        for (TransferStatus s : statusOnEveryRank(ctx, true, OptionalInt.empty())) {
            assertThat(s.completed()).as("reported once").isEmpty();
        }
        for (int r = 0; r < ctx.ranks(); r++) {
            assertThat(ctx.transceiver(r).pendingContextRequests()).isZero();
        }
    }

    /**
     * Runs a status check on every rank of an instance at once (the ranks of a status group allgather).
     *
     * @param inst    the instance
     * @param context context or generation check
     * @param atLeast the atLeast argument
     * @return each rank's result
     * @throws Exception when a check fails
     */
    protected final List<TransferStatus> statusOnEveryRank(LocalInstance inst, boolean context, OptionalInt atLeast)
            throws Exception {
        ExecutorService ex = Executors.newFixedThreadPool(inst.ranks());
        try {
            List<Future<TransferStatus>> fs = new ArrayList<>();
            for (int r = 0; r < inst.ranks(); r++) {
                int rank = r;
                fs.add(ex.submit(() -> context ? inst.transceiver(rank).checkContextTransferStatus(atLeast)
                        : inst.transceiver(rank).checkGenTransferStatus(atLeast)));
            }
            List<TransferStatus> out = new ArrayList<>();
            for (Future<TransferStatus> f : fs) {
                out.add(f.get(bound().toSeconds(), TimeUnit.SECONDS));
            }
            return out;
        } finally {
            ex.shutdownNow();
        }
    }

    @Test
    public void required_spec3_10_closeWithRequestsInFlightLeaksNoBufferConnectionOrThread() {
        LayoutPair p = workhorsePair();
        LocalInstance ctx = start("ctx", p.ctx(), transceiverConfig().build());
        LocalInstance gen = start("gen", p.gen(), transceiverConfig().build());
        Transfer done = prepare(ctx, gen, p.ctx(), p.gen(), 33, 33);
        respond(ctx, done);
        request(gen, done);
        awaitEnded(List.of(done));
        assertExact(gen, done);
        Transfer stuckCtx = prepare(ctx, gen, p.ctx(), p.gen(), 17, 17);
        Transfer stuckGen = prepare(ctx, gen, p.ctx(), p.gen(), 17, 17);
        respond(ctx, stuckCtx);
        request(gen, stuckGen);
        instances.remove(ctx);
        instances.remove(gen);
        ctx.close(); // fails naming the buffers if any leaked
        gen.close();
        for (TransferRequest r : stuckCtx.ctx) {
            assertThat(r.state()).isEqualTo(RequestState.CANCELLED);
        }
        for (TransferRequest r : stuckGen.gen) {
            assertThat(r.isDone()).as("%s", r).isTrue();
            assertThat(r.state()).isIn(RequestState.CANCELLED, RequestState.TRANS_ERROR);
        }
        for (int r = 0; r < ctx.ranks(); r++) {
            assertThat(ctx.connections(r).isRunning()).isFalse();
        }
        // The thread check runs in closeInstances.
    }

    /**
     * Rule 10: push and layer-wise. The generation side asks for push ({@code transferMode=push}) and the context
     * side hands its requests over layer by layer, marking the layers in reverse order (they move in order). Every
     * element arrives; the request was pushed exactly when the transport declares one-sided writes and the
     * formatter can push, and pulled otherwise. The same with pull and layer-wise, on a pair with layer pools on
     * both sides and reuse.
     */
    @Test
    public void required_spec3_11_pushAndLayerWiseMoveEveryElementWithThePullFallback() {
        LayoutPair base = workhorsePair();
        // Context layer-hnd, generation layer-nhd.
        LayoutPair p = LayoutGrid.of(List.of(base)).everyPoolLayoutPair(List.of(
                dev.kvtransfer.api.layout.PoolLayout.LAYER_HND, dev.kvtransfer.api.layout.PoolLayout.LAYER_NHD))
                .supported().get(1);
        for (TransceiverConfig.TransferMode mode : TransceiverConfig.TransferMode.values()) {
            LocalInstance ctx = start("ctx", p.ctx(), transceiverConfig().build());
            LocalInstance gen = start("gen", p.gen(), transceiverConfig().transferMode(mode).build());
            boolean canPush = provider().capabilities().contains(
                    dev.kvtransfer.api.transport.TransportCapability.ONE_SIDED_WRITE)
                    && ctx.transceiver(0).formatterCapabilities().contains(
                    dev.kvtransfer.api.format.FormatterCapability.PUSH);
            List<Transfer> ts = new ArrayList<>();
            int[] prompts = {1, 33, 70, 64};
            int[] reuse = {0, 1, 0, 4};
            for (int i = 0; i < prompts.length; i++) {
                Transfer t = prepare(ctx, gen, p.ctx(), p.gen(), prompts[i], prompts[i], reuse[i]);
                ts.add(t);
                request(gen, t);
                for (int k = 0; k < t.ctxRanks.size(); k++) {
                    int rank = t.ctxRanks.get(k);
                    TransferRequest r = t.ctx.get(k);
                    ctx.transceiver(rank).respondAndSendLayerWise(r);
                    int layers = p.ctx().layerCount(p.ctx().ppRank(rank));
                    for (int l = layers - 1; l >= 0; l--) {
                        r.layerReady(l);
                    }
                }
            }
            awaitEnded(ts);
            for (Transfer t : ts) {
                assertExact(gen, t);
                for (TransferRequest r : t.gen) {
                    if (r.kvCacheSize() > 0) {
                        assertThat(r.wasPushed()).as("%s in %s mode, transport and formatter can push: %s", r, mode,
                                canPush).isEqualTo(canPush && (mode == TransceiverConfig.TransferMode.PUSH
                                || localPullWrites()));
                    }
                }
                free(ctx, gen, t);
            }
            assertThat(backgroundErrors).isEmpty();
            closeInstances();
        }
    }

    @Test
    public void required_spec3_15_theCopyLedgerAccountsForEveryByteMoved() {
        LayoutPair p = workhorsePair();
        for (boolean checksums : new boolean[] {true, false}) {
            TransceiverConfig c = transceiverConfig().partChecksums(checksums).build();
            LocalInstance ctx = start("ctx", p.ctx(), c);
            LocalInstance gen = start("gen", p.gen(), c);
            Transfer t = prepare(ctx, gen, p.ctx(), p.gen(), 97, 97, 0);
            respond(ctx, t);
            request(gen, t);
            awaitEnded(List.of(t));
            assertExact(gen, t);
            long[] moved = new long[2];
            for (TransferRequest r : t.all()) {
                boolean context = t.ctx.contains(r);
                dev.kvtransfer.core.CopyLedger l = r.copyLedger();
                String who = (context ? "context" : "generation") + " side of request " + t.id + " (checksums "
                        + checksums + ", " + p.name() + "): " + l;
                assertThat(l.bytes()).as(who).isNotNegative(); // 0 on a rank another of its head group sends for
                // Each byte a rank moved went through staging at most once on that rank.
                assertThat(l.staged()).as(who).isBetween(0L, l.bytes());
                assertThat(l.transportUnknown()).as(who).isBetween(0L, l.bytes());
                // Where the transport tells its passes, it touches every byte at least once.
                assertThat(l.transport()).as(who).isGreaterThanOrEqualTo(l.bytes() - l.transportUnknown());
                if (checksums) {
                    assertThat(l.checksummed()).as(who + ": every part is checksummed on both sides")
                            .isGreaterThanOrEqualTo(l.bytes());
                } else {
                    assertThat(l.checksummed()).as(who + ": checksums off, journal off").isZero();
                }
                moved[context ? 0 : 1] += l.bytes();
            }
            assertThat(moved[0]).as("bytes in the context and generation ledgers of request %d", t.id)
                    .isPositive().isEqualTo(moved[1]);
            free(ctx, gen, t);
            assertThat(backgroundErrors).isEmpty();
            closeInstances();
        }
    }

    /** Bytes of a message the suite calls large: a transport may switch protocol there (rendezvous, RMA, fragments). */
    private static final long LARGE_MESSAGE = 1L << 20;

    /**
     * Clause 3.16, large messages. The workhorse pair with each head widened until a block of every rank holds at
     * least 1 MiB, parts sent in chunks of 4 MiB and part checksums off, so that what a transport does to a large
     * message (a bit flipped at its start, middle or end, a tail not written) reaches the blocks and fails the
     * pattern check rather than only a checksum. The rule checks that it moved messages of 1 MiB on average.
     */
    @Test
    public void required_spec3_16_messagesOfAMebibyteAndMoreArriveExactly() {
        LayoutPair base = workhorsePair();
        if (base.ctx().recurrentState() != null || base.ctx().windowGroups() != null) {
            // Full attention only: a hybrid's recurrent states travel as small messages of their own, and sliding
            // windows cut a part into one message per run of layers; neither is what this rule is about (the other
            // rules move them).
            base = base.with(base.name() + " | full attention only", base.ctx().toBuilder().recurrentState(null)
                    .windowGroups(null).build(), base.gen().toBuilder().recurrentState(null).windowGroups(null).build());
        }
        LayoutPair p = LayoutGrid.of(List.of(base)).withBlocksOfAtLeast(LARGE_MESSAGE).supported().get(0);
        // Pulled: the rule is about messages, and a push may write pools with no message at all (one-copy paths).
        TransceiverConfig c = transceiverConfig().chunkBytes(4L << 20).transferBufferBytes(8L << 20)
                .partChecksums(false).transferMode(TransceiverConfig.TransferMode.PULL).build();
        LocalInstance ctx = start("ctx", p.ctx(), c, 32, messageConfig());
        LocalInstance gen = start("gen", p.gen(), c, 32, messageConfig());
        int tpb = p.ctx().tokensPerBlock();
        List<Transfer> ts = new ArrayList<>();
        for (int prompt : new int[] {tpb * 6, tpb * 3 + 1}) {
            Transfer t = prepare(ctx, gen, p.ctx(), p.gen(), prompt, prompt, 0);
            ts.add(t);
            respond(ctx, t);
            request(gen, t);
        }
        awaitEnded(ts);
        long bytes = 0;
        long messages = 0;
        for (Transfer t : ts) {
            assertExact(gen, t);
            for (TransferRequest r : t.gen) {
                bytes += r.copyLedger().bytes();
                messages += r.messageCount();
            }
            free(ctx, gen, t);
        }
        assertThat(messages).as("payload messages of %s", p.name()).isPositive();
        assertThat(bytes / messages).as("bytes per payload message on %s (%d bytes, %d messages): the rule must move "
                + "messages of at least 1 MiB", p.name(), bytes, messages).isGreaterThanOrEqualTo(LARGE_MESSAGE);
        assertThat(backgroundErrors).isEmpty();
    }

    /**
     * Rule 17: two pulls that the two context ranks of one generation rank serve in opposite orders both arrive
     * exactly, with one sender thread per context rank ({@code sendConcurrency=1}) and one receive slot on the
     * generation rank ({@code recvSlots=1}). Each context rank's thread is busy with the request the other one
     * serves second, so a generation rank that waited for its slot would hold it for a request whose other half
     * cannot come: a staging slot must never be waited for by a request whose senders are not moving it. Messages
     * of 1 MiB and more (sends that wait for the receiver on a rendezvous transport).
     */
    @Test
    public void required_spec3_17_pullsServedInOppositeOrdersByTwoContextRanksBothArrive() {
        pullsInOppositeOrders(transceiverConfig());
    }

    /**
     * Clause 3.18, rule 17 with one generation request thread ({@code requestThreadsPerPeerInstance=1}), so the
     * generation rank receives one request at a time: a context rank must not start a pull's sends before its
     * requester's receive started ({@code RequestInfo.FLAG_PULL_GO}), or its thread waits for the request that has
     * no generation thread while the one that has it waits for this rank. Optional: it needs a transport that posts
     * receives ({@code Connection.recvAsync}), for the context rank waits for the go with no thread; a backend's
     * suite runs it by overriding this method with {@code @Test} and calling {@code super} (UCX, Aeron and loopback
     * do).
     */
    protected void optional_spec3_18_pullsServedInOppositeOrdersArriveWithOneGenerationRequestThread() {
        pullsInOppositeOrders(transceiverConfig().requestThreadsPerPeerInstance(1));
    }

    private void pullsInOppositeOrders(TransceiverConfig.Builder config) {
        LayoutPair base = grid().supported().stream().filter(q -> q.ctx().worldSize() == 2 && q.gen().worldSize() == 1
                && !q.ctx().attentionDpEnabled() && q.ctx().recurrentState() == null
                && q.ctx().windowGroups() == null).findFirst().orElse(workhorsePair());
        LayoutPair p = LayoutGrid.of(List.of(base)).withBlocksOfAtLeast(LARGE_MESSAGE).supported().get(0);
        TransceiverConfig c = config.chunkBytes(4L << 20).transferBufferBytes(8L << 20)
                .sendConcurrency(1).recvSlots(1).kvTransferTimeout(Duration.ofSeconds(20))
                .transferMode(TransceiverConfig.TransferMode.PULL).build();
        LocalInstance ctx = start("ctx", p.ctx(), c, 32, messageConfig());
        LocalInstance gen = start("gen", p.gen(), c, 32, messageConfig());
        int tpb = p.ctx().tokensPerBlock();
        Transfer a = prepare(ctx, gen, p.ctx(), p.gen(), tpb * 3, tpb * 3, 0);
        Transfer b = prepare(ctx, gen, p.ctx(), p.gen(), tpb * 3 - 1, tpb * 3 - 1, 0);
        // Context rank 0 serves a first, rank 1 b first; each rank's second request queues behind its first.
        ctx.transceiver(a.ctxRanks.get(0)).respondAndSendAsync(a.ctx.get(0));
        ctx.transceiver(b.ctxRanks.get(1)).respondAndSendAsync(b.ctx.get(1));
        request(gen, a);
        request(gen, b);
        await().atMost(bound()).until(() -> a.ctx.get(0).transferStart().isPresent()
                && b.ctx.get(1).transferStart().isPresent());
        ctx.transceiver(b.ctxRanks.get(0)).respondAndSendAsync(b.ctx.get(0));
        ctx.transceiver(a.ctxRanks.get(1)).respondAndSendAsync(a.ctx.get(1));
        awaitEnded(List.of(a, b));
        assertExact(gen, a);
        assertExact(gen, b);
        free(ctx, gen, a);
        free(ctx, gen, b);
        assertThat(backgroundErrors).isEmpty();
    }

    /**
     * Clause 3.12, the coalescing switch. Optional: a backend's suite runs it by overriding this method with
     * {@code @Test} and calling {@code super} (loopback, Aeron and MPI do). With {@code kvtransfer.coalesce=false}
     * on the requester a pull plans one message per block on both
     * sides (the requester's flag reaches the context side), moves every element exactly, and needs more messages
     * than the default, which coalesces blocks consecutive on both sides (layer-nhd pools on both sides here).
     */
    protected void optional_spec3_12_pullWithoutCoalescingMovesEveryElementInMoreMessages() {
        LayoutPair p = LayoutGrid.of(List.of(workhorsePair())).everyPoolLayoutPair(List.of(
                dev.kvtransfer.api.layout.PoolLayout.LAYER_NHD)).supported().get(0);
        int[] prompts = {97, 64};
        long[] messages = new long[2];
        // One context instance serves both requesters: the choice travels with each request.
        LocalInstance ctx = start("ctx", p.ctx(), transceiverConfig().build());
        LocalInstance[] gens = {start("gen", p.gen(), transceiverConfig().coalesce(true).build()),
                start("gen-nc", p.gen(), transceiverConfig().coalesce(false).build())};
        for (int run = 0; run < 2; run++) {
            LocalInstance gen = gens[run];
            List<Transfer> ts = new ArrayList<>();
            for (int prompt : prompts) {
                Transfer t = prepare(ctx, gen, p.ctx(), p.gen(), prompt, prompt, 0);
                ts.add(t);
                respond(ctx, t);
                request(gen, t);
            }
            awaitEnded(ts);
            for (Transfer t : ts) {
                assertExact(gen, t);
                for (TransferRequest r : t.gen) {
                    messages[run] += r.messageCount();
                }
                free(ctx, gen, t);
            }
        }
        assertThat(backgroundErrors).isEmpty();
        assertThat(messages[1]).as("messages without coalescing (%s) vs with it (%s) on %s", messages[1],
                messages[0], p.name()).isGreaterThan(messages[0]);
    }
}
