package dev.kvtransfer.aeron;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.KvTransferException;
import dev.kvtransfer.api.layout.BlockDistribution;
import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.api.model.DataType;
import dev.kvtransfer.api.transport.TransportConfig;
import dev.kvtransfer.core.RequestState;
import dev.kvtransfer.core.TransceiverConfig;
import dev.kvtransfer.core.TransferRequest;
import dev.kvtransfer.core.local.LocalInstance;
import dev.kvtransfer.testkit.KvPattern;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.atomic.AtomicInteger;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

/**
 * Generation requests waiting for their ready signals over Aeron hold no thread: 200 requests
 * submitted while the context side is not ready cost at most {@code requestThreadsPerPeerInstance} request threads
 * and no thread waits in a receive; made ready, every element of every request arrives (KvPattern). Requests whose
 * deadline passes while posted end once with {@code TIMEOUT} naming them, and the others keep being served.
 */
@Timeout(180)
class AeronPostedReadyTest {
    private static final Duration BOUND = Duration.ofSeconds(90);
    private static final int REQUEST_THREADS = 2;

    private final List<LocalInstance> instances = new ArrayList<>();
    private final List<Throwable> errors = new CopyOnWriteArrayList<>();

    @AfterEach
    void close() {
        for (LocalInstance i : instances) {
            i.close();
        }
    }

    private LocalInstance start(String name, Duration timeout) {
        CacheState s = CacheState.builder().uniformKvHeads(4, 4).sizePerHead(8).tokensPerBlock(4)
                .tensorParallelism(1).pipelineParallelism(1).dataType(DataType.FLOAT16).build();
        TransceiverConfig c = TransceiverConfig.builder().backend(AeronTransportProvider.NAME)
                .transferBufferBytes(64 << 10).chunkBytes(1000).kvTransferTimeout(timeout)
                .senderFutureTimeout(Duration.ofMillis(500)).requestThreadsPerPeerInstance(REQUEST_THREADS)
                .postedReady(true).build();
        LocalInstance i = LocalInstance.builder(name, s).transport(new AeronTransportProvider(),
                TransportConfig.builder().build()).config(c).blocksPerRank(4096).errorHandler(errors::add).start();
        instances.add(i);
        return i;
    }

    private record Req(long id, int blocks, TransferRequest ctx, TransferRequest gen, AtomicInteger completions) {
    }

    private static Req prepare(LocalInstance ctx, LocalInstance gen, long id, int prompt) {
        int blocks = BlockDistribution.blocksFor(prompt, ctx.cacheState().tokensPerBlock());
        int[] c = ctx.cache(0).allocate(id, blocks);
        KvPattern.fill(ctx.cache(0), c, ctx.cacheState(0), 0, id, blocks);
        int[] g = gen.cache(0).allocate(id, blocks);
        Req r = new Req(id, blocks, TransferRequest.context(id, prompt, c),
                TransferRequest.generation(ctx.contextPhaseParams(id, 0), prompt, g), new AtomicInteger());
        r.gen.completion().whenComplete((v, e) -> r.completions.incrementAndGet());
        return r;
    }

    /**
     * Until every request's completion callback ran: {@code isDone()} turns true before the callbacks of the
     * completion stage run (on the completing thread), so counting them right after it raced.
     */
    private static void awaitDone(List<Req> rs) {
        await().atMost(BOUND).pollInterval(Duration.ofMillis(5)).until(() -> rs.stream().allMatch(r -> r.completions.get() > 0));
    }

    private static void assertExact(LocalInstance gen, Req r) {
        assertThat(r.gen.state()).as("request %d: %s", r.id, r.gen).isEqualTo(RequestState.GENERATION_TRANS_COMPLETE);
        KvPattern.Result v = KvPattern.verify(gen.cache(0), r.gen.blockIds(), gen.cacheState(0), 0, r.id, r.blocks);
        assertThat(v.ok()).as("request %d: %s", r.id, v.firstMismatch()).isTrue();
        assertThat(v.checkedElements()).isPositive();
        assertThat(r.completions.get()).as("completions of request %d", r.id).isEqualTo(1);
    }

    @Test
    void twoHundredRequestsWaitingForTheirPrefillHoldNoThreadThenAllArriveExactly() {
        LocalInstance ctx = start("ctx", BOUND);
        LocalInstance gen = start("gen", BOUND);
        Req warm = prepare(ctx, gen, 1, 4);
        ctx.transceiver(0).respondAndSendAsync(warm.ctx);
        gen.transceiver(0).requestAndReceiveAsync(warm.gen);
        awaitDone(List.of(warm));
        assertExact(gen, warm);
        int n = 200;
        List<Req> reqs = new ArrayList<>();
        for (int i = 0; i < n; i++) {
            reqs.add(prepare(ctx, gen, 1000 + i, 1 + (i * 7) % 24));
        }
        for (Req r : reqs) {
            gen.transceiver(0).requestAndReceiveAsync(r.gen); // the context side is not locally ready
        }
        await().atMost(BOUND).until(() -> ctx.transceiver(0).contextRequestsAwaitingDispatch() == n);
        assertThat(reqs.stream().noneMatch(r -> r.gen.isDone())).isTrue();
        Map<Thread, StackTraceElement[]> all = Thread.getAllStackTraces();
        List<String> requestThreads = all.keySet().stream().filter(Thread::isAlive).map(Thread::getName)
                .filter(t -> t.startsWith("kvt-gen-") && t.contains("-recv-")).toList();
        assertThat(requestThreads).as("request threads of the generation rank").hasSizeBetween(1, REQUEST_THREADS);
        List<String> waiting = new ArrayList<>();
        all.forEach((t, stack) -> {
            for (StackTraceElement f : stack) {
                if ((f.getMethodName().equals("recv") && f.getClassName().contains("Connection"))
                        || f.getClassName().endsWith("GenerationHandshake")) {
                    waiting.add(t.getName() + " at " + f);
                    break;
                }
            }
        });
        assertThat(waiting).as("threads waiting in a receive or the handshake").isEmpty();
        for (Req r : reqs) {
            ctx.transceiver(0).respondAndSendAsync(r.ctx);
        }
        awaitDone(reqs);
        for (Req r : reqs) {
            assertExact(gen, r);
        }
        await().atMost(BOUND).until(() -> gen.transceiver(0).generationTagsInUse() == 0);
        assertThat(errors).isEmpty();
    }

    @Test
    void aDeadlineWhilePostedEndsEachRequestOnceWithTimeoutAndOthersKeepBeingServed() {
        LocalInstance slow = start("slow", BOUND);
        LocalInstance fast = start("fast", BOUND);
        LocalInstance gen = start("gen", Duration.ofSeconds(2));
        List<Req> late = new ArrayList<>();
        for (int i = 0; i < 20; i++) {
            Req r = prepare(slow, gen, 100 + i, 8);
            gen.transceiver(0).requestAndReceiveAsync(r.gen); // slow never makes them ready
            late.add(r);
        }
        List<Req> served = new ArrayList<>();
        for (int i = 0; i < 40; i++) {
            Req r = prepare(fast, gen, 200 + i, 1 + i % 16);
            fast.transceiver(0).respondAndSendAsync(r.ctx);
            gen.transceiver(0).requestAndReceiveAsync(r.gen);
            served.add(r);
        }
        awaitDone(served);
        for (Req r : served) {
            assertExact(gen, r);
        }
        awaitDone(late);
        for (Req r : late) {
            KvTransferException e = r.gen.error().orElseThrow();
            assertThat(e.code()).as("request %d: %s", r.id, e.getMessage()).isEqualTo(ErrorCode.TIMEOUT);
            assertThat(e.requestId()).isEqualTo(r.id);
            assertThat(r.completions.get()).isEqualTo(1);
        }
        await().atMost(BOUND).until(() -> gen.transceiver(0).generationTagsInUse() == 0);
        Req after = prepare(fast, gen, 300, 12);
        fast.transceiver(0).respondAndSendAsync(after.ctx);
        gen.transceiver(0).requestAndReceiveAsync(after.gen);
        awaitDone(List.of(after));
        assertExact(gen, after);
    }
}
