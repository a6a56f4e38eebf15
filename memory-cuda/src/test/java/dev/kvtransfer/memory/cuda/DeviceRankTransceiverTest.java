package dev.kvtransfer.memory.cuda;

import dev.kvtransfer.api.layout.BlockDistribution;
import dev.kvtransfer.api.layout.PoolLayout;
import dev.kvtransfer.api.memory.MemoryKind;
import dev.kvtransfer.api.model.AttentionType;
import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.api.model.ContextPhaseParams;
import dev.kvtransfer.api.model.DataType;
import dev.kvtransfer.api.transport.TransportConfig;
import dev.kvtransfer.core.RequestState;
import dev.kvtransfer.core.TransferRequest;
import dev.kvtransfer.core.buffer.DefaultTransferBufferPool;
import dev.kvtransfer.core.local.LocalInstance;
import dev.kvtransfer.testkit.KvPattern;
import dev.kvtransfer.testkit.LayoutPair;
import dev.kvtransfer.testkit.loopback.LoopbackTransportProvider;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.MethodSource;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.stream.Stream;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;
import static org.junit.jupiter.params.provider.Arguments.arguments;

/**
 * A rank whose KV pool is on the device works through the whole stack: two {@link LocalInstance}s over
 * loopback, every rank's memory from one {@link CudaBufferManager} on the fake runtime (device pool, pinned staging
 * from core's {@code RankAssembly}, core's host control buffers), requests through the transceivers' responder,
 * sender and receiver threads, every element verified on the device pools. The loopback refuses device memory,
 * so a device buffer reaching the transport anywhere in core or a formatter fails the request.
 */
class DeviceRankTransceiverTest {
    private static final AtomicLong FABRICS = new AtomicLong();
    private static final AtomicLong IDS = new AtomicLong(77_000);

    private static CudaBufferManager fake() {
        return new CudaBufferManager(new FakeCudaRuntime(0), TimeUnit.SECONDS.toNanos(10),
                CudaBufferManager.HOST_ALLOC_LIMIT, false);
    }

    static Stream<Arguments> pairs() {
        CacheState.Builder std = CacheState.builder().uniformKvHeads(4, 4).sizePerHead(32).tokensPerBlock(8)
                .dataType(DataType.FLOAT16);
        CacheState.Builder mla = CacheState.builder().uniformKvHeads(4, 1).sizePerHead(64).tokensPerBlock(8)
                .dataType(DataType.BFLOAT16).attentionType(AttentionType.MLA).kvFactor(1);
        return Stream.of(
                arguments("std TP2 -> TP1, block -> block", std.tensorParallelism(2).build(),
                        std.tensorParallelism(1).build()),
                arguments("std TP1 -> PP2, layer-nhd -> layer-hnd",
                        std.tensorParallelism(1).poolLayout(PoolLayout.LAYER_NHD).build(),
                        std.pipelineParallelism(2).poolLayout(PoolLayout.LAYER_HND).build()),
                arguments("mla TP1 -> TP2 attention DP", mla.tensorParallelism(1).build(),
                        mla.tensorParallelism(2).attentionDp(true, 0, 2).build()));
    }

    @ParameterizedTest(name = "{0}")
    @MethodSource("pairs")
    void required_1_devicePoolsOnBothSidesMoveThroughTheTransceivers(String name, CacheState ctxState,
                                                                       CacheState genState) {
        String fabric = "device-rank-" + FABRICS.incrementAndGet();
        TransportConfig base = TransportConfig.builder().defaultTimeout(Duration.ofSeconds(20))
                .property(LoopbackTransportProvider.FABRIC_PROPERTY, fabric).build();
        try (LocalInstance ctx = LocalInstance.builder("ctx", ctxState).transport(new LoopbackTransportProvider(), base)
                .memory(DeviceRankTransceiverTest::fake, MemoryKind.DEVICE).blocksPerRank(40).start();
             LocalInstance gen = LocalInstance.builder("gen", genState).transport(new LoopbackTransportProvider(), base)
                     .memory(DeviceRankTransceiverTest::fake, MemoryKind.DEVICE).blocksPerRank(40).start()) {
            assertThat(ctx.cache(0).memoryKind()).isEqualTo(MemoryKind.DEVICE);
            assertThat(DefaultTransferBufferPool.stagingKindFor(ctx.cache(0).memoryKind()))
                    .isEqualTo(MemoryKind.PINNED_HOST);
            for (int i = 0; i < 2; i++) {
                transfer(ctx, gen, ctxState, genState, 60 + 37 * i);
            }
        }
    }

    /**
     * A generation instance configured for push whose pool is on the device asks for a pull (no grants: nothing
     * registers device memory for one-sided writes here), and the request moves every element, not pushed.
     */
    @org.junit.jupiter.api.Test
    void required_2_aPushAskedIntoADevicePoolIsPulled() {
        CacheState.Builder std = CacheState.builder().uniformKvHeads(4, 4).sizePerHead(32).tokensPerBlock(8)
                .dataType(DataType.FLOAT16).poolLayout(PoolLayout.LAYER_NHD);
        CacheState cs = std.tensorParallelism(2).build();
        CacheState gs = std.tensorParallelism(1).build();
        String fabric = "device-rank-" + FABRICS.incrementAndGet();
        TransportConfig base = TransportConfig.builder().defaultTimeout(Duration.ofSeconds(20))
                .property(LoopbackTransportProvider.FABRIC_PROPERTY, fabric).build();
        dev.kvtransfer.core.TransceiverConfig push = dev.kvtransfer.core.TransceiverConfig.builder()
                .backend("loopback").transferMode(dev.kvtransfer.core.TransceiverConfig.TransferMode.PUSH).build();
        try (LocalInstance ctx = LocalInstance.builder("ctx", cs).transport(new LoopbackTransportProvider(), base)
                .memory(DeviceRankTransceiverTest::fake, MemoryKind.DEVICE).blocksPerRank(40).start();
             LocalInstance gen = LocalInstance.builder("gen", gs).transport(new LoopbackTransportProvider(), base)
                     .memory(DeviceRankTransceiverTest::fake, MemoryKind.DEVICE).config(push).blocksPerRank(40)
                     .start()) {
            List<TransferRequest> genReqs = transfer(ctx, gen, cs, gs, 77);
            for (TransferRequest r : genReqs) {
                assertThat(r.wasPushed()).as("%s into a device pool", r).isFalse();
            }
        }
    }

    private static List<TransferRequest> transfer(LocalInstance ctx, LocalInstance gen, CacheState ctxState,
                                                  CacheState genState, int prompt) {
        long id = IDS.incrementAndGet();
        CacheState cs = ctxState.attentionDpEnabled() ? ctxState.withDpRank(0) : ctxState;
        CacheState gs = genState.attentionDpEnabled() ? genState.withDpRank((int) (id % genState.dpSize()))
                : genState;
        int total = BlockDistribution.blocksFor(prompt, cs.tokensPerBlock());
        List<TransferRequest> ctxReqs = new ArrayList<>();
        List<Integer> ctxRanks = new ArrayList<>();
        for (int r = 0; r < ctx.ranks(); r++) {
            if (!LayoutPair.serves(cs, r)) {
                continue;
            }
            int[] ids = ctx.cache(r).allocate(id, BlockDistribution.count(total, cs.contextParallelism(),
                    cs.cpRank(r)));
            KvPattern.fill(ctx.cache(r), ctx.bufferManager(r), ids, ctx.cacheState(r), r, id, total);
            ctxRanks.add(r);
            ctxReqs.add(TransferRequest.context(id, prompt, ids));
        }
        ContextPhaseParams params = ctx.contextPhaseParams(id, ctxRanks.get(0));
        List<TransferRequest> genReqs = new ArrayList<>();
        List<Integer> genRanks = new ArrayList<>();
        for (int r = 0; r < gen.ranks(); r++) {
            if (!LayoutPair.serves(gs, r)) {
                continue;
            }
            int[] ids = gen.cache(r).allocate(id, BlockDistribution.count(total, gs.contextParallelism(),
                    gs.cpRank(r)));
            KvPattern.fill(gen.cache(r), gen.bufferManager(r), ids, gen.cacheState(r), r, id + 1_000_000, total);
            genRanks.add(r);
            genReqs.add(TransferRequest.generation(params, prompt, ids));
        }
        for (int i = 0; i < ctxRanks.size(); i++) {
            ctx.transceiver(ctxRanks.get(i)).respondAndSendAsync(ctxReqs.get(i));
        }
        for (int i = 0; i < genRanks.size(); i++) {
            gen.transceiver(genRanks.get(i)).requestAndReceiveAsync(genReqs.get(i));
        }
        List<TransferRequest> all = new ArrayList<>(ctxReqs);
        all.addAll(genReqs);
        await("request " + id).atMost(Duration.ofSeconds(30)).pollInterval(Duration.ofMillis(10))
                .until(() -> all.stream().allMatch(TransferRequest::isDone));
        for (TransferRequest r : ctxReqs) {
            assertThat(r.state()).as("context side of %d: %s", id, r).isEqualTo(RequestState.CONTEXT_COMPLETE);
        }
        for (int i = 0; i < genRanks.size(); i++) {
            int r = genRanks.get(i);
            TransferRequest req = genReqs.get(i);
            assertThat(req.state()).as("generation rank %d of %d: %s", r, id, req)
                    .isEqualTo(RequestState.GENERATION_TRANS_COMPLETE);
            KvPattern.Result v = KvPattern.verify(gen.cache(r), gen.bufferManager(r), req.blockIds(),
                    gen.cacheState(r), r, id, total);
            assertThat(v.checkedElements()).isEqualTo(req.blockIds().length * gen.cache(r).layout().blockBytes()
                    / gen.cache(r).layout().elementBytes());
            v.assertOk();
        }
        for (int r : ctxRanks) {
            ctx.cache(r).free(id);
        }
        for (int r : genRanks) {
            gen.cache(r).free(id);
        }
        return genReqs;
    }
}
