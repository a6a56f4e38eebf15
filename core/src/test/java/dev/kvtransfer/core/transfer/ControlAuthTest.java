package dev.kvtransfer.core.transfer;

import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.api.model.CommState;
import dev.kvtransfer.api.model.DataType;
import dev.kvtransfer.api.model.RequestInfo;
import dev.kvtransfer.api.model.TransceiverState;
import org.junit.jupiter.api.Test;

import javax.crypto.Mac;
import javax.crypto.spec.SecretKeySpec;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.Random;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * The control plane's HMAC without garbage per request: the hand-rolled HMAC-SHA256 gives the JDK's bytes, and
 * the in-place variants (info MAC, ready MAC, token and nonce read from the info) agree with the array ones, so
 * ranks of either version interoperate and every check still refuses a flipped byte.
 */
class ControlAuthTest {
    private static final byte[] SECRET = "a deployment secret of some length".getBytes(StandardCharsets.US_ASCII);

    private static byte[] jdkHmac(byte[] key, byte[] data) throws Exception {
        Mac m = Mac.getInstance("HmacSHA256");
        m.init(new SecretKeySpec(key, "HmacSHA256"));
        return m.doFinal(data);
    }

    private static byte[] framed(String domain, byte[]... parts) {
        ByteBuffer b = ByteBuffer.allocate(4096).order(ByteOrder.LITTLE_ENDIAN);
        b.putInt(domain.length()).put(domain.getBytes(StandardCharsets.US_ASCII));
        for (byte[] p : parts) {
            b.putInt(p.length).put(p);
        }
        byte[] out = new byte[b.position()];
        b.flip().get(out);
        return out;
    }

    private static RequestInfo info(ControlAuth auth, long id) {
        CacheState cache = CacheState.builder().uniformKvHeads(4, 4).sizePerHead(16).tokensPerBlock(16)
                .dataType(DataType.FLOAT16).tensorParallelism(1).pipelineParallelism(1).build();
        TransceiverState s = new TransceiverState(cache, new CommState("aeron", List.of("gen-0"), 0));
        return new RequestInfo(id, 0, new long[0], s, 4096, 0, 0, new long[0], new int[] {5}, auth.token(id),
                auth.nonce(), System.currentTimeMillis(), 0, 1, List.of());
    }

    @Test
    void macsAndTokensAreTheJdksHmacBytes() throws Exception {
        byte[] issuing = ControlAuth.newIssuingKey();
        ControlAuth auth = ControlAuth.of(SECRET, issuing);
        byte[] macKey = jdkHmac(SECRET, "kvtransfer-control-mac-v1".getBytes(StandardCharsets.US_ASCII));
        byte[] tokenKey = jdkHmac(issuing, "kvtransfer-request-token-v3".getBytes(StandardCharsets.US_ASCII));
        // What a holder of the deployment secret alone can derive (the former tokens) is no token.
        byte[] fromSecret = jdkHmac(SECRET, "kvtransfer-request-token-v1".getBytes(StandardCharsets.US_ASCII));
        ControlAuth sameSecretOtherRank = ControlAuth.of(SECRET);
        ControlAuth sameKey = ControlAuth.of(SECRET, issuing);
        Random random = new Random(3);
        for (int round = 0; round < 200; round++) {
            byte[] a = new byte[random.nextInt(300)];
            byte[] b = new byte[random.nextInt(70)];
            random.nextBytes(a);
            random.nextBytes(b);
            assertThat(auth.mac("INFO", a, b)).isEqualTo(jdkHmac(macKey, framed("INFO", a, b)));
            long id = random.nextLong();
            int checksum = random.nextInt();
            byte[] le = ByteBuffer.allocate(8).order(ByteOrder.LITTLE_ENDIAN).putLong(id).array();
            // The token: HMAC(token key, id, checksum) cut to 12 bytes, then the checksum it was issued for.
            byte[] token = ByteBuffer.allocate(ControlAuth.TOKEN_BYTES).order(ByteOrder.LITTLE_ENDIAN)
                    .put(jdkHmac(tokenKey, ByteBuffer.allocate(12).order(ByteOrder.LITTLE_ENDIAN).putLong(id)
                            .putInt(checksum).array()), 0, ControlAuth.TOKEN_MAC_BYTES).putInt(checksum).array();
            assertThat(auth.token(id, checksum)).isEqualTo(token);
            assertThat(ControlAuth.issuedChecksum(token)).isEqualTo(checksum);
            assertThat(auth.tokenValid(id, token)).isTrue();
            // Issued for other tokens: the checksum bytes cannot be rewritten without the issuing key.
            byte[] rewritten = token.clone();
            rewritten[ControlAuth.TOKEN_BYTES - 1] ^= 1;
            assertThat(auth.tokenValid(id, rewritten)).isFalse();
            assertThat(auth.token(id)).isEqualTo(auth.token(id,
                    dev.kvtransfer.api.model.ContextPhaseParams.tokensChecksum(new long[0], new long[0])));
            assertThat(sameKey.tokenValid(id, token)).as("another rank of the instance").isTrue();
            assertThat(sameSecretOtherRank.tokenValid(id, token)).as("a rank with its own key").isFalse();
            assertThat(auth.tokenValid(id, java.util.Arrays.copyOf(jdkHmac(fromSecret, le), ControlAuth.TOKEN_BYTES)))
                    .as("derived from the secret").isFalse();
            token[random.nextInt(token.length)] ^= 1;
            assertThat(auth.tokenValid(id, token)).isFalse();
        }
        ControlAuth off = ControlAuth.of(null);
        assertThat(off.mac("INFO", new byte[3])).isEmpty();
        assertThat(off.tokenValid(1, new byte[0])).isTrue();
        org.assertj.core.api.Assertions.assertThatThrownBy(() -> ControlAuth.of(SECRET, new byte[8]))
                .isInstanceOf(IllegalArgumentException.class).hasMessageContaining("16 bytes");
    }

    @Test
    void inPlaceMacsAgreeWithTheArrayOnesAndRefuseAFlippedByte() {
        ControlAuth auth = ControlAuth.of(SECRET);
        Random random = new Random(11);
        byte[] ctx = "aeron:ipc?ctx-0".getBytes(StandardCharsets.UTF_8);
        byte[] gen = "aeron:ipc?gen-0".getBytes(StandardCharsets.UTF_8);
        for (boolean direct : new boolean[] {false, true}) {
            for (int round = 0; round < 50; round++) {
                ByteBuffer bb = (direct ? ByteBuffer.allocateDirect(1024) : ByteBuffer.allocate(1024))
                        .order(ByteOrder.LITTLE_ENDIAN);
                int from = random.nextInt(64);
                int len = 1 + random.nextInt(600);
                byte[] body = new byte[len];
                random.nextBytes(body);
                bb.put(from, body);
                int macAt = from + len;
                bb.position(7).limit(900);
                auth.infoMacInto(bb, from, len, ctx, macAt);
                assertThat(bb.position()).isEqualTo(7);
                assertThat(bb.limit()).isEqualTo(900);
                byte[] written = new byte[ControlAuth.MAC_BYTES];
                bb.get(macAt, written);
                assertThat(written).isEqualTo(auth.mac("INFO", body, ctx));
                assertThat(auth.infoMacValid(bb, from, len, ctx, macAt)).isTrue();
                assertThat(auth.infoMacValid(bb, from, len, gen, macAt)).isFalse(); // meant for another rank
                int flip = from + random.nextInt(len + ControlAuth.MAC_BYTES);
                bb.put(flip, (byte) (bb.get(flip) ^ 0x10));
                assertThat(auth.infoMacValid(bb, from, len, ctx, macAt)).isFalse();
            }
            // Ready signals: the context side's in-place MAC is readyMac's below (the array form both sides used
            // before the in-place MACs), and the in-place check
            // accepts it only for the same request, tag, nonce, ends and body.
            for (int round = 0; round < 50; round++) {
                RequestInfo info = info(auth, 100 + round);
                ByteBuffer bb = (direct ? ByteBuffer.allocateDirect(512) : ByteBuffer.allocate(512))
                        .order(ByteOrder.LITTLE_ENDIAN);
                int bodyLen = 12 + 4 * random.nextInt(20);
                byte[] body = new byte[bodyLen];
                random.nextBytes(body);
                bb.put(0, body);
                auth.readyMacInto(bb, bodyLen, info, ctx, gen);
                byte[] written = new byte[ControlAuth.MAC_BYTES];
                bb.get(bodyLen, written);
                assertThat(written).isEqualTo(readyMac(auth, info.requestId(), info.dataTag(),
                        info.nonce(), "aeron:ipc?ctx-0", "aeron:ipc?gen-0", body));
                assertThat(auth.readyMacValid(bb, 0, bodyLen, info.requestId(), info.dataTag(), info.nonce(), ctx,
                        gen)).isTrue();
                assertThat(auth.readyMacValid(bb, 0, bodyLen, info.requestId() + 1, info.dataTag(), info.nonce(),
                        ctx, gen)).isFalse();
                assertThat(auth.readyMacValid(bb, 0, bodyLen, info.requestId(), info.dataTag(), auth.nonce(), ctx,
                        gen)).isFalse();
                int flip = random.nextInt(bodyLen);
                bb.put(flip, (byte) (bb.get(flip) ^ 1));
                assertThat(auth.readyMacValid(bb, 0, bodyLen, info.requestId(), info.dataTag(), info.nonce(), ctx,
                        gen)).isFalse();
            }
        }
    }

    @Test
    void tokenAndNonceAreCheckedInsideTheInfo() {
        ControlAuth auth = ControlAuth.of(SECRET);
        RequestInfo info = info(auth, 42);
        assertThat(auth.tokenValid(42, info)).isTrue();
        assertThat(auth.tokenValid(43, info)).isFalse();
        assertThat(auth.checkFresh(info)).isNull();
        assertThat(auth.checkFresh(info)).startsWith("nonce already used");
        // The same nonce through the array path is the same nonce.
        RequestInfo again = info(auth, 44);
        assertThat(auth.checkFresh(again.nonce(), again.timestampMillis())).isNull();
        assertThat(auth.checkFresh(again)).startsWith("nonce already used");
        RequestInfo stale = new RequestInfo(45, 0, new long[0], info.requesterState(), 4096, 0, 0, new long[0],
                new int[] {5}, auth.token(45), auth.nonce(),
                System.currentTimeMillis() - 10 * ControlAuth.WINDOW_MILLIS, 0, 1, List.of());
        assertThat(auth.checkFresh(stale)).contains("stale");
        RequestInfo noNonce = new RequestInfo(46, 0, new long[0], info.requesterState(), 4096, 0, 0, new long[0],
                new int[] {5}, auth.token(46), new byte[0], System.currentTimeMillis(), 0, 1, List.of());
        assertThat(auth.checkFresh(noNonce)).isEqualTo("no nonce");
        RequestInfo noToken = new RequestInfo(47, 0, new long[0], info.requesterState(), 4096, 0, 0, new long[0],
                new int[] {5}, new byte[0], auth.nonce(), System.currentTimeMillis(), 0, 1, List.of());
        assertThat(auth.tokenValid(47, noToken)).isFalse();
        assertThat(ControlAuth.of(null).tokenValid(47, noToken)).isTrue();
        assertThat(ControlAuth.of(null).checkFresh(noNonce)).isNull();
    }

    @Test
    void aTokenIsValidInPlaceOnlyForTheTokensChecksumItWasIssuedFor() {
        ControlAuth auth = ControlAuth.of(SECRET);
        RequestInfo base = info(auth, 50);
        int issued = 0x1234abcd;
        RequestInfo echoing = new RequestInfo(50, 0, new long[0], base.requesterState(), 4096, 0, 0, new long[0],
                new int[] {5}, auth.token(50, issued), auth.nonce(), System.currentTimeMillis(),
                RequestInfo.FLAG_TOKENS_CHECKSUM, 1, List.of(), issued);
        assertThat(auth.tokenValid(50, issued, echoing)).isTrue();
        assertThat(auth.tokenValid(50, issued + 1, echoing)).as("echoing other tokens").isFalse();
        assertThat(auth.tokenValid(51, issued, echoing)).as("another request").isFalse();
        assertThat(auth.tokenValid(50, echoing)).as("genuine, whatever was echoed").isTrue();
        assertThat(ControlAuth.issuedChecksum(echoing.requestToken())).isEqualTo(issued);
        assertThat(ControlAuth.of(null).tokenValid(50, issued + 1, echoing)).isTrue();
    }

    private static RequestInfo echoing(ControlAuth auth, long id, byte[] token, boolean echo, int checksum) {
        RequestInfo base = info(auth, id);
        return new RequestInfo(id, 0, new long[0], base.requesterState(), 4096, 0, 0, new long[0], new int[] {5},
                token, auth.nonce(), System.currentTimeMillis(), echo ? RequestInfo.FLAG_TOKENS_CHECKSUM : 0, 1,
                List.of(), echo ? checksum : 0);
    }

    @Test
    void theTokenCheckRefusesOtherTokensAMissingEchoAndAForgeryNamingWhatItCan() {
        ControlAuth auth = ControlAuth.of(SECRET);
        int issued = 0x0badf00d;
        byte[] token = auth.token(60, issued);
        assertThat(auth.checkToken(echoing(auth, 60, token, true, issued))).isNull();
        // Tokens replaced on the way: the request and both checksums named.
        assertThat(auth.checkToken(echoing(auth, 60, token, true, 0x12345678))).contains("request 60",
                "changed between the instances", "tokens checksum badf00d", "checksum 12345678");
        // A requester that does not echo cannot show its tokens unchanged: refused, naming the issued checksum.
        assertThat(auth.checkToken(echoing(auth, 60, token, false, 0))).contains("request 60",
                "does not echo", "tokens checksum badf00d");
        // A token rewritten to claim the requester's checksum is no token of this issuer.
        byte[] rewritten = token.clone();
        rewritten[ControlAuth.TOKEN_BYTES - 4] = 0x78;
        assertThat(auth.checkToken(echoing(auth, 60, rewritten, true, ControlAuth.issuedChecksum(rewritten))))
                .startsWith("wrong request token");
        assertThat(auth.checkToken(echoing(auth, 61, token, true, issued))).startsWith("wrong request token");
        assertThat(ControlAuth.of(SECRET).checkToken(echoing(auth, 60, token, true, issued)))
                .as("another issuing key").startsWith("wrong request token");
        // Off: nothing binds the tokens (the params' CRC is all that holds).
        assertThat(ControlAuth.of(null).checkToken(echoing(auth, 60, new byte[0], false, 0))).isNull();
    }

    /** What the MAC of a ready signal covers: request, tag, the request's nonce, both ends' addresses, its body. */
    private static byte[] readyMac(ControlAuth auth, long id, int tag, byte[] nonce, String ctxAddress,
                                   String genAddress, byte[] body) {
        byte[] idTag = new byte[12];
        ByteBuffer.wrap(idTag).order(ByteOrder.LITTLE_ENDIAN).putLong(id).putInt(tag);
        return auth.mac("READY", idTag, nonce, Texts.utf8(ctxAddress), Texts.utf8(genAddress), body);
    }
}
