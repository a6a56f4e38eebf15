package dev.kvtransfer.formatter.standard;

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

import java.lang.management.ManagementFactory;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.OptionalInt;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.TimeUnit;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

/**
 * Guard of the control plane's heap work (reused buffers, cached plans and states): the steady-state heap a one-block
 * request allocates through the whole path (CacheTransceiver, CacheReceiver / CacheSender with authentication,
 * DefaultTransferSession, the standard formatter with part checksums, the loopback transport, both sides' status
 * agreement), measured over every thread of the JVM with {@code
 * com.sun.management.ThreadMXBean#getThreadAllocatedBytes} — an allocation bound, not a wall-clock one. Between the
 * measured windows, a cancelled request and a timed-out one reuse the same blocks, and every request before and after
 * them arrives exactly (every element checked against {@link KvPattern}): the control plane's caches (plans, durations,
 * MAC state, control buffers) never hand one request another's state.
 */
class ControlPlaneHeapTest {
    /**
     * Bytes per request the guard allows. Measured by this test on 2026-12-01: 15,882 B before the control plane's heap
     * pass (main at 0e73614), 10,962-11,626 B after it (the testkit loopback transport's own garbage and the
     * engine-side objects of each request are included; the bench measures 6.5 KB over Aeron). The bound leaves ~12 %
     * for JIT and GC-timing noise and sits well below the old figure. Lower it when the path allocates less; a change
     * that makes it fail put garbage back on the per-request path.
     */
    static final long BOUND_BYTES_PER_REQUEST = 13_000;
    private static final int WARMUP = 400;
    private static final int MEASURED = 400;

    private final List<Throwable> background = new CopyOnWriteArrayList<>();
    private final List<LocalInstance> instances = new ArrayList<>();
    private final com.sun.management.ThreadMXBean threads =
            (com.sun.management.ThreadMXBean) ManagementFactory.getThreadMXBean();
    private CacheState state;
    private long nextId = 50_000;

    @AfterEach
    void close() {
        for (LocalInstance i : instances) {
            i.close();
        }
    }

    private LocalInstance start(String name, TransceiverConfig config, String fabric) {
        TransportConfig base = TransportConfig.builder().name(name).defaultTimeout(Duration.ofSeconds(30))
                .property(LoopbackTransportProvider.FABRIC_PROPERTY, fabric).build();
        LocalInstance i = LocalInstance.builder(name, state).transport(new LoopbackTransportProvider(), base)
                .formatter(Plugins.discover().formatterFor(state.attentionType())).config(config).blocksPerRank(4)
                .errorHandler(background::add).start();
        instances.add(i);
        return i;
    }

    private long allThreadsAllocated() {
        long[] ids = threads.getAllThreadIds();
        long sum = 0;
        for (long b : threads.getThreadAllocatedBytes(ids)) {
            sum += Math.max(0, b);
        }
        return sum;
    }

    /** One request end to end on fixed blocks; returns what the test thread allocated for fill and verify. */
    private long oneRequest(LocalInstance ctx, LocalInstance gen, int[] ctxBlocks, int[] genBlocks) throws Exception {
        long self = Thread.currentThread().getId();
        long id = nextId++;
        long before = threads.getThreadAllocatedBytes(self);
        KvPattern.fill(ctx.cache(0), ctxBlocks, state, 0, id, 1);
        long filled = threads.getThreadAllocatedBytes(self);
        TransferRequest c = TransferRequest.context(id, state.tokensPerBlock(), ctxBlocks);
        ctx.transceiver(0).respondAndSendAsync(c);
        ContextPhaseParams params = ctx.contextPhaseParams(id, 0);
        TransferRequest g = TransferRequest.generation(params, state.tokensPerBlock(), genBlocks);
        gen.transceiver(0).requestAndReceiveAsync(g);
        g.completion().toCompletableFuture().get(30, TimeUnit.SECONDS);
        c.completion().toCompletableFuture().get(30, TimeUnit.SECONDS);
        assertThat(g.state()).as("request %d: %s", id, g).isEqualTo(RequestState.GENERATION_TRANS_COMPLETE);
        assertThat(c.state()).as("request %d: %s", id, c).isEqualTo(RequestState.CONTEXT_COMPLETE);
        long verifying = threads.getThreadAllocatedBytes(self);
        KvPattern.Result v = KvPattern.verify(gen.cache(0), genBlocks, state, 0, id, 1);
        var l = gen.cache(0).layout();
        assertThat(v.checkedElements()).isEqualTo((long) l.localLayers() * l.kvFactor() * l.localHeads()
                * l.tokensPerBlock() * l.sizePerHead());
        v.assertOk();
        long verified = threads.getThreadAllocatedBytes(self);
        ctx.transceiver(0).checkContextTransferStatus(OptionalInt.empty());
        gen.transceiver(0).checkGenTransferStatus(OptionalInt.empty());
        return (filled - before) + (verified - verifying);
    }

    @Test
    void aOneBlockRequestAllocatesLittleInSteadyStateAndCachesNeverMixRequests() throws Exception {
        assertThat(threads.isThreadAllocatedMemorySupported()).as("this JVM cannot count allocations").isTrue();
        threads.setThreadAllocatedMemoryEnabled(true);
        state = CacheState.builder().uniformKvHeads(4, 4).sizePerHead(16).tokensPerBlock(16)
                .dataType(DataType.FLOAT16).tensorParallelism(1).pipelineParallelism(1).build();
        TransceiverConfig config = TransceiverConfig.builder().kvTransferTimeout(Duration.ofSeconds(2))
                .partChecksums(true).build();
        String fabric = "control-plane-heap-" + System.nanoTime();
        LocalInstance ctx = start("heap-ctx", config, fabric);
        LocalInstance gen = start("heap-gen", config, fabric);
        int[] ctxBlocks = ctx.cache(0).allocate(-1, 1);
        int[] genBlocks = gen.cache(0).allocate(-1, 1);

        for (int i = 0; i < WARMUP; i++) {
            oneRequest(ctx, gen, ctxBlocks, genBlocks);
        }
        long perRequest = measure(ctx, gen, ctxBlocks, genBlocks);

        // A context request cancelled before it is ready, then a generation request nobody answers (timed out):
        // both fail, and the same blocks then serve exact requests again.
        long cancelledId = nextId++;
        TransferRequest cancelled = TransferRequest.context(cancelledId, state.tokensPerBlock(), ctxBlocks);
        ctx.transceiver(0).respondAndSendAsync(cancelled);
        ContextPhaseParams cancelledParams = ctx.contextPhaseParams(cancelledId, 0);
        assertThat(ctx.transceiver(0).cancelRequest(cancelled)).isTrue();
        TransferRequest refused = TransferRequest.generation(cancelledParams, state.tokensPerBlock(), genBlocks);
        gen.transceiver(0).requestAndReceiveAsync(refused);
        long lonelyId = nextId++;
        TransferRequest lonely = TransferRequest.generation(ctx.contextPhaseParams(lonelyId, 0),
                state.tokensPerBlock(), genBlocks);
        gen.transceiver(0).requestAndReceiveAsync(lonely);
        await("the cancelled and the unanswered request to end").atMost(Duration.ofSeconds(30))
                .until(() -> cancelled.isDone() && refused.isDone() && lonely.isDone());
        assertThat(cancelled.state()).isNotEqualTo(RequestState.CONTEXT_COMPLETE);
        assertThat(refused.state()).isNotEqualTo(RequestState.GENERATION_TRANS_COMPLETE);
        assertThat(lonely.state()).isNotEqualTo(RequestState.GENERATION_TRANS_COMPLETE);
        ctx.transceiver(0).checkContextTransferStatus(OptionalInt.empty());
        gen.transceiver(0).checkGenTransferStatus(OptionalInt.empty());
        long after = measure(ctx, gen, ctxBlocks, genBlocks);

        assertThat(background).as("background errors").isEmpty();
        System.out.printf("ControlPlaneHeapTest: %d / %d B per one-block request (loopback, all threads)%n",
                perRequest, after);
        assertThat(Math.min(perRequest, after)).as("heap bytes per one-block request, all threads (first window %d,"
                + " after the failures %d)", perRequest, after).isLessThanOrEqualTo(BOUND_BYTES_PER_REQUEST);
    }

    private long measure(LocalInstance ctx, LocalInstance gen, int[] ctxBlocks, int[] genBlocks) throws Exception {
        long mine = 0;
        long start = allThreadsAllocated();
        for (int i = 0; i < MEASURED; i++) {
            mine += oneRequest(ctx, gen, ctxBlocks, genBlocks);
        }
        long total = allThreadsAllocated() - start;
        return (total - mine) / MEASURED;
    }
}
