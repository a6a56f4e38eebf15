package dev.kvtransfer.formatter.standard;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.KvTransferException;
import dev.kvtransfer.api.layout.BlockDistribution;
import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.api.model.ContextPhaseParams;
import dev.kvtransfer.api.model.DataType;
import dev.kvtransfer.api.model.RecurrentStateShape;
import dev.kvtransfer.core.RequestState;
import dev.kvtransfer.core.TransceiverConfig;
import dev.kvtransfer.core.TransferRequest;
import dev.kvtransfer.core.local.LocalInstance;
import dev.kvtransfer.testkit.KvPattern;
import dev.kvtransfer.testkit.LeakCheckExtension;
import dev.kvtransfer.testkit.loopback.LoopbackTransportProvider;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

/**
 * A hybrid model (3 attention layers : 1 recurrent) end to end through the transceiver over loopback: each request's
 * KV blocks and recurrent states move in one transfer, TP2 to TP1 and PP2 to PP1, every element of both checked with
 * KvPattern after being poisoned; a pair whose layer tagging or state size differs is refused
 * {@code UNSUPPORTED_LAYOUT} naming both sides' values before a byte moves, and the responder keeps serving.
 */
@ExtendWith(LeakCheckExtension.class)
class HybridTransferTest {
    private static final Duration BOUND = Duration.ofSeconds(60);
    private static final long POISON = 1L << 40;
    private static final RecurrentStateShape SHAPE = new RecurrentStateShape(RecurrentStateShape.kinds("AAAR", 2),
            List.of(), 16, 3, 4, 8, 16, DataType.BFLOAT16, DataType.FLOAT32);

    private final List<LocalInstance> instances = new ArrayList<>();

    @AfterEach
    void close() {
        for (LocalInstance i : instances) {
            i.close();
        }
    }

    private static CacheState state(int tp, int pp, RecurrentStateShape shape) {
        return state(tp, pp, shape, 4);
    }

    private static CacheState state(int tp, int pp, RecurrentStateShape shape, int kvHeads) {
        return CacheState.builder().uniformKvHeads(shape.attentionLayers(), kvHeads).sizePerHead(16).tokensPerBlock(8)
                .tensorParallelism(tp).pipelineParallelism(pp).recurrentState(shape).build();
    }

    private LocalInstance start(String name, CacheState state) {
        TransceiverConfig c = TransceiverConfig.builder().transferBufferBytes(1 << 20)
                .kvTransferTimeout(Duration.ofSeconds(30)).build();
        LocalInstance i = LocalInstance.builder(name, state).transport(new LoopbackTransportProvider(),
                        dev.kvtransfer.api.transport.TransportConfig.builder().build())
                .formatter(new StandardFormatterProvider()).config(c).blocksPerRank(64).start();
        instances.add(i);
        return i;
    }

    /** One request on every rank of both instances, context side filled, generation side poisoned. */
    private static final class Req {
        final long id;
        final int prompt;
        final int blocks;
        final TransferRequest[] ctx;
        final TransferRequest[] gen;
        final int[][] genIds;

        Req(LocalInstance ctxI, LocalInstance genI, long id, int prompt) {
            this.id = id;
            this.prompt = prompt;
            CacheState c = ctxI.cacheState();
            CacheState g = genI.cacheState();
            this.blocks = BlockDistribution.blocksFor(prompt, c.tokensPerBlock());
            ctx = new TransferRequest[ctxI.ranks()];
            gen = new TransferRequest[genI.ranks()];
            genIds = new int[genI.ranks()][];
            for (int r = 0; r < ctxI.ranks(); r++) {
                int[] ids = ctxI.cache(r).allocate(id, blocks);
                KvPattern.fill(ctxI.cache(r), ids, c, r, id, blocks);
                KvPattern.fillRecurrent(ctxI.cache(r).recurrentState(), c, r, id);
                ctx[r] = TransferRequest.context(id, prompt, ids);
            }
            ContextPhaseParams params = ctxI.contextPhaseParams(id, 0);
            for (int r = 0; r < genI.ranks(); r++) {
                genIds[r] = genI.cache(r).allocate(id, blocks);
                KvPattern.fill(genI.cache(r), genIds[r], g, r, id + POISON, blocks);
                KvPattern.fillRecurrent(genI.cache(r).recurrentState(), g, r, id, id + POISON);
                gen[r] = TransferRequest.generation(params, prompt, genIds[r]);
            }
        }

        void submit(LocalInstance ctxI, LocalInstance genI) {
            for (int r = 0; r < gen.length; r++) {
                genI.transceiver(r).requestAndReceiveAsync(gen[r]);
            }
            for (int r = 0; r < ctx.length; r++) {
                ctxI.transceiver(r).respondAndSendAsync(ctx[r]);
            }
            await().atMost(BOUND).until(() -> {
                for (TransferRequest q : gen) {
                    if (!q.isDone()) {
                        return false;
                    }
                }
                for (TransferRequest q : ctx) {
                    if (!q.isDone()) {
                        return false;
                    }
                }
                return true;
            });
        }

        /** Every element of every generation rank's blocks and states is the context side's. */
        long verify(LocalInstance genI) {
            long checked = 0;
            for (int r = 0; r < gen.length; r++) {
                assertThat(gen[r].state()).as("%s", gen[r]).isEqualTo(RequestState.GENERATION_TRANS_COMPLETE);
                checked += KvPattern.verify(genI.cache(r), genIds[r], genI.cacheState(), r, id, blocks).assertOk()
                        .checkedElements();
                checked += KvPattern.verifyRecurrent(genI.cache(r).recurrentState(), genI.cacheState(), r, id)
                        .assertOk().checkedElements();
            }
            for (TransferRequest q : ctx) {
                assertThat(q.state()).as("%s", q).isEqualTo(RequestState.CONTEXT_COMPLETE);
            }
            return checked;
        }

        void refused(LocalInstance genI, String... fragments) {
            for (TransferRequest q : gen) {
                assertThat(q.state()).as("%s", q).isEqualTo(RequestState.TRANS_ERROR);
                KvTransferException e = q.error().orElseThrow();
                assertThat(e.code()).as("%s", e).isEqualTo(ErrorCode.UNSUPPORTED_LAYOUT);
                assertThat(e.getMessage()).contains(fragments);
            }
            for (int r = 0; r < gen.length; r++) {
                KvPattern.verify(genI.cache(r), genIds[r], genI.cacheState(), r, id + POISON, blocks).assertOk();
                KvPattern.verifyRecurrent(genI.cache(r).recurrentState(), genI.cacheState(), r, id, id + POISON)
                        .assertOk();
            }
        }

        void free(LocalInstance ctxI, LocalInstance genI) {
            for (int r = 0; r < ctx.length; r++) {
                ctxI.cache(r).free(id);
            }
            for (int r = 0; r < gen.length; r++) {
                genI.cache(r).free(id);
            }
        }
    }

    private long move(CacheState ctxState, CacheState genState, long id) {
        LocalInstance ctx = start("ctx-" + id, ctxState);
        LocalInstance gen = start("gen-" + id, genState);
        long checked = 0;
        for (int prompt : new int[] {8 * 5 + 3, 8, 8 * 9}) {
            Req q = new Req(ctx, gen, id++, prompt);
            q.submit(ctx, gen);
            checked += q.verify(gen);
            q.free(ctx, gen);
        }
        return checked;
    }

    @Test
    void tp2ToTp1MovesEveryBlockAndStateElement() {
        // Gen TP1 holds 6 attention layers x 4 heads and 2 recurrent layers of 16 x 3 conv + 4 x 8 x 16 SSM.
        long states = 3L * 2 * (16 * 3 + 4 * 8 * 16);
        assertThat(move(state(2, 1, SHAPE), state(1, 1, SHAPE), 1000)).isGreaterThan(states);
    }

    @Test
    void pp2ToPp1MovesEveryBlockAndStateElement() {
        assertThat(move(state(1, 2, SHAPE), state(1, 1, SHAPE), 2000)).isPositive();
    }

    @Test
    void tp1Pp1ToTp2Pp2MovesEveryBlockAndStateElement() {
        assertThat(move(state(1, 1, SHAPE), state(2, 2, SHAPE), 3000)).isPositive();
    }

    @Test
    void tpAboveTheKvHeadsSendsTheKvOncePerDuplicateGroupAndEveryStateSlice() {
        // 2 KV heads under TP4, as Qwen3-Next's: context ranks 1 and 3 duplicate 0 and 2's KV, yet each holds its
        // own quarter of the conv channels and SSM heads.
        assertThat(move(state(4, 1, SHAPE, 2), state(1, 1, SHAPE, 2), 4000)).isPositive();
        assertThat(move(state(1, 1, SHAPE, 2), state(4, 1, SHAPE, 2), 5000)).isPositive();
    }

    @Test
    void differentLayerTaggingOrStateSizeIsRefusedNamingBothValuesBeforeAByteMoves() {
        LocalInstance ctx = start("ctx", state(2, 1, SHAPE));
        RecurrentStateShape bigger = new RecurrentStateShape(SHAPE.layerKinds(), List.of(), 16, 3, 4, 8, 32,
                DataType.BFLOAT16, DataType.FLOAT32);
        LocalInstance gen = start("gen", state(1, 1, bigger));
        Req q = new Req(ctx, gen, 500, 8 * 3 + 1);
        q.submit(ctx, gen);
        q.refused(gen, "recurrentState.ssmStateDim: self 32, peer 16");
        q.free(ctx, gen);

        RecurrentStateShape retagged = new RecurrentStateShape(RecurrentStateShape.kinds("AARAAAAR", 1), List.of(),
                16, 3, 4, 8, 16, DataType.BFLOAT16, DataType.FLOAT32);
        LocalInstance gen2 = start("gen2", state(1, 1, retagged));
        Req t = new Req(ctx, gen2, 501, 8 * 3 + 1);
        t.submit(ctx, gen2);
        t.refused(gen2, "recurrentState.layerKinds: self AARAAAAR, peer AAARAAAR");
        t.free(ctx, gen2);

        // The responder keeps serving a matching generation instance.
        LocalInstance same = start("gen3", state(1, 1, SHAPE));
        Req ok = new Req(ctx, same, 502, 8 * 3 + 1);
        ok.submit(ctx, same);
        assertThat(ok.verify(same)).isPositive();
        ok.free(ctx, same);
    }
}
