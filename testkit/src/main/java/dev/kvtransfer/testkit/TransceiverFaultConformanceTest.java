package dev.kvtransfer.testkit;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.KvTransferException;
import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.api.transport.Tags;
import dev.kvtransfer.api.transport.TransportCapability;
import dev.kvtransfer.api.transport.TransportConfig;
import dev.kvtransfer.api.transport.TransportProvider;
import dev.kvtransfer.core.RequestState;
import dev.kvtransfer.core.TransceiverConfig;
import dev.kvtransfer.core.TransferRequest;
import dev.kvtransfer.core.local.LocalInstance;
import dev.kvtransfer.core.plugin.Plugins;
import dev.kvtransfer.testkit.TransferFixture.Transfer;
import dev.kvtransfer.testkit.fault.Fault;
import dev.kvtransfer.testkit.fault.Faults;
import dev.kvtransfer.testkit.fault.FaultyTransportProvider;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

import java.time.Duration;
import java.util.ArrayList;
import java.util.EnumSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.TimeUnit;
import java.util.function.Predicate;

import static dev.kvtransfer.testkit.TransferFixture.free;
import static dev.kvtransfer.testkit.TransferFixture.prepare;
import static dev.kvtransfer.testkit.TransferFixture.request;
import static dev.kvtransfer.testkit.TransferFixture.respond;
import static org.assertj.core.api.Assertions.assertThat;

/**
 * The fault conformance suite: the transfer path over a transport made faulty on command
 * ({@link FaultyTransportProvider}). A backend's test is a short subclass supplying {@link #provider()}.
 *
 * <p>Each rule injects one fault into one request's messages while other requests run beside it, and checks the
 * required outcome: the affected request ends on the generation side, within its deadline, with one of the
 * documented codes and never as a completed transfer (end-to-end part checksums are on, so no corrupted byte is
 * accepted); every other request completes verified with {@link KvPattern}; nothing leaks (blocks, staging
 * slots, threads — the instances close cleanly); and the same generation instance then serves a fresh request
 * verified. Rule names say the fault:
 * <ul>
 *   <li>{@code spec4_01} a dropped ready signal; {@code spec4_02} a dropped payload message;
 *       {@code spec4_03} a duplicated payload message; {@code spec4_04} one corrupted byte in a message of at
 *       least 1 MiB ({@code MALFORMED} naming the peer, the message and its offset); {@code spec4_05} a
 *       truncated payload message; {@code spec4_06} two payload messages swapped;</li>
 *   <li>{@code spec4_07} payload delayed past the deadline ({@code TIMEOUT}); {@code spec4_08} the context
 *       side's endpoint closed mid-message; {@code spec4_09} a stalled context side (every send stopped longer
 *       than the deadline), serving again afterwards;</li>
 *   <li>{@code spec4_10} refused connects ({@code NETWORK}, fast); {@code spec4_11} a dropped request info
 *       ({@code TIMEOUT} on both sides); {@code spec4_12} duplicated request headers and infos (tolerated: the
 *       request completes); {@code spec4_13} a request info late after its header (served); {@code spec4_14} a
 *       pull's go dropped ({@code TIMEOUT} on both sides, the context side naming the go).</li>
 * </ul>
 */
@RuleBound(seconds = 180, suiteSeconds = 600)
@org.junit.jupiter.api.extension.ExtendWith(LeakCheckExtension.class)
public abstract class TransceiverFaultConformanceTest {
    /** Codes a request that was hit by a payload fault may end with. */
    private static final Set<ErrorCode> PAYLOAD_CODES = EnumSet.of(ErrorCode.MALFORMED, ErrorCode.TIMEOUT,
            ErrorCode.UNAUTHORIZED, ErrorCode.PEER_LOST, ErrorCode.NETWORK);

    private final List<LocalInstance> instances = new CopyOnWriteArrayList<>();
    private final List<Throwable> errors = new CopyOnWriteArrayList<>();
    private Set<Thread> threadsBefore;
    private Faults faults;

    /** @return the transport under test */
    protected abstract TransportProvider provider();

    /** @return transport settings every rank starts from */
    protected TransportConfig baseConfig() {
        return TransportConfig.builder().build();
    }

    /**
     * The layout both instances use: context TP 2 to generation TP 1 (the generation rank has two counterparts,
     * so a fault on one leaves the other's part intact), 8 layers, 2 heads, 64 dims, 16 tokens per block, FP16.
     * Identical layouts are used when {@link #resharding()} is false.
     *
     * @return context and generation state
     */
    protected CacheState[] states() {
        CacheState gen = CacheState.builder().uniformKvHeads(8, 2).sizePerHead(64).tokensPerBlock(16).build();
        CacheState ctx = resharding() ? gen.toBuilder().tensorParallelism(2).build() : gen;
        return new CacheState[] {ctx, gen};
    }

    /** @return whether the formatter on the class path re-shards (false: identical layouts only) */
    protected boolean resharding() {
        return true;
    }

    /**
     * Whether the transceiver over this transport moves a pull's payload as messages on data tags (the default).
     * Override with false where pulls move as one-copy writes into the generation pools (a shared-memory path): rules
     * 4.3 and 4.4 fault a payload message, and there is none; they check instead that none is sent and that the
     * bytes arrive exact, so the claim is tested rather than skipped. With false, {@link #transceiverConfig()} also
     * moves pulls of every size as one-copy writes ({@code kvtransfer.localOneCopyMinBytes=0}).
     *
     * @return false when no payload travels as a message
     */
    protected boolean payloadAsMessages() {
        return true;
    }

    /** @return the per-request deadline of the suite (short, so timeouts end fast) */
    protected Duration deadline() {
        return Duration.ofSeconds(4);
    }

    /** @return slack allowed past a deadline before a failure counts as late */
    protected Duration slack() {
        return Duration.ofSeconds(6);
    }

    private long chunk = 256 << 10;

    /**
     * @return transceiver settings of the suite (8 MiB staging, {@link #deadline()}, part checksums; the chunk size
     *         a rule sets); an override starts from these
     */
    protected TransceiverConfig.Builder transceiverConfig() {
        TransceiverConfig.Builder b = TransceiverConfig.builder().backend(provider().name())
                .transferBufferBytes(8 << 20).chunkBytes(chunk).kvTransferTimeout(deadline())
                .senderFutureTimeout(Duration.ofMillis(200)).partChecksums(true);
        // Where pulls move as one-copy writes, the suite's pulls (a few 64 KiB blocks) all take that path.
        return payloadAsMessages() ? b : b.localOneCopyMinBytes(0);
    }

    private TransceiverConfig config() {
        return transceiverConfig().build();
    }

    @BeforeEach
    void setUp() {
        threadsBefore = LeakChecks.liveThreads();
        errors.clear();
        faults = new Faults();
    }

    @AfterEach
    void tearDown() {
        faults.clear();
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

    private LocalInstance start(String name, CacheState s, boolean faulty) {
        TransportProvider p = faulty ? new FaultyTransportProvider(provider(), faults) : provider();
        LocalInstance i = LocalInstance.builder(name, s).transport(p, baseConfig())
                .formatter(Plugins.discover().formatterFor(s.attentionType())).config(config())
                .blocksPerRank(512).errorHandler(errors::add).start();
        instances.add(i);
        return i;
    }

    /** A context instance whose sends are faulty and a plain generation instance. */
    private LocalInstance[] pair() {
        return pair(states());
    }

    private LocalInstance[] pair(CacheState[] s) {
        LocalInstance ctx = start("ctx", s[0], true);
        LocalInstance gen = start("gen", s[1], false);
        return new LocalInstance[] {ctx, gen};
    }

    /** A generation instance whose sends are faulty and a plain context instance. */
    private LocalInstance[] pairFaultyGen() {
        CacheState[] s = states();
        LocalInstance ctx = start("ctx", s[0], false);
        LocalInstance gen = start("gen", s[1], true);
        return new LocalInstance[] {ctx, gen};
    }

    /**
     * {@link TransferFixture#assertExact}, its failure carrying what the instances reported meanwhile (a request
     * that never reached the context side's state machine is explained only there).
     */
    private void assertExact(LocalInstance gen, Transfer t) {
        try {
            TransferFixture.assertExact(gen, t);
        } catch (AssertionError e) {
            StringBuilder b = new StringBuilder(e.getMessage()).append("\nerrors the instances reported:");
            for (Throwable x : errors) {
                b.append("\n  ").append(x);
            }
            AssertionError explained = new AssertionError(b.toString(), e);
            throw explained;
        }
    }

    private static Transfer transfer(LocalInstance ctx, LocalInstance gen, int prompt) {
        Transfer t = prepare(ctx, gen, ctx.cacheState(), gen.cacheState(), prompt, prompt);
        request(gen, t);
        respond(ctx, t);
        return t;
    }

    private Set<String> addresses(LocalInstance i) {
        Set<String> a = ConcurrentHashMap.newKeySet();
        for (int r = 0; r < i.ranks(); r++) {
            a.add(i.connections(r).localAddress());
        }
        return a;
    }

    /**
     * Messages on data tags sent by the context instance, counted per (sender, receiver, tag) stream: the first
     * is the ready signal, the following ones the payload.
     */
    private Predicate<Fault.Message> nthOnDataTag(LocalInstance ctx, int nth, long minBytes) {
        Set<String> from = addresses(ctx);
        Map<String, Integer> seen = new ConcurrentHashMap<>();
        return m -> {
            if (!from.contains(m.from()) || m.tag() < Tags.FIRST_DATA_TAG) {
                return false;
            }
            int k = seen.merge(m.from() + ">" + m.to() + "#" + m.tag(), 1, Integer::sum);
            return k == nth && m.length() >= minBytes;
        };
    }

    /** The affected request fails in bound with an allowed code; the others complete; a fresh one is served. */
    private void expectFailedOthersFineFreshServed(LocalInstance ctx, LocalInstance gen, Transfer hit,
                                                   List<Transfer> others, Set<ErrorCode> codes, String rule)
            throws Exception {
        long t0 = System.nanoTime();
        TransferFixture.awaitEnded(List.of(hit), deadline().plus(slack()));
        Duration took = Duration.ofNanos(System.nanoTime() - t0);
        for (TransferRequest r : hit.gen) {
            assertThat(r.state()).as("%s: the faulted request must never complete on the generation side: %s",
                    rule, r).isNotEqualTo(RequestState.GENERATION_TRANS_COMPLETE);
            KvTransferException e = r.error().orElseThrow();
            assertThat(e.code()).as("%s: code of %s", rule, e).isIn(codes);
            assertThat(e.requestId()).isEqualTo(hit.id);
        }
        assertThat(took).as("%s: time to error", rule).isLessThan(deadline().plus(slack()));
        faults.clear();
        TransferFixture.awaitEnded(others, deadline().plus(slack()));
        for (Transfer t : others) {
            assertExact(gen, t);
            free(ctx, gen, t);
        }
        TransferFixture.awaitEnded(List.of(hit), deadline().plus(slack()));
        free(ctx, gen, hit);
        Transfer fresh = transfer(ctx, gen, 200);
        TransferFixture.awaitEnded(List.of(fresh), deadline().plus(slack()));
        assertExact(gen, fresh);
        free(ctx, gen, fresh);
        assertBlocksFree(ctx);
        assertBlocksFree(gen);
    }

    private static void assertBlocksFree(LocalInstance i) {
        for (int r = 0; r < i.ranks(); r++) {
            assertThat(i.cache(r).freeBlocks()).as("blocks of %s rank %d", i.name(), r)
                    .isEqualTo(i.cache(r).blockCount());
        }
    }

    /**
     * For a transport whose pulls send no payload message ({@link #payloadAsMessages()} false): a request moves exact
     * and what each context rank sends on data tags is notices (ready signals, lists of what it wrote), less than an
     * eighth of its share of the request's bytes.
     */
    private void noPayloadMessage(String rule, CacheState[] states) throws Exception {
        LocalInstance[] p = pair(states);
        LocalInstance ctx = p[0];
        LocalInstance gen = p[1];
        Set<String> from = addresses(ctx);
        List<Fault.Message> onDataTags = new CopyOnWriteArrayList<>();
        // A fault that never fires: its predicate sees every message the context side sends.
        faults.inject(new Fault(Fault.Kind.DROP, m -> {
            if (from.contains(m.from()) && m.tag() >= Tags.FIRST_DATA_TAG) {
                onDataTags.add(m);
            }
            return false;
        }, 1, Duration.ZERO));
        int tpb = ctx.cacheState().tokensPerBlock();
        Transfer t = transfer(ctx, gen, tpb * Math.max(4, 2560 / tpb));
        TransferFixture.awaitEnded(List.of(t), deadline().plus(slack()));
        assertExact(gen, t);
        assertThat(faults.injected(Fault.Kind.DROP)).isZero();
        // Each context rank's share of the request: what its messages would carry if the payload went as messages.
        long share = (long) (t.prompt + tpb - 1) / tpb * ctx.cache(0).layout().blockBytes();
        Map<String, Long> sent = new java.util.TreeMap<>();
        for (Fault.Message m : onDataTags) {
            sent.merge(m.from(), m.length(), Long::sum);
        }
        assertThat(sent).as("%s: messages on data tags", rule).isNotEmpty();
        sent.forEach((rank, bytes) -> assertThat(bytes).as("%s: %s declares that pulls send no payload message, so "
                + "context rank %s may send notices only (less than an eighth of its %d B share): %s", rule,
                provider().name(), rank, share, onDataTags).isLessThan(share / 8));
        faults.clear();
        free(ctx, gen, t);
        assertBlocksFree(gen);
    }

    /** Runs a payload fault: the hit request is the only one in flight when the fault is armed. */
    private void payloadFault(Fault.Kind kind, int nth, long minBytes, Set<ErrorCode> codes, String rule)
            throws Exception {
        payloadFault(kind, nth, minBytes, codes, rule, states());
    }

    private void payloadFault(Fault.Kind kind, int nth, long minBytes, Set<ErrorCode> codes, String rule,
                              CacheState[] states) throws Exception {
        LocalInstance[] p = pair(states);
        LocalInstance ctx = p[0];
        LocalInstance gen = p[1];
        // A clean request first: connections are up, nothing is left in flight.
        Transfer warm = transfer(ctx, gen, 64);
        TransferFixture.awaitEnded(List.of(warm), deadline().plus(slack()));
        assertExact(gen, warm);
        free(ctx, gen, warm);
        faults.inject(new Fault(kind, nthOnDataTag(ctx, nth, minBytes), 1, Duration.ZERO));
        int tpb = ctx.cacheState().tokensPerBlock();
        Transfer hit = transfer(ctx, gen, tpb * Math.max(4, 2560 / tpb));
        TransferFixture.awaitEnded(List.of(hit), deadline().plus(slack()));
        assertThat(faults.injected(kind)).as("%s: the fault was injected", rule).isEqualTo(1);
        faults.clear();
        List<Transfer> others = List.of(transfer(ctx, gen, 33), transfer(ctx, gen, 700));
        expectFailedOthersFineFreshServed(ctx, gen, hit, others, codes, rule);
        if (kind == Fault.Kind.CORRUPT) {
            String msg = hit.gen.get(0).error().orElseThrow().getMessage();
            assertThat(msg).as("%s: the error names the part", rule).contains("corrupted part", "peer rank",
                    "byte offset");
        }
    }

    @Test
    public void required_spec4_01_droppedReadySignalFailsTheRequestNeverCompletesIt() throws Exception {
        payloadFault(Fault.Kind.DROP, 1, 0, PAYLOAD_CODES, "spec 4.1");
    }

    @Test
    public void required_spec4_02_droppedPayloadMessageFailsTheRequestNeverCompletesIt() throws Exception {
        payloadFault(Fault.Kind.DROP, 3, 1, PAYLOAD_CODES, "spec 4.2");
    }

    @Test
    public void required_spec4_03_duplicatedPayloadMessageFailsTheRequestNeverCompletesIt() throws Exception {
        if (!payloadAsMessages()) {
            noPayloadMessage("spec 4.3", states());
            return;
        }
        payloadFault(Fault.Kind.DUPLICATE, 3, 1, PAYLOAD_CODES, "spec 4.3");
    }

    @Test
    public void required_spec4_04_corruptedByteInALargeMessageIsCaughtByTheChecksum() throws Exception {
        // Blocks of 256 tokens x 128 dims: each context rank's share of one block is a 1 MiB message, sent
        // unchunked (4 MiB chunks), so the corruption sits deep inside a message of at least 1 MiB.
        chunk = 4 << 20;
        CacheState gen = CacheState.builder().uniformKvHeads(8, 2).sizePerHead(128).tokensPerBlock(256).build();
        CacheState ctx = resharding() ? gen.toBuilder().tensorParallelism(2).build() : gen;
        if (!payloadAsMessages()) {
            noPayloadMessage("spec 4.4", new CacheState[] {ctx, gen});
            return;
        }
        payloadFault(Fault.Kind.CORRUPT, 2, 1 << 20, EnumSet.of(ErrorCode.MALFORMED), "spec 4.4",
                new CacheState[] {ctx, gen});
    }

    @Test
    public void required_spec4_05_truncatedPayloadMessageIsMalformed() throws Exception {
        payloadFault(Fault.Kind.TRUNCATE, 3, 2, PAYLOAD_CODES, "spec 4.5");
    }

    @Test
    public void required_spec4_06_reorderedPayloadMessagesAreCaughtByTheChecksum() throws Exception {
        payloadFault(Fault.Kind.REORDER, 2, 1, PAYLOAD_CODES, "spec 4.6");
    }

    @Test
    public void required_spec4_07_payloadDelayedPastTheDeadlineTimesOut() throws Exception {
        LocalInstance[] p = pair();
        LocalInstance ctx = p[0];
        LocalInstance gen = p[1];
        faults.inject(new Fault(Fault.Kind.DELAY, nthOnDataTag(ctx, 2, 1), 1, deadline().plus(Duration.ofSeconds(1))));
        Transfer hit = transfer(ctx, gen, 16 * 40);
        TransferFixture.awaitEnded(List.of(hit), deadline().plus(slack()).plus(deadline()));
        for (TransferRequest r : hit.gen) {
            assertThat(r.error().orElseThrow().code()).as("%s", r).isIn(ErrorCode.TIMEOUT, ErrorCode.MALFORMED);
        }
        expectFailedOthersFineFreshServed(ctx, gen, hit, List.of(), EnumSet.of(ErrorCode.TIMEOUT,
                ErrorCode.MALFORMED), "spec 4.7");
    }

    @Test
    public void required_spec4_08_contextEndpointClosedMidMessageFailsInBoundAndAFreshContextIsServed() throws Exception {
        CacheState[] s = states();
        LocalInstance doomed = start("ctx-doomed", s[0], true);
        LocalInstance gen = start("gen", s[1], false);
        faults.inject(new Fault(Fault.Kind.DISCONNECT, nthOnDataTag(doomed, 2, 1), 1, Duration.ZERO));
        Transfer hit = transfer(doomed, gen, 16 * 160);
        long t0 = System.nanoTime();
        TransferFixture.awaitEnded(List.of(hit), deadline().plus(slack()));
        // A transport that detects peer failure must say so: the generation side learns that its peer is gone,
        // not merely that the deadline passed (a retry policy tells the two apart).
        boolean detects = provider().capabilities().contains(TransportCapability.PEER_FAILURE_DETECTION);
        for (TransferRequest r : hit.gen) {
            assertThat(r.state()).isNotEqualTo(RequestState.GENERATION_TRANS_COMPLETE);
            KvTransferException e = r.error().orElseThrow();
            if (detects) {
                assertThat(e.code()).as("spec 4.8: %s declares PEER_FAILURE_DETECTION, so a request whose context "
                        + "endpoint closed must fail PEER_LOST: %s", provider().name(), e)
                        .isEqualTo(ErrorCode.PEER_LOST);
            } else {
                assertThat(e.code()).as("%s", r).isIn(PAYLOAD_CODES);
            }
        }
        assertThat(Duration.ofNanos(System.nanoTime() - t0)).isLessThan(deadline().plus(slack()));
        faults.clear();
        for (int r : hit.genRanks) {
            gen.cache(r).free(hit.id);
        }
        LocalInstance fresh = start("ctx-fresh", s[0], false);
        Transfer ok = transfer(fresh, gen, 16 * 20);
        TransferFixture.awaitEnded(List.of(ok), deadline().plus(slack()));
        assertExact(gen, ok);
        free(fresh, gen, ok);
        assertBlocksFree(gen);
    }

    @Test
    public void required_spec4_09_stalledContextSideFailsInBoundThenServesAgain() throws Exception {
        LocalInstance[] p = pair();
        LocalInstance ctx = p[0];
        LocalInstance gen = p[1];
        faults.inject(Fault.stall(deadline().plus(Duration.ofSeconds(1)), nthOnDataTag(ctx, 1, 0)));
        Transfer hit = transfer(ctx, gen, 16 * 40);
        expectFailedOthersFineFreshServed(ctx, gen, hit, List.of(), EnumSet.of(ErrorCode.TIMEOUT,
                ErrorCode.MALFORMED, ErrorCode.UNAUTHORIZED), "spec 4.9");
    }

    @Test
    public void required_spec4_10_refusedConnectsFailFastWithNetwork() throws Exception {
        LocalInstance[] p = pairFaultyGen();
        LocalInstance ctx = p[0];
        LocalInstance gen = p[1];
        Set<String> ctxAddresses = addresses(ctx);
        faults.inject(new Fault(Fault.Kind.REFUSE_CONNECT, m -> ctxAddresses.contains(m.to()), Fault.UNLIMITED,
                Duration.ZERO));
        long t0 = System.nanoTime();
        Transfer hit = transfer(ctx, gen, 16 * 10);
        org.awaitility.Awaitility.await().atMost(deadline().plus(slack()))
                .until(() -> hit.gen.stream().allMatch(TransferRequest::isDone));
        Duration took = Duration.ofNanos(System.nanoTime() - t0);
        for (TransferRequest r : hit.gen) {
            assertThat(r.error().orElseThrow().code()).as("%s", r).isEqualTo(ErrorCode.NETWORK);
            assertThat(r.error().orElseThrow().getMessage()).contains("refused");
        }
        assertThat(took).as("refused connects fail fast, not at the deadline").isLessThan(deadline());
        faults.clear();
        // The context side never heard of the request: its copy times out on its own.
        TransferFixture.awaitEnded(List.of(hit), deadline().plus(slack()));
        free(ctx, gen, hit);
        Transfer ok = transfer(ctx, gen, 16 * 10);
        TransferFixture.awaitEnded(List.of(ok), deadline().plus(slack()));
        assertExact(gen, ok);
        free(ctx, gen, ok);
    }

    @Test
    public void required_spec4_11_droppedRequestInfoTimesOutOnBothSides() throws Exception {
        LocalInstance[] p = pairFaultyGen();
        LocalInstance ctx = p[0];
        LocalInstance gen = p[1];
        faults.inject(new Fault(Fault.Kind.DROP, Fault.requestInfos(), Fault.UNLIMITED, Duration.ZERO));
        Transfer hit = transfer(ctx, gen, 16 * 10);
        TransferFixture.awaitEnded(List.of(hit), deadline().plus(slack()));
        for (TransferRequest r : hit.all()) {
            assertThat(r.error().orElseThrow().code()).as("%s", r).isEqualTo(ErrorCode.TIMEOUT);
        }
        faults.clear();
        free(ctx, gen, hit);
        // The lost info costs its own request only: later requests of the pair, of other sizes (so their infos
        // have other lengths), are served.
        List<Transfer> later = new ArrayList<>();
        for (int blocks : new int[] {7, 13, 3}) {
            later.add(transfer(ctx, gen, 16 * blocks));
        }
        TransferFixture.awaitEnded(later, deadline().plus(slack()));
        for (Transfer ok : later) {
            assertExact(gen, ok);
            free(ctx, gen, ok);
        }
    }

    @Test
    public void required_spec4_12_duplicatedRequestHeadersAndInfosAreTolerated() throws Exception {
        LocalInstance[] p = pairFaultyGen();
        LocalInstance ctx = p[0];
        LocalInstance gen = p[1];
        faults.inject(new Fault(Fault.Kind.DUPLICATE, Fault.tag(Tags.ID_TAG), 1, Duration.ZERO));
        faults.inject(new Fault(Fault.Kind.DUPLICATE, Fault.requestInfos(), 3, Duration.ZERO));
        List<Transfer> ts = new ArrayList<>();
        for (int i = 0; i < 4; i++) {
            ts.add(transfer(ctx, gen, 16 * (3 + i)));
        }
        TransferFixture.awaitEnded(ts, deadline().plus(slack()));
        assertThat(faults.injected(Fault.Kind.DUPLICATE)).isGreaterThanOrEqualTo(2);
        for (Transfer t : ts) {
            assertExact(gen, t);
            free(ctx, gen, t);
        }
    }

    @Test
    public void required_spec4_13_aRequestInfoThatComesLateAfterItsHeaderIsStillServed() throws Exception {
        // The context side's responder waits briefly for the info that follows a header, then hands the read to an
        // info reader: an info 50 ms late must reach that later receive, whole, and the request complete exactly.
        LocalInstance[] p = pairFaultyGen();
        LocalInstance ctx = p[0];
        LocalInstance gen = p[1];
        faults.inject(new Fault(Fault.Kind.DELAY, Fault.requestInfos(), 2, Duration.ofMillis(50)));
        List<Transfer> ts = new ArrayList<>();
        for (int i = 0; i < 3; i++) {
            ts.add(transfer(ctx, gen, 16 * (2 + i)));
        }
        TransferFixture.awaitEnded(ts, deadline().plus(slack()));
        assertThat(faults.injected(Fault.Kind.DELAY)).isGreaterThanOrEqualTo(1);
        for (Transfer t : ts) {
            assertExact(gen, t);
            free(ctx, gen, t);
        }
    }

    @Test
    public void required_spec4_14_droppedGoOfAPullTimesOutTheContextSideNamingItAndServingGoesOn() throws Exception {
        // A pull above 256 KiB of the requester's blocks waits on the context side for the requester's go (a 16-byte
        // notice on the data tag, RequestInfo.FLAG_PULL_GO). Every go lost: nothing moves, the context side fails
        // TIMEOUT naming the missing go and its generation rank, the generation side TIMEOUT waiting for the data.
        LocalInstance[] p = pairFaultyGen();
        LocalInstance ctx = p[0];
        LocalInstance gen = p[1];
        faults.inject(new Fault(Fault.Kind.DROP, m -> m.tag() >= Tags.FIRST_DATA_TAG && m.length() == 16,
                Fault.UNLIMITED, Duration.ZERO));
        Transfer hit = transfer(ctx, gen, 16 * 10);
        if (!payloadAsMessages()) {
            // A pull that moves as one-sided writes into the requester's pool is a push underneath: no go is sent.
            TransferFixture.awaitEnded(List.of(hit), deadline().plus(slack()));
            assertExact(gen, hit);
            assertThat(faults.injected(Fault.Kind.DROP)).as("gos on a pull that moves as writes").isZero();
            free(ctx, gen, hit);
            return;
        }
        TransferFixture.awaitEnded(List.of(hit), deadline().plus(slack()));
        assertThat(faults.injected(Fault.Kind.DROP)).as("gos dropped").isGreaterThanOrEqualTo(1);
        for (TransferRequest r : hit.all()) {
            assertThat(r.state()).as("%s", r).isEqualTo(RequestState.TRANS_ERROR);
            assertThat(r.error().orElseThrow().code()).as("%s", r).isEqualTo(ErrorCode.TIMEOUT);
        }
        for (TransferRequest r : hit.ctx) {
            assertThat(r.error().orElseThrow().getMessage()).as("%s", r).contains("no go from generation rank");
        }
        faults.clear();
        free(ctx, gen, hit);
        List<Transfer> later = new ArrayList<>();
        for (int blocks : new int[] {10, 3}) {
            later.add(transfer(ctx, gen, 16 * blocks));
        }
        TransferFixture.awaitEnded(later, deadline().plus(slack()));
        for (Transfer ok : later) {
            assertExact(gen, ok);
            free(ctx, gen, ok);
        }
    }
}
