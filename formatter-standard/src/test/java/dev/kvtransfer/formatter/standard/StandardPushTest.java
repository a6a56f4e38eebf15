package dev.kvtransfer.formatter.standard;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.KvTransferException;
import dev.kvtransfer.api.format.FormatterCapability;
import dev.kvtransfer.api.layout.PoolLayout;
import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.api.model.DataType;
import dev.kvtransfer.core.buffer.DefaultTransferBufferPool;
import dev.kvtransfer.core.cache.PagedKvCache;
import dev.kvtransfer.core.memory.HostBufferManager;
import dev.kvtransfer.testkit.LayoutPair;
import dev.kvtransfer.testkit.harness.FormatterHarness;
import dev.kvtransfer.testkit.harness.HarnessOptions;
import dev.kvtransfer.testkit.harness.PairReport;
import org.junit.jupiter.api.Test;

import java.util.List;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/**
 * How the standard formatter's push writes (Mooncake's layer-wise connector): with matching head sharding blocks go
 * pool to pool, runs consecutive in both pools coalesced into one entry; with a head ratio each context rank writes
 * its heads at their offset in the destination rows (per (block, layer, kv) into a block pool, per token into a
 * layer-nhd row); a strided source is staged into the destination's order first; duplicated heads are written
 * once; reused blocks never. Every run is verified element by element with KvPattern and checked as core's receiver
 * checks the writes. 4 layers, 8 KV heads, head size 16, 4 tokens per block, fp16; one request of 4 blocks with
 * consecutive ids on both sides.
 */
class StandardPushTest {
    private static final int LAYERS = 4;
    private static final int BLOCKS = 4;

    private static CacheState state(int tp, int heads, PoolLayout pool) {
        return CacheState.builder().uniformKvHeads(LAYERS, heads).sizePerHead(16).tokensPerBlock(4)
                .dataType(DataType.FLOAT16).tensorParallelism(tp).poolLayout(pool).build();
    }

    private static PairReport.RequestReport push(CacheState ctx, CacheState gen, int reused,
                                                 HarnessOptions.Mode mode) {
        LayoutPair pair = new LayoutPair("push", ctx, gen, List.of(BLOCKS * 4), null, List.of(reused));
        PairReport r = FormatterHarness.run(new StandardFormatterProvider(), pair,
                HarnessOptions.defaults().withFragmentBlocks(false).withMode(mode));
        assertThat(r.failure()).isNull();
        PairReport.RequestReport q = r.requests().get(0);
        assertThat(q.verify().ok()).as("%s", q.verify()).isTrue();
        assertThat(q.writeViolations()).isEmpty();
        assertThat(q.totalReceived()).isEqualTo(q.totalSent());
        return q;
    }

    private static PairReport.RequestReport push(CacheState ctx, CacheState gen) {
        return push(ctx, gen, 0, HarnessOptions.Mode.PUSH);
    }

    @Test
    void declaresLayerRangesAndPush() {
        HostBufferManager memory = new HostBufferManager();
        try (PagedKvCache cache = PagedKvCache.of(memory, state(1, 8, PoolLayout.BLOCK), 0, 2);
             DefaultTransferBufferPool pool = new DefaultTransferBufferPool(memory, 0, 1, 1, true)) {
            assertThat(new StandardCacheFormatter(cache, pool).capabilities())
                    .containsExactlyInAnyOrder(FormatterCapability.LAYER_RANGES, FormatterCapability.PUSH);
        } finally {
            memory.close();
        }
    }

    @Test
    void matchingShardsWriteRunsOfBlocksConsecutiveInBothPoolsAsOneEntry() {
        // Layer pools: one entry per (layer, kv) for the run of 4 blocks.
        assertThat(push(state(1, 8, PoolLayout.LAYER_NHD), state(1, 8, PoolLayout.LAYER_NHD)).messagesSent())
                .isEqualTo(LAYERS * 2);
        // Block pools holding every block in one region: the whole request is one run.
        assertThat(push(state(1, 8, PoolLayout.BLOCK), state(1, 8, PoolLayout.BLOCK)).messagesSent()).isEqualTo(1);
        // Per layer (core's layer-wise push): still one entry per (layer, kv) and run of blocks into layer pools; into
        // a block pool one per block and layer (a layer's K and V rows of a block are contiguous, the next block's
        // lie a block further).
        assertThat(push(state(1, 8, PoolLayout.LAYER_NHD), state(1, 8, PoolLayout.LAYER_NHD), 0,
                HarnessOptions.Mode.PUSH_LAYERS).messagesSent()).isEqualTo(LAYERS * 2);
        assertThat(push(state(1, 8, PoolLayout.BLOCK), state(1, 8, PoolLayout.BLOCK), 0,
                HarnessOptions.Mode.PUSH_LAYERS).messagesSent()).isEqualTo((long) LAYERS * BLOCKS);
    }

    @Test
    void aHeadRatioWritesEachRanksHeadsAtTheirOffsetInTheDestinationRows() {
        // TP2 -> TP1 block pools: each rank's 4 heads are one run per (block, layer, kv).
        PairReport.RequestReport block = push(state(2, 8, PoolLayout.BLOCK), state(1, 8, PoolLayout.BLOCK));
        assertThat(block.ctxMessages()).containsExactly((long) BLOCKS * LAYERS * 2, (long) BLOCKS * LAYERS * 2);
        // TP2 -> TP1 layer-nhd: a destination row of one token holds all 8 heads; each rank writes its 4 per token.
        PairReport.RequestReport nhd = push(state(2, 8, PoolLayout.LAYER_NHD), state(1, 8, PoolLayout.LAYER_NHD));
        assertThat(nhd.ctxMessages()).containsExactly((long) BLOCKS * LAYERS * 2 * 4, (long) BLOCKS * LAYERS * 2 * 4);
        // Layer-hnd: a rank's heads are contiguous in each block's plane, and consecutive blocks are not (the other
        // rank's heads lie between): one entry per (block, layer, kv).
        PairReport.RequestReport hnd = push(state(2, 8, PoolLayout.LAYER_HND), state(1, 8, PoolLayout.LAYER_HND));
        assertThat(hnd.ctxMessages()).containsExactly((long) BLOCKS * LAYERS * 2, (long) BLOCKS * LAYERS * 2);
    }

    @Test
    void aStridedSourceIsStagedIntoTheDestinationOrder() {
        // TP1 -> TP2 layer-nhd: the source heads of a generation rank are strided per token, its plane contiguous:
        // staged, one entry per (layer, kv) and generation rank.
        PairReport.RequestReport nhd = push(state(1, 8, PoolLayout.LAYER_NHD), state(2, 8, PoolLayout.LAYER_NHD));
        assertThat(nhd.genMessages()).containsExactly(LAYERS * 2L, LAYERS * 2L);
        // TP1 -> TP2 block pools: the destination blocks hold the generation rank's heads of every layer
        // contiguously: staged, the whole run of blocks one entry.
        PairReport.RequestReport block = push(state(1, 8, PoolLayout.BLOCK), state(2, 8, PoolLayout.BLOCK));
        assertThat(block.genMessages()).containsExactly(1L, 1L);
        // A transpose (layer-hnd to layer-nhd) at TP1: staged, one entry per (layer, kv).
        assertThat(push(state(1, 8, PoolLayout.LAYER_HND), state(1, 8, PoolLayout.LAYER_NHD)).messagesSent())
                .isEqualTo(LAYERS * 2);
    }

    @Test
    void duplicatedHeadsAreWrittenOnceByTheDesignatedRank() {
        // TP4 with 2 KV heads: ranks 0 and 1 hold head 0, ranks 2 and 3 head 1; ranks 0 and 2 write.
        PairReport.RequestReport q = push(state(4, 2, PoolLayout.LAYER_NHD), state(1, 2, PoolLayout.LAYER_NHD));
        assertThat(q.ctxSentBytes()[0]).isPositive();
        assertThat(q.ctxSentBytes()[1]).isZero();
        assertThat(q.ctxSentBytes()[2]).isPositive();
        assertThat(q.ctxSentBytes()[3]).isZero();
        assertThat(q.ctxNeedSend()).containsExactly(true, false, true, false);
    }

    @Test
    void reusedBlocksAreNeverWritten() {
        PairReport.RequestReport some = push(state(1, 8, PoolLayout.LAYER_NHD), state(1, 8, PoolLayout.LAYER_NHD), 3,
                HarnessOptions.Mode.PUSH);
        assertThat(some.totalReceived()).isEqualTo(some.genExpectedBytes()[0]);
        assertThat(some.messagesSent()).isEqualTo(LAYERS * 2);
        PairReport.RequestReport all = push(state(2, 8, PoolLayout.BLOCK), state(1, 8, PoolLayout.LAYER_HND),
                LayoutPair.ALL_BLOCKS, HarnessOptions.Mode.PUSH_LAYERS);
        assertThat(all.messagesSent()).isZero();
        assertThat(all.totalSent()).isZero();
    }

    @Test
    void pushOnAPullSessionFailsNamingTheRequest() {
        HostBufferManager memory = new HostBufferManager();
        CacheState s = state(1, 8, PoolLayout.BLOCK);
        try (PagedKvCache cache = PagedKvCache.of(memory, s, 0, 2);
             DefaultTransferBufferPool pool = new DefaultTransferBufferPool(memory, 0, 1, 1, true);
             CapturingSession session = new CapturingSession(42, true, s, 0, s, cache.allocate(42, 1), 1, memory,
                     null)) {
            StandardCacheFormatter f = new StandardCacheFormatter(cache, pool);
            assertThatThrownBy(() -> f.push(session, 0, LAYERS)).isInstanceOf(KvTransferException.class)
                    .hasMessageContaining("42").hasMessageContaining("not a push session")
                    .satisfies(e -> assertThat(((KvTransferException) e).code()).isEqualTo(ErrorCode.INTERNAL));
            assertThatThrownBy(() -> f.format(session, 2, LAYERS)).isInstanceOf(KvTransferException.class)
                    .hasMessageContaining("layer range [2, 2+4) outside the model's 4 layers");
        } finally {
            memory.close();
        }
    }
}
