package dev.kvtransfer.formatter.standard;

import dev.kvtransfer.api.layout.BlockDistribution;
import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.api.model.ContextPhaseParams;
import dev.kvtransfer.api.model.DataType;
import dev.kvtransfer.api.transport.TransportConfig;
import dev.kvtransfer.core.RequestState;
import dev.kvtransfer.core.TransceiverConfig;
import dev.kvtransfer.core.TransferRequest;
import dev.kvtransfer.core.local.LocalInstance;
import dev.kvtransfer.core.pattern.KvPattern;
import dev.kvtransfer.core.plugin.Plugins;
import dev.kvtransfer.testkit.loopback.LoopbackTransportProvider;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

/**
 * Two context ranks (TP2) that take two requests in opposite orders, serving a TP1 generation rank, with one sender
 * thread each and a transport whose large sends wait for the receiver (loopback with a rendezvous longer than the
 * test). Each generation request thread waits for both ranks' ready signals before it receives any data, so if a
 * ready signal waited for a sender thread, rank 0 would be moving B (waiting for B's receive, which waits for rank
 * 1's signal for B) while rank 1 moved A (waiting for A's receive, which waits for rank 0's signal for A): a cycle
 * that only the deadline breaks. Ready signals go out when a request is dispatched, so both requests complete and
 * every element arrives.
 */
@Timeout(60)
class CrossedReadyOrderTest {
    /** The requests' deadline; both must complete well before it. */
    private static final Duration DEADLINE = Duration.ofSeconds(20);

    private final List<Throwable> background = new CopyOnWriteArrayList<>();
    private final List<LocalInstance> instances = new ArrayList<>();

    @AfterEach
    void close() {
        for (LocalInstance i : instances) {
            i.close();
        }
    }

    private static CacheState state(int tp) {
        // One block is 4 layers x 2 x 2 heads x 64 tokens x 256 dims x 2 B = 512 KiB per context rank: every part
        // message is far above the eager limit, so each send waits for its receive.
        return CacheState.builder().uniformKvHeads(4, 4).sizePerHead(256).tokensPerBlock(64)
                .dataType(DataType.FLOAT16).tensorParallelism(tp).pipelineParallelism(1).build();
    }

    private LocalInstance start(String name, CacheState state, String fabric) {
        TransceiverConfig config = TransceiverConfig.builder().backend("loopback").kvTransferTimeout(DEADLINE)
                .sendConcurrency(1).requestThreadsPerPeerInstance(2).chunkBytes(1 << 20)
                .transferBufferBytes(8L << 20).build();
        TransportConfig transport = TransportConfig.builder().name(name).defaultTimeout(Duration.ofSeconds(30))
                .property(LoopbackTransportProvider.FABRIC_PROPERTY, fabric)
                // Longer than the test: a large send never turns eager, it waits for its receive as Aeron's does.
                .property(LoopbackTransportProvider.RENDEZVOUS_WAIT_US_PROPERTY, Long.toString(120_000_000L))
                .build();
        LocalInstance i = LocalInstance.builder(name, state).transport(new LoopbackTransportProvider(), transport)
                .formatter(Plugins.discover().formatterFor(state.attentionType())).config(config).blocksPerRank(8)
                .errorHandler(background::add).start();
        instances.add(i);
        return i;
    }

    @Test
    void contextRanksThatTakeRequestsInOppositeOrdersStillServeBoth() {
        String fabric = "crossed-ready-" + System.nanoTime();
        LocalInstance ctx = start("crossed-ctx", state(2), fabric);
        LocalInstance gen = start("crossed-gen", state(1), fabric);
        int prompt = 64;
        int blocks = BlockDistribution.blocksFor(prompt, 64);
        // A first request starts the context ranks' responders (they start with the first respond).
        long first = 7_000;
        TransferRequest[] firstCtx = new TransferRequest[2];
        for (int r = 0; r < 2; r++) {
            int[] c = ctx.cache(r).allocate(first, blocks);
            KvPattern.fill(ctx.cache(r), c, ctx.cacheState(r), r, first, blocks);
            firstCtx[r] = TransferRequest.context(first, prompt, c);
            ctx.transceiver(r).respondAndSendAsync(firstCtx[r]);
        }
        TransferRequest firstGen = TransferRequest.generation(ctx.contextPhaseParams(first, 0), prompt,
                gen.cache(0).allocate(first, blocks));
        gen.transceiver(0).requestAndReceiveAsync(firstGen);
        await("the first request").atMost(DEADLINE).until(firstGen::isDone);
        assertThat(firstGen.state()).as("first request: %s", firstGen).isEqualTo(RequestState.GENERATION_TRANS_COMPLETE);
        KvPattern.verify(gen.cache(0), firstGen.blockIds(), gen.cacheState(0), 0, first, blocks).assertOk();
        long a = 7_001;
        long b = 7_002;
        TransferRequest[][] ctxReq = new TransferRequest[2][2];
        TransferRequest[] genReq = new TransferRequest[2];
        long[] ids = {a, b};
        for (int k = 0; k < 2; k++) {
            for (int r = 0; r < 2; r++) {
                int[] c = ctx.cache(r).allocate(ids[k], blocks);
                KvPattern.fill(ctx.cache(r), c, ctx.cacheState(r), r, ids[k], blocks);
                ctxReq[k][r] = TransferRequest.context(ids[k], prompt, c);
            }
            int[] g = gen.cache(0).allocate(ids[k], blocks);
            ContextPhaseParams params = ctx.contextPhaseParams(ids[k], 0);
            genReq[k] = TransferRequest.generation(params, prompt, g);
        }
        // Both requests ask first, so each context rank dispatches a request the moment the engine makes it ready.
        gen.transceiver(0).requestAndReceiveAsync(genReq[0]);
        gen.transceiver(0).requestAndReceiveAsync(genReq[1]);
        await("both context ranks to hold both requests' infos").atMost(DEADLINE)
                .until(() -> ctx.transceiver(0).contextRequestsAwaitingDispatch() == 2
                        && ctx.transceiver(1).contextRequestsAwaitingDispatch() == 2);
        // Opposite orders: rank 0 takes B first, rank 1 takes A first.
        ctx.transceiver(0).respondAndSendAsync(ctxReq[1][0]);
        ctx.transceiver(0).respondAndSendAsync(ctxReq[0][0]);
        ctx.transceiver(1).respondAndSendAsync(ctxReq[0][1]);
        ctx.transceiver(1).respondAndSendAsync(ctxReq[1][1]);

        await("both requests to end on both sides").atMost(DEADLINE.plusSeconds(10))
                .until(() -> genReq[0].isDone() && genReq[1].isDone() && ctxReq[0][0].isDone()
                        && ctxReq[0][1].isDone() && ctxReq[1][0].isDone() && ctxReq[1][1].isDone());
        for (int k = 0; k < 2; k++) {
            assertThat(genReq[k].state()).as("generation request %d: %s", ids[k], genReq[k])
                    .isEqualTo(RequestState.GENERATION_TRANS_COMPLETE);
            for (int r = 0; r < 2; r++) {
                assertThat(ctxReq[k][r].state()).as("context rank %d, request %d: %s", r, ids[k], ctxReq[k][r])
                        .isEqualTo(RequestState.CONTEXT_COMPLETE);
            }
            KvPattern.Result v = KvPattern.verify(gen.cache(0), genReq[k].blockIds(), gen.cacheState(0), 0, ids[k],
                    blocks);
            v.assertOk();
            assertThat(v.checkedElements()).isEqualTo(4L * 2 * 4 * 64 * 256);
        }
        assertThat(background).as("background errors").isEmpty();
    }
}
