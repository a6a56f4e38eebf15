package dev.kvtransfer.formatter.mla;

import dev.kvtransfer.api.format.CacheFormatter;
import dev.kvtransfer.api.format.Support;
import dev.kvtransfer.api.layout.BlockLayout;
import dev.kvtransfer.api.model.AttentionType;
import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.api.model.DataType;
import dev.kvtransfer.core.cache.PagedKvCache;
import dev.kvtransfer.core.memory.HostBufferManager;
import org.junit.jupiter.api.Test;

import java.util.function.UnaryOperator;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/** Every pair {@code inquireSupport} rejects, with the fields and values named in the reason. */
class MlaSupportTest {
    private static CacheState.Builder base() {
        return CacheState.builder().uniformKvHeads(4, 1).sizePerHead(8).tokensPerBlock(4)
                .dataType(DataType.FLOAT16).attentionType(AttentionType.MLA);
    }

    private static CacheState state(UnaryOperator<CacheState.Builder> change) {
        return change.apply(base()).build();
    }

    private static void rejected(CacheState self, CacheState peer, String... fragments) {
        Support s = MlaSupport.inquire(self, peer);
        assertThat(s.supported()).as("%s -> %s", self, peer).isFalse();
        assertThat(s.reason()).contains(fragments);
    }

    @Test
    void acceptsMatchingMlaLayouts() {
        assertThat(MlaSupport.inquire(state(b -> b.tensorParallelism(4)), state(b -> b.pipelineParallelism(2))))
                .isEqualTo(Support.yes());
    }

    @Test
    void rejectsNonMlaOnEitherSide() {
        CacheState mha = base().attentionType(AttentionType.DEFAULT).build();
        rejected(mha, state(b -> b), "attentionType=DEFAULT", "peer attentionType=MLA");
        rejected(state(b -> b), mha, "self attentionType=MLA", "peer attentionType=DEFAULT");
    }

    @Test
    void rejectsDifferentDataType() {
        rejected(state(b -> b), state(b -> b.dataType(DataType.FP8)), "self dataType=FLOAT16", "peer dataType=FP8");
    }

    @Test
    void rejectsDifferentTokensPerBlock() {
        rejected(state(b -> b), state(b -> b.tokensPerBlock(8)), "self tokensPerBlock=4", "peer tokensPerBlock=8");
    }

    @Test
    void rejectsDifferentLatentSize() {
        rejected(state(b -> b), state(b -> b.sizePerHead(16)), "self sizePerHead=8", "peer sizePerHead=16");
    }

    @Test
    void rejectsDifferentLayerCount() {
        rejected(state(b -> b), state(b -> b.uniformKvHeads(5, 1)), "self layers=4", "peer layers=5");
    }

    @Test
    void rejectsContextCpAboveOne() {
        CacheState cp2 = state(b -> b.contextParallelism(2));
        CacheState cp4 = state(b -> b.contextParallelism(4));
        // Both sides CP > 1: whichever is the context side has CP > 1.
        rejected(cp2, cp4, "context CP 1", "self contextParallelism=2", "peer contextParallelism=4");
        // With the direction known (format / unformat), context CP 2 -> generation CP 1 is refused too.
        Support s = MlaSupport.check(cp2, state(b -> b));
        assertThat(s.supported()).isFalse();
        assertThat(s.reason()).contains("context contextParallelism=2", "generation contextParallelism=1");
        // Generation CP is supported, asked from either side.
        assertThat(MlaSupport.check(state(b -> b), cp4).supported()).isTrue();
        assertThat(MlaSupport.inquire(state(b -> b), cp4).supported()).isTrue();
        assertThat(MlaSupport.inquire(cp4, state(b -> b)).supported()).isTrue();
    }

    @Test
    void acceptsAttentionDpWithAnyTpPerGroupOnEitherSide() {
        CacheState tp4dp4 = state(b -> b.tensorParallelism(4).attentionDp(true, 1, 4));
        CacheState tp4dp2 = state(b -> b.tensorParallelism(4).attentionDp(true, 1, 2));
        CacheState tp2 = state(b -> b.tensorParallelism(2));
        assertThat(MlaSupport.check(tp2, tp4dp4).supported()).isTrue();
        // Upstream refuses a DP generation side with TP != dpSize; the mapping is consistent without it
        // (MlaTransferGridTest.generalDpAndSkewedLayers moves every byte of such pairs).
        assertThat(MlaSupport.check(tp2, tp4dp2).supported()).isTrue();
        assertThat(MlaSupport.check(tp4dp2, tp2).supported()).isTrue();
    }

    @Test
    void rulesTheCacheStateAlreadyEnforcesCannotBeReached() {
        // kvFactor != 1, heads != 1 and TP % dpSize != 0 are refused by CacheState itself (also when read from
        // the wire), so no MLA state reaching inquireSupport breaks them; the formatter still checks them.
        assertThatThrownBy(() -> base().kvFactor(2).build()).hasMessageContaining("kvFactor");
        assertThatThrownBy(() -> base().uniformKvHeads(4, 2).build()).hasMessageContaining("kvHeadsPerLayer[0]");
        assertThatThrownBy(() -> base().tensorParallelism(4).attentionDp(true, 0, 3).build())
                .hasMessageContaining("dpSize");
    }

    @Test
    void formatterAnswersLikeMlaSupport() {
        CacheState mla = state(b -> b);
        CacheState mha = base().attentionType(AttentionType.DEFAULT).build();
        try (HostBufferManager memory = new HostBufferManager();
             PagedKvCache cache = new PagedKvCache(memory, BlockLayout.of(mla, 0), 2)) {
            CacheFormatter f = new MlaFormatterProvider().create(cache, new DynamicBufferPool(memory));
            assertThat(f.inquireSupport(mla, mha)).isEqualTo(MlaSupport.inquire(mla, mha));
            assertThat(f.inquireSupport(mla, mla).supported()).isTrue();
        }
    }
}
