package dev.kvtransfer.connector;

import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.api.model.CommState;
import dev.kvtransfer.api.model.ContextPhaseParams;
import dev.kvtransfer.api.model.TransceiverState;
import dev.kvtransfer.api.wire.MalformedMessageException;
import dev.kvtransfer.api.wire.WireWriter;
import org.junit.jupiter.api.Test;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.Arrays;
import java.util.List;
import java.util.Random;
import java.util.Set;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/**
 * {@link ConnectorMetadata}'s byte form: a round trip keeps every field, and hostile bytes — truncated, with a wrong
 * tag or version, counts beyond what is left, out-of-range values, trailing bytes, random corruption — fail with a
 * {@link MalformedMessageException} that says what and where, never with anything else. (Workers fed only the decoded
 * bytes move verified KV in {@code MiniEngine}, which hands its workers nothing but the bytes.)
 */
class MetadataCodecTest {
    private static final CacheState STATE = CacheState.builder().uniformKvHeads(2, 2).sizePerHead(4)
            .tokensPerBlock(8).tensorParallelism(2).build();
    private static final ContextPhaseParams PARAMS = new ContextPhaseParams(70, new long[]{5, 6},
            new TransceiverState(STATE, new CommState("loopback", List.of("a", "b"), 0)));

    static ConnectorMetadata sample() {
        return new ConnectorMetadata(42,
                List.of(new ConnectorMetadata.LoadSpec(7, PARAMS, 30, BlockTable.perRank(new int[][]{{4, 5, 6, 9},
                        {1, 2, 3, 8}}), 1, new long[]{11}, true, new long[]{1, 7, 4242})),
                List.of(new ConnectorMetadata.SaveSpec(5, 20, BlockTable.uniform(2, new int[]{0, 3}),
                        new long[]{21, 22}, new long[]{1, 7}), new ConnectorMetadata.SaveSpec(-3, 1, BlockTable.uniform(2, new int[]{7}),
                        new long[0])),
                Set.of(9L), Set.of(10L, 12L));
    }

    @Test
    void aRoundTripKeepsEveryField() {
        ConnectorMetadata m = sample();
        ConnectorMetadata back = ConnectorMetadata.fromBytes(m.toBytes());
        assertThat(back).isEqualTo(m);
        assertThat(back.loads().get(0).params().contextState()).isEqualTo(PARAMS.contextState());
        assertThat(back.loads().get(0).blocks().rank(1)).containsExactly(1, 2, 3, 8);
        assertThat(back.preempted()).containsExactlyInAnyOrder(10L, 12L);
        ConnectorMetadata empty = new ConnectorMetadata(1, List.of(), List.of(), Set.of());
        assertThat(ConnectorMetadata.fromBytes(empty.toBytes())).isEqualTo(empty);
        assertThat(Arrays.equals(m.toBytes(), back.toBytes())).isTrue();
    }

    @Test
    void lastBlockKeysRoundTripAndVersion1StillReadsWithoutThem() {
        ConnectorMetadata back = ConnectorMetadata.fromBytes(sample().toBytes());
        assertThat(back.loads().get(0).lastBlockKey()).containsExactly(1, 7, 4242);
        assertThat(back.saves().get(0).lastBlockKey()).containsExactly(1, 7);
        assertThat(back.saves().get(1).lastBlockKey()).isEmpty();
        // Version 1, as its writer wrote it: no keys after a load's async flag or a save's hashes.
        WireWriter w = WireWriter.message();
        w.writeByte(MetadataCodec.TAG).writeShort(1).writeLong(3);
        w.writeInt(1).writeLong(7);
        PARAMS.writeTo(w);
        w.writeInt(30).writeInt(1).writeIntArray(new int[]{4, 5, 6, 9}).writeInt(1).writeLongArray(new long[]{11})
                .writeBoolean(false);
        w.writeInt(1).writeLong(5).writeInt(20).writeInt(1).writeIntArray(new int[]{0, 3})
                .writeLongArray(new long[]{21, 22});
        w.writeLongArray(new long[0]).writeLongArray(new long[0]);
        ConnectorMetadata v1 = ConnectorMetadata.fromBytes(w.toByteArray());
        assertThat(v1.loads().get(0).lastBlockKey()).isEmpty();
        assertThat(v1.loads().get(0).reusedHashes()).containsExactly(11);
        assertThat(v1.saves().get(0).lastBlockKey()).isEmpty();
        assertThat(v1.saves().get(0).blockHashes()).containsExactly(21, 22);
        assertThat(sample()).isNotEqualTo(new ConnectorMetadata(42, List.of(), sample().saves(), Set.of(9L),
                Set.of(10L, 12L)));
        assertThat(sample().loads().get(0)).isNotEqualTo(new ConnectorMetadata.LoadSpec(7, PARAMS, 30,
                sample().loads().get(0).blocks(), 1, new long[]{11}, true));
    }

    @Test
    void everyTruncationFailsNamingTheField() {
        byte[] b = sample().toBytes();
        for (int n = 0; n < b.length; n++) {
            byte[] cut = Arrays.copyOf(b, n);
            assertThatThrownBy(() -> ConnectorMetadata.fromBytes(cut)).as("first %d bytes", n)
                    .isInstanceOf(MalformedMessageException.class).hasMessageContaining("at offset");
        }
    }

    @Test
    void aWrongTagVersionCountOrValueFailsClearly() {
        byte[] b = sample().toBytes();
        int tagAt = 6; // after the kvtransfer header: magic (4) and format version (2)
        assertThat(b[tagAt]).isEqualTo((byte) MetadataCodec.TAG);
        byte[] tag = b.clone();
        tag[tagAt] = 0x11;
        assertThatThrownBy(() -> ConnectorMetadata.fromBytes(tag)).isInstanceOf(MalformedMessageException.class)
                .hasMessageContaining("not connector metadata");
        byte[] version = b.clone();
        version[tagAt + 1] = 3;
        assertThatThrownBy(() -> ConnectorMetadata.fromBytes(version)).isInstanceOf(MalformedMessageException.class)
                .hasMessageContaining("ConnectorMetadata version 3").hasMessageContaining("versions 1 to 2");
        byte[] count = b.clone();
        ByteBuffer.wrap(count).order(ByteOrder.LITTLE_ENDIAN).putInt(tagAt + 3 + 8, 1 << 19);
        assertThatThrownBy(() -> ConnectorMetadata.fromBytes(count)).isInstanceOf(MalformedMessageException.class)
                .hasMessageContaining("loads count 524288 needs at least");
        byte[] negative = b.clone();
        ByteBuffer.wrap(negative).order(ByteOrder.LITTLE_ENDIAN).putLong(tagAt + 3, -1);
        assertThatThrownBy(() -> ConnectorMetadata.fromBytes(negative)).isInstanceOf(MalformedMessageException.class)
                .hasMessageContaining("step = -1");
        byte[] trailing = Arrays.copyOf(b, b.length + 1);
        assertThatThrownBy(() -> ConnectorMetadata.fromBytes(trailing)).isInstanceOf(MalformedMessageException.class)
                .hasMessageContaining("1 trailing bytes after ConnectorMetadata");
        assertThatThrownBy(() -> ConnectorMetadata.fromBytes(PARAMS.toBytes()))
                .isInstanceOf(MalformedMessageException.class);
        assertThatThrownBy(() -> ConnectorMetadata.fromBytes(new byte[]{1, 2, 3, 4, 5, 6, 7}))
                .isInstanceOf(MalformedMessageException.class).hasMessageContaining("bad magic");
    }

    @Test
    void aNegativeBlockIdAndAHashCountUnlikeTheReusedBlocksAreRefused() {
        WireWriter w = WireWriter.message();
        w.writeByte(MetadataCodec.TAG).writeShort(MetadataCodec.VERSION).writeLong(1);
        w.writeInt(0); // no loads
        w.writeInt(1).writeLong(5).writeInt(8).writeInt(1).writeIntArray(new int[]{3, -1}).writeLongArray(new long[0]);
        w.writeLongArray(new long[0]).writeLongArray(new long[0]);
        assertThatThrownBy(() -> ConnectorMetadata.fromBytes(w.toByteArray()))
                .isInstanceOf(MalformedMessageException.class).hasMessageContaining("saves[0].blocks[0][1] = -1");

        WireWriter l = WireWriter.message();
        l.writeByte(MetadataCodec.TAG).writeShort(MetadataCodec.VERSION).writeLong(1);
        l.writeInt(1).writeLong(7);
        PARAMS.writeTo(l);
        l.writeInt(30).writeInt(1).writeIntArray(new int[]{4}).writeInt(2).writeLongArray(new long[]{1})
                .writeBoolean(true);
        l.writeInt(0).writeLongArray(new long[0]).writeLongArray(new long[0]);
        assertThatThrownBy(() -> ConnectorMetadata.fromBytes(l.toByteArray()))
                .isInstanceOf(MalformedMessageException.class).hasMessageContaining("1 hashes for 2 reused blocks");

        WireWriter rows = WireWriter.message();
        rows.writeByte(MetadataCodec.TAG).writeShort(MetadataCodec.VERSION).writeLong(1);
        rows.writeInt(0).writeInt(1).writeLong(5).writeInt(8).writeInt(0).writeLongArray(new long[0]);
        rows.writeLongArray(new long[0]).writeLongArray(new long[0]);
        assertThatThrownBy(() -> ConnectorMetadata.fromBytes(rows.toByteArray()))
                .isInstanceOf(MalformedMessageException.class).hasMessageContaining("0 rows outside [1, 65536]");
    }

    @Test
    void randomCorruptionEitherDecodesOrFailsAsMalformed() {
        byte[] b = sample().toBytes();
        Random random = new Random(27);
        for (int i = 0; i < 3000; i++) {
            byte[] c = b.clone();
            for (int k = 1 + random.nextInt(3); k > 0; k--) {
                c[random.nextInt(c.length)] = (byte) random.nextInt(256);
            }
            try {
                ConnectorMetadata m = ConnectorMetadata.fromBytes(c);
                assertThat(ConnectorMetadata.fromBytes(m.toBytes())).isEqualTo(m);
            } catch (MalformedMessageException expected) {
                assertThat(expected.getMessage()).contains("at offset");
            }
        }
    }
}
