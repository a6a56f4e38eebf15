package dev.kvtransfer.api.wire;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.model.AttentionType;
import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.api.model.DataType;
import dev.kvtransfer.api.model.RecurrentStateShape;
import dev.kvtransfer.api.model.WindowGroups;
import org.junit.jupiter.api.Test;

import java.util.HexFormat;
import java.util.List;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatIllegalArgumentException;
import static org.assertj.core.api.Assertions.catchThrowableOfType;

/** The byte layout of a cache state with sliding windows (VSWA), and the window arithmetic. */
class WindowWireFormatTest {
    /** Two attention layers (4 heads, D4, T8, FP16): a 16-token window, then full attention. */
    private static final CacheState WINDOWED = CacheState.builder().uniformKvHeads(2, 4).sizePerHead(4)
            .tokensPerBlock(8).windowGroups(WindowGroups.of(List.of(16, WindowGroups.UNLIMITED))).build();

    /** The whole encoding of {@link #WINDOWED}: the attention-only layout with tag 'W' and a tail. */
    private static final String WINDOWED_HEX = String.join("",
            "4b565458", "0400",                 // magic "KVTX", format version 4 (LE u16)
            "57",                               // CacheState tag 'W': a state with sliding windows
            "02000000", "04000000", "04000000", // kvHeadsPerLayer: count 2, [4, 4]
            "04000000", "08000000",             // sizePerHead, tokensPerBlock
            "01000000", "01000000", "01000000", // TP, PP, CP
            "00", "00000000", "01000000",       // attention DP off, dpRank 0, dpSize 1
            "01000000", "02000000",             // attentionLayersPerPp: count 1, [2]
            "01000000", "00", "02000000", "00", // FLOAT16, DEFAULT, kvFactor 2, blockReuse off
            "00", "00000000",                   // poolLayout BLOCK, mlaRopeDim 0
            "00000000", "00000000", "00",       // no indexer-K pool, partialReuse off
            "00",                               // not hybrid: no RecurrentStateShape follows
            "77",                               // WindowGroups tag 'w'
            "02000000", "10000000", "00000000"); // windows: count 2, [16, 0 = unlimited]

    @Test
    void aWindowedStateHasTheDocumentedByteLayout() {
        assertThat(HexFormat.of().formatHex(WINDOWED.toBytes())).isEqualTo(WINDOWED_HEX);
        CacheState back = CacheState.fromBytes(HexFormat.of().parseHex(WINDOWED_HEX));
        assertThat(back).isEqualTo(WINDOWED);
        assertThat(back.windowGroups().windowPerLayer()).containsExactly(16, 0);
    }

    @Test
    void withoutWindowsTheStateKeepsTagCAndDiffers() {
        CacheState plain = WINDOWED.toBuilder().windowGroups(null).build();
        assertThat(plain.toBytes()[6]).isEqualTo((byte) 0x43);
        assertThat(CacheState.fromBytes(plain.toBytes()).windowGroups()).isNull();
        assertThat(plain).isNotEqualTo(WINDOWED);
        assertThat(WINDOWED.toBuilder().windowGroups(WindowGroups.of(List.of(32, 0))).build())
                .isNotEqualTo(WINDOWED);
    }

    @Test
    void aHybridStateWithWindowsRoundTrips() {
        RecurrentStateShape shape = new RecurrentStateShape(RecurrentStateShape.kinds("AAR", 1), List.of(), 8, 3, 2,
                4, 16, DataType.FLOAT16, DataType.FLOAT32);
        CacheState hybrid = WINDOWED.toBuilder().recurrentState(shape).build();
        byte[] bytes = hybrid.toBytes();
        assertThat(bytes[6]).isEqualTo((byte) 0x57);
        CacheState back = CacheState.fromBytes(bytes);
        assertThat(back).isEqualTo(hybrid);
        assertThat(back.recurrentState()).isNotNull();
        assertThat(back.windowGroups()).isEqualTo(WINDOWED.windowGroups());
    }

    @Test
    void aBadWindowTagOrNegativeWindowIsMalformedAndNamed() {
        byte[] tag = HexFormat.of().parseHex(WINDOWED_HEX);
        tag[WINDOWED_HEX.indexOf("0077") / 2 + 1] = 0x78;
        assertMalformed(tag, "expected WindowGroups tag");
        byte[] negative = HexFormat.of().parseHex(WINDOWED_HEX.substring(0, WINDOWED_HEX.length() - 8) + "ffffffff");
        assertMalformed(negative, "windowGroups");
        byte[] cut = HexFormat.of().parseHex(WINDOWED_HEX.substring(0, WINDOWED_HEX.length() - 8));
        assertMalformed(cut, "windowGroups");
    }

    @Test
    void aStateWhoseWindowsDoNotFitIsRefusedNamingTheValue() {
        CacheState.Builder b = CacheState.builder().uniformKvHeads(3, 4).sizePerHead(4).tokensPerBlock(8);
        assertThatIllegalArgumentException().isThrownBy(() -> b.windowGroups(WindowGroups.of(List.of(16, 0))).build())
                .withMessageContaining("windowGroups.size = 2").withMessageContaining("(3)");
        assertThatIllegalArgumentException().isThrownBy(() -> WindowGroups.of(List.of(16, -1)))
                .withMessageContaining("windowGroups[1] = -1");
        assertThatIllegalArgumentException().isThrownBy(() -> CacheState.builder().uniformKvHeads(2, 1)
                        .sizePerHead(4).tokensPerBlock(8).attentionType(AttentionType.MLA)
                        .windowGroups(WindowGroups.of(List.of(16, 0))).build())
                .withMessageContaining("windowGroups = [16,full]").withMessageContaining("MLA");
    }

    @Test
    void theWindowCoversItsLastTokensWhereverThePromptEnds() {
        // ceil(W/T) + 1 blocks: the seed's W/T + 1 when T divides W.
        assertThat(WindowGroups.blocksInWindow(16, 8, 100)).isEqualTo(3);
        assertThat(WindowGroups.blocksInWindow(80, 8, 100)).isEqualTo(11);
        assertThat(WindowGroups.blocksInWindow(4096, 32, 1000)).isEqualTo(129);
        assertThat(WindowGroups.blocksInWindow(10, 8, 100)).isEqualTo(3);
        assertThat(WindowGroups.blocksInWindow(16, 8, 2)).isEqualTo(2);
        assertThat(WindowGroups.blocksInWindow(WindowGroups.UNLIMITED, 8, 7)).isEqualTo(7);
        // Every window of W tokens ending anywhere in the prompt lies inside the blocks moved.
        for (int w = 1; w <= 40; w++) {
            for (int prompt = 1; prompt <= 80; prompt++) {
                int total = (prompt + 7) / 8;
                int firstToken = Math.max(0, prompt - w);
                int needed = total - firstToken / 8;
                assertThat(WindowGroups.blocksInWindow(w, 8, total)).as("W=%d prompt=%d", w, prompt)
                        .isGreaterThanOrEqualTo(needed);
            }
        }
        WindowGroups g = WindowGroups.pattern(8, List.of(1024, 1024, 1024, 0));
        assertThat(g.groups()).containsExactly(0, 1024);
        assertThat(g.compact()).isEqualTo("[1024x3,full,1024x3,full]");
        assertThat(g.firstMovedBlock(0, 32, 100, 0)).isEqualTo(100 - 33);
        assertThat(g.firstMovedBlock(0, 32, 100, 80)).isEqualTo(80);
        assertThat(g.firstMovedBlock(3, 32, 100, 5)).isEqualTo(5);
        assertThat(g.runEnd(0, 8)).isEqualTo(3);
        assertThat(g.runEnd(1, 2)).isEqualTo(2);
    }

    private static void assertMalformed(byte[] bytes, String what) {
        MalformedMessageException e = catchThrowableOfType(MalformedMessageException.class,
                () -> CacheState.fromBytes(bytes));
        assertThat(e).as("expected MalformedMessageException").isNotNull();
        assertThat(e.code()).isEqualTo(ErrorCode.MALFORMED);
        assertThat(e.getMessage()).contains(what);
    }
}
