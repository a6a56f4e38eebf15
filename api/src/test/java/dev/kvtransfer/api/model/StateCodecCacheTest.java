package dev.kvtransfer.api.model;

import dev.kvtransfer.api.layout.RankMapping;
import dev.kvtransfer.api.layout.TargetRanks;
import dev.kvtransfer.api.wire.MalformedMessageException;
import dev.kvtransfer.api.wire.WireReader;
import dev.kvtransfer.api.wire.WireWriter;
import org.junit.jupiter.api.Test;

import java.nio.ByteBuffer;
import java.util.Arrays;
import java.util.List;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/**
 * The control plane's codec caches (they keep per-request garbage down): a peer's state decoded once per distinct
 * bytes, encoded once per instance, target ranks memoized — each returning exactly what the uncached path returns.
 */
class StateCodecCacheTest {
    private static CacheState cache(int tp) {
        return CacheState.builder().uniformKvHeads(4, 8).sizePerHead(64).tokensPerBlock(16)
                .dataType(DataType.FLOAT16).tensorParallelism(tp).pipelineParallelism(1).build();
    }

    private static TransceiverState state(int tp, int self, String prefix) {
        List<String> addrs = new java.util.ArrayList<>();
        for (int i = 0; i < tp; i++) {
            addrs.add(prefix + "-" + i);
        }
        return new TransceiverState(cache(tp), new CommState("aeron", addrs, self));
    }

    private static RequestInfo info(TransceiverState s, long id) {
        return new RequestInfo(id, 0, new long[0], s, 2048, 0, 0, new long[0], new int[] {3},
                new byte[0], new byte[0], 1234L + id, 0, 1, List.of());
    }

    @Test
    void repeatedBytesDecodeToTheSameStateAndEveryRankKeepsItsOwnIndex() {
        StateCodecCache.clear();
        for (int self = 0; self < 4; self++) {
            byte[] bytes = state(4, self, "gen").toBytes();
            TransceiverState first = TransceiverState.fromBytes(bytes);
            TransceiverState second = TransceiverState.fromBytes(bytes.clone());
            assertThat(second).isSameAs(first);
            assertThat(second.selfIndex()).isEqualTo(self);
            StateCodecCache.clear();
            TransceiverState fresh = TransceiverState.fromBytes(bytes);
            assertThat(fresh).isEqualTo(first);
            assertThat(fresh.selfIndex()).isEqualTo(self);
        }
        // Ranks of one instance differ only in their index: each decodes to its own (cache warm with all of them).
        for (int round = 0; round < 2; round++) {
            for (int self = 0; self < 4; self++) {
                assertThat(TransceiverState.fromBytes(state(4, self, "gen").toBytes()).selfIndex()).isEqualTo(self);
            }
        }
        // More distinct states than entries: still right.
        for (int i = 0; i < 3 * StateCodecCache.ENTRIES; i++) {
            TransceiverState s = state(2, i % 2, "peer" + i);
            assertThat(TransceiverState.fromBytes(s.toBytes())).isEqualTo(s);
            assertThat(TransceiverState.fromBytes(s.toBytes()).commState().addresses()).isEqualTo(
                    s.commState().addresses());
        }
    }

    @Test
    void theFieldsAfterACachedStateAreStillReadAndCheckedEveryTime() {
        TransceiverState s = state(2, 1, "gen");
        RequestInfo a = info(s, 7);
        RequestInfo b = info(s, 8);
        assertThat(RequestInfo.fromBytes(a.toBytes())).isEqualTo(a);
        RequestInfo decoded = RequestInfo.fromBytes(b.toBytes()); // the state is a cache hit now
        assertThat(decoded).isEqualTo(b);
        assertThat(decoded.timestampMillis()).isEqualTo(1242L);
        assertThat(decoded.requesterState().selfIndex()).isEqualTo(1);
        byte[] truncated = Arrays.copyOf(b.toBytes(), b.toBytes().length - 3);
        assertThatThrownBy(() -> RequestInfo.fromBytes(truncated)).isInstanceOf(MalformedMessageException.class);
        byte[] trailing = Arrays.copyOf(b.toBytes(), b.toBytes().length + 1);
        assertThatThrownBy(() -> RequestInfo.fromBytes(trailing)).isInstanceOf(MalformedMessageException.class)
                .hasMessageContaining("trailing");
        // A state cut short inside a message is refused, though a longer one of the same prefix is cached.
        byte[] whole = s.toBytes();
        byte[] cut = Arrays.copyOf(whole, whole.length - 1);
        assertThatThrownBy(() -> TransceiverState.fromBytes(cut)).isInstanceOf(MalformedMessageException.class);
    }

    @Test
    void anInstanceEncodesOnceToTheSameBytesAsAFreshEncoding() {
        StateCodecCache.clear();
        TransceiverState s = state(2, 0, "ctx");
        byte[] first = s.toBytes();
        byte[] again = s.toBytes();
        assertThat(again).isEqualTo(first);
        TransceiverState equalOther = state(2, 0, "ctx");
        assertThat(equalOther.toBytes()).isEqualTo(first);
        // Same addresses, another rank: CommState.equals ignores the index, the encoding must not.
        TransceiverState rank1 = new TransceiverState(s.cacheState(), s.commState().withSelfIndex(1));
        assertThat(TransceiverState.fromBytes(rank1.toBytes()).selfIndex()).isEqualTo(1);
        assertThat(TransceiverState.fromBytes(s.toBytes()).selfIndex()).isZero();
    }

    @Test
    void skipIfNextConsumesOnlyAnExactMatchOnHeapAndDirectBuffers() {
        byte[] msg = WireWriter.message().writeInt(11).writeLong(42).writeInt(13).toByteArray();
        byte[] expected = WireWriter.raw().writeInt(11).writeLong(42).toByteArray();
        for (boolean direct : new boolean[] {false, true}) {
            ByteBuffer bb = direct ? ByteBuffer.allocateDirect(msg.length).put(msg).flip() : ByteBuffer.wrap(msg);
            WireReader r = WireReader.message(bb);
            int at = r.offset();
            assertThat(r.skipIfNext(new byte[] {11, 0, 0, 1})).isFalse();
            assertThat(r.offset()).isEqualTo(at);
            assertThat(r.longAhead(4, 42)).isTrue();
            assertThat(r.longAhead(4, 43)).isFalse();
            assertThat(r.longAhead(9, 42)).isFalse(); // beyond the end
            assertThat(r.skipIfNext(expected)).isTrue();
            assertThat(r.copyRange(at, r.offset())).isEqualTo(expected);
            assertThat(r.skipIfNext(new byte[] {13, 0, 0, 0, 0})).isFalse(); // longer than what is left
            assertThat(r.readInt("last")).isEqualTo(13);
            r.expectEnd("test");
        }
    }

    @Test
    void targetRanksAreRememberedPerStatesAndRankAndEqualTheComputedOnes() {
        CacheState ctx = cache(2);
        CacheState gen = cache(4);
        for (int g = 0; g < 4; g++) {
            TargetRanks t = RankMapping.targetRanks(ctx, gen, g);
            assertThat(RankMapping.targetRanks(ctx, gen, g)).isSameAs(t);
            // An equal but different instance gets an equal answer (computed again or remembered).
            assertThat(RankMapping.targetRanks(cache(2), cache(4), g)).isEqualTo(t);
        }
        assertThat(RankMapping.targetRanks(ctx, gen, 0).peerRanks()).containsExactly(0);
        assertThat(RankMapping.targetRanks(ctx, gen, 3).peerRanks()).containsExactly(1);
        assertThat(RankMapping.targetRanks(gen, ctx, 1).peerRanks()).containsExactly(2, 3);
        assertThatThrownBy(() -> RankMapping.targetRanks(ctx, gen, 4)).isInstanceOf(IllegalArgumentException.class);
    }
}
