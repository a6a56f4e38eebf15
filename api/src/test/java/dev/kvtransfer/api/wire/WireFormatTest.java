package dev.kvtransfer.api.wire;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.TestStates;
import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.api.model.CommState;
import dev.kvtransfer.api.model.ContextPhaseParams;
import dev.kvtransfer.api.model.RequestInfo;
import dev.kvtransfer.api.model.TransceiverState;
import dev.kvtransfer.api.transport.Tags;
import org.junit.jupiter.api.Test;
import org.assertj.core.api.ThrowableAssert.ThrowingCallable;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.util.HexFormat;
import java.util.List;
import java.util.Random;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatExceptionOfType;
import static org.assertj.core.api.Assertions.assertThatIllegalArgumentException;
import static org.assertj.core.api.Assertions.assertThatThrownBy;
import static org.assertj.core.api.Assertions.catchThrowableOfType;

/** The byte layout of the wire format and how each kind of bad input is reported. */
class WireFormatTest {
    private static final CacheState SMALL = TestStates.state(1, 1, 1, 2, 4); // 2 layers, 4 heads, D4 T8 FP16

    /** The whole encoding of {@link #SMALL} in format version 1 (no pool layout): still read, as BLOCK. */
    private static final String SMALL_HEX_V1 = String.join("",
            "4b565458", "0100",                 // magic "KVTX", format version 1 (LE u16)
            "43",                               // CacheState tag 'C'
            "02000000", "04000000", "04000000", // kvHeadsPerLayer: count 2, [4, 4]
            "04000000",                         // sizePerHead
            "08000000",                         // tokensPerBlock
            "01000000", "01000000", "01000000", // TP, PP, CP
            "00", "00000000", "01000000",       // attention DP off, dpRank 0, dpSize 1
            "01000000", "02000000",             // attentionLayersPerPp: count 1, [2]
            "01000000",                         // dataType FLOAT16 (wire id 1)
            "00",                               // attentionType DEFAULT
            "02000000",                         // kvFactor
            "00");                              // blockReuse

    /** {@link #SMALL} as format version 2 wrote it (before the indexer-K fields). */
    private static final String SMALL_HEX_V2 = String.join("",
            "4b565458", "0200",                 // magic "KVTX", format version 2 (LE u16)
            "43",                               // CacheState tag 'C'
            "02000000", "04000000", "04000000", // kvHeadsPerLayer: count 2, [4, 4]
            "04000000",                         // sizePerHead
            "08000000",                         // tokensPerBlock
            "01000000", "01000000", "01000000", // TP, PP, CP
            "00", "00000000", "01000000",       // attention DP off, dpRank 0, dpSize 1
            "01000000", "02000000",             // attentionLayersPerPp: count 1, [2]
            "01000000",                         // dataType FLOAT16 (wire id 1)
            "00",                               // attentionType DEFAULT
            "02000000",                         // kvFactor
            "00",                               // blockReuse
            "00", "00000000");                  // poolLayout BLOCK (v2), mlaRopeDim 0 (v2)

    /** {@link #SMALL} as format version 3 wrote it (before partialReuse). */
    private static final String SMALL_HEX_V3 = String.join("",
            "4b565458", "0300",                 // magic "KVTX", format version 3 (LE u16)
            "43",                               // CacheState tag 'C'
            "02000000", "04000000", "04000000", // kvHeadsPerLayer: count 2, [4, 4]
            "04000000",                         // sizePerHead
            "08000000",                         // tokensPerBlock
            "01000000", "01000000", "01000000", // TP, PP, CP
            "00", "00000000", "01000000",       // attention DP off, dpRank 0, dpSize 1
            "01000000", "02000000",             // attentionLayersPerPp: count 1, [2]
            "01000000",                         // dataType FLOAT16 (wire id 1)
            "00",                               // attentionType DEFAULT
            "02000000",                         // kvFactor
            "00",                               // blockReuse
            "00", "00000000",                   // poolLayout BLOCK (v2), mlaRopeDim 0 (v2)
            "00000000", "00000000");            // indexerDimPerHead 0, quant block size 0 (v3): no indexer-K pool

    /** The whole encoding of {@link #SMALL}, field by field. Changing it means bumping FORMAT_VERSION. */
    private static final String SMALL_HEX = String.join("",
            "4b565458", "0400",                 // magic "KVTX", format version 4 (LE u16)
            "43",                               // CacheState tag 'C'
            "02000000", "04000000", "04000000", // kvHeadsPerLayer: count 2, [4, 4]
            "04000000",                         // sizePerHead
            "08000000",                         // tokensPerBlock
            "01000000", "01000000", "01000000", // TP, PP, CP
            "00", "00000000", "01000000",       // attention DP off, dpRank 0, dpSize 1
            "01000000", "02000000",             // attentionLayersPerPp: count 1, [2]
            "01000000",                         // dataType FLOAT16 (wire id 1)
            "00",                               // attentionType DEFAULT
            "02000000",                         // kvFactor
            "00",                               // blockReuse
            "00", "00000000",                   // poolLayout BLOCK (v2), mlaRopeDim 0 (v2)
            "00000000", "00000000",             // indexerDimPerHead 0, quant block size 0 (v3): no indexer-K pool
            "00");                              // partialReuse (v4)

    private static MalformedMessageException malformed(ThrowingCallable call) {
        return catchThrowableOfType(MalformedMessageException.class, call);
    }

    private static MalformedMessageException malformedCacheState(byte[] bytes) {
        MalformedMessageException e = malformed(() -> CacheState.fromBytes(bytes));
        assertThat(e).as("expected MalformedMessageException").isNotNull();
        assertThat(e.code()).isEqualTo(ErrorCode.MALFORMED);
        return e;
    }

    private static byte[] hex(String s) {
        return HexFormat.of().parseHex(s);
    }

    private static void putIntLe(byte[] b, int offset, int v) {
        for (int i = 0; i < 4; i++) {
            b[offset + i] = (byte) (v >>> (8 * i));
        }
    }

    private static TransceiverState ts(CacheState cache) {
        List<String> addresses = new java.util.ArrayList<>();
        for (int i = 0; i < cache.worldSize(); i++) {
            addresses.add("127.0.0.1:" + (4000 + i));
        }
        return new TransceiverState(cache, new CommState("aeron", addresses, 0));
    }

    @Test
    void cacheStateHasTheDocumentedByteLayout() {
        assertThat(HexFormat.of().formatHex(SMALL.toBytes())).isEqualTo(SMALL_HEX);
        assertThat(CacheState.fromBytes(hex(SMALL_HEX))).isEqualTo(SMALL);
    }

    @Test
    void aVersion1CacheStateStillReadsAsABlockPool() {
        CacheState old = CacheState.fromBytes(hex(SMALL_HEX_V1));
        assertThat(old).isEqualTo(SMALL);
        assertThat(old.poolLayout()).isEqualTo(dev.kvtransfer.api.layout.PoolLayout.BLOCK);
    }

    @Test
    void aVersion2CacheStateStillReadsWithoutAnIndexerPool() {
        CacheState old = CacheState.fromBytes(hex(SMALL_HEX_V2));
        assertThat(old).isEqualTo(SMALL);
        assertThat(old.hasIndexerKCache()).isFalse();
    }

    @Test
    void aVersion3CacheStateStillReadsWithoutPartialReuse() {
        CacheState old = CacheState.fromBytes(hex(SMALL_HEX_V3));
        assertThat(old).isEqualTo(SMALL);
        assertThat(old.partialReuse()).isFalse();
    }

    @Test
    void partialReuseRoundTripsAndNeedsBlockReuse() {
        CacheState partial = SMALL.toBuilder().blockReuse(true).partialReuse(true).build();
        CacheState back = CacheState.fromBytes(partial.toBytes());
        assertThat(back).isEqualTo(partial);
        assertThat(back.partialReuse()).isTrue();
        assertThat(partial).isNotEqualTo(SMALL.toBuilder().blockReuse(true).build());
        assertThat(partial.toString()).contains("reuse partial");
        assertThatIllegalArgumentException().isThrownBy(() -> SMALL.toBuilder().partialReuse(true).build())
                .withMessageContaining("partialReuse = true: needs blockReuse");
        byte[] b = SMALL.toBytes();
        b[b.length - 1] = 1; // partial reuse without block reuse
        assertThat(malformedCacheState(b).getMessage()).contains("needs blockReuse");
        b[b.length - 1] = 2;
        assertThat(malformedCacheState(b).getMessage()).contains("partialReuse", "0 or 1");
    }

    @Test
    void anIndexerPoolRoundTripsAndOutOfRangeValuesAreMalformed() {
        CacheState mla = CacheState.builder().uniformKvHeads(4, 1).sizePerHead(576).tokensPerBlock(64)
                .attentionType(dev.kvtransfer.api.model.AttentionType.MLA).indexerKCache(132, 128).build();
        CacheState back = CacheState.fromBytes(mla.toBytes());
        assertThat(back).isEqualTo(mla);
        assertThat(back.hasIndexerKCache()).isTrue();
        assertThat(back.indexerDimPerHead()).isEqualTo(132);
        assertThat(back.indexerKCacheQuantBlockSize()).isEqualTo(128);
        assertThat(mla).isNotEqualTo(mla.toBuilder().indexerKCache(0, 0).build());
        byte[] b = mla.toBytes();
        putIntLe(b, b.length - 9, -1);
        assertThat(malformedCacheState(b).getMessage()).contains("indexerDimPerHead");
        b = SMALL.toBytes();
        putIntLe(b, b.length - 5, 64); // a quantization block size without an indexer pool
        assertThat(malformedCacheState(b).getMessage()).contains("indexerKCacheQuantBlockSize", "without");
    }

    @Test
    void anFp4IndexerCacheSetsBit30OfTheQuantWordAndEveryOtherStateEncodesAsBefore() {
        CacheState mla = CacheState.builder().uniformKvHeads(4, 1).sizePerHead(576).tokensPerBlock(64)
                .attentionType(dev.kvtransfer.api.model.AttentionType.MLA).indexerKCache(132, 128).build();
        CacheState fp4 = mla.toBuilder().indexerKCache(132, 128, true).build();
        assertThat(fp4.indexerKCacheUseFp4()).isTrue();
        assertThat(mla.indexerKCacheUseFp4()).isFalse();
        assertThat(fp4).isNotEqualTo(mla);
        assertThat(fp4.toString()).contains("indexerK=132/q128/fp4");
        byte[] plain = mla.toBytes();
        byte[] flagged = fp4.toBytes();
        String tail = "84000000" + "80000000" + "00"; // indexerDimPerHead 132, quant block size 128, partialReuse
        assertThat(HexFormat.of().formatHex(plain)).endsWith(tail);
        // Same length, same bytes but bit 30 of the quant word: 0x40000080, which a reader without the flag
        // range-checks against [0, MAX_DIM] and refuses.
        assertThat(HexFormat.of().formatHex(flagged)).endsWith("84000000" + "80000040" + "00")
                .startsWith(HexFormat.of().formatHex(plain, 0, plain.length - 5));
        assertThat(0x40000080).isGreaterThan(CacheState.MAX_DIM);
        CacheState back = CacheState.fromBytes(flagged);
        assertThat(back).isEqualTo(fp4);
        assertThat(back.indexerKCacheUseFp4()).isTrue();
        assertThat(back.indexerKCacheQuantBlockSize()).isEqualTo(128);
        assertThat(CacheState.fromBytes(plain).indexerKCacheUseFp4()).isFalse();
        // FP4 needs an indexer pool; other high bits stay malformed.
        assertThatIllegalArgumentException().isThrownBy(() -> SMALL.toBuilder().indexerKCache(0, 0, true).build())
                .withMessageContaining("indexerKCacheUseFp4 = true: needs an indexer-K pool");
        byte[] b = SMALL.toBytes();
        putIntLe(b, b.length - 5, 1 << 30);
        assertThat(malformedCacheState(b).getMessage()).contains("indexerKCacheUseFp4", "needs an indexer-K pool");
        b = mla.toBytes();
        putIntLe(b, b.length - 5, 0x80000080);
        assertThat(malformedCacheState(b).getMessage()).contains("indexerKCacheQuantBlockSize");
        b = mla.toBytes();
        putIntLe(b, b.length - 5, (1 << 30) | (CacheState.MAX_DIM + 1));
        assertThat(malformedCacheState(b).getMessage()).contains("indexerKCacheQuantBlockSize");
    }

    @Test
    void aPoolLayoutRoundTripsAndAnUnknownOneIsMalformed() {
        CacheState mla = CacheState.builder().uniformKvHeads(4, 1).sizePerHead(576).tokensPerBlock(16)
                .attentionType(dev.kvtransfer.api.model.AttentionType.MLA)
                .poolLayout(new dev.kvtransfer.api.layout.PoolLayout(
                        dev.kvtransfer.api.layout.PoolLayout.Kind.LAYER_NHD, 64)).build();
        assertThat(CacheState.fromBytes(mla.toBytes())).isEqualTo(mla);
        byte[] b = SMALL.toBytes();
        b[b.length - 14] = 9;
        assertThat(malformedCacheState(b).getMessage()).contains("unknown poolLayout id 9");
    }

    @Test
    void everyMessageStartsWithMagicAndVersionLittleEndian() {
        byte[] b = WireWriter.message().writeInt(0x01020304).writeLong(0x0102030405060708L).toByteArray();
        assertThat(new String(b, 0, 4, java.nio.charset.StandardCharsets.US_ASCII)).isEqualTo("KVTX");
        assertThat(HexFormat.of().formatHex(b)).isEqualTo("4b5654580400" + "04030201" + "0807060504030201");
        WireReader r = WireReader.message(ByteBuffer.wrap(b));
        assertThat(r.offset()).isEqualTo(6);
        assertThat(r.readInt("x")).isEqualTo(0x01020304);
        assertThat(r.readLong("y")).isEqualTo(0x0102030405060708L);
        r.expectEnd("test");
    }

    @Test
    void aNewerFormatVersionIsRejectedNamingBothVersions() {
        byte[] b = SMALL.toBytes();
        b[4] = 5;
        MalformedMessageException e = malformedCacheState(b);
        assertThat(e.getMessage()).contains("format version 5", "version " + WireWriter.FORMAT_VERSION, "newer");
        assertThat(e.offset()).isEqualTo(4);
        b[4] = (byte) 0xff;
        b[5] = (byte) 0xff;
        assertThat(malformedCacheState(b).getMessage()).contains("format version 65535", "version 4");
    }

    @Test
    void anOlderFormatVersionIsRejected() {
        byte[] b = SMALL.toBytes();
        b[4] = 0;
        assertThat(malformedCacheState(b).getMessage()).contains("unsupported format version 0", "versions 1 to 4");
    }

    @Test
    void aWrongMagicIsRejected() {
        byte[] b = SMALL.toBytes();
        b[0] = 'X';
        MalformedMessageException e = malformedCacheState(b);
        assertThat(e.getMessage()).contains("bad magic", "not a kvtransfer message");
        assertThat(e.offset()).isZero();
    }

    @Test
    void truncationNamesTheFieldAndOffset() {
        assertThat(malformedCacheState(new byte[0]).getMessage()).contains("truncated: magic", "at offset 0");
        byte[] b = SMALL.toBytes();
        // cut inside sizePerHead (offset 19)
        MalformedMessageException e = malformedCacheState(java.util.Arrays.copyOf(b, 21));
        assertThat(e.getMessage()).contains("sizePerHead", "needs 4 bytes, 2 left");
        assertThat(e.offset()).isEqualTo(19);
    }

    @Test
    void trailingBytesAreRejectedForEveryMessageType() {
        Random rnd = new Random(7);
        for (Samples.Codec codec : Samples.CODECS) {
            byte[] good = codec.encode().apply(Samples.sample(codec, rnd));
            byte[] longer = java.util.Arrays.copyOf(good, good.length + 1);
            MalformedMessageException e = malformed(() -> codec.decode().apply(longer));
            assertThat(e).as(codec.name()).isNotNull();
            assertThat(e.getMessage()).contains("1 trailing bytes after " + codec.name());
            assertThat(e.offset()).isEqualTo(good.length);
        }
    }

    @ParameterizedTest(name = "count {0}")
    @ValueSource(ints = {0x7fffffff, 0x80000000, -1, WireReader.MAX_COUNT + 1})
    void hostileCountsAreRejectedBeforeAllocating(int count) {
        byte[] b = SMALL.toBytes();
        putIntLe(b, 7, count); // the kvHeadsPerLayer count
        MalformedMessageException e = malformedCacheState(b);
        assertThat(e.getMessage()).contains("kvHeadsPerLayer count " + count, "out of range");
        assertThat(e.offset()).isEqualTo(7);
    }

    @Test
    void aCountLargerThanTheBytesLeftIsRejected() {
        byte[] b = SMALL.toBytes();
        putIntLe(b, 7, 1000);
        assertThat(malformedCacheState(b).getMessage())
                .contains("kvHeadsPerLayer count 1000 needs at least 4000 bytes");
    }

    @Test
    void outOfRangeFieldsAreNamed() {
        byte[] b = SMALL.toBytes();
        putIntLe(b, 19, 0); // sizePerHead
        assertThat(malformedCacheState(b).getMessage()).contains("sizePerHead = 0 out of range");
        b = SMALL.toBytes();
        b[39] = 2; // attention DP boolean
        assertThat(malformedCacheState(b).getMessage()).contains("attentionDpEnabled", "must be 0 or 1, was 2");
        b = SMALL.toBytes();
        putIntLe(b, 56, 99); // dataType
        assertThat(malformedCacheState(b).getMessage()).contains("unknown dataType id 99");
        b = SMALL.toBytes();
        b[60] = 5; // attentionType
        assertThat(malformedCacheState(b).getMessage()).contains("unknown attentionType 5");
        b = SMALL.toBytes();
        b[6] = 'X'; // tag
        assertThat(malformedCacheState(b).getMessage()).contains("expected CacheState tag");
    }

    @Test
    void aSemanticallyInvalidStateIsMalformedWithTheBuilderReason() {
        byte[] b = SMALL.toBytes();
        putIntLe(b, 27, 3); // TP 3
        MalformedMessageException e = malformedCacheState(b);
        assertThat(e.getMessage()).contains("invalid CacheState", "tensorParallelism = 3", "power of two");
        assertThat(e.offset()).isEqualTo(6);
    }

    @Test
    void invalidUtf8IsMalformed() {
        byte[] b = WireWriter.message().writeByte(0x4D).writeInt(2).writeByte(0xC3).writeByte(0x28)
                .writeInt(0).writeInt(-1).toByteArray();
        MalformedMessageException e = malformed(() -> CommState.fromBytes(b));
        assertThat(e.getMessage()).contains("transport: invalid UTF-8");
        assertThat(e.offset()).isEqualTo(11);
    }

    @Test
    void selfIndexMustBeInsideTheAddressList() {
        byte[] b = new CommState("ucx", List.of("a", "b"), 1).toBytes();
        putIntLe(b, b.length - 4, 2);
        assertThat(malformed(() -> CommState.fromBytes(b)).getMessage()).contains("selfIndex = 2 out of range [-1, 1]");
    }

    @Test
    void addressCountMustMatchTheCacheLayout() {
        WireWriter w = WireWriter.message().writeByte(0x54);
        TestStates.state(2, 1, 1, 2, 4).writeTo(w);
        new CommState("ucx", List.of("only-one"), 0).writeTo(w);
        byte[] b = w.toByteArray();
        MalformedMessageException e = malformed(() -> TransceiverState.fromBytes(b));
        assertThat(e.getMessage()).contains("invalid TransceiverState", "1 addresses", "2 ranks");
    }

    @Test
    void dataTagsMustStayClearOfControlTags() {
        assertThatIllegalArgumentException()
                .isThrownBy(() -> new RequestInfo(1, 0, new long[0], ts(SMALL), Tags.READY_SIGNAL_TAG, 0))
                .withMessageContaining("dataTag = 42");
        byte[] b = new RequestInfo(1, 0, new long[0], ts(SMALL), Tags.FIRST_DATA_TAG, 0).toBytes();
        // The data tag sits before chunkBytes (8) and the version-2 fields (40 bytes when all are empty).
        putIntLe(b, b.length - 12 - 40, Tags.INFO_TAG);
        assertThat(malformed(() -> RequestInfo.fromBytes(b)).getMessage()).contains("dataTag = 32 out of range");
    }

    @Test
    void negativeChunkBytesAreMalformed() {
        byte[] b = new RequestInfo(1, 0, new long[0], ts(SMALL), Tags.FIRST_DATA_TAG, 0).toBytes();
        b[b.length - 1 - 40] = (byte) 0x80;
        assertThat(malformed(() -> RequestInfo.fromBytes(b)).getMessage()).contains("chunkBytes =", "must be >= 0");
    }

    @Test
    void requestInfoV2CarriesReuseBlockIdsAndAuthenticationFields() {
        byte[] token = new byte[ContextPhaseParams.TOKEN_BYTES];
        byte[] nonce = new byte[RequestInfo.NONCE_BYTES];
        token[3] = 7;
        nonce[15] = 9;
        RequestInfo i = new RequestInfo(5, 9, new long[0], ts(SMALL), Tags.FIRST_DATA_TAG + 3, 4096, 3,
                new long[] {11, 12, 13}, new int[] {4, 5, 6, 90, 91, 2, 3, 7, 8, 1}, token, nonce, 1234567L, RequestInfo.FLAG_PART_CHECKSUMS, 64,
                List.of(new dev.kvtransfer.api.format.PeerPool.Grant(3, 4096, new dev.kvtransfer.api.transport
                        .RegionDescriptor("gen-0", 9, 0x7f00_0000L, 65536, new byte[16]))));
        RequestInfo back = RequestInfo.fromBytes(i.toBytes());
        assertThat(back).isEqualTo(i);
        assertThat(back.blockIds()).containsExactly(4, 5, 6, 90, 91, 2, 3, 7, 8, 1);
        assertThat(back.reusedBlockHashes()).containsExactly(11, 12, 13);
        assertThat(back.partChecksums()).isTrue();
        assertThat(back.push()).isTrue();
        assertThat(back.grants().get(0).descriptor().regionId()).isEqualTo(9);
        assertThatIllegalArgumentException().isThrownBy(() -> new RequestInfo(5, 1, new long[0], ts(SMALL),
                Tags.FIRST_DATA_TAG, 0, 3, new long[3], new int[0], new byte[0], new byte[0], 0, 0, 1, List.of()))
                .withMessageContaining("reusedBlocks = 3");
        assertThatIllegalArgumentException().isThrownBy(() -> new RequestInfo(5, 4, new long[0], ts(SMALL),
                Tags.FIRST_DATA_TAG, 0, 2, new long[1], new int[0], new byte[0], new byte[0], 0, 0, 1, List.of()))
                .withMessageContaining("1 entries for 2 reused blocks");
    }

    @Test
    void contextPhaseParamsCarryTheirRequestToken() {
        TransceiverState s = new TransceiverState(SMALL, new CommState("aeron", List.of("x"), 0));
        byte[] token = new byte[ContextPhaseParams.TOKEN_BYTES];
        token[0] = 1;
        ContextPhaseParams p = new ContextPhaseParams(9, new long[] {1, 2}, s, token);
        assertThat(ContextPhaseParams.fromBytes(p.toBytes())).isEqualTo(p);
        assertThat(p).isNotEqualTo(new ContextPhaseParams(9, new long[] {1, 2}, s));
        assertThat(p.toString()).doesNotContain("[1, 0").contains("token");
    }

    @Test
    void contextPhaseParamsCarryTheDescribingRank() {
        TransceiverState s = new TransceiverState(SMALL, new CommState("aeron", List.of("x"), 0));
        ContextPhaseParams p = new ContextPhaseParams(9, new long[] {1, 2}, s);
        ContextPhaseParams other = new ContextPhaseParams(9, new long[] {1, 2},
                new TransceiverState(SMALL, s.commState().withSelfIndex(-1)));
        assertThat(p).isNotEqualTo(other);
        assertThat(ContextPhaseParams.fromBytes(p.toBytes())).isEqualTo(p);
    }

    @Test
    void stringsRoundTripAnyUnicodeAndRejectLoneSurrogates() {
        String s = "漢字 é 😀 \u0000 end";
        WireReader r = WireReader.raw(WireWriter.raw().writeString(s).toByteArray());
        assertThat(r.readString("s")).isEqualTo(s);
        assertThatIllegalArgumentException().isThrownBy(() -> WireWriter.raw().writeString("bad \ud800 half"))
                .withMessageContaining("surrogate");
        // the reader refuses an encoded surrogate (CESU-8 style) just the same
        byte[] b = WireWriter.raw().writeInt(3).writeByte(0xED).writeByte(0xA0).writeByte(0x80).toByteArray();
        assertThatExceptionOfType(MalformedMessageException.class)
                .isThrownBy(() -> WireReader.raw(b).readString("s")).withMessageContaining("invalid UTF-8");
        // A high surrogate at the end, a low one alone: refused too, by the length and by the buffer writer.
        for (String bad : new String[] {"end \ud83d", "\ude00 start", "\ude00\ud83d"}) {
            assertThatIllegalArgumentException().isThrownBy(() -> WireWriter.utf8Length(bad))
                    .withMessageContaining("surrogate");
            assertThatIllegalArgumentException().isThrownBy(() -> WireWriter.putString(ByteBuffer.allocate(64), 0,
                    bad)).withMessageContaining("surrogate");
        }
    }

    @Test
    void stringsWrittenIntoABufferAreTheWritersBytes() {
        for (String s : new String[] {"", "gen-0", "127.0.0.1:40123", "\u007f\u0080", "\u07ff\u0800", "\uffff",
                "漢字 é 😀 \u0000 end", "\ud83d\ude80\ud83d\ude80"}) {
            byte[] expected = WireWriter.raw().writeString(s).toByteArray();
            assertThat(WireWriter.utf8Length(s)).as(s).isEqualTo(s.getBytes(StandardCharsets.UTF_8).length);
            assertThat(expected.length).isEqualTo(4 + WireWriter.utf8Length(s));
            for (ByteOrder order : new ByteOrder[] {ByteOrder.LITTLE_ENDIAN, ByteOrder.BIG_ENDIAN}) {
                ByteBuffer b = ByteBuffer.allocate(expected.length + 7).order(order);
                assertThat(WireWriter.putString(b, 3, s)).isEqualTo(expected.length);
                byte[] got = new byte[expected.length];
                b.get(3, got);
                assertThat(got).as("%s, %s", s, order).isEqualTo(expected);
                assertThat(b.position()).isZero();
            }
            assertThat(WireReader.raw(expected).readString("s")).isEqualTo(s);
            assertThatThrownBy(() -> WireWriter.putString(ByteBuffer.allocate(expected.length - 1), 0, s))
                    .isInstanceOf(IndexOutOfBoundsException.class);
        }
    }

    @Test
    void theReaderDoesNotMoveTheCallersBuffer() {
        ByteBuffer buf = ByteBuffer.wrap(SMALL.toBytes());
        WireReader r = WireReader.message(buf);
        assertThat(CacheState.readFrom(r)).isEqualTo(SMALL);
        assertThat(buf.position()).isZero();
        assertThat(r.remaining()).isZero();
    }
}
