package dev.kvtransfer.core.transfer;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.KvTransferException;
import dev.kvtransfer.api.layout.BlockDistribution;
import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.memory.MemoryKind;
import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.api.model.ContextPhaseParams;
import dev.kvtransfer.api.model.DataType;
import dev.kvtransfer.api.transport.Connection;
import dev.kvtransfer.api.transport.ConnectionManager;
import dev.kvtransfer.api.transport.Tags;
import dev.kvtransfer.api.transport.TransportConfig;
import dev.kvtransfer.core.RequestState;
import dev.kvtransfer.core.TransceiverConfig;
import dev.kvtransfer.core.TransferRequest;
import dev.kvtransfer.core.TransferStatus;
import dev.kvtransfer.core.local.LocalInstance;
import dev.kvtransfer.core.memory.HostBufferManager;
import dev.kvtransfer.core.testsupport.Bytes;
import dev.kvtransfer.testkit.loopback.LoopbackTransportProvider;
import dev.kvtransfer.core.testsupport.WholeBlockFormatterProvider;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;

import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.OptionalInt;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.stream.Collectors;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

/**
 * The protocol of CacheSender / CacheReceiver / CacheTransceiver over core's in-test transport and
 * whole-block formatter, with LocalInstance ranks as threads. The full layout grid runs in the testkit's
 * TransceiverConformanceTest (formatter-standard's test module).
 */
@Timeout(60)
class CacheTransceiverProtocolTest {
    private static final Duration BOUND = Duration.ofSeconds(20);

    private final LoopbackTransportProvider transport = new LoopbackTransportProvider();
    private final WholeBlockFormatterProvider formatter = new WholeBlockFormatterProvider();
    private final List<LocalInstance> instances = new ArrayList<>();
    private final List<Throwable> backgroundErrors = new CopyOnWriteArrayList<>();
    private Set<Thread> threadsBefore;

    @BeforeEach
    void before() {
        threadsBefore = Set.copyOf(Thread.getAllStackTraces().keySet());
        WholeBlockFormatterProvider.failRequestId = Long.MIN_VALUE;
        WholeBlockFormatterProvider.formatGate = null;
    }

    @AfterEach
    void after() {
        WholeBlockFormatterProvider.formatGate = null;
        for (LocalInstance i : instances) {
            i.close();
        }
        await().atMost(BOUND).until(() -> newThreads().isEmpty());
    }

    private List<String> newThreads() {
        return Thread.getAllStackTraces().keySet().stream()
                .filter(t -> t.isAlive() && !threadsBefore.contains(t) && t.getName().startsWith("kvt-"))
                .map(Thread::getName).collect(Collectors.toList());
    }

    private static CacheState state(int tp, int pp, DataType dt) {
        return CacheState.builder().uniformKvHeads(4, 4).sizePerHead(8).tokensPerBlock(4).tensorParallelism(tp)
                .pipelineParallelism(pp).dataType(dt).build();
    }

    private static TransceiverConfig.Builder config() {
        return TransceiverConfig.builder().backend("loopback").transferBufferBytes(64 << 10).chunkBytes(1000)
                .kvTransferTimeout(Duration.ofSeconds(20)).senderFutureTimeout(Duration.ofMillis(200));
    }

    private LocalInstance start(String name, CacheState s, TransceiverConfig c) {
        LocalInstance i = LocalInstance.builder(name, s).transport(transport, TransportConfig.builder().build())
                .formatter(formatter).config(c).blocksPerRank(1024).errorHandler(backgroundErrors::add).start();
        instances.add(i);
        return i;
    }

    /** One request across all ranks of both instances. */
    private static final class Req {
        final long id;
        final int prompt;
        final TransferRequest[] ctx;
        final TransferRequest[] gen;

        Req(long id, int prompt, int ctxRanks, int genRanks) {
            this.id = id;
            this.prompt = prompt;
            this.ctx = new TransferRequest[ctxRanks];
            this.gen = new TransferRequest[genRanks];
        }
    }

    private static Req prepare(LocalInstance ctx, LocalInstance gen, long id, int prompt) {
        Req r = new Req(id, prompt, ctx.ranks(), gen.ranks());
        int blocks = BlockDistribution.blocksFor(prompt, ctx.cacheState().tokensPerBlock());
        ContextPhaseParams params = ctx.contextPhaseParams(id, 0);
        for (int k = 0; k < ctx.ranks(); k++) {
            int[] ids = ctx.cache(k).allocate(id, blocks);
            Bytes.fill(ctx.cache(k), ids, id * 100 + k);
            r.ctx[k] = TransferRequest.context(id, prompt, ids);
        }
        for (int k = 0; k < gen.ranks(); k++) {
            int[] ids = gen.cache(k).allocate(id, blocks);
            Bytes.clear(gen.cache(k), ids);
            r.gen[k] = TransferRequest.generation(params, prompt, ids);
        }
        return r;
    }

    private static void respond(LocalInstance ctx, Req r) {
        for (int k = 0; k < ctx.ranks(); k++) {
            ctx.transceiver(k).respondAndSendAsync(r.ctx[k]);
        }
    }

    private static void request(LocalInstance gen, Req r) {
        for (int k = 0; k < gen.ranks(); k++) {
            gen.transceiver(k).requestAndReceiveAsync(r.gen[k]);
        }
    }

    private static void awaitDone(TransferRequest... rs) {
        await().atMost(BOUND).pollDelay(Duration.ZERO).pollInterval(Duration.ofMillis(5))
                .until(() -> List.of(rs).stream().allMatch(TransferRequest::isDone));
    }

    private static void assertExact(LocalInstance gen, Req r) {
        for (int k = 0; k < gen.ranks(); k++) {
            assertThat(r.gen[k].state()).as("gen rank %d of request %d: %s", k, r.id, r.gen[k])
                    .isEqualTo(RequestState.GENERATION_TRANS_COMPLETE);
            // Same layouts: gen rank k holds what ctx rank k held.
            assertThat(Bytes.mismatches(gen.cache(k), r.gen[k].blockIds(), r.id * 100 + k)).isZero();
            assertThat(r.gen[k].kvCacheSize()).isEqualTo((long) r.gen[k].blockIds().length
                    * gen.cache(k).layout().blockBytes());
        }
    }

    /** Runs a status check on every rank at once (they allgather) and returns each rank's result. */
    private static List<TransferStatus> statusAll(LocalInstance inst, boolean context, OptionalInt atLeast)
            throws Exception {
        ExecutorService ex = Executors.newFixedThreadPool(inst.ranks());
        try {
            List<Future<TransferStatus>> fs = new ArrayList<>();
            for (int k = 0; k < inst.ranks(); k++) {
                int rank = k;
                fs.add(ex.submit(() -> context ? inst.transceiver(rank).checkContextTransferStatus(atLeast)
                        : inst.transceiver(rank).checkGenTransferStatus(atLeast)));
            }
            List<TransferStatus> out = new ArrayList<>();
            for (Future<TransferStatus> f : fs) {
                out.add(f.get(BOUND.toSeconds(), TimeUnit.SECONDS));
            }
            return out;
        } finally {
            ex.shutdownNow();
        }
    }

    @Test
    void transfersEveryByteAcrossTp2Pp2AndReportsAgreedCompletion() throws Exception {
        LocalInstance ctx = start("ctx", state(2, 2, DataType.FLOAT16), config().build());
        LocalInstance gen = start("gen", state(2, 2, DataType.FLOAT16), config().build());
        List<Req> reqs = new ArrayList<>();
        int[] prompts = {1, 4, 5, 30, 61};
        for (int i = 0; i < prompts.length; i++) {
            Req r = prepare(ctx, gen, 10 + i, prompts[i]);
            reqs.add(r);
            // Half the requests ask before the context side is ready, half after.
            if (i % 2 == 0) {
                respond(ctx, r);
                request(gen, r);
            } else {
                request(gen, r);
                respond(ctx, r);
            }
        }
        for (Req r : reqs) {
            awaitDone(r.gen);
            awaitDone(r.ctx);
            assertExact(gen, r);
            for (TransferRequest c : r.ctx) {
                assertThat(c.state()).isEqualTo(RequestState.CONTEXT_COMPLETE);
                assertThat(c.transferDuration()).isPresent();
            }
        }
        List<Long> ids = reqs.stream().map(r -> r.id).toList();
        for (TransferStatus s : statusAll(ctx, true, OptionalInt.empty())) {
            assertThat(s.completed()).containsExactlyInAnyOrderElementsOf(ids);
            assertThat(s.failed()).isEmpty();
        }
        for (TransferStatus s : statusAll(gen, false, OptionalInt.of(0))) {
            assertThat(s.completed()).containsExactlyInAnyOrderElementsOf(ids);
        }
        // Reported once.
        for (TransferStatus s : statusAll(gen, false, OptionalInt.empty())) {
            assertThat(s.completed()).isEmpty();
        }
        assertThat(backgroundErrors).isEmpty();
    }

    @Test
    void manyConcurrentRequestsAllArriveExactly() {
        TransceiverConfig c = config().sendConcurrency(3).requestThreadsPerPeerInstance(6).build();
        LocalInstance ctx = start("ctx", state(1, 1, DataType.INT8), c);
        LocalInstance gen = start("gen", state(1, 1, DataType.INT8), c);
        List<Req> reqs = new ArrayList<>();
        for (int i = 0; i < 100; i++) {
            reqs.add(prepare(ctx, gen, 1000 + i, 1 + (i * 7) % 40));
        }
        reqs.parallelStream().forEach(r -> {
            request(gen, r);
            respond(ctx, r);
        });
        awaitDone(reqs.stream().flatMap(r -> List.of(r.gen).stream()).toArray(TransferRequest[]::new));
        for (Req r : reqs) {
            assertExact(gen, r);
        }
        assertThat(backgroundErrors).isEmpty();
    }

    @Test
    void aReadyRequestDoesNotWaitBehindOneThatIsNot() {
        LocalInstance ctx = start("ctx", state(1, 1, DataType.FLOAT32), config().build());
        LocalInstance gen = start("gen", state(1, 1, DataType.FLOAT32), config().build());
        Req a = prepare(ctx, gen, 1, 8);
        Req b = prepare(ctx, gen, 2, 8);
        Req warm = prepare(ctx, gen, 3, 8);
        respond(ctx, warm); // starts the responder
        request(gen, warm);
        awaitDone(warm.gen);
        request(gen, a);
        request(gen, b);
        respond(ctx, b);
        awaitDone(b.gen);
        assertExact(gen, b);
        assertThat(a.gen[0].isDone()).as("A is not ready on the context side").isFalse();
        respond(ctx, a);
        awaitDone(a.gen);
        assertExact(gen, a);
    }

    @Test
    void contextCancelBeforeDispatchRefusesTheRequesterWithCancelled() {
        LocalInstance ctx = start("ctx", state(1, 1, DataType.FLOAT16), config().build());
        LocalInstance gen = start("gen", state(1, 1, DataType.FLOAT16), config().build());
        Req r = prepare(ctx, gen, 7, 9);
        respond(ctx, r);
        assertThat(ctx.transceiver(0).cancelRequest(r.ctx[0])).isTrue();
        assertThat(r.ctx[0].state()).isEqualTo(RequestState.CANCELLED);
        assertThat(ctx.transceiver(0).cancelRequest(r.ctx[0])).as("second cancel").isFalse();
        request(gen, r);
        awaitDone(r.gen);
        assertThat(r.gen[0].state()).isEqualTo(RequestState.CANCELLED);
        assertThat(r.gen[0].error().orElseThrow().code()).isEqualTo(ErrorCode.CANCELLED);
        assertThat(Bytes.mismatches(gen.cache(0), r.gen[0].blockIds(), 700)).as("nothing written")
                .isEqualTo(gen.cache(0).layout().blockBytes() * r.gen[0].blockIds().length
                        - countZeroPatternBytes(r.gen[0].blockIds().length, gen.cache(0).layout().blockBytes()));
    }

    /** Bytes of the pattern of request 700 that happen to be 0 (a cleared block matches them). */
    private static long countZeroPatternBytes(int blocks, long blockBytes) {
        long n = 0;
        for (int i = 0; i < blocks; i++) {
            for (long o = 0; o < blockBytes; o++) {
                if (Bytes.at(700, i, o) == 0) {
                    n++;
                }
            }
        }
        return n;
    }

    @Test
    void contextCancelAfterDispatchIsRefusedAndTheTransferCompletes() {
        LocalInstance ctx = start("ctx", state(1, 1, DataType.FLOAT16), config().build());
        LocalInstance gen = start("gen", state(1, 1, DataType.FLOAT16), config().build());
        CountDownLatch gate = new CountDownLatch(1);
        WholeBlockFormatterProvider.formatGate = gate;
        Req r = prepare(ctx, gen, 8, 9);
        respond(ctx, r);
        request(gen, r);
        await().atMost(BOUND).until(() -> ctx.transceiver(0).contextRequestsAwaitingDispatch() == 0
                && r.ctx[0].transferStart().isPresent());
        assertThat(ctx.transceiver(0).cancelRequest(r.ctx[0])).isFalse();
        gate.countDown();
        awaitDone(r.gen);
        awaitDone(r.ctx);
        assertExact(gen, r);
        assertThat(r.ctx[0].state()).isEqualTo(RequestState.CONTEXT_COMPLETE);
    }

    @Test
    void generationCancelBeforeSendingSucceedsAndAfterSendingIsRefused() {
        // Ready signals awaited by the request thread, so that A holds the only one and B queues before its infos
        // leave (set here whatever the default); with posted ready signals every cancel is "after".
        TransceiverConfig c = config().requestThreadsPerPeerInstance(1).postedReady(false).build();
        LocalInstance ctx = start("ctx", state(1, 1, DataType.FLOAT16), c);
        LocalInstance gen = start("gen", state(1, 1, DataType.FLOAT16), c);
        Req warm = prepare(ctx, gen, 20, 4);
        respond(ctx, warm);
        request(gen, warm);
        awaitDone(warm.gen);
        Req a = prepare(ctx, gen, 21, 4);
        Req b = prepare(ctx, gen, 22, 4);
        request(gen, a); // occupies the only request thread: ctx is not ready for it
        await().atMost(BOUND).until(() -> ctx.transceiver(0).contextRequestsAwaitingDispatch() == 1);
        assertThat(gen.transceiver(0).cancelRequest(a.gen[0])).as("A's infos are out").isFalse();
        request(gen, b); // queued behind A
        assertThat(gen.transceiver(0).cancelRequest(b.gen[0])).isTrue();
        assertThat(b.gen[0].state()).isEqualTo(RequestState.CANCELLED);
        respond(ctx, a);
        awaitDone(a.gen);
        assertExact(gen, a);
    }

    @Test
    void unsupportedLayoutFailsBothSidesWithTheReasonAndTheResponderKeepsServing() {
        LocalInstance ctx = start("ctx", state(1, 1, DataType.FLOAT16), config().build());
        LocalInstance bad = start("gen-bad", state(1, 1, DataType.FLOAT32), config().build());
        LocalInstance good = start("gen-good", state(1, 1, DataType.FLOAT16), config().build());
        Req r = prepare(ctx, bad, 31, 6);
        respond(ctx, r);
        request(bad, r);
        awaitDone(r.gen);
        awaitDone(r.ctx);
        for (TransferRequest t : List.of(r.gen[0], r.ctx[0])) {
            assertThat(t.state()).isEqualTo(RequestState.TRANS_ERROR);
            KvTransferException e = t.error().orElseThrow();
            assertThat(e.code()).isEqualTo(ErrorCode.UNSUPPORTED_LAYOUT);
            assertThat(e.getMessage()).contains("identical layouts").contains("FLOAT32");
        }
        Req ok = prepare(ctx, good, 32, 6);
        respond(ctx, ok);
        request(good, ok);
        awaitDone(ok.gen);
        assertExact(good, ok);
    }

    @Test
    void aRequestNeverMadeReadyTimesOutOnBothSides() {
        TransceiverConfig c = config().kvTransferTimeout(Duration.ofMillis(600)).build();
        LocalInstance ctx = start("ctx", state(1, 1, DataType.FLOAT16), c);
        LocalInstance gen = start("gen", state(1, 1, DataType.FLOAT16), c);
        Req asked = prepare(ctx, gen, 41, 4);   // gen asks, ctx never ready
        Req orphan = prepare(ctx, gen, 42, 4);  // ctx ready, gen never asks
        respond(ctx, orphan);
        request(gen, asked);
        awaitDone(asked.gen);
        awaitDone(orphan.ctx);
        assertThat(asked.gen[0].state()).isEqualTo(RequestState.TRANS_ERROR);
        assertThat(asked.gen[0].error().orElseThrow().code()).isEqualTo(ErrorCode.TIMEOUT);
        assertThat(orphan.ctx[0].state()).isEqualTo(RequestState.TRANS_ERROR);
        assertThat(orphan.ctx[0].error().orElseThrow().code()).isEqualTo(ErrorCode.TIMEOUT);
        assertThat(orphan.ctx[0].error().orElseThrow().getMessage()).contains("0 of its counterparts asked");
        // The responder drops the asked-for entry once it expires.
        await().atMost(BOUND).until(() -> ctx.transceiver(0).contextRequestsAwaitingDispatch() == 0);
    }

    @Test
    void oneFailingRequestDoesNotAffectTheOthers() {
        TransceiverConfig c = config().kvTransferTimeout(Duration.ofSeconds(2)).build();
        LocalInstance ctx = start("ctx", state(1, 1, DataType.FLOAT16), c);
        LocalInstance gen = start("gen", state(1, 1, DataType.FLOAT16), c);
        WholeBlockFormatterProvider.failRequestId = 52;
        List<Req> reqs = new ArrayList<>();
        for (int i = 50; i < 56; i++) {
            Req r = prepare(ctx, gen, i, 10);
            reqs.add(r);
            respond(ctx, r);
            request(gen, r);
        }
        for (Req r : reqs) {
            awaitDone(r.gen);
            awaitDone(r.ctx);
            if (r.id == 52) {
                assertThat(r.ctx[0].state()).isEqualTo(RequestState.TRANS_ERROR);
                assertThat(r.ctx[0].error().orElseThrow().getMessage()).contains("injected failure");
                assertThat(r.gen[0].state()).isEqualTo(RequestState.TRANS_ERROR);
                assertThat(r.gen[0].error().orElseThrow().code()).isEqualTo(ErrorCode.TIMEOUT);
            } else {
                assertExact(gen, r);
            }
        }
    }

    @Test
    void malformedAndOversizedInfosAreReportedAndTheResponderKeepsServing() {
        LocalInstance ctx = start("ctx", state(1, 1, DataType.FLOAT16), config().build());
        LocalInstance gen = start("gen", state(1, 1, DataType.FLOAT16), config().build());
        Req warm = prepare(ctx, gen, 60, 4);
        respond(ctx, warm);
        request(gen, warm);
        awaitDone(warm.gen);
        try (HostBufferManager bm = new HostBufferManager();
             ConnectionManager stray = transport.create(TransportConfig.builder().build())) {
            Connection c = stray.connection(ctx.commState().addresses().get(0));
            try (MemoryBuffer buf = bm.allocate(64, MemoryKind.HOST)) {
                var bb = buf.asByteBuffer();
                bb.putLong(0, Tags.REQUEST_SEND);
                bb.putLong(8, 16);
                for (int i = 16; i < 32; i++) {
                    bb.put(i, (byte) 0x5A);
                }
                c.send(Tags.ID_TAG, buf, 0, 8);
                c.send(Tags.INFO_SIZE_TAG, buf, 8, 8);
                c.send(Tags.INFO_TAG, buf, 16, 16);
                bb.putLong(8, 1L << 40);
                c.send(Tags.ID_TAG, buf, 0, 8);
                c.send(Tags.INFO_SIZE_TAG, buf, 8, 8);
            }
            await().atMost(BOUND).until(() -> backgroundErrors.size() >= 2);
        }
        assertThat(backgroundErrors).allMatch(e -> e instanceof KvTransferException k
                && k.code() == ErrorCode.MALFORMED);
        Req r = prepare(ctx, gen, 61, 12);
        respond(ctx, r);
        request(gen, r);
        awaitDone(r.gen);
        assertExact(gen, r);
    }

    /** Both modes write a row per request on both sides: a push's receive row times the writers' done notices. */
    @ParameterizedTest
    @EnumSource(TransceiverConfig.TransferMode.class)
    void timingFilesFollowTheUpstreamFormat(TransceiverConfig.TransferMode mode, @TempDir Path dir) throws Exception {
        TransceiverConfig c = config().transferMode(mode).timingDir(dir).build();
        LocalInstance ctx = start("ctx", state(1, 1, DataType.FLOAT16), c);
        LocalInstance gen = start("gen", state(1, 1, DataType.FLOAT16), c.toBuilder().timingDir(dir.resolve("g"))
                .build());
        Map<Long, Req> reqs = new ConcurrentHashMap<>();
        for (int i = 0; i < 3; i++) {
            Req r = prepare(ctx, gen, 70 + i, 16);
            reqs.put(r.id, r);
            respond(ctx, r);
            request(gen, r);
            awaitDone(r.gen);
            awaitDone(r.ctx);
        }
        instances.remove(ctx);
        instances.remove(gen);
        ctx.close();
        gen.close();
        for (Path f : List.of(dir.resolve("rank_0_send.csv"), dir.resolve("g").resolve("rank_0_recv.csv"))) {
            List<String> lines = Files.readAllLines(f);
            assertThat(lines.get(0)).isEqualTo(
                    "RequestID,RequestInfo,Preparation,Preprocess,Transmissions,Postprocess,Delay,Duration,Bandwidth(Gbps)");
            assertThat(lines).hasSize(4);
            for (String row : lines.subList(1, 4)) {
                String[] cols = row.split(",");
                assertThat(cols).hasSize(9);
                assertThat(reqs).containsKey(Long.parseLong(cols[0]));
                for (int i = 1; i < cols.length; i++) {
                    assertThat(Double.parseDouble(cols[i])).isGreaterThanOrEqualTo(0.0);
                }
            }
        }
    }

    @Test
    void parallelReceiveAndDynamicOnlyBuffersStillMoveEveryByte() {
        TransceiverConfig c = config().parallelReceive(true).transferBufferBytes(0).allowDynamicBuffers(true)
                .chunkBytes(0).build();
        LocalInstance ctx = start("ctx", state(2, 1, DataType.BFLOAT16), c);
        LocalInstance gen = start("gen", state(2, 1, DataType.BFLOAT16), c);
        Req r = prepare(ctx, gen, 80, 33);
        request(gen, r);
        respond(ctx, r);
        awaitDone(r.gen);
        assertExact(gen, r);
    }

    @Test
    void closeWithRequestsInFlightCancelsThemAndLeaksNothing() {
        LocalInstance ctx = start("ctx", state(1, 1, DataType.FLOAT16), config().build());
        LocalInstance gen = start("gen", state(1, 1, DataType.FLOAT16), config().build());
        Req r = prepare(ctx, gen, 90, 8);
        Req s = prepare(ctx, gen, 91, 8);
        respond(ctx, r);   // never asked
        request(gen, s);   // never ready
        instances.remove(ctx);
        instances.remove(gen);
        ctx.close();
        gen.close();
        assertThat(r.ctx[0].state()).isEqualTo(RequestState.CANCELLED);
        assertThat(s.gen[0].state()).isIn(RequestState.CANCELLED, RequestState.TRANS_ERROR);
        assertThat(s.gen[0].isDone()).isTrue();
    }
}
