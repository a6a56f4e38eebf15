package dev.kvtransfer.api.wire;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.api.model.CommState;
import dev.kvtransfer.api.model.ContextPhaseParams;
import dev.kvtransfer.api.model.RequestInfo;
import dev.kvtransfer.api.model.TransceiverState;
import dev.kvtransfer.api.transport.Tags;
import org.junit.jupiter.api.Test;

import java.util.Arrays;
import java.util.HexFormat;
import java.util.List;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatIllegalArgumentException;
import static org.assertj.core.api.Assertions.catchThrowableOfType;

/**
 * What format version 4 adds for the two sides to agree on: draft tokens in the context-phase params (with a checksum
 * of the tokens), the partial-reuse flag of a request info, and the requester's last block key compared in place.
 */
class NegotiationWireTest {
    private static final CacheState STATE = CacheState.builder().uniformKvHeads(2, 4).sizePerHead(4)
            .tokensPerBlock(8).build();
    private static final TransceiverState TS = new TransceiverState(STATE, new CommState("aeron", List.of("x"), 0));

    private static byte[] hex(String s) {
        return HexFormat.of().parseHex(s);
    }

    /** The transceiver state's body, as it sits inside a message (no header). */
    private static String stateBody() {
        WireWriter w = WireWriter.raw();
        TS.writeTo(w);
        return HexFormat.of().formatHex(w.toByteArray());
    }

    /** Params of request 5 with first generated token 7 and draft tokens 11, 12, field by field. */
    private static String paramsHex(String version, String tail) {
        return String.join("",
                "4b565458", version,                   // magic "KVTX", format version (LE u16)
                "50",                                  // ContextPhaseParams tag 'P'
                "0500000000000000",                    // requestId 5
                "01000000", "0700000000000000",        // firstGenTokens: count 1, [7]
                stateBody(),                           // the context side's TransceiverState
                tail);
    }

    private static final String V4_TAIL = String.join("",
            "00000000",                                // requestToken: none (v2)
            "02000000", "0b00000000000000", "0c00000000000000", // draftTokens: count 2, [11, 12] (v4)
            "e7ead740");                               // CRC32C of (1, 7, 2, 11, 12) as LE i32/i64 (v4)

    private static MalformedMessageException malformed(byte[] b) {
        MalformedMessageException e = catchThrowableOfType(MalformedMessageException.class,
                () -> ContextPhaseParams.fromBytes(b));
        assertThat(e).as("expected MalformedMessageException").isNotNull();
        assertThat(e.code()).isEqualTo(ErrorCode.MALFORMED);
        return e;
    }

    @Test
    void draftTokensHaveTheDocumentedByteLayout() {
        ContextPhaseParams p = new ContextPhaseParams(5, new long[] {7}, TS, new byte[0], new long[] {11, 12});
        assertThat(HexFormat.of().formatHex(p.toBytes())).isEqualTo(paramsHex("0400", V4_TAIL));
        ContextPhaseParams back = ContextPhaseParams.fromBytes(hex(paramsHex("0400", V4_TAIL)));
        assertThat(back).isEqualTo(p);
        assertThat(back.draftTokens()).containsExactly(11, 12);
        assertThat(p.tokensChecksum()).isEqualTo(0x40d7eae7);
        assertThat(p).isNotEqualTo(new ContextPhaseParams(5, new long[] {7}, TS));
        assertThat(p.toString()).contains("2 draft tokens");
    }

    @Test
    void olderParamsStillReadWithoutDraftTokens() {
        // Version 3 (and 2) wrote the request token last; version 1 stopped after the state.
        String v3 = paramsHex("0300", "00000000").replace(stateBody(), v3StateBody());
        ContextPhaseParams p3 = ContextPhaseParams.fromBytes(hex(v3));
        assertThat(p3).isEqualTo(new ContextPhaseParams(5, new long[] {7}, TS));
        assertThat(p3.draftTokens()).isEmpty();
        String v1 = paramsHex("0100", "").replace(stateBody(), v1StateBody());
        assertThat(ContextPhaseParams.fromBytes(hex(v1)).draftTokens()).isEmpty();
    }

    /** The state body as format version 3 wrote it: without the trailing partialReuse byte of the cache state. */
    private static String v3StateBody() {
        String body = stateBody();
        String cache = cacheBody();
        return body.replace(cache, cache.substring(0, cache.length() - 2));
    }

    /** Version 1: no pool layout, indexer-K fields or partialReuse in the cache state. */
    private static String v1StateBody() {
        String body = stateBody();
        String cache = cacheBody();
        return body.replace(cache, cache.substring(0, cache.length() - 2 - 2 * (1 + 4 + 4 + 4)));
    }

    private static String cacheBody() {
        WireWriter w = WireWriter.raw();
        STATE.writeTo(w);
        return HexFormat.of().formatHex(w.toByteArray());
    }

    @Test
    void aChangedTokenIsRefusedNamingBothChecksums() {
        byte[] b = hex(paramsHex("0400", V4_TAIL));
        int draftAt = b.length - 4 - 16;
        b[draftAt] = 0x0d; // draft token 11 becomes 13
        MalformedMessageException e = malformed(b);
        assertThat(e.getMessage()).contains("tokensChecksum", "recorded 40d7eae7", "2 draft tokens",
                "hash to " + Integer.toHexString(new ContextPhaseParams(5, new long[] {7}, TS, new byte[0],
                        new long[] {13, 12}).tokensChecksum()));
        assertThat(e.offset()).isEqualTo(b.length - 4);
        // The first generated token is covered too.
        byte[] c = hex(paramsHex("0400", V4_TAIL));
        c[6 + 1 + 8 + 4] = 8;
        assertThat(malformed(c).getMessage()).contains("tokensChecksum", "recorded 40d7eae7");
        // And the checksum itself.
        byte[] d = hex(paramsHex("0400", V4_TAIL));
        d[d.length - 1] ^= 1;
        assertThat(malformed(d).getMessage()).contains("tokensChecksum", "recorded 41d7eae7");
    }

    @Test
    void partialReuseIsARequestFlagOfFormatVersion4() {
        RequestInfo i = new RequestInfo(5, 3, new long[] {9, 8}, TS, Tags.FIRST_DATA_TAG, 0, 2, new long[] {1, 2},
                new int[0], new byte[0], new byte[0], 0, RequestInfo.FLAG_PARTIAL_REUSE, 1, List.of());
        RequestInfo back = RequestInfo.fromBytes(i.toBytes());
        assertThat(back).isEqualTo(i);
        assertThat(back.partialReuse()).isTrue();
        assertThat(new RequestInfo(5, 3, new long[0], TS, Tags.FIRST_DATA_TAG, 0).partialReuse()).isFalse();
        // The partial block follows the whole reused ones: with every block reused there is none.
        assertThatIllegalArgumentException().isThrownBy(() -> new RequestInfo(5, 1, new long[0], TS,
                Tags.FIRST_DATA_TAG, 0, 2, new long[2], new int[0], new byte[0], new byte[0], 0,
                RequestInfo.FLAG_PARTIAL_REUSE, 1, List.of())).withMessageContaining("there is none");
        // A version-3 writer never set the flag: a version-3 message with it is malformed.
        byte[] b = i.toBytes();
        b[4] = 3;
        byte[] v3 = withoutPartialReuseByte(b);
        MalformedMessageException e = catchThrowableOfType(MalformedMessageException.class,
                () -> RequestInfo.fromBytes(v3));
        assertThat(e.getMessage()).contains("flags = 4", "format version 3");
    }

    /** Drops the cache state's partialReuse byte (version 4) from an encoded request info, making it version 3. */
    private static byte[] withoutPartialReuseByte(byte[] b) {
        String h = HexFormat.of().formatHex(b);
        String cache = cacheBody();
        int at = h.indexOf(cache);
        assertThat(at).isPositive();
        return hex(h.substring(0, at) + cache.substring(0, cache.length() - 2) + h.substring(at + cache.length()));
    }

    /** A request info of request 5, one block, no key, the requester's state, echoing {@code 0x40d7eae7}. */
    private static String echoingInfoHex(String flags, String tail) {
        return String.join("",
                "4b565458", "0400",                    // magic "KVTX", format version 4 (LE u16)
                "52",                                  // RequestInfo tag 'R'
                "0500000000000000",                    // requestId 5
                "00000000",                            // indexFromEnd 0 (one block)
                "00000000",                            // lastBlockKey: none
                stateBody(),                           // the requester's TransceiverState
                "00100000",                            // dataTag 4096
                "0000000000000000",                    // chunkBytes 0
                "00000000", "00000000",                // reusedBlocks 0, reusedBlockHashes: none (v2)
                "00000000",                            // blockIds: none
                "00000000", "00000000",                // requestToken, nonce: none
                "0000000000000000",                    // timestampMillis 0
                flags,                                 // flags
                "01000000",                            // blocksPerRegion 1
                "00000000",                            // grants: none
                tail);
    }

    @Test
    void anEchoedTokensChecksumFollowsTheGrantsUnderItsFlag() {
        int checksum = new ContextPhaseParams(5, new long[] {7}, TS, new byte[0], new long[] {11, 12})
                .tokensChecksum();
        RequestInfo echoing = new RequestInfo(5, 0, new long[0], TS, 4096, 0, 0, new long[0], new int[0],
                new byte[0], new byte[0], 0, RequestInfo.FLAG_TOKENS_CHECKSUM, 1, List.of(), checksum);
        String golden = echoingInfoHex("08000000", "e7ead740"); // FLAG_TOKENS_CHECKSUM; the checksum (LE i32)
        assertThat(HexFormat.of().formatHex(echoing.toBytes())).isEqualTo(golden);
        java.nio.ByteBuffer direct = java.nio.ByteBuffer.allocateDirect(echoing.messageSize() + 3);
        assertThat(echoing.writeMessage(direct, 3)).isEqualTo(echoing.messageSize());
        byte[] inPlace = new byte[echoing.messageSize()];
        direct.get(3, inPlace);
        assertThat(HexFormat.of().formatHex(inPlace)).isEqualTo(golden);
        RequestInfo back = RequestInfo.fromBytes(hex(golden));
        assertThat(back).isEqualTo(echoing);
        assertThat(back.echoesTokensChecksum()).isTrue();
        assertThat(back.tokensChecksum()).isEqualTo(0x40d7eae7);
        // Without the flag nothing follows the grants: the bytes are the ones every version-4 writer wrote.
        RequestInfo plain = new RequestInfo(5, 0, new long[0], TS, 4096, 0, 0, new long[0], new int[0],
                new byte[0], new byte[0], 0, 0, 1, List.of());
        assertThat(HexFormat.of().formatHex(plain.toBytes())).isEqualTo(echoingInfoHex("00000000", ""));
        assertThat(plain.echoesTokensChecksum()).isFalse();
        assertThat(plain.tokensChecksum()).isZero();
        assertThat(plain).isNotEqualTo(echoing);
        // A checksum without its flag is refused; the flag without its checksum is truncated; version 3 never set it.
        assertThatIllegalArgumentException().isThrownBy(() -> new RequestInfo(5, 0, new long[0], TS, 4096, 0, 0,
                new long[0], new int[0], new byte[0], new byte[0], 0, 0, 1, List.of(), 7))
                .withMessageContaining("without FLAG_TOKENS_CHECKSUM");
        assertThat(catchThrowableOfType(MalformedMessageException.class,
                () -> RequestInfo.fromBytes(hex(echoingInfoHex("08000000", ""))))).isNotNull();
        byte[] v3 = withoutPartialReuseByte(echoing.toBytes());
        v3[4] = 3;
        assertThat(catchThrowableOfType(MalformedMessageException.class, () -> RequestInfo.fromBytes(v3))
                .getMessage()).contains("flags = 8", "format version 3");
    }

    @Test
    void theLastBlockKeyIsComparedInPlace() {
        long[] key = {1, 42, 7};
        RequestInfo i = new RequestInfo(5, 0, key, TS, Tags.FIRST_DATA_TAG, 0);
        assertThat(i.lastBlockKeyMatches(new long[] {1, 42, 7})).isTrue();
        assertThat(i.lastBlockKeyMatches(new long[] {1, 43, 7})).isFalse();
        assertThat(i.lastBlockKeyMatches(new long[0])).isFalse();
        key[1] = 0; // the info holds its own copy
        assertThat(i.lastBlockKeyMatches(new long[] {1, 42, 7})).isTrue();
        assertThat(RequestInfo.fromBytes(i.toBytes()).lastBlockKeyMatches(new long[] {1, 42, 7})).isTrue();
        assertThat(Arrays.equals(new RequestInfo(5, 0, new long[0], TS, Tags.FIRST_DATA_TAG, 0).lastBlockKey(),
                new long[0])).isTrue();
    }
}
