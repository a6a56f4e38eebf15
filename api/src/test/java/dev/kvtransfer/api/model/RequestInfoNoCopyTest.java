package dev.kvtransfer.api.model;

import dev.kvtransfer.api.wire.MalformedMessageException;
import org.junit.jupiter.api.Test;

import java.nio.ByteBuffer;
import java.util.List;
import java.util.Random;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/**
 * Request infos decoded without extra copies (per-request garbage): decoding from a buffer region gives what decoding
 * the same bytes from an array gives; decoded arrays are taken over by the record but still never shared with
 * callers; the in-place accessors read what the copying accessors return; malformed counts are refused with the
 * same messages as before.
 */
class RequestInfoNoCopyTest {
    private static TransceiverState state() {
        CacheState cache = CacheState.builder().uniformKvHeads(4, 8).sizePerHead(64).tokensPerBlock(16)
                .dataType(DataType.FLOAT16).tensorParallelism(2).pipelineParallelism(1).build();
        return new TransceiverState(cache, new CommState("aeron", List.of("gen-0", "gen-1"), 1));
    }

    private static RequestInfo random(Random r) {
        int blocks = 1 + r.nextInt(6);
        int reused = r.nextInt(blocks + 1);
        long[] hashes = new long[reused];
        for (int i = 0; i < reused; i++) {
            hashes[i] = r.nextLong();
        }
        int[] ids = new int[blocks];
        for (int i = 0; i < blocks; i++) {
            ids[i] = r.nextInt(1000);
        }
        byte[] token = new byte[r.nextBoolean() ? ContextPhaseParams.TOKEN_BYTES : 0];
        byte[] nonce = new byte[token.length == 0 ? 0 : RequestInfo.NONCE_BYTES];
        r.nextBytes(token);
        r.nextBytes(nonce);
        long[] key = new long[r.nextInt(3)];
        for (int i = 0; i < key.length; i++) {
            key[i] = r.nextLong();
        }
        return new RequestInfo(r.nextLong(), blocks - 1, key, state(), 4096 + r.nextInt(100), r.nextInt(3) * 4096L,
                reused, hashes, ids, token, nonce, r.nextLong(), r.nextInt(4), 1 + r.nextInt(4), grants(r));
    }

    /** None in half the infos; else grants whose owners are ASCII, two-byte, three-byte or surrogate-pair UTF-8. */
    private static List<dev.kvtransfer.api.format.PeerPool.Grant> grants(Random r) {
        String[] owners = {"gen-0", "127.0.0.1:40123", "g\u00e9n-1", "\u751f\u6210-2", "gen-\ud83d\ude80", ""};
        List<dev.kvtransfer.api.format.PeerPool.Grant> out = new java.util.ArrayList<>();
        int n = r.nextBoolean() ? 0 : 1 + r.nextInt(3);
        for (int i = 0; i < n; i++) {
            byte[] key = new byte[r.nextInt(300)];
            r.nextBytes(key);
            out.add(new dev.kvtransfer.api.format.PeerPool.Grant(r.nextInt(8), r.nextInt(1 << 20),
                    new dev.kvtransfer.api.transport.RegionDescriptor(owners[r.nextInt(owners.length)], r.nextLong(),
                            r.nextLong(), r.nextInt(1 << 30), key)));
        }
        return out;
    }

    @Test
    void decodingFromABufferRegionEqualsDecodingTheArray() {
        Random r = new Random(5);
        for (int round = 0; round < 300; round++) {
            RequestInfo info = random(r);
            byte[] bytes = info.toBytes();
            int at = r.nextInt(40);
            ByteBuffer bb = (round % 2 == 0 ? ByteBuffer.allocate(bytes.length + 80)
                    : ByteBuffer.allocateDirect(bytes.length + 80));
            bb.put(at, bytes);
            bb.position(3).limit(bytes.length + 70);
            RequestInfo back = RequestInfo.fromBytes(bb, at, bytes.length);
            assertThat(bb.position()).isEqualTo(3);
            assertThat(bb.limit()).isEqualTo(bytes.length + 70);
            assertThat(back).isEqualTo(info).isEqualTo(RequestInfo.fromBytes(bytes));
            assertThat(back.nonceLength()).isEqualTo(info.nonce().length);
            for (int i = 0; i < back.nonceLength(); i++) {
                assertThat(back.nonceAt(i)).isEqualTo(info.nonce()[i]);
            }
            if (back.nonceLength() == RequestInfo.NONCE_BYTES) {
                ByteBuffer le = ByteBuffer.wrap(info.nonce()).order(java.nio.ByteOrder.LITTLE_ENDIAN);
                assertThat(back.nonceLong(0)).isEqualTo(le.getLong(0));
                assertThat(back.nonceLong(8)).isEqualTo(le.getLong(8));
            }
            byte[] token = info.requestToken();
            assertThat(back.requestTokenMatches(token, 0, token.length)).isTrue();
            if (token.length > 0) {
                token[r.nextInt(token.length)] ^= 4;
                assertThat(back.requestTokenMatches(token, 0, token.length)).isFalse();
            }
            assertThat(back.blockIdCount()).isEqualTo(info.blockIds().length);
            // A message one byte short, or with a trailing byte, is refused from a buffer too.
            assertThatThrownBy(() -> RequestInfo.fromBytes(bb, at, bytes.length - 1))
                    .isInstanceOf(MalformedMessageException.class);
            bb.limit(bb.capacity());
            assertThatThrownBy(() -> RequestInfo.fromBytes(bb, at, bytes.length + 1))
                    .isInstanceOf(MalformedMessageException.class);
        }
    }

    @Test
    void writingIntoABufferGivesTheBytesOfToBytes() {
        Random r = new Random(21);
        for (int round = 0; round < 300; round++) {
            RequestInfo info = random(r);
            byte[] bytes = info.toBytes();
            assertThat(info.messageSize()).isEqualTo(bytes.length);
            int at = r.nextInt(30);
            ByteBuffer bb = (round % 2 == 0 ? ByteBuffer.allocate(bytes.length + 64)
                    : ByteBuffer.allocateDirect(bytes.length + 64));
            bb.order(round % 3 == 0 ? java.nio.ByteOrder.BIG_ENDIAN : java.nio.ByteOrder.LITTLE_ENDIAN);
            bb.position(5);
            assertThat(info.writeMessage(bb, at)).isEqualTo(bytes.length);
            assertThat(bb.position()).isEqualTo(5);
            byte[] written = new byte[bytes.length];
            bb.get(at, written);
            assertThat(written).isEqualTo(bytes);
            assertThat(RequestInfo.fromBytes(bb, at, bytes.length)).isEqualTo(info);
            ByteBuffer small = ByteBuffer.allocate(bytes.length - 1);
            assertThatThrownBy(() -> info.writeMessage(small, 0)).isInstanceOf(IndexOutOfBoundsException.class);
        }
    }

    @Test
    void decodedArraysAreNeverSharedWithCallers() {
        RequestInfo info = random(new Random(9));
        RequestInfo back = RequestInfo.fromBytes(info.toBytes());
        int[] ids = back.blockIds();
        ids[0] ^= 1;
        assertThat(back.blockIds()).isEqualTo(info.blockIds());
        byte[] nonce = back.nonce();
        if (nonce.length > 0) {
            nonce[0] ^= 1;
            assertThat(back.nonce()).isEqualTo(info.nonce());
        }
        // A caller's arrays are still copied by the constructor.
        int[] mine = {1, 2};
        RequestInfo made = new RequestInfo(1, 1, new long[0], state(), 4096, 0, 0, new long[0], mine, new byte[0],
                new byte[0], 0, 0, 1, List.of());
        mine[0] = 99;
        assertThat(made.blockIds()).containsExactly(1, 2);
        // Handed over on purpose: the same content as the copying constructor, and checked the same way.
        int[] owned = {1, 2};
        RequestInfo taken = RequestInfo.ofOwnedArrays(1, 1, new long[0], state(), 4096, 0, 0, new long[0], owned,
                new byte[0], new byte[0], 0, 0, 1, List.of());
        assertThat(taken).isEqualTo(new RequestInfo(1, 1, new long[0], state(), 4096, 0, 0, new long[0],
                new int[] {1, 2}, new byte[0], new byte[0], 0, 0, 1, List.of()));
        assertThatThrownBy(() -> RequestInfo.ofOwnedArrays(1, 1, new long[0], state(), 4096, 0, 0, new long[0],
                owned, new byte[3], new byte[0], 0, 0, 1, List.of())).isInstanceOf(IllegalArgumentException.class);
        // The next construction by copy is not affected by a failed hand-over.
        int[] again = {5, 6};
        RequestInfo copied = new RequestInfo(1, 1, new long[0], state(), 4096, 0, 0, new long[0], again,
                new byte[0], new byte[0], 0, 0, 1, List.of());
        again[0] = 0;
        assertThat(copied.blockIds()).containsExactly(5, 6);
    }

    @Test
    void malformedCountsAreRefusedWithTheReadersMessages() {
        RequestInfo info = new RequestInfo(7, 1, new long[0], state(), 4096, 0, 0, new long[0], new int[] {3, 4},
                new byte[0], new byte[0], 0, 0, 1, List.of());
        byte[] bytes = info.toBytes();
        // The block id count sits right before the two ids (3, 4) at the end of that array.
        int idsAt = indexOf(bytes, new byte[] {2, 0, 0, 0, 3, 0, 0, 0, 4, 0, 0, 0});
        assertThat(idsAt).isPositive();
        byte[] huge = bytes.clone();
        huge[idsAt] = 100;
        assertThatThrownBy(() -> RequestInfo.fromBytes(huge)).isInstanceOf(MalformedMessageException.class)
                .hasMessageContaining("blockIds count 100 needs at least 400 bytes");
        byte[] negative = bytes.clone();
        negative[idsAt + 4 + 3] = (byte) 0x80;
        assertThatThrownBy(() -> RequestInfo.fromBytes(negative)).isInstanceOf(MalformedMessageException.class)
                .hasMessageContaining("blockIds[0] = ").hasMessageContaining("out of range [0, 2147483647]");
        byte[] minus = bytes.clone();
        minus[idsAt + 3] = (byte) 0xFF;
        assertThatThrownBy(() -> RequestInfo.fromBytes(minus)).isInstanceOf(MalformedMessageException.class)
                .hasMessageContaining("blockIds count ").hasMessageContaining("out of range [0, ");
    }

    private static int indexOf(byte[] hay, byte[] needle) {
        outer:
        for (int i = 0; i + needle.length <= hay.length; i++) {
            for (int j = 0; j < needle.length; j++) {
                if (hay[i + j] != needle[j]) {
                    continue outer;
                }
            }
            return i;
        }
        return -1;
    }
}
