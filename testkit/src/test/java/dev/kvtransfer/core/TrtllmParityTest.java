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

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.OptionalInt;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;
import static org.awaitility.Awaitility.await;

/**
 * TensorRT-LLM functions with a counterpart here: {@code requestAndReceiveSync}, {@code checkGenTransferComplete},
 * the duplicate {@code respondAndSendAsync} upstream warns about (refused here, the first transfer unharmed), and
 * the {@code TRTLLM_*} environment aliases. Every transfer verifies every element with KvPattern.
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

    private LocalInstance start(String name, Duration timeout) {
        CacheState s = CacheState.builder().uniformKvHeads(4, 4).sizePerHead(8).tokensPerBlock(4)
                .dataType(DataType.FLOAT16).build();
        TransceiverConfig c = TransceiverConfig.builder().backend("loopback").transferBufferBytes(64 << 10)
                .kvTransferTimeout(timeout).senderFutureTimeout(Duration.ofMillis(200)).build();
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
                .isInstanceOf(IllegalArgumentException.class).hasMessageContaining("31");
        gen.transceiver(0).requestAndReceiveSync(p.gen());
        KvPattern.Result r = KvPattern.verify(gen.cache(0), p.genBlocks(), gen.cacheState(0), 0, 31,
                p.genBlocks().length);
        assertThat(r.mismatches()).as(r.firstMismatch()).isZero();
        await().atMost(BOUND).until(() -> p.ctx().isDone());
        assertThat(p.ctx().state()).isEqualTo(RequestState.CONTEXT_COMPLETE);
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
    }
}
