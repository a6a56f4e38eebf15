package dev.kvtransfer.core;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.KvTransferException;
import dev.kvtransfer.api.layout.BlockDistribution;
import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.api.model.ContextPhaseParams;
import dev.kvtransfer.api.model.DataType;
import dev.kvtransfer.api.transport.TransportConfig;
import dev.kvtransfer.core.local.LocalInstance;
import dev.kvtransfer.core.testsupport.WholeBlockFormatterProvider;
import dev.kvtransfer.testkit.KvPattern;
import dev.kvtransfer.testkit.loopback.LoopbackTransportProvider;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Optional;
import java.util.OptionalInt;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.function.IntFunction;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;
import static org.awaitility.Awaitility.await;

/**
 * TensorRT-LLM functions with a counterpart here: {@code requestAndReceiveSync}, {@code checkGenTransferComplete},
 * {@code checkContextTransferStatus} with {@code markComplete}, {@code updateKVCacheTransferBW} and its
 * {@code gen_transfer_summary.csv}, the duplicate {@code respondAndSendAsync} upstream warns about (refused here,
 * the first transfer unharmed), and the {@code TRTLLM_*} environment aliases. Every transfer verifies every element
 * with KvPattern.
 */
@Timeout(60)
class TrtllmParityTest {
    private static final Duration BOUND = Duration.ofSeconds(20);
    private final LoopbackTransportProvider transport = new LoopbackTransportProvider();
    private final List<LocalInstance> instances = new ArrayList<>();

    @AfterEach
    void after() {
        instances.forEach(LocalInstance::close);
    }

    @TempDir
    Path timingDir;

    private LocalInstance start(String name, Duration timeout) {
        return start(name, timeout, 1, null);
    }

    private LocalInstance start(String name, Duration timeout, int tp, Path timing) {
        CacheState s = CacheState.builder().uniformKvHeads(4, 4).sizePerHead(8).tokensPerBlock(4)
                .dataType(DataType.FLOAT16).tensorParallelism(tp).build();
        TransceiverConfig c = TransceiverConfig.builder().backend("loopback").transferBufferBytes(64 << 10)
                .kvTransferTimeout(timeout).senderFutureTimeout(Duration.ofMillis(200)).timingDir(timing).build();
        LocalInstance i = LocalInstance.builder(name, s).transport(transport, TransportConfig.builder().build())
                .formatter(new WholeBlockFormatterProvider()).config(c).blocksPerRank(256).start();
        instances.add(i);
        return i;
    }

    private record Pair(TransferRequest ctx, TransferRequest gen, int[] genBlocks) {
    }

    private static Pair prepare(LocalInstance ctx, LocalInstance gen, long id, int prompt) {
        int blocks = BlockDistribution.blocksFor(prompt, ctx.cacheState().tokensPerBlock());
        int[] c = ctx.cache(0).allocate(id, blocks);
        KvPattern.fill(ctx.cache(0), c, ctx.cacheState(0), 0, id, blocks);
        int[] g = gen.cache(0).allocate(id, blocks);
        ContextPhaseParams params = ctx.contextPhaseParams(id, 0);
        return new Pair(TransferRequest.context(id, prompt, c), TransferRequest.generation(params, prompt, g), g);
    }

    /** One request on every rank of both instances (TP alike: rank k's counterpart is rank k), all submitted. */
    private static List<Pair> submitOnEveryRank(LocalInstance ctx, LocalInstance gen, long id, int prompt) {
        int blocks = BlockDistribution.blocksFor(prompt, ctx.cacheState().tokensPerBlock());
        ContextPhaseParams params = ctx.contextPhaseParams(id, 0);
        List<Pair> out = new ArrayList<>();
        for (int k = 0; k < ctx.ranks(); k++) {
            int[] c = ctx.cache(k).allocate(id, blocks);
            KvPattern.fill(ctx.cache(k), c, ctx.cacheState(k), k, id, blocks);
            int[] g = gen.cache(k).allocate(id, blocks);
            out.add(new Pair(TransferRequest.context(id, prompt, c), TransferRequest.generation(params, prompt, g), g));
        }
        for (int k = 0; k < ctx.ranks(); k++) {
            ctx.transceiver(k).respondAndSendAsync(out.get(k).ctx());
            gen.transceiver(k).requestAndReceiveAsync(out.get(k).gen());
        }
        for (Pair p : out) {
            await().atMost(BOUND).until(() -> p.ctx().isDone() && p.gen().isDone());
        }
        for (int k = 0; k < gen.ranks(); k++) {
            Pair p = out.get(k);
            assertThat(p.gen().state()).isEqualTo(RequestState.GENERATION_TRANS_COMPLETE);
            KvPattern.Result r = KvPattern.verify(gen.cache(k), p.genBlocks(), gen.cacheState(k), k, id, blocks);
            assertThat(r.mismatches()).as(r.firstMismatch()).isZero();
            // Every token of the prompt: tokens · layers · K,V · heads per rank · dim.
            assertThat(r.checkedElements()).isGreaterThanOrEqualTo((long) prompt * 4 * 2 * 2 * 8);
        }
        return out;
    }

    /** Runs a collective (a status check) on every rank of an instance at once, each bounded. */
    private static List<TransferStatus> onEveryRank(LocalInstance inst, IntFunction<TransferStatus> check)
            throws Exception {
        ExecutorService pool = Executors.newFixedThreadPool(inst.ranks());
        try {
            List<Future<TransferStatus>> fs = new ArrayList<>();
            for (int k = 0; k < inst.ranks(); k++) {
                int rank = k;
                fs.add(pool.submit(() -> check.apply(rank)));
            }
            List<TransferStatus> out = new ArrayList<>();
            for (Future<TransferStatus> f : fs) {
                out.add(f.get(BOUND.toSeconds(), TimeUnit.SECONDS));
            }
            return out;
        } finally {
            pool.shutdownNow();
        }
    }

    @Test
    void markCompleteMarksAndReleasesOnlyOnceTheWholeContextGroupFinished() throws Exception {
        LocalInstance ctx = start("ctx", BOUND, 2, null);
        LocalInstance gen = start("gen", BOUND, 2, null);
        int free = ctx.cache(0).freeBlocks();
        List<Pair> a = submitOnEveryRank(ctx, gen, 51, 23);
        List<TransferStatus> plain = onEveryRank(ctx, k -> ctx.transceiver(k)
                .checkContextTransferStatus(OptionalInt.empty()));
        for (int k = 0; k < 2; k++) {
            assertThat(plain.get(k).completed()).containsExactly(51L);
            assertThat(a.get(k).ctx().isMarkedComplete()).as("the default leaves release to the engine").isFalse();
            assertThat(ctx.cache(k).blocksOf(51)).containsExactly(a.get(k).ctx().blockIds());
        }
        List<Pair> b = submitOnEveryRank(ctx, gen, 52, 30);
        List<TransferStatus> marked = onEveryRank(ctx, k -> ctx.transceiver(k)
                .checkContextTransferStatus(OptionalInt.empty(), true));
        for (int k = 0; k < 2; k++) {
            assertThat(marked.get(k).completed()).containsExactly(52L);
            assertThat(b.get(k).ctx().isMarkedComplete()).isTrue();
            assertThat(b.get(k).ctx().state()).isEqualTo(RequestState.CONTEXT_COMPLETE);
            assertThat(a.get(k).ctx().isMarkedComplete()).isFalse();
            // Request 52's blocks went back; 51's (reported without markComplete) are still held.
            assertThat(ctx.cache(k).requestCount()).isOne();
            assertThat(ctx.cache(k).freeBlocks()).isEqualTo(free - a.get(k).ctx().blockIds().length);
            ctx.cache(k).free(51);
        }
        // A failed request is reported failed and never released, markComplete or not.
        WholeBlockFormatterProvider.failRequestId = 53;
        try {
            ContextPhaseParams params = ctx.contextPhaseParams(53, 0);
            List<TransferRequest> failing = new ArrayList<>();
            for (int k = 0; k < 2; k++) {
                failing.add(TransferRequest.context(53, 8, ctx.cache(k).allocate(53, 2)));
                ctx.transceiver(k).respondAndSendAsync(failing.get(k));
                gen.transceiver(k).requestAndReceiveAsync(TransferRequest.generation(params, 8,
                        gen.cache(k).allocate(53, 2)));
            }
            List<TransferStatus> st = onEveryRank(ctx, k -> ctx.transceiver(k)
                    .checkContextTransferStatus(OptionalInt.empty(), true));
            for (int k = 0; k < 2; k++) {
                assertThat(st.get(k).failed()).containsExactly(53L);
                assertThat(failing.get(k).state()).isEqualTo(RequestState.TRANS_ERROR);
                assertThat(failing.get(k).isMarkedComplete()).isFalse();
                assertThat(ctx.cache(k).blocksOf(53)).containsExactly(failing.get(k).blockIds());
            }
        } finally {
            WholeBlockFormatterProvider.failRequestId = Long.MIN_VALUE;
        }
    }

    @Test
    void genStatusAllGathersTheBandwidthAndWritesTheUpstreamSummary() throws Exception {
        LocalInstance ctx = start("ctx", BOUND, 2, timingDir);
        LocalInstance gen = start("gen", BOUND, 2, timingDir);
        List<Pair> one = submitOnEveryRank(ctx, gen, 61, 23);
        List<Pair> two = submitOnEveryRank(ctx, gen, 62, 41);
        List<TransferStatus> st = onEveryRank(gen, k -> gen.transceiver(k).checkGenTransferStatus(OptionalInt.empty()));
        long blockBytes = gen.cache(0).layout().blockBytes();
        List<String> expectedRows = new ArrayList<>();
        for (List<Pair> req : List.of(one, two)) {
            long id = req.get(0).gen().requestId();
            long bytes = req.get(0).gen().kvCacheSize() + req.get(1).gen().kvCacheSize();
            assertThat(bytes).as("both ranks' parts").isEqualTo(2L * req.get(0).genBlocks().length * blockBytes);
            long start = Math.min(nanos(req.get(0).gen().transferStart()), nanos(req.get(1).gen().transferStart()));
            long end = Math.max(nanos(req.get(0).gen().transferEnd()), nanos(req.get(1).gen().transferEnd()));
            for (Pair p : req) {
                assertThat(p.gen().instanceKvCacheSize()).isEqualTo(bytes);
                assertThat(p.gen().instanceTransferDuration()).contains(Duration.ofNanos(end - start));
            }
            expectedRows.add(id + "," + String.format(Locale.ROOT, "%.3f", (end - start) / 1e6) + ","
                    + bytes);
        }
        for (int k = 0; k < 2; k++) {
            assertThat(st.get(k).completed()).containsExactlyInAnyOrder(61L, 62L);
            List<String> lines = Files.readAllLines(timingDir.resolve("gen_" + k + "_gen_transfer_summary.csv"));
            assertThat(lines.get(0)).isEqualTo("RequestID,gen_side_transfer_time(ms),kv_cache_size");
            assertThat(lines.subList(1, lines.size())).as("every rank writes the merged values")
                    .containsExactlyInAnyOrderElementsOf(expectedRows);
        }
        // The context side writes no summary (its status check has no all-gather), and a generation check that
        // completes nothing adds no row (and no round).
        onEveryRank(ctx, k -> ctx.transceiver(k).checkContextTransferStatus(OptionalInt.empty()));
        assertThat(timingDir.resolve("ctx_0_gen_transfer_summary.csv")).doesNotExist();
        assertThat(timingDir.resolve("rank_0_send.csv")).as("the timing CSVs are still written").exists();
        onEveryRank(gen, k -> gen.transceiver(k).checkGenTransferStatus(OptionalInt.of(0)));
        assertThat(Files.readAllLines(timingDir.resolve("gen_0_gen_transfer_summary.csv"))).hasSize(3);
    }

    private static long nanos(Optional<Instant> t) {
        Instant i = t.orElseThrow();
        return i.getEpochSecond() * 1_000_000_000L + i.getNano();
    }

    @Test
    void requestAndReceiveSyncReturnsWithEveryElementInPlace() {
        LocalInstance ctx = start("ctx", BOUND);
        LocalInstance gen = start("gen", BOUND);
        Pair p = prepare(ctx, gen, 11, 37);
        ctx.transceiver(0).respondAndSendAsync(p.ctx());
        assertThat(gen.transceiver(0).checkGenTransferComplete()).as("nothing in flight yet").isTrue();
        gen.transceiver(0).requestAndReceiveSync(p.gen());
        assertThat(p.gen().state()).isEqualTo(RequestState.GENERATION_TRANS_COMPLETE);
        KvPattern.Result r = KvPattern.verify(gen.cache(0), p.genBlocks(), gen.cacheState(0), 0, 11,
                p.genBlocks().length);
        assertThat(r.mismatches()).as(r.firstMismatch()).isZero();
        assertThat(r.checkedElements()).as("every token of the prompt").isGreaterThanOrEqualTo(37L * 4 * 2 * 4 * 8);
        assertThat(gen.transceiver(0).checkGenTransferComplete()).isTrue();
        // Reported once by the status check, like any async request.
        assertThat(gen.transceiver(0).checkGenTransferStatus(OptionalInt.empty()).completed()).containsExactly(11L);
        assertThat(p.gen().instanceKvCacheSize()).as("no timing directory: no all-gather").isZero();
        assertThat(p.gen().instanceTransferDuration()).isEmpty();
    }

    @Test
    void checkGenTransferCompleteIsFalseWhileARequestWaitsAndSyncFailsWithTheRequestsOwnError() {
        LocalInstance ctx = start("ctx", Duration.ofMillis(600));
        LocalInstance gen = start("gen", Duration.ofMillis(600));
        Pair waiting = prepare(ctx, gen, 21, 8);
        gen.transceiver(0).requestAndReceiveAsync(waiting.gen()); // the context side never makes it ready
        assertThat(gen.transceiver(0).checkGenTransferComplete()).isFalse();
        Pair sync = prepare(ctx, gen, 22, 8);
        assertThatThrownBy(() -> gen.transceiver(0).requestAndReceiveSync(sync.gen()))
                .isInstanceOfSatisfying(KvTransferException.class, e -> {
                    assertThat(e.requestId()).isEqualTo(22);
                    assertThat(e.code()).isEqualTo(ErrorCode.TIMEOUT);
                });
        await().atMost(BOUND).until(() -> gen.transceiver(0).checkGenTransferComplete());
        assertThat(waiting.gen().state()).isEqualTo(RequestState.TRANS_ERROR);
    }

    @Test
    void aDuplicateRespondAndSendAsyncIsRefusedAndTheFirstTransferCompletes() {
        LocalInstance ctx = start("ctx", BOUND);
        LocalInstance gen = start("gen", BOUND);
        Pair p = prepare(ctx, gen, 31, 16);
        ctx.transceiver(0).respondAndSendAsync(p.ctx());
        assertThatThrownBy(() -> ctx.transceiver(0).respondAndSendAsync(p.ctx()))
                .isInstanceOf(IllegalArgumentException.class).hasMessageContaining("request 31 is already in flight");
        TransferRequest again = TransferRequest.context(31, 16, p.ctx().blockIds());
        assertThatThrownBy(() -> ctx.transceiver(0).respondAndSendAsync(again))
                .isInstanceOf(IllegalArgumentException.class).hasMessageContaining("request 31 is already in flight");
        assertThat(again.state()).as("the refused copy is untouched").isEqualTo(RequestState.CONTEXT_TRANS_IN_PROGRESS);
        assertThat(ctx.transceiver(0).pendingContextRequests()).as("tracked once").isOne();
        gen.transceiver(0).requestAndReceiveSync(p.gen());
        KvPattern.Result r = KvPattern.verify(gen.cache(0), p.genBlocks(), gen.cacheState(0), 0, 31,
                p.genBlocks().length);
        assertThat(r.mismatches()).as(r.firstMismatch()).isZero();
        await().atMost(BOUND).until(() -> p.ctx().isDone());
        assertThat(p.ctx().state()).isEqualTo(RequestState.CONTEXT_COMPLETE);
        assertThat(ctx.transceiver(0).checkContextTransferStatus(OptionalInt.empty()).completed())
                .as("reported once").containsExactly(31L);
        assertThat(ctx.transceiver(0).pendingContextRequests()).isZero();
    }

    @Test
    void trtllmVariablesAreAliasesAndExplicitKeysWin() {
        Map<String, String> env = Map.of("TRTLLM_KVCACHE_TRANSFER_BUFFER_SIZE", "64MB",
                "TRTLLM_KVCACHE_SEND_MAX_CONCURRENCY_NUM", "3", "TRTLLM_ENABLE_KVCACHE_RECEIVE_PARALLEL", "1",
                "TRTLLM_KVCACHE_RECV_BUFFER_COUNT", "4", "TRTLLM_USE_UCX_KVCACHE", "1",
                "TRTLLM_KVCACHE_TIME_OUTPUT_PATH", "/tmp/kvt-timing");
        TransceiverConfig c = TransceiverConfig.fromProperties(TrtllmEnvironment.merge(
                Map.of(TransceiverConfig.P_SEND_CONCURRENCY, "5"), env));
        assertThat(c.transferBufferBytes()).isEqualTo(64L << 20);
        assertThat(c.sendConcurrency()).as("the explicit key wins").isEqualTo(5);
        assertThat(c.parallelReceive()).isTrue();
        assertThat(c.recvSlots()).isEqualTo(4);
        assertThat(c.backend()).isEqualTo("ucx");
        assertThat(c.timingDir()).contains(java.nio.file.Path.of("/tmp/kvt-timing"));
        assertThatThrownBy(() -> TrtllmEnvironment.merge(Map.of(), Map.of("TRTLLM_USE_NIXL_KVCACHE", "1")))
                .hasMessageContaining("TRTLLM_USE_NIXL_KVCACHE = 1: kvtransfer has no such backend");
        assertThatThrownBy(() -> TrtllmEnvironment.merge(Map.of(), Map.of("TRTLLM_USE_UCX_KVCACHE", "1",
                "TRTLLM_USE_MPI_KVCACHE", "1"))).hasMessageContaining("more than one backend");
        assertThatThrownBy(() -> TrtllmEnvironment.merge(Map.of(), Map.of("TRTLLM_ENABLE_KVCACHE_RECEIVE_PARALLEL",
                "yes"))).hasMessageContaining("TRTLLM_ENABLE_KVCACHE_RECEIVE_PARALLEL = 'yes'");
        assertThat(TrtllmEnvironment.merge(Map.of(), Map.of("TRTLLM_USE_MPI_KVCACHE", "0"))).isEmpty();
        // Zero copy has no key (the formatters decide it); the variable is still checked.
        assertThat(TrtllmEnvironment.merge(Map.of(), Map.of("TRTLLM_TRY_ZCOPY_FOR_KVCACHE_TRANSFER", "1"))).isEmpty();
        assertThatThrownBy(() -> TrtllmEnvironment.merge(Map.of(), Map.of("TRTLLM_TRY_ZCOPY_FOR_KVCACHE_TRANSFER",
                "true"))).hasMessageContaining("TRTLLM_TRY_ZCOPY_FOR_KVCACHE_TRANSFER = 'true'");
        assertThat(TrtllmEnvironment.ALIASES.values()).allMatch(k -> TransceiverConfig.defaults().toProperties()
                .containsKey(k), "every alias names a key the config reads");
    }
}
