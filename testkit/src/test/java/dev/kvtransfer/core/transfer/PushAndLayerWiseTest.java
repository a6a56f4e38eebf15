package dev.kvtransfer.core.transfer;

import dev.kvtransfer.core.protocol.PushEntryFlyweight;
import dev.kvtransfer.core.protocol.PushNoticeFlyweight;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.layout.BlockDistribution;
import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.api.model.ContextPhaseParams;
import dev.kvtransfer.api.transport.TransportConfig;
import dev.kvtransfer.api.transport.TransportProvider;
import dev.kvtransfer.core.RequestState;
import dev.kvtransfer.core.TransceiverConfig;
import dev.kvtransfer.core.TransferRequest;
import dev.kvtransfer.core.local.LocalInstance;
import dev.kvtransfer.testkit.KvPattern;
import dev.kvtransfer.testkit.LeakCheckExtension;
import dev.kvtransfer.testkit.fault.Fault;
import dev.kvtransfer.testkit.fault.Faults;
import dev.kvtransfer.testkit.fault.FaultyTransportProvider;
import dev.kvtransfer.testkit.loopback.LoopbackTransportProvider;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

/**
 * Core's push (one-sided writes into the generation pool's per-request grants) and layer-wise protocols, over
 * loopback's emulated one-sided writes, with this module's identical-layout test formatter.
 */
@ExtendWith(LeakCheckExtension.class)
class PushAndLayerWiseTest {
    private static final Duration BOUND = Duration.ofSeconds(60);
    private static final CacheState STATE = CacheState.builder().uniformKvHeads(6, 2).sizePerHead(16)
            .tokensPerBlock(8).pipelineParallelism(2).build();

    private final List<LocalInstance> instances = new ArrayList<>();

    @AfterEach
    void close() {
        for (LocalInstance i : instances) {
            i.close();
        }
    }

    private LocalInstance start(String name, TransportProvider p, TransceiverConfig.TransferMode mode,
                                Duration timeout) {
        return start(name, p, mode, timeout, TransceiverConfig.DEFAULT_SEND_CONCURRENCY);
    }

    private LocalInstance start(String name, TransportProvider p, TransceiverConfig.TransferMode mode,
                                Duration timeout, int senders) {
        TransceiverConfig c = TransceiverConfig.builder().transferBufferBytes(1 << 20).transferMode(mode)
                .kvTransferTimeout(timeout).sendConcurrency(senders).build();
        LocalInstance i = LocalInstance.builder(name, STATE).transport(p, TransportConfig.builder()
                .property(LoopbackTransportProvider.FABRIC_PROPERTY, "push").build()).config(c).blocksPerRank(64)
                .start();
        instances.add(i);
        return i;
    }

    /** One request over both instances (rank r of one feeds rank r of the other). */
    private static final class Req {
        final long id;
        final int prompt;
        final int blocks;
        final TransferRequest[] ctx = new TransferRequest[2];
        final TransferRequest[] gen = new TransferRequest[2];

        Req(long id, int prompt) {
            this.id = id;
            this.prompt = prompt;
            this.blocks = BlockDistribution.blocksFor(prompt, STATE.tokensPerBlock());
        }
    }

    private static Req prepare(LocalInstance ctx, LocalInstance gen, long id, int prompt, int reused) {
        Req q = new Req(id, prompt);
        long[] hashes = new long[q.blocks];
        for (int b = 0; b < hashes.length; b++) {
            hashes[b] = id * 1000 + b;
        }
        ContextPhaseParams params = ctx.contextPhaseParams(id, 0);
        for (int r = 0; r < 2; r++) {
            int[] c = ctx.cache(r).allocate(id, q.blocks);
            KvPattern.fill(ctx.cache(r), c, STATE, r, id, q.blocks);
            q.ctx[r] = TransferRequest.context(id, prompt, c, hashes);
            int[] g = gen.cache(r).allocate(id, q.blocks);
            // The reused prefix is already in place on the generation side (a prefix-cache hit).
            if (reused > 0) {
                KvPattern.fill(gen.cache(r), java.util.Arrays.copyOf(g, reused), STATE, r, id, q.blocks);
            }
            q.gen[r] = TransferRequest.generation(params, prompt, g, reused,
                    java.util.Arrays.copyOf(hashes, reused));
        }
        return q;
    }

    private static void verify(LocalInstance gen, Req q) {
        for (int r = 0; r < 2; r++) {
            assertThat(q.gen[r].state()).as("%s", q.gen[r]).isEqualTo(RequestState.GENERATION_TRANS_COMPLETE);
            KvPattern.verify(gen.cache(r), q.gen[r].blockIds(), STATE, r, q.id, q.blocks).assertOk();
        }
    }

    private static void free(LocalInstance ctx, LocalInstance gen, Req q) {
        for (int r = 0; r < 2; r++) {
            ctx.cache(r).free(q.id);
            gen.cache(r).free(q.id);
        }
    }

    private static void awaitDone(Req... qs) {
        await().atMost(BOUND).until(() -> java.util.Arrays.stream(qs).allMatch(q ->
                q.ctx[0].isDone() && q.ctx[1].isDone() && q.gen[0].isDone() && q.gen[1].isDone()));
    }

    @Test
    void pushWritesEveryElementIntoTheGenerationPoolAndMovesOnlyMissingBlocks() {
        LocalInstance ctx = start("ctx", new LoopbackTransportProvider(), TransceiverConfig.TransferMode.PULL,
                Duration.ofSeconds(30));
        LocalInstance gen = start("gen", new LoopbackTransportProvider(), TransceiverConfig.TransferMode.PUSH,
                Duration.ofSeconds(30));
        List<Req> qs = new ArrayList<>();
        int[][] cases = {{100, 0}, {8 * 7, 3}, {8 * 5, 5}, {1, 0}};
        for (int i = 0; i < cases.length; i++) {
            Req q = prepare(ctx, gen, 500 + i, cases[i][0], cases[i][1]);
            qs.add(q);
            for (int r = 0; r < 2; r++) {
                gen.transceiver(r).requestAndReceiveAsync(q.gen[r]);
                ctx.transceiver(r).respondAndSendAsync(q.ctx[r]);
            }
        }
        awaitDone(qs.toArray(new Req[0]));
        for (int i = 0; i < qs.size(); i++) {
            Req q = qs.get(i);
            verify(gen, q);
            long expected = (long) (q.blocks - cases[i][1]) * gen.cache(0).layout().blockBytes();
            for (int r = 0; r < 2; r++) {
                assertThat(q.gen[r].kvCacheSize()).as("bytes written: only the missing blocks").isEqualTo(expected);
                assertThat(q.ctx[r].kvCacheSize()).isEqualTo(expected);
            }
            free(ctx, gen, q);
        }
    }

    @Test
    void layerWisePushDeliversEachLayerAsItIsMarkedReady() throws Exception {
        layerWise(TransceiverConfig.TransferMode.PUSH);
    }

    @Test
    void layerWisePullDeliversEachLayerAsItIsMarkedReady() throws Exception {
        layerWise(TransceiverConfig.TransferMode.PULL);
    }

    private void layerWise(TransceiverConfig.TransferMode mode) throws Exception {
        LocalInstance ctx = start("ctx", new LoopbackTransportProvider(), TransceiverConfig.TransferMode.PULL,
                Duration.ofSeconds(30));
        LocalInstance gen = start("gen", new LoopbackTransportProvider(), mode, Duration.ofSeconds(30));
        Req q = prepare(ctx, gen, 600, 8 * 9, 0);
        for (int r = 0; r < 2; r++) {
            ctx.transceiver(r).respondAndSendLayerWise(q.ctx[r]);
            gen.transceiver(r).requestAndReceiveAsync(q.gen[r]);
        }
        int layers = STATE.layerCount(0);
        for (int l = 0; l < layers; l++) {
            for (int r = 0; r < 2; r++) {
                // The next layer has not been computed yet: the generation side must not see it.
                assertThat(q.gen[r].awaitLayer(l, Duration.ofMillis(150))).as("layer %d before it is ready", l)
                        .isFalse();
                q.ctx[r].layerReady(l);
                assertThat(q.gen[r].awaitLayer(l, BOUND)).as("layer %d after it is ready", l).isTrue();
            }
        }
        awaitDone(q);
        verify(gen, q);
        assertThat(q.ctx[0].isLayerWise()).isTrue();
        free(ctx, gen, q);
    }

    @Test
    void aLayerWiseRequestWhoseBlocksTheGenerationSideHoldsEndsWithoutWaitingForLayers() {
        for (TransceiverConfig.TransferMode mode : TransceiverConfig.TransferMode.values()) {
            LocalInstance ctx = start("ctx-" + mode, new LoopbackTransportProvider(),
                    TransceiverConfig.TransferMode.PULL, Duration.ofSeconds(30), 1);
            LocalInstance gen = start("gen-" + mode, new LoopbackTransportProvider(), mode, Duration.ofSeconds(30));
            Req q = prepare(ctx, gen, 750 + mode.ordinal(), 8 * 5, 5);
            for (int r = 0; r < 2; r++) {
                ctx.transceiver(r).respondAndSendLayerWise(q.ctx[r]);
                gen.transceiver(r).requestAndReceiveAsync(q.gen[r]);
            }
            // No layer is ever marked: nothing moves, so nothing waits for one.
            awaitDone(q);
            verify(gen, q);
            for (int r = 0; r < 2; r++) {
                assertThat(q.ctx[r].state()).isEqualTo(RequestState.CONTEXT_COMPLETE);
                assertThat(q.gen[r].kvCacheSize()).isZero();
            }
            free(ctx, gen, q);
        }
    }

    /**
     * Three layer-wise pushes in flight on a context instance with one sender thread: a push waiting for its
     * engine's next layer holds no thread, so each request's first layer reaches the generation side while every
     * request still waits for its second (a thread held per request moved only the first request's layers until
     * its last one). A layer-wise pull keeps its thread (see {@link LayerPump}).
     */
    @Test
    void layerWisePushesBeyondTheSenderThreadsEachMoveALayerAsSoonAsItIsReady() throws Exception {
        LocalInstance ctx = start("ctx", new LoopbackTransportProvider(), TransceiverConfig.TransferMode.PULL,
                Duration.ofSeconds(30), 1);
        LocalInstance gen = start("gen", new LoopbackTransportProvider(), TransceiverConfig.TransferMode.PUSH,
                Duration.ofSeconds(30));
        Req[] qs = {prepare(ctx, gen, 700, 8 * 9, 0), prepare(ctx, gen, 701, 8 * 5, 0),
            prepare(ctx, gen, 702, 8 * 7, 0)};
        for (Req q : qs) {
            for (int r = 0; r < 2; r++) {
                ctx.transceiver(r).respondAndSendLayerWise(q.ctx[r]);
                gen.transceiver(r).requestAndReceiveAsync(q.gen[r]);
            }
        }
        int layers = STATE.layerCount(0);
        for (int l = 0; l < layers; l++) {
            for (Req q : qs) {
                for (int r = 0; r < 2; r++) {
                    q.ctx[r].layerReady(l);
                }
            }
            for (Req q : qs) {
                for (int r = 0; r < 2; r++) {
                    assertThat(q.gen[r].awaitLayer(l, BOUND)).as("request %d, rank %d: layer %d after it is ready",
                            q.id, r, l).isTrue();
                    if (l < layers - 1) {
                        assertThat(q.ctx[r].isDone()).as("request %d, rank %d done before its last layer", q.id, r)
                                .isFalse();
                    }
                }
            }
        }
        awaitDone(qs);
        for (Req q : qs) {
            verify(gen, q);
            free(ctx, gen, q);
        }
    }

    @Test
    void layerWisePushChecksEachLayersWritesWhenItsNoticeArrivesNotAfterTheLastLayer() throws Exception {
        Faults faults = new Faults();
        LocalInstance ctx = start("ctx", new FaultyTransportProvider(new LoopbackTransportProvider(), faults),
                TransceiverConfig.TransferMode.PULL, Duration.ofSeconds(30));
        LocalInstance gen = start("gen", new LoopbackTransportProvider(), TransceiverConfig.TransferMode.PUSH,
                Duration.ofSeconds(30));
        // One byte flipped in the first list of written entries (28 bytes each) that follows a layer notice on a
        // data tag: the receiver must refuse it while later layers are still being computed.
        faults.inject(Fault.once(Fault.Kind.CORRUPT, m -> m.tag() >= dev.kvtransfer.api.transport.Tags.FIRST_DATA_TAG
                && m.length() >= PushEntryFlyweight.LENGTH && m.length() % PushEntryFlyweight.LENGTH == 0
                && m.length() != PushNoticeFlyweight.LENGTH));
        Req q = prepare(ctx, gen, 650, 8 * 9, 0);
        for (int r = 0; r < 2; r++) {
            ctx.transceiver(r).respondAndSendLayerWise(q.ctx[r]);
            gen.transceiver(r).requestAndReceiveAsync(q.gen[r]);
        }
        // Only the first layer of each rank is computed; the others never are during this test's bound.
        for (int r = 0; r < 2; r++) {
            q.ctx[r].layerReady(0);
        }
        await().atMost(BOUND).until(() -> q.gen[0].isDone() || q.gen[1].isDone());
        TransferRequest failed = q.gen[0].isDone() ? q.gen[0] : q.gen[1];
        assertThat(failed.state()).as("%s", failed).isEqualTo(RequestState.TRANS_ERROR);
        assertThat(failed.error().orElseThrow().code()).isEqualTo(ErrorCode.MALFORMED);
        assertThat(faults.injected(Fault.Kind.CORRUPT)).isEqualTo(1);
        // Caught before the done notice could be sent: that needs every layer, and these come only now.
        for (int r = 0; r < 2; r++) {
            q.ctx[r].layerReady(1);
            q.ctx[r].layerReady(2);
        }
        awaitDone(q);
        free(ctx, gen, q);
    }

    @Test
    void aFailedPushRevokesItsGrantsSoAStalledWriterNeverReachesReusedBlocks() throws Exception {
        Faults faults = new Faults();
        LocalInstance ctx = start("ctx", new FaultyTransportProvider(new LoopbackTransportProvider(), faults),
                TransceiverConfig.TransferMode.PULL, Duration.ofSeconds(30));
        LocalInstance gen = start("gen", new LoopbackTransportProvider(), TransceiverConfig.TransferMode.PUSH,
                Duration.ofSeconds(2));
        // The context side stops after its ready signal (a stopped process) for longer than the generation
        // side's deadline, then resumes and writes.
        for (int r = 0; r < 2; r++) {
            String from = ctx.connections(r).localAddress();
            faults.inject(Fault.stall(Duration.ofSeconds(4), m -> m.from().equals(from)
                    && m.tag() >= dev.kvtransfer.api.transport.Tags.FIRST_DATA_TAG));
        }
        Req q = prepare(ctx, gen, 700, 8 * 6, 0);
        for (int r = 0; r < 2; r++) {
            gen.transceiver(r).requestAndReceiveAsync(q.gen[r]);
            ctx.transceiver(r).respondAndSendAsync(q.ctx[r]);
        }
        await().atMost(BOUND).until(() -> q.gen[0].isDone() && q.gen[1].isDone());
        for (int r = 0; r < 2; r++) {
            assertThat(q.gen[r].state()).isEqualTo(RequestState.TRANS_ERROR);
            assertThat(q.gen[r].error().orElseThrow().code()).isEqualTo(ErrorCode.TIMEOUT);
        }
        // The request ended, so its grants are revoked: the engine reuses the blocks for another request.
        long other = 701;
        for (int r = 0; r < 2; r++) {
            KvPattern.fill(gen.cache(r), q.gen[r].blockIds(), STATE, r, other, q.blocks);
        }
        // The stalled writer resumes: its writes are refused, the context side fails, the blocks keep request 701.
        await().atMost(BOUND).until(() -> q.ctx[0].isDone() && q.ctx[1].isDone());
        for (int r = 0; r < 2; r++) {
            // Its writes were refused (the grant was revoked): CANCELLED, or an error if it could not even tell.
            assertThat(q.ctx[r].state()).as("%s", q.ctx[r]).isIn(RequestState.CANCELLED, RequestState.TRANS_ERROR);
            KvPattern.verify(gen.cache(r), q.gen[r].blockIds(), STATE, r, other, q.blocks).assertOk();
        }
        assertThat(faults.injected(Fault.Kind.STALL)).isEqualTo(2);
        free(ctx, gen, q);
    }

    @Test
    void aPrefixThatDisagreesIsRefusedNamingTheBlock() {
        LocalInstance ctx = start("ctx", new LoopbackTransportProvider(), TransceiverConfig.TransferMode.PULL,
                Duration.ofSeconds(30));
        LocalInstance gen = start("gen", new LoopbackTransportProvider(), TransceiverConfig.TransferMode.PUSH,
                Duration.ofSeconds(30));
        Req q = prepare(ctx, gen, 800, 8 * 6, 0);
        long[] wrong = {800 * 1000, 800 * 1000 + 1, 42};
        ContextPhaseParams params = ctx.contextPhaseParams(800, 0);
        for (int r = 0; r < 2; r++) {
            q.gen[r] = TransferRequest.generation(params, q.prompt, q.gen[r].blockIds(), 3, wrong);
            gen.transceiver(r).requestAndReceiveAsync(q.gen[r]);
            ctx.transceiver(r).respondAndSendAsync(q.ctx[r]);
        }
        awaitDone(q);
        for (int r = 0; r < 2; r++) {
            assertThat(q.gen[r].error().orElseThrow().code()).isEqualTo(ErrorCode.UNSUPPORTED_LAYOUT);
            assertThat(q.gen[r].error().orElseThrow().getMessage()).contains("prefix mismatch at block 2");
        }
        free(ctx, gen, q);
        // The responder keeps serving.
        Req ok = prepare(ctx, gen, 801, 8 * 6, 2);
        for (int r = 0; r < 2; r++) {
            gen.transceiver(r).requestAndReceiveAsync(ok.gen[r]);
            ctx.transceiver(r).respondAndSendAsync(ok.ctx[r]);
        }
        awaitDone(ok);
        verify(gen, ok);
        free(ctx, gen, ok);
    }
}
