package dev.kvtransfer.testkit;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.KvTransferException;
import dev.kvtransfer.api.format.FormatterProvider;
import dev.kvtransfer.api.layout.BlockDistribution;
import dev.kvtransfer.api.model.AttentionType;
import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.api.model.ContextPhaseParams;
import dev.kvtransfer.api.model.RecurrentStateShape;
import dev.kvtransfer.api.transport.TransportConfig;
import dev.kvtransfer.api.transport.TransportProvider;
import dev.kvtransfer.core.RequestState;
import dev.kvtransfer.core.TransceiverConfig;
import dev.kvtransfer.core.TransferRequest;
import dev.kvtransfer.core.TransferStatus;
import dev.kvtransfer.core.local.LocalInstance;
import dev.kvtransfer.core.plugin.Plugins;
import dev.kvtransfer.core.pattern.WindowPattern;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.DynamicTest;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestFactory;
import org.junit.jupiter.api.Timeout;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.OptionalInt;
import java.util.Set;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.stream.Stream;
import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

/**
 * Moving requests between a context and a generation {@link LocalInstance} in tests: allocate and fill the
 * context blocks with {@link KvPattern}, make them ready, ask for them, wait, and check every element. Used by the
 * transceiver and fault conformance suites; a backend's own tests may use it too.
 */
public final class TransferFixture {
    private static final AtomicLong NEXT_ID = new AtomicLong(1_000);
    /** Added to a request id for the poison written into the generation side's recurrent states. */
    private static final long STATE_POISON = 1L << 41;
    private static final long WINDOW_POISON = 1L << 42;

    private TransferFixture() {
    }

    /** One request across both instances: the ranks that serve it and their handles. */
    public static final class Transfer {
        /** The context request id. */
        public final long id;
        final int prompt;
        final int totalBlocks;
        final CacheState ctxState;
        final CacheState genState;
        final List<Integer> ctxRanks = new ArrayList<>();
        final List<Integer> genRanks = new ArrayList<>();
        final List<TransferRequest> ctx = new ArrayList<>();
        final List<TransferRequest> gen = new ArrayList<>();

        Transfer(long id, int prompt, CacheState ctxState, CacheState genState) {
            this.id = id;
            this.prompt = prompt;
            this.ctxState = ctxState;
            this.genState = genState;
            this.totalBlocks = BlockDistribution.blocksFor(prompt, ctxState.tokensPerBlock());
        }

        /** @return every handle of the transfer, context ones first */
        public List<TransferRequest> all() {
            List<TransferRequest> a = new ArrayList<>(ctx);
            a.addAll(gen);
            return a;
        }
    }

    /**
     * Allocates and fills the context blocks and allocates the generation blocks of one request.
     *
     * @param ctx       context instance
     * @param gen       generation instance
     * @param ctxState  context state for the request (its DP rank picks the serving ranks)
     * @param genState  generation state for the request
     * @param prompt    context prompt length
     * @param genPrompt prompt length the generation side asks for (normally {@code prompt})
     * @return the prepared transfer
     */
    public static Transfer prepare(LocalInstance ctx, LocalInstance gen, CacheState ctxState, CacheState genState,
                                      int prompt, int genPrompt) {
        return prepare(ctx, gen, ctxState, genState, prompt, genPrompt, 0);
    }

    /**
     * As {@link #prepare(LocalInstance, LocalInstance, CacheState, CacheState, int, int)}, with prefix reuse: the
     * context side knows every block's hash ({@link #blockHash}), the generation side already holds the first
     * {@code reused} blocks (filled with the pattern, as a prefix cache holds them) and asks only for the rest.
     *
     * @param ctx       context instance
     * @param gen       generation instance
     * @param ctxState  context state for the request
     * @param genState  generation state for the request
     * @param prompt    context prompt length
     * @param genPrompt prompt length the generation side asks for
     * @param reused    leading global blocks the generation side holds (0 = none)
     * @return the prepared transfer
     */
    public static Transfer prepare(LocalInstance ctx, LocalInstance gen, CacheState ctxState, CacheState genState,
                                      int prompt, int genPrompt, int reused) {
        Transfer t = new Transfer(NEXT_ID.incrementAndGet(), prompt, ctxState, genState);
        long[] hashes = new long[t.totalBlocks];
        for (int b = 0; b < hashes.length; b++) {
            hashes[b] = blockHash(t.id, b);
        }
        int genTotal = BlockDistribution.blocksFor(genPrompt, genState.tokensPerBlock());
        for (int r = 0; r < ctx.ranks(); r++) {
            if (!LayoutPair.serves(ctxState, r)) {
                continue;
            }
            int cp = ctxState.contextParallelism();
            int[] ids = ctx.cache(r).allocate(t.id, BlockDistribution.count(t.totalBlocks, cp, ctxState.cpRank(r)));
            KvPattern.fill(ctx.cache(r), ids, ctx.cacheState(r), r, t.id, t.totalBlocks);
            if (RecurrentStateShape.holdsState(ctx.cacheState(r), r)) {
                KvPattern.fillRecurrent(ctx.cache(r).recurrentState(), ctx.cacheState(r), r, t.id);
            }
            t.ctxRanks.add(r);
            t.ctx.add(TransferRequest.context(t.id, prompt, ids, hashes));
        }
        ContextPhaseParams params = ctx.contextPhaseParams(t.id, t.ctxRanks.get(0));
        for (int r = 0; r < gen.ranks(); r++) {
            if (!LayoutPair.serves(genState, r)) {
                continue;
            }
            int cp = genState.contextParallelism();
            int[] ids = gen.cache(r).allocate(t.id, BlockDistribution.count(genTotal, cp, genState.cpRank(r)));
            t.genRanks.add(r);
            if (RecurrentStateShape.holdsState(gen.cacheState(r), r)) {
                // A hybrid model's states, poisoned: the transfer must overwrite every element.
                KvPattern.fillRecurrent(gen.cache(r).recurrentState(), gen.cacheState(r), r, t.id,
                        t.id + STATE_POISON);
            }
            if (reused > 0) {
                KvPattern.fill(gen.cache(r), ids, gen.cacheState(r), r, t.id, genTotal, 0, reused);
            }
            if (gen.cacheState(r).windowGroups() != null) {
                // Sliding windows, poisoned after the prefix: the blocks before each window must keep the poison.
                KvPattern.fill(gen.cache(r), ids, gen.cacheState(r), r, t.id + WINDOW_POISON, genTotal, reused,
                        genTotal);
            }
            t.gen.add(reused > 0
                    ? TransferRequest.generation(params, genPrompt, ids, reused, java.util.Arrays.copyOf(hashes, reused))
                    : TransferRequest.generation(params, genPrompt, ids));
        }
        return t;
    }

    /**
     * The prefix-cache key of a request's block in these suites.
     *
     * @param requestId the request
     * @param block     global block index
     * @return its hash
     */
    public static long blockHash(long requestId, int block) {
        return KvPattern.mix(requestId * 0x9E3779B97F4A7C15L + block);
    }

    /** Context ranks of the transfer make it ready. */
    public static void respond(LocalInstance ctx, Transfer t) {
        for (int i = 0; i < t.ctxRanks.size(); i++) {
            ctx.transceiver(t.ctxRanks.get(i)).respondAndSendAsync(t.ctx.get(i));
        }
    }

    /** Generation ranks of the transfer ask for it. */
    public static void request(LocalInstance gen, Transfer t) {
        for (int i = 0; i < t.genRanks.size(); i++) {
            gen.transceiver(t.genRanks.get(i)).requestAndReceiveAsync(t.gen.get(i));
        }
    }

    /** Asserts both sides completed and every element of every generation rank is the pattern. */
    public static void assertExact(LocalInstance gen, Transfer t) {
        for (TransferRequest r : t.ctx) {
            // Both sides in the message: a context send that timed out is explained by its counterpart's end.
            assertThat(r.state()).as("context side of request %d: %s; its generation side: %s", t.id, r, t.gen)
                    .isEqualTo(RequestState.CONTEXT_COMPLETE);
        }
        for (int i = 0; i < t.genRanks.size(); i++) {
            int rank = t.genRanks.get(i);
            TransferRequest r = t.gen.get(i);
            assertThat(r.state()).as("generation rank %d of request %d: %s", rank, t.id, r)
                    .isEqualTo(RequestState.GENERATION_TRANS_COMPLETE);
            KvPattern.Result v = gen.cacheState(rank).windowGroups() == null
                    ? KvPattern.verify(gen.cache(rank), r.blockIds(), gen.cacheState(rank), rank, t.id, t.totalBlocks)
                    : WindowPattern.verify(gen.cache(rank), r.blockIds(), gen.cacheState(rank), rank, t.id,
                    t.id + WINDOW_POISON, t.totalBlocks, r.reusedBlocks());
            assertThat(v.checkedElements()).as("elements checked on rank %d", rank)
                    .isEqualTo(expectedElements(gen, rank, r.blockIds().length));
            v.assertOk();
            CacheState s = gen.cacheState(rank);
            if (RecurrentStateShape.holdsState(s, rank)) {
                RecurrentStateShape shape = s.recurrentState();
                int tp = s.tensorParallelism();
                long states = shape.recurrentLayerCount(s.ppRank(rank))
                        * (shape.convBytesPerRank(tp) / shape.convDataType().bytes()
                        + shape.ssmBytesPerRank(tp) / shape.ssmDataType().bytes());
                KvPattern.Result sv = KvPattern.verifyRecurrent(gen.cache(rank).recurrentState(), s, rank, t.id);
                assertThat(sv.checkedElements()).as("state elements checked on rank %d", rank).isEqualTo(states);
                sv.assertOk();
            }
        }
    }

    private static long expectedElements(LocalInstance gen, int rank, int blocks) {
        var l = gen.cache(rank).layout();
        return (long) blocks * l.localLayers() * l.kvFactor() * l.localHeads() * l.tokensPerBlock() * l.sizePerHead();
    }

    /** Frees the transfer's blocks on both sides. */
    public static void free(LocalInstance ctx, LocalInstance gen, Transfer t) {
        for (int r : t.ctxRanks) {
            ctx.cache(r).free(t.id);
        }
        for (int r : t.genRanks) {
            gen.cache(r).free(t.id);
        }
    }

    /**
     * One request start to end: {@link #prepare} it, {@link #respond} and {@link #request} it, wait (bounded) until
     * every handle ended and {@link #assertExact check every element}.
     *
     * @param ctx      context instance
     * @param gen      generation instance
     * @param ctxState context state for the request
     * @param genState generation state for the request
     * @param prompt   prompt length (both sides)
     * @param reused   leading global blocks the generation side holds (0 = none)
     * @param bound    the longest wait
     * @return the transfer, ended and verified (its blocks still held: {@link #free} them)
     */
    public static Transfer moveExact(LocalInstance ctx, LocalInstance gen, CacheState ctxState, CacheState genState,
                                     int prompt, int reused, Duration bound) {
        Transfer t = prepare(ctx, gen, ctxState, genState, prompt, prompt, reused);
        respond(ctx, t);
        request(gen, t);
        awaitEnded(List.of(t), bound);
        assertExact(gen, t);
        return t;
    }

    /**
     * Checks how every generation request of a transfer moved.
     *
     * @param t      an ended transfer
     * @param pushed whether its bytes were written one-sided into the generation pool (push, or a local one-copy
     *               pull) rather than received as messages
     */
    public static void assertPushed(Transfer t, boolean pushed) {
        for (TransferRequest r : t.gen) {
            assertThat(r.wasPushed()).as("written one-sided: %s", r).isEqualTo(pushed);
        }
    }

    /**
     * Waits (bounded) until every handle of the transfers ended.
     *
     * @param ts    the transfers
     * @param bound the longest wait
     */
    public static void awaitEnded(List<Transfer> ts, Duration bound) {
        await("transfers to end").atMost(bound).pollInterval(Duration.ofMillis(10))
                .until(() -> ts.stream().allMatch(t -> t.all().stream().allMatch(TransferRequest::isDone)));
    }
}
