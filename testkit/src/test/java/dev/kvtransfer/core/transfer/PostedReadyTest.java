package dev.kvtransfer.core.transfer;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.KvTransferException;
import dev.kvtransfer.api.layout.BlockDistribution;
import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.api.model.ContextPhaseParams;
import dev.kvtransfer.api.model.DataType;
import dev.kvtransfer.api.transport.TransportConfig;
import dev.kvtransfer.api.transport.TransportProvider;
import dev.kvtransfer.core.RequestState;
import dev.kvtransfer.core.TransceiverConfig;
import dev.kvtransfer.core.TransferRequest;
import dev.kvtransfer.core.local.LocalInstance;
import dev.kvtransfer.core.testsupport.WholeBlockFormatterProvider;
import dev.kvtransfer.testkit.KvPattern;
import dev.kvtransfer.testkit.loopback.LoopbackTransportProvider;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.stream.Collectors;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

/**
 * Generation requests waiting for their ready signals with no thread ({@link PostedReady}), on the
 * loopback transport (which posts receives): 1,000 requests submitted while the context side is not ready hold at
 * most {@code requestThreadsPerPeerInstance} request threads and no thread parked in a receive, then all arrive
 * exactly; close, the deadline and a refused cancel while posted end each request once, with the right code naming
 * it, and the other requests keep being served. Every element is checked ({@link KvPattern}).
 */
@Timeout(120)
class PostedReadyTest {
    private static final Duration BOUND = Duration.ofSeconds(60);
    private static final int REQUEST_THREADS = 2;

    private final WholeBlockFormatterProvider formatter = new WholeBlockFormatterProvider();
    private final List<LocalInstance> instances = new ArrayList<>();
    private final List<Throwable> backgroundErrors = new CopyOnWriteArrayList<>();
    private Set<Thread> threadsBefore;

    /** @return the transport under test (it must post receives) */
    TransportProvider transport() {
        return new LoopbackTransportProvider();
    }

    @BeforeEach
    void before() {
        threadsBefore = Set.copyOf(Thread.getAllStackTraces().keySet());
    }

    @AfterEach
    void after() {
        for (LocalInstance i : instances) {
            i.close();
        }
        await().atMost(BOUND).until(() -> Thread.getAllStackTraces().keySet().stream()
                .filter(t -> t.isAlive() && !threadsBefore.contains(t) && t.getName().startsWith("kvt-"))
                .map(Thread::getName).collect(Collectors.toList()).isEmpty());
    }

    private static CacheState state() {
        return CacheState.builder().uniformKvHeads(4, 4).sizePerHead(8).tokensPerBlock(4).tensorParallelism(1)
                .pipelineParallelism(1).dataType(DataType.FLOAT16).build();
    }

    private static TransceiverConfig config(Duration timeout) {
        return TransceiverConfig.builder().backend("loopback").transferBufferBytes(64 << 10).chunkBytes(1000)
                .kvTransferTimeout(timeout).senderFutureTimeout(Duration.ofMillis(200))
                .requestThreadsPerPeerInstance(REQUEST_THREADS).postedReady(true).build();
    }

    private LocalInstance start(String name, TransceiverConfig c) {
        LocalInstance i = LocalInstance.builder(name, state()).transport(transport(), TransportConfig.builder().build())
                .formatter(formatter).config(c).blocksPerRank(8192).errorHandler(backgroundErrors::add).start();
        instances.add(i);
        return i;
    }

    /** One request of one context rank and one generation rank, with how often its completion was reported. */
    private static final class Req {
        final long id;
        final int blocks;
        final TransferRequest ctx;
        final TransferRequest gen;
        final AtomicInteger completions = new AtomicInteger();

        Req(long id, int blocks, TransferRequest ctx, TransferRequest gen) {
            this.id = id;
            this.blocks = blocks;
            this.ctx = ctx;
            this.gen = gen;
        }
    }

    private static Req prepare(LocalInstance ctx, LocalInstance gen, long id, int prompt) {
        int blocks = BlockDistribution.blocksFor(prompt, ctx.cacheState().tokensPerBlock());
        int[] c = ctx.cache(0).allocate(id, blocks);
        KvPattern.fill(ctx.cache(0), c, ctx.cacheState(0), 0, id, blocks);
        int[] g = gen.cache(0).allocate(id, blocks);
        KvPattern.fill(gen.cache(0), g, gen.cacheState(0), 0, before(id), blocks);
        ContextPhaseParams params = ctx.contextPhaseParams(id, 0);
        Req r = new Req(id, blocks, TransferRequest.context(id, prompt, c), TransferRequest.generation(params, prompt,
                g));
        r.gen.completion().whenComplete((v, e) -> r.completions.incrementAndGet());
        return r;
    }

    private static long before(long id) {
        return 1_000_000 + id;
    }

    /**
     * Until every request's completion callback ran: {@code isDone()} turns true before the callbacks of the
     * completion stage run (on the completing thread), so counting them right after it raced.
     */
    private static void awaitDone(List<Req> rs) {
        await().atMost(BOUND).pollDelay(Duration.ZERO).pollInterval(Duration.ofMillis(5))
                .until(() -> rs.stream().allMatch(r -> r.completions.get() > 0));
    }

    private static void assertExact(LocalInstance gen, Req r) {
        assertThat(r.gen.state()).as("request %d: %s", r.id, r.gen).isEqualTo(RequestState.GENERATION_TRANS_COMPLETE);
        KvPattern.Result v = KvPattern.verify(gen.cache(0), r.gen.blockIds(), gen.cacheState(0), 0, r.id, r.blocks);
        assertThat(v.ok()).as("request %d: %s", r.id, v.firstMismatch()).isTrue();
        assertThat(v.checkedElements()).isPositive();
    }

    private static void assertUntouched(LocalInstance gen, Req r) {
        KvPattern.Result v = KvPattern.verify(gen.cache(0), r.gen.blockIds(), gen.cacheState(0), 0, before(r.id),
                r.blocks);
        assertThat(v.ok()).as("request %d must not be written: %s", r.id, v.firstMismatch()).isTrue();
    }

    private static void assertFailed(Req r, ErrorCode code) {
        assertThat(r.gen.state()).as("request %d", r.id).isNotEqualTo(RequestState.GENERATION_TRANS_COMPLETE);
        KvTransferException e = r.gen.error().orElseThrow();
        assertThat(e.code()).as("request %d: %s", r.id, e.getMessage()).isEqualTo(code);
        assertThat(e.requestId()).isEqualTo(r.id);
    }

    private static void warm(LocalInstance ctx, LocalInstance gen, long id) {
        Req warm = prepare(ctx, gen, id, 4);
        ctx.transceiver(0).respondAndSendAsync(warm.ctx);
        gen.transceiver(0).requestAndReceiveAsync(warm.gen);
        awaitDone(List.of(warm));
        assertExact(gen, warm);
    }

    /**
     * The generation rank's request threads ({@code -recv-} in their names) are at most the pool's size, and no
     * thread of the JVM waits in a transport receive or in the handshake.
     */
    private static void assertNoThreadPerRequest(String genPrefix) {
        Map<Thread, StackTraceElement[]> all = Thread.getAllStackTraces();
        List<String> requestThreads = all.keySet().stream().filter(Thread::isAlive)
                .map(Thread::getName).filter(n -> n.startsWith(genPrefix) && n.contains("-recv-")).toList();
        assertThat(requestThreads).as("request threads of the generation rank").hasSizeBetween(1, REQUEST_THREADS);
        List<String> inRecv = new ArrayList<>();
        all.forEach((t, stack) -> {
            for (StackTraceElement f : stack) {
                boolean recv = f.getMethodName().equals("recv") && f.getClassName().contains("Connection");
                boolean handshake = f.getClassName().endsWith("GenerationHandshake");
                if (recv || handshake) {
                    inRecv.add(t.getName() + " at " + f);
                    break;
                }
            }
        });
        assertThat(inRecv).as("threads waiting in a receive or the handshake").isEmpty();
    }

    private static String threadPrefix(LocalInstance gen) {
        return gen.transceiver(0).toString();
    }

    @Test
    void thousandRequestsWaitingForTheirPrefillHoldNoThreadThenAllArriveExactly() {
        LocalInstance ctx = start("ctx", config(BOUND));
        LocalInstance gen = start("gen", config(BOUND));
        warm(ctx, gen, 1);
        int n = 1000;
        List<Req> reqs = new ArrayList<>();
        for (int i = 0; i < n; i++) {
            reqs.add(prepare(ctx, gen, 10_000 + i, 1 + (i * 7) % 24));
        }
        for (Req r : reqs) {
            gen.transceiver(0).requestAndReceiveAsync(r.gen); // the context side is not locally ready: no respond
        }
        await().atMost(BOUND).until(() -> ctx.transceiver(0).contextRequestsAwaitingDispatch() == n);
        assertThat(reqs.stream().noneMatch(r -> r.gen.isDone())).isTrue();
        assertNoThreadPerRequest("kvt-gen-");
        for (Req r : reqs) {
            ctx.transceiver(0).respondAndSendAsync(r.ctx);
        }
        awaitDone(reqs);
        for (Req r : reqs) {
            assertExact(gen, r);
            assertThat(r.completions.get()).as("completions of request %d", r.id).isEqualTo(1);
        }
        await().atMost(BOUND).until(() -> gen.transceiver(0).generationTagsInUse() == 0);
        assertThat(backgroundErrors).isEmpty();
    }

    @Test
    void aDeadlineWhilePostedEndsEachRequestOnceWithTimeoutAndOthersKeepBeingServed() {
        LocalInstance slow = start("slow", config(BOUND));
        LocalInstance fast = start("fast", config(BOUND));
        LocalInstance gen = start("gen", config(Duration.ofMillis(800)));
        warm(slow, gen, 1);
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
            assertFailed(r, ErrorCode.TIMEOUT);
            assertThat(r.gen.error().orElseThrow().getMessage()).contains("context rank 0");
            assertUntouched(gen, r);
        }
        await().atMost(BOUND).until(() -> gen.transceiver(0).generationTagsInUse() == 0);
        // Still serving after the deadlines.
        Req after = prepare(fast, gen, 300, 12);
        fast.transceiver(0).respondAndSendAsync(after.ctx);
        gen.transceiver(0).requestAndReceiveAsync(after.gen);
        awaitDone(List.of(after));
        assertExact(gen, after);
        for (Req r : late) {
            assertThat(r.completions.get()).as("completions of request %d", r.id).isEqualTo(1);
        }
    }

    @Test
    void cancelIsRefusedWhilePostedAndCloseEndsEveryPostedRequestOnceAsCancelled() {
        LocalInstance ctx = start("ctx", config(BOUND));
        LocalInstance gen = start("gen", config(BOUND));
        warm(ctx, gen, 1);
        List<Req> waiting = new ArrayList<>();
        for (int i = 0; i < 50; i++) {
            Req r = prepare(ctx, gen, 400 + i, 4 + i % 8);
            gen.transceiver(0).requestAndReceiveAsync(r.gen);
            waiting.add(r);
        }
        await().atMost(BOUND).until(() -> ctx.transceiver(0).contextRequestsAwaitingDispatch() == waiting.size());
        // Its infos are out: cancel is refused (the context side may already send), the request goes on.
        Req refused = waiting.get(0);
        assertThat(gen.transceiver(0).cancelRequest(refused.gen)).isFalse();
        ctx.transceiver(0).respondAndSendAsync(refused.ctx);
        awaitDone(List.of(refused));
        assertExact(gen, refused);
        List<Req> rest = waiting.subList(1, waiting.size());
        assertThat(rest.stream().noneMatch(r -> r.gen.isDone())).isTrue();
        gen.transceiver(0).close();
        awaitDone(rest);
        for (Req r : rest) {
            assertFailed(r, ErrorCode.CANCELLED);
            assertUntouched(gen, r);
        }
        gen.connections(0).close(); // the posted receives end; their tags come back
        await().atMost(BOUND).until(() -> gen.transceiver(0).generationTagsInUse() == 0);
        for (Req r : waiting) {
            assertThat(r.completions.get()).as("completions of request %d", r.id).isEqualTo(1);
        }
    }
}
