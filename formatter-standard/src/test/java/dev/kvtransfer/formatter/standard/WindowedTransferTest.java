package dev.kvtransfer.formatter.standard;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.KvTransferException;
import dev.kvtransfer.api.layout.BlockDistribution;
import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.api.model.ContextPhaseParams;
import dev.kvtransfer.api.model.WindowGroups;
import dev.kvtransfer.core.RequestState;
import dev.kvtransfer.core.TransceiverConfig;
import dev.kvtransfer.core.TransferRequest;
import dev.kvtransfer.core.local.LocalInstance;
import dev.kvtransfer.core.pattern.WindowPattern;
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
 * Sliding-window attention (VSWA) end to end through the transceiver over loopback: five local layers with a 16-token
 * window to one full-attention layer (Gemma 3's 5 : 1), 8 tokens a block. Per layer only the last
 * {@code ceil(16 / 8) + 1 = 3} blocks of a local layer move and every block of the global one; the bytes each
 * generation rank receives equal that formula, a local layer's blocks before its window still hold the poison, every
 * element inside a window holds the pattern; a pair whose windows differ is refused {@code UNSUPPORTED_LAYOUT} naming
 * both sides' windows before a byte moves, and the responder keeps serving.
 */
@ExtendWith(LeakCheckExtension.class)
class WindowedTransferTest {
    private static final Duration BOUND = Duration.ofSeconds(60);
    private static final long POISON = 1L << 40;
    private static final int LAYERS = 6;
    private static final int HEADS = 4;
    private static final int DIM = 16;
    private static final int TOKENS = 8;
    private static final WindowGroups GEMMA3 = WindowGroups.pattern(LAYERS, List.of(16, 16, 16, 16, 16, 0));
    /** One layer of one block on a rank holding all heads: K and V, 4 heads, 8 tokens, 16 dims, FP16. */
    private static final long LAYER_BYTES = 2L * HEADS * TOKENS * DIM * 2;

    private final List<LocalInstance> instances = new ArrayList<>();

    @AfterEach
    void close() {
        for (LocalInstance i : instances) {
            i.close();
        }
    }

    private static CacheState.Builder state(int tp, int pp, WindowGroups windows) {
        return CacheState.builder().uniformKvHeads(LAYERS, HEADS).sizePerHead(DIM).tokensPerBlock(TOKENS)
                .tensorParallelism(tp).pipelineParallelism(pp).windowGroups(windows);
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
        final int blocks;
        final TransferRequest[] ctx;
        final TransferRequest[] gen;
        final int[][] genIds;

        Req(LocalInstance ctxI, LocalInstance genI, long id, int prompt) {
            this.id = id;
            CacheState c = ctxI.cacheState();
            CacheState g = genI.cacheState();
            this.blocks = BlockDistribution.blocksFor(prompt, c.tokensPerBlock());
            ctx = new TransferRequest[ctxI.ranks()];
            gen = new TransferRequest[genI.ranks()];
            genIds = new int[genI.ranks()][];
            for (int r = 0; r < ctxI.ranks(); r++) {
                int[] ids = ctxI.cache(r).allocate(id, blocks);
                KvPattern.fill(ctxI.cache(r), ids, c, r, id, blocks);
                ctx[r] = TransferRequest.context(id, prompt, ids);
            }
            ContextPhaseParams params = ctxI.contextPhaseParams(id, 0);
            for (int r = 0; r < genI.ranks(); r++) {
                genIds[r] = genI.cache(r).allocate(id, blocks);
                KvPattern.fill(genI.cache(r), genIds[r], g, r, id + POISON, blocks);
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

        /**
         * Every element of every generation rank: the pattern inside each window, the poison before it; each rank
         * received exactly the window formula's bytes.
         *
         * @return elements checked
         */
        long verify(LocalInstance genI) {
            long checked = 0;
            CacheState g = genI.cacheState();
            for (int r = 0; r < gen.length; r++) {
                assertThat(gen[r].state()).as("%s", gen[r]).isEqualTo(RequestState.GENERATION_TRANS_COMPLETE);
                checked += WindowPattern.verify(genI.cache(r), genIds[r], g, r, id, id + POISON, blocks, 0)
                        .assertOk().checkedElements();
                assertThat(gen[r].kvCacheSize()).as("bytes received by gen rank %d of %s", r, gen[r])
                        .isEqualTo(WindowPattern.movedBytes(g, r, blocks, 0));
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
        // 5 blocks and a partial one, one block, a block short of the window, and 9 whole blocks.
        for (int prompt : new int[] {8 * 5 + 3, 8, 8 * 2, 8 * 9}) {
            Req q = new Req(ctx, gen, id++, prompt);
            q.submit(ctx, gen);
            checked += q.verify(gen);
            q.free(ctx, gen);
        }
        return checked;
    }

    @Test
    void theFormulaIsTheLastCeilWindowOverTokensPlusOneBlocks() {
        assertThat(WindowGroups.blocksInWindow(16, TOKENS, 9)).isEqualTo(3);
        assertThat(WindowGroups.blocksInWindow(16, TOKENS, 2)).isEqualTo(2);
        assertThat(WindowGroups.blocksInWindow(WindowGroups.UNLIMITED, TOKENS, 9)).isEqualTo(9);
        // A TP1 rank holding all 6 layers, 9 blocks: 5 local layers x 3 blocks + 1 global layer x 9 blocks.
        assertThat(WindowPattern.movedBytes(state(1, 1, GEMMA3).build(), 0, 9, 0)).isEqualTo((5 * 3 + 9) * LAYER_BYTES);
        // With 7 of the 9 blocks reused: the local layers move blocks 7 and 8, the global one too.
        assertThat(WindowPattern.movedBytes(state(1, 1, GEMMA3).build(), 0, 9, 7)).isEqualTo((5 * 2 + 2) * LAYER_BYTES);
    }

    @Test
    void tp1ToTp1MovesOnlyTheBlocksInsideEachWindow() {
        assertThat(move(state(1, 1, GEMMA3).build(), state(1, 1, GEMMA3).build(), 1000)).isPositive();
    }

    @Test
    void tp2ToTp1MovesOnlyTheBlocksInsideEachWindow() {
        assertThat(move(state(2, 1, GEMMA3).build(), state(1, 1, GEMMA3).build(), 2000)).isPositive();
    }

    @Test
    void pp2ToPp1MovesOnlyTheBlocksInsideEachWindow() {
        // The context's PP split [3, 3] cuts the local run; each stage sends its part of each window run.
        assertThat(move(state(1, 2, GEMMA3).build(), state(1, 1, GEMMA3).build(), 3000)).isPositive();
    }

    @Test
    void eachLayerGroupOnItsOwnStageReceivesExactlyItsWindowsBlocks() {
        // Gen PP2 [5, 1]: rank 0 holds the five local layers, rank 1 the global one, so each rank's bytes are one
        // group's. 9 blocks: the local group 5 layers x 3 blocks, the global group 1 layer x 9 blocks.
        LocalInstance ctx = start("ctx", state(2, 1, GEMMA3).build());
        LocalInstance gen = start("gen", state(1, 2, GEMMA3).attentionLayersPerPp(List.of(5, 1)).build());
        Req q = new Req(ctx, gen, 4000, 8 * 9);
        q.submit(ctx, gen);
        assertThat(q.verify(gen)).isEqualTo(LAYERS * 9 * LAYER_BYTES / 2);
        assertThat(q.gen[0].kvCacheSize()).as("local group").isEqualTo(5 * 3 * LAYER_BYTES);
        assertThat(q.gen[1].kvCacheSize()).as("global group").isEqualTo(9 * LAYER_BYTES);
        // Blocks 0..5 of the local layers were never written: still the poison, every element.
        KvPattern.verify(gen.cache(0), q.genIds[0], gen.cacheState(), 0, q.id + POISON, 9, 0, 6).assertOk();
        KvPattern.verify(gen.cache(0), q.genIds[0], gen.cacheState(), 0, q.id, 9, 6, 9).assertOk();
        KvPattern.verify(gen.cache(1), q.genIds[1], gen.cacheState(), 1, q.id, 9).assertOk();
        q.free(ctx, gen);
    }

    @Test
    void differentWindowsAreRefusedNamingBothValuesBeforeAByteMoves() {
        LocalInstance ctx = start("ctx", state(2, 1, GEMMA3).build());
        LocalInstance wider = start("wider", state(1, 1, WindowGroups.pattern(LAYERS, List.of(32, 32, 32, 32, 32, 0)))
                .build());
        Req q = new Req(ctx, wider, 500, 8 * 3 + 1);
        q.submit(ctx, wider);
        q.refused(wider, "windowGroups: self [32x5,full], peer [16x5,full]");
        q.free(ctx, wider);

        LocalInstance full = start("full", state(1, 1, null).build());
        Req t = new Req(ctx, full, 501, 8 * 3 + 1);
        t.submit(ctx, full);
        t.refused(full, "windowGroups: self none (full attention), peer [16x5,full]");
        t.free(ctx, full);

        // The responder keeps serving a matching generation instance.
        LocalInstance same = start("same", state(1, 1, GEMMA3).build());
        Req ok = new Req(ctx, same, 502, 8 * 3 + 1);
        ok.submit(ctx, same);
        assertThat(ok.verify(same)).isPositive();
        ok.free(ctx, same);
    }
}
