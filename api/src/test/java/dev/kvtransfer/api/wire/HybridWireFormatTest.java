package dev.kvtransfer.api.wire;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.model.AttentionType;
import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.api.model.DataType;
import dev.kvtransfer.api.model.LayerKind;
import dev.kvtransfer.api.model.RecurrentStateShape;
import org.junit.jupiter.api.Test;

import java.util.HexFormat;
import java.util.List;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatIllegalArgumentException;
import static org.assertj.core.api.Assertions.catchThrowableOfType;

/** The byte layout of a hybrid model's cache state (attention layers plus recurrent state layers). */
class HybridWireFormatTest {
    private static RecurrentStateShape shape(String pattern, int times, List<Integer> perPp) {
        return new RecurrentStateShape(RecurrentStateShape.kinds(pattern, times), perPp, 8, 3, 2, 4, 16,
                DataType.FLOAT16, DataType.FLOAT32);
    }

    /** One attention layer (4 heads, D4, T8, FP16) and one recurrent layer. */
    private static final CacheState HYBRID = CacheState.builder().uniformKvHeads(1, 4).sizePerHead(4)
            .tokensPerBlock(8).recurrentState(shape("AR", 1, List.of())).build();

    /** The whole encoding of {@link #HYBRID}, field by field: the attention-only layout with tag 'H' and a tail. */
    private static final String HYBRID_HEX = String.join("",
            "4b565458", "0400",                 // magic "KVTX", format version 4 (LE u16)
            "48",                               // CacheState tag 'H': a hybrid state
            "01000000", "04000000",             // kvHeadsPerLayer: count 1, [4] (attention layers only)
            "04000000", "08000000",             // sizePerHead, tokensPerBlock
            "01000000", "01000000", "01000000", // TP, PP, CP
            "00", "00000000", "01000000",       // attention DP off, dpRank 0, dpSize 1
            "01000000", "01000000",             // attentionLayersPerPp: count 1, [1]
            "01000000", "00", "02000000", "00", // FLOAT16, DEFAULT, kvFactor 2, blockReuse off
            "00", "00000000",                   // poolLayout BLOCK, mlaRopeDim 0
            "00000000", "00000000", "00",       // no indexer-K pool, partialReuse off
            "53",                               // RecurrentStateShape tag 'S'
            "02000000", "00000000", "01000000", // layerKinds: count 2, [ATTENTION, RECURRENT]
            "01000000", "02000000",             // layersPerPp (all layers): count 1, [2]
            "08000000", "03000000",             // convChannels 8, convWidth 3
            "02000000", "04000000", "10000000", // ssmHeads 2, ssmHeadDim 4, ssmStateDim 16
            "01000000", "00000000");            // conv FLOAT16, ssm FLOAT32

    @Test
    void aHybridStateHasTheDocumentedByteLayout() {
        assertThat(HexFormat.of().formatHex(HYBRID.toBytes())).isEqualTo(HYBRID_HEX);
        CacheState back = CacheState.fromBytes(HexFormat.of().parseHex(HYBRID_HEX));
        assertThat(back).isEqualTo(HYBRID);
        assertThat(back.recurrentState().layersPerPp()).containsExactly(2);
    }

    @Test
    void anAttentionOnlyStateKeepsTagCAndHasNoRecurrentState() {
        CacheState plain = HYBRID.toBuilder().recurrentState(null).build();
        assertThat(plain.toBytes()[6]).isEqualTo((byte) 0x43);
        assertThat(CacheState.fromBytes(plain.toBytes()).recurrentState()).isNull();
        assertThat(plain).isNotEqualTo(HYBRID);
    }

    @Test
    void anUnknownLayerKindOrShapeTagIsMalformedAndNamed() {
        byte[] kind = HexFormat.of().parseHex(HYBRID_HEX);
        int kindsAt = HYBRID_HEX.indexOf("53020000000000000001000000") / 2 + 9; // the second kind
        kind[kindsAt] = 7;
        assertMalformed(kind, "layerKinds");
        byte[] tag = HexFormat.of().parseHex(HYBRID_HEX);
        tag[HYBRID_HEX.indexOf("53020000000000000001000000") / 2] = 0x54;
        assertMalformed(tag, "expected RecurrentStateShape tag");
        byte[] cut = HexFormat.of().parseHex(HYBRID_HEX.substring(0, HYBRID_HEX.length() - 8));
        assertMalformed(cut, "ssmDataType");
    }

    @Test
    void theSplitOfAllLayersGivesTheAttentionAndRecurrentSplits() {
        CacheState pp4 = CacheState.builder().uniformKvHeads(6, 4).sizePerHead(4).tokensPerBlock(8)
                .pipelineParallelism(4).recurrentState(shape("AAAR", 2, List.of())).build();
        RecurrentStateShape r = pp4.recurrentState();
        assertThat(r.layersPerPp()).containsExactly(2, 2, 2, 2);
        assertThat(pp4.attentionLayersPerPp()).containsExactly(2, 1, 2, 1);
        assertThat(r.recurrentLayersPerPp()).containsExactly(0, 1, 0, 1);
        assertThat(r.firstRecurrentLayer(3)).isEqualTo(1);
        assertThat(r.recurrentLayerCount(1)).isEqualTo(1);
        assertThat(r.convBytesPerRank(2)).isEqualTo(4L * 3 * 2);
        assertThat(r.ssmBytesPerRank(2)).isEqualTo(1L * 4 * 16 * 4);
        assertThat(CacheState.fromBytes(pp4.toBytes())).isEqualTo(pp4);
    }

    @Test
    void aStateThatDoesNotFitItsRecurrentShapeIsRefusedNamingBothValues() {
        CacheState.Builder b = CacheState.builder().uniformKvHeads(6, 4).sizePerHead(4).tokensPerBlock(8);
        assertThatIllegalArgumentException().isThrownBy(() -> b.recurrentState(shape("AAR", 2, List.of())).build())
                .withMessageContaining("recurrentState.layerKinds = AARAAR").withMessageContaining("has 4 attention")
                .withMessageContaining("kvHeadsPerLayer has 6");
        assertThatIllegalArgumentException().isThrownBy(() -> b.pipelineParallelism(2)
                        .attentionLayersPerPp(List.of(2, 4)).recurrentState(shape("AAAR", 2, List.of())).build())
                .withMessageContaining("attentionLayersPerPp = [2, 4]").withMessageContaining("gives [3, 3]");
        assertThatIllegalArgumentException().isThrownBy(() -> CacheState.builder().uniformKvHeads(6, 4)
                        .sizePerHead(4).tokensPerBlock(8).tensorParallelism(4)
                        .recurrentState(shape("AAAR", 2, List.of())).build())
                .withMessageContaining("recurrentState.ssmHeads = 2").withMessageContaining("tensorParallelism 4");
        assertThatIllegalArgumentException().isThrownBy(() -> CacheState.builder().uniformKvHeads(6, 1)
                        .sizePerHead(4).tokensPerBlock(8).attentionType(AttentionType.MLA)
                        .recurrentState(shape("AAAR", 2, List.of())).build())
                .withMessageContaining("attentionType = MLA");
        assertThatIllegalArgumentException().isThrownBy(() -> shape("AAAA", 1, List.of()))
                .withMessageContaining("at least one attention and one recurrent layer");
        assertThat(RecurrentStateShape.kinds("AR", 2)).containsExactly(LayerKind.ATTENTION, LayerKind.RECURRENT,
                LayerKind.ATTENTION, LayerKind.RECURRENT);
    }

    private static void assertMalformed(byte[] bytes, String what) {
        MalformedMessageException e = catchThrowableOfType(MalformedMessageException.class,
                () -> CacheState.fromBytes(bytes));
        assertThat(e).as("expected MalformedMessageException").isNotNull();
        assertThat(e.code()).isEqualTo(ErrorCode.MALFORMED);
        assertThat(e.getMessage()).contains(what);
    }
}
