package dev.kvtransfer.core.transfer;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.KvTransferException;
import dev.kvtransfer.api.layout.BlockDistribution;
import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.api.model.ContextPhaseParams;
import dev.kvtransfer.api.model.DataType;
import dev.kvtransfer.api.transport.TransportConfig;
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
import java.util.Random;
import java.util.Set;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.stream.Collectors;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

/**
 * The generation side's request threads under load (core/README.md "Generation path"): many
 * small requests in flight on two request threads, cancels racing them, a context instance that dies under a
 * waiting request and a queue of others, one context instance that is not ready beside another. Each element
 * arrives (KvPattern), a cancel that returns true leaves the blocks untouched, every request of a dead instance
 * fails with {@code PEER_LOST} naming it, and one instance's wait does not hold up another's requests.
 */
@Timeout(60)
class GenerationPathTest {
    private static final Duration BOUND = Duration.ofSeconds(20);

    private final LoopbackTransportProvider transport = new LoopbackTransportProvider();
    private final WholeBlockFormatterProvider formatter = new WholeBlockFormatterProvider();
    private final List<LocalInstance> instances = new ArrayList<>();
    private final List<Throwable> backgroundErrors = new CopyOnWriteArrayList<>();
    private Set<Thread> threadsBefore;

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

    private static TransceiverConfig config(int requestThreads) {
        return TransceiverConfig.builder().backend("loopback").transferBufferBytes(64 << 10).chunkBytes(1000)
                .kvTransferTimeout(BOUND).senderFutureTimeout(Duration.ofMillis(200))
                .requestThreadsPerPeerInstance(requestThreads).build();
    }

    private LocalInstance start(String name, TransceiverConfig c) {
        LocalInstance i = LocalInstance.builder(name, state()).transport(transport, TransportConfig.builder().build())
                .formatter(formatter).config(c).blocksPerRank(4096).errorHandler(backgroundErrors::add).start();
        instances.add(i);
        return i;
    }

    /** One request of one context rank and one generation rank (TP1 both). */
    private static final class Req {
        final long id;
        final int blocks;
        final TransferRequest ctx;
        final TransferRequest gen;

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
        // What the blocks hold before: another request's pattern (so "not written" is exact, see assertUntouched).
        KvPattern.fill(gen.cache(0), g, gen.cacheState(0), 0, before(id), blocks);
        ContextPhaseParams params = ctx.contextPhaseParams(id, 0);
        return new Req(id, blocks, TransferRequest.context(id, prompt, c), TransferRequest.generation(params, prompt,
                g));
    }

    private static void respond(LocalInstance ctx, Req r) {
        ctx.transceiver(0).respondAndSendAsync(r.ctx);
    }

    private static void request(LocalInstance gen, Req r) {
        gen.transceiver(0).requestAndReceiveAsync(r.gen);
    }

    private static void awaitDone(List<Req> rs) {
        await().atMost(BOUND).pollDelay(Duration.ZERO).pollInterval(Duration.ofMillis(5))
                .until(() -> rs.stream().allMatch(r -> r.gen.isDone()));
    }

    private static void assertExact(LocalInstance gen, Req r) {
        assertThat(r.gen.state()).as("request %d: %s", r.id, r.gen).isEqualTo(RequestState.GENERATION_TRANS_COMPLETE);
        KvPattern.Result v = KvPattern.verify(gen.cache(0), r.gen.blockIds(), gen.cacheState(0), 0, r.id, r.blocks);
        assertThat(v.ok()).as("request %d: %s", r.id, v.firstMismatch()).isTrue();
        assertThat(v.checkedElements()).isPositive();
    }

    /** The pattern a request's generation blocks hold before it is received. */
    private static long before(long id) {
        return 1_000_000 + id;
    }

    /** Never written: every element of the generation blocks still holds what they held before. */
    private static void assertUntouched(LocalInstance gen, Req r) {
        KvPattern.Result v = KvPattern.verify(gen.cache(0), r.gen.blockIds(), gen.cacheState(0), 0, before(r.id),
                r.blocks);
        assertThat(v.ok()).as("request %d must not be written: %s", r.id, v.firstMismatch()).isTrue();
    }

    /** One request through, which also starts the context side's responder. */
    private static void warm(LocalInstance ctx, LocalInstance gen, long id) {
        Req warm = prepare(ctx, gen, id, 4);
        respond(ctx, warm);
        request(gen, warm);
        awaitDone(List.of(warm));
        assertExact(gen, warm);
    }

    /** Starts request {@code w} and waits until the context side holds its info (not ready: nobody responded). */
    private static void occupy(LocalInstance ctx, LocalInstance gen, Req w, int awaiting) {
        request(gen, w);
        await().atMost(BOUND).until(() -> ctx.transceiver(0).contextRequestsAwaitingDispatch() == awaiting);
    }

    @Test
    void manyInFlightOnTwoThreadsAllArriveExactly() {
        LocalInstance ctx = start("ctx", config(2));
        LocalInstance gen = start("gen", config(2));
        List<Req> reqs = new ArrayList<>();
        for (int i = 0; i < 300; i++) {
            reqs.add(prepare(ctx, gen, 1000 + i, 1 + (i * 7) % 24));
        }
        for (Req r : reqs) {
            respond(ctx, r);
        }
        for (Req r : reqs) {
            request(gen, r);
        }
        awaitDone(reqs);
        for (Req r : reqs) {
            assertExact(gen, r);
        }
        assertThat(backgroundErrors).isEmpty();
    }

    @Test
    void cancelWinsExactlyUntilTheInfoIsOutWithManyInFlight() {
        LocalInstance ctx = start("ctx", config(2));
        LocalInstance gen = start("gen", config(2));
        Random random = new Random(11);
        List<Req> reqs = new ArrayList<>();
        for (int i = 0; i < 200; i++) {
            Req r = prepare(ctx, gen, 5000 + i, 1 + random.nextInt(12));
            respond(ctx, r);
            reqs.add(r);
        }
        List<Boolean> cancelled = new ArrayList<>();
        for (Req r : reqs) {
            request(gen, r);
            // Cancel some at once (likely still queued), some after others were submitted.
            cancelled.add(random.nextInt(3) == 0 && gen.transceiver(0).cancelRequest(r.gen));
        }
        for (int i = 0; i < reqs.size(); i += 5) {
            if (!cancelled.get(i)) {
                cancelled.set(i, gen.transceiver(0).cancelRequest(reqs.get(i).gen));
            }
        }
        awaitDone(reqs);
        int won = 0;
        for (int i = 0; i < reqs.size(); i++) {
            Req r = reqs.get(i);
            if (cancelled.get(i)) {
                won++;
                assertThat(r.gen.state()).as("request %d", r.id).isEqualTo(RequestState.CANCELLED);
                assertThat(r.gen.error().orElseThrow().code()).isEqualTo(ErrorCode.CANCELLED);
                assertUntouched(gen, r);
            } else {
                assertExact(gen, r);
            }
        }
        assertThat(won).as("some cancels won").isPositive();
        assertThat(backgroundErrors).isEmpty();
    }

    @Test
    void aDeadContextInstanceFailsEveryWaitingAndQueuedRequestWithPeerLostNamingIt() {
        LocalInstance ctx = start("ctx", config(1));
        LocalInstance gen = start("gen", config(1));
        warm(ctx, gen, 1);
        Req w = prepare(ctx, gen, 2, 8);
        occupy(ctx, gen, w, 1);
        List<Req> batch = new ArrayList<>();
        for (int i = 0; i < 8; i++) {
            Req r = prepare(ctx, gen, 100 + i, 4 + i);
            request(gen, r); // never made ready: they queue behind W
            batch.add(r);
        }
        // The context instance dies: its transport goes away without a word to the generation side.
        ctx.connections(0).close();
        List<Req> all = new ArrayList<>(batch);
        all.add(w);
        awaitDone(all);
        for (Req r : all) {
            assertThat(r.gen.state()).as("request %d", r.id).isNotEqualTo(RequestState.GENERATION_TRANS_COMPLETE);
            KvTransferException e = r.gen.error().orElseThrow();
            assertThat(e.code()).as("request %d: %s", r.id, e.getMessage()).isEqualTo(ErrorCode.PEER_LOST);
            assertThat(e.requestId()).isEqualTo(r.id);
            assertThat(e.getMessage()).contains("context rank 0");
            assertUntouched(gen, r);
        }
    }

    @Test
    void aContextInstanceThatIsNotReadyDoesNotDelayAnother() {
        LocalInstance slow = start("slow", config(1));
        LocalInstance fast = start("fast", config(1));
        LocalInstance gen = start("gen", config(1));
        warm(slow, gen, 299);
        List<Req> stuck = new ArrayList<>();
        for (int i = 0; i < 5; i++) {
            Req r = prepare(slow, gen, 300 + i, 8);
            request(gen, r); // slow never responds (yet): its only request thread waits
            stuck.add(r);
        }
        await().atMost(BOUND).until(() -> slow.transceiver(0).contextRequestsAwaitingDispatch() >= 1);
        List<Req> served = new ArrayList<>();
        for (int i = 0; i < 40; i++) {
            Req r = prepare(fast, gen, 400 + i, 1 + i % 16);
            respond(fast, r);
            request(gen, r);
            served.add(r);
        }
        awaitDone(served);
        for (Req r : served) {
            assertExact(gen, r);
        }
        assertThat(stuck.stream().noneMatch(r -> r.gen.isDone())).as("slow made none ready").isTrue();
        for (Req r : stuck) {
            respond(slow, r);
        }
        awaitDone(stuck);
        for (Req r : stuck) {
            assertExact(gen, r);
        }
        assertThat(backgroundErrors).isEmpty();
    }
}
