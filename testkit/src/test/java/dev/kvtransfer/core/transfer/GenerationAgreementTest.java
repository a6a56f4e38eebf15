package dev.kvtransfer.core.transfer;

import dev.kvtransfer.api.layout.BlockDistribution;
import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.api.model.ContextPhaseParams;
import dev.kvtransfer.api.transport.Tags;
import dev.kvtransfer.api.transport.TransportConfig;
import dev.kvtransfer.core.RequestState;
import dev.kvtransfer.core.TransceiverConfig;
import dev.kvtransfer.core.TransferRequest;
import dev.kvtransfer.core.TransferStatus;
import dev.kvtransfer.core.local.LocalInstance;
import dev.kvtransfer.testkit.KvPattern;
import dev.kvtransfer.testkit.fault.Fault;
import dev.kvtransfer.testkit.fault.Faults;
import dev.kvtransfer.testkit.fault.FaultyTransportProvider;
import dev.kvtransfer.testkit.loopback.LoopbackTransportProvider;
import org.junit.jupiter.api.Test;

import java.time.Duration;
import java.util.List;
import java.util.OptionalInt;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

/**
 * Generation status agreement spans the whole generation instance: with PP 2 on the generation side and the
 * transfer to one stage delayed, neither stage reports the request complete until both have it.
 */
class GenerationAgreementTest {
    private static final Duration BOUND = Duration.ofSeconds(60);

    @Test
    void aRequestCompletesOnNoStageUntilEveryStageHasIt() throws Exception {
        // PP 2 on both sides (this module's test formatter moves identical layouts: ctx rank r feeds gen rank r).
        CacheState ctxState = CacheState.builder().uniformKvHeads(4, 2).sizePerHead(8).tokensPerBlock(4)
                .pipelineParallelism(2).build();
        CacheState genState = ctxState;
        TransceiverConfig config = TransceiverConfig.builder().transferBufferBytes(64 << 10)
                .kvTransferTimeout(Duration.ofSeconds(30)).senderFutureTimeout(Duration.ofMillis(100)).build();
        TransportConfig t = TransportConfig.builder().property(LoopbackTransportProvider.FABRIC_PROPERTY, "agree")
                .build();
        Faults faults = new Faults();
        try (LocalInstance gen = LocalInstance.builder("gen", genState).transport(new LoopbackTransportProvider(), t)
                .config(config).blocksPerRank(16).start();
             LocalInstance ctx = LocalInstance.builder("ctx", ctxState)
                     .transport(new FaultyTransportProvider(new LoopbackTransportProvider(), faults), t)
                     .config(config).blocksPerRank(16).start()) {
            String slowStage = gen.connections(1).localAddress();
            // Payload to PP stage 1 is held back until the test releases it.
            CompletableFuture<Void> release = new CompletableFuture<>();
            faults.inject(new Fault(Fault.Kind.DELAY, m -> m.to().equals(slowStage)
                    && m.tag() >= Tags.FIRST_DATA_TAG && m.length() > 1 && !release.isDone(), Fault.UNLIMITED,
                    Duration.ofSeconds(2)));
            long id = 77;
            int prompt = 5 * ctxState.tokensPerBlock();
            int blocks = BlockDistribution.blocksFor(prompt, ctxState.tokensPerBlock());
            ContextPhaseParams params = ctx.contextPhaseParams(id, 0);
            TransferRequest[] g = new TransferRequest[2];
            for (int r = 0; r < 2; r++) {
                int[] ctxIds = ctx.cache(r).allocate(id, blocks);
                KvPattern.fill(ctx.cache(r), ctxIds, ctxState, r, id, blocks);
                ctx.transceiver(r).respondAndSendAsync(TransferRequest.context(id, prompt, ctxIds));
                g[r] = TransferRequest.generation(params, prompt, gen.cache(r).allocate(id, blocks));
            }
            gen.transceiver(0).requestAndReceiveAsync(g[0]);
            gen.transceiver(1).requestAndReceiveAsync(g[1]);
            // Stage 0 has its layers, stage 1 is still receiving.
            await().atMost(BOUND).until(() -> g[0].isDone());
            assertThat(g[0].state()).as("%s", g[0].error()).isEqualTo(RequestState.GENERATION_TRANS_COMPLETE);
            assertThat(g[1].isDone()).isFalse();
            for (OptionalInt atLeast : List.of(OptionalInt.of(0), OptionalInt.of(1))) {
                List<TransferStatus> s = checkBothStages(gen, atLeast);
                if (!g[1].isDone()) {
                    assertThat(s.get(0).completed()).as("stage 0 with atLeast %s while stage 1 receives", atLeast)
                            .isEmpty();
                    assertThat(s.get(1).completed()).isEmpty();
                }
            }
            release.complete(null);
            await().atMost(BOUND).until(() -> g[1].isDone());
            List<TransferStatus> s = checkBothStages(gen, OptionalInt.of(1));
            assertThat(s.get(0).completed()).containsExactly(id);
            assertThat(s.get(1).completed()).containsExactly(id);
            for (int r = 0; r < 2; r++) {
                KvPattern.verify(gen.cache(r), g[r].blockIds(), gen.cacheState(r), r, id, blocks).assertOk();
            }
            assertThat(faults.injected(Fault.Kind.DELAY)).isPositive();
        }
    }

    /** Status checks are collective: every member of the generation group calls at once. */
    private static List<TransferStatus> checkBothStages(LocalInstance gen, OptionalInt atLeast) throws Exception {
        CompletableFuture<TransferStatus> s0 = CompletableFuture.supplyAsync(
                () -> gen.transceiver(0).checkGenTransferStatus(atLeast));
        CompletableFuture<TransferStatus> s1 = CompletableFuture.supplyAsync(
                () -> gen.transceiver(1).checkGenTransferStatus(atLeast));
        return List.of(s0.get(BOUND.toSeconds(), TimeUnit.SECONDS), s1.get(BOUND.toSeconds(), TimeUnit.SECONDS));
    }
}
