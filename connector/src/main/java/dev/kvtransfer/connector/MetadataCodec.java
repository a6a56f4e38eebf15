package dev.kvtransfer.connector;

import dev.kvtransfer.api.model.ContextPhaseParams;
import dev.kvtransfer.api.wire.MalformedMessageException;
import dev.kvtransfer.api.wire.WireReader;
import dev.kvtransfer.api.wire.WireWriter;

import java.util.ArrayList;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Objects;
import java.util.Set;

/**
 * The byte form of {@link ConnectorMetadata}, for workers in other processes. A kvtransfer message (magic and wire
 * format version, {@link WireWriter#message()}), then:
 *
 * <pre>
 * u8  tag 'M' (0x4D)          u16 metadata version (2)      i64 step (>= 0)
 * i32 loads, each:  i64 requestId, ContextPhaseParams (its own writeTo), i32 promptTokens (>= 1),
 *                   table, i32 reusedBlocks (>= 0), i64[] reusedHashes (as many as reusedBlocks), u8 async (0 / 1),
 *                   i64[] lastBlockKey (version 2)
 * i32 saves, each:  i64 requestId, i32 promptTokens (>= 1), table, i64[] blockHashes, i64[] lastBlockKey (v2)
 * i64[] cancels     i64[] preempted
 * table:            i32 rows (1 .. 65536), each i32[] block ids (each >= 0)
 * </pre>
 *
 * Little-endian; every array is count-prefixed. Decoding checks every count against the bytes left and every value
 * against its bound, and fails on trailing bytes; hostile bytes fail with a {@link MalformedMessageException} naming
 * the field and its offset, and never allocate more than the message could describe.
 */
final class MetadataCodec {
    /** Tag byte after the message header. */
    static final int TAG = 0x4D;
    /** The metadata version this codec writes and the newest it reads. */
    static final int VERSION = 2;
    private static final int MAX_ROWS = 1 << 16;

    private MetadataCodec() {
    }

    static byte[] encode(ConnectorMetadata m) {
        Objects.requireNonNull(m, "meta");
        WireWriter w = WireWriter.message();
        w.writeByte(TAG);
        w.writeShort(VERSION);
        w.writeLong(m.step());
        w.writeInt(m.loads().size());
        for (ConnectorMetadata.LoadSpec l : m.loads()) {
            w.writeLong(l.requestId());
            l.params().writeTo(w);
            w.writeInt(l.promptTokens());
            table(w, l.blocks());
            w.writeInt(l.reusedBlocks());
            w.writeLongArray(l.reusedHashes());
            w.writeBoolean(l.async());
            w.writeLongArray(l.lastBlockKey());
        }
        w.writeInt(m.saves().size());
        for (ConnectorMetadata.SaveSpec s : m.saves()) {
            w.writeLong(s.requestId());
            w.writeInt(s.promptTokens());
            table(w, s.blocks());
            w.writeLongArray(s.blockHashes());
            w.writeLongArray(s.lastBlockKey());
        }
        w.writeLongArray(longs(m.cancels()));
        w.writeLongArray(longs(m.preempted()));
        return w.toByteArray();
    }

    static ConnectorMetadata decode(byte[] bytes) {
        Objects.requireNonNull(bytes, "bytes");
        WireReader r = WireReader.message(bytes);
        try {
            return body(r);
        } catch (MalformedMessageException e) {
            throw e;
        } catch (IllegalArgumentException | IllegalStateException e) {
            // A value inside the bounds the codec checks that a record refuses (e.g. an invalid cache state).
            throw new MalformedMessageException(r.offset(), "invalid ConnectorMetadata: " + e.getMessage());
        }
    }

    private static ConnectorMetadata body(WireReader r) {
        int at = r.offset();
        int tag = r.readByte("ConnectorMetadata tag");
        if (tag != TAG) {
            throw new MalformedMessageException(at, "expected ConnectorMetadata tag " + TAG + ", found " + tag
                    + ": not connector metadata");
        }
        at = r.offset();
        int version = r.readShort("ConnectorMetadata version");
        if (version < 1 || version > VERSION) {
            throw new MalformedMessageException(at, "ConnectorMetadata version " + version + ": this reader "
                    + "understands versions 1 to " + VERSION);
        }
        at = r.offset();
        long step = r.readLong("step");
        if (step < 0) {
            throw new MalformedMessageException(at, "step = " + step + ": must be >= 0");
        }
        // The smallest load is well over 30 bytes, the smallest save 24: counts beyond what is left fail here.
        int nl = r.readCount("loads", 30);
        List<ConnectorMetadata.LoadSpec> loads = new ArrayList<>(nl);
        for (int i = 0; i < nl; i++) {
            at = r.offset();
            long id = r.readLong("loads[" + i + "].requestId");
            ContextPhaseParams p = ContextPhaseParams.readFrom(r);
            int prompt = r.readInt("loads[" + i + "].promptTokens", 1, Integer.MAX_VALUE);
            BlockTable t = table(r, "loads[" + i + "]");
            int reused = r.readInt("loads[" + i + "].reusedBlocks", 0, Integer.MAX_VALUE);
            long[] hashes = r.readLongArray("loads[" + i + "].reusedHashes");
            boolean async = r.readBoolean("loads[" + i + "].async");
            long[] key = version >= 2 ? r.readLongArray("loads[" + i + "].lastBlockKey") : new long[0];
            if (hashes.length != reused) {
                throw new MalformedMessageException(at, "loads[" + i + "] (request " + id + "): " + hashes.length
                        + " hashes for " + reused + " reused blocks");
            }
            loads.add(new ConnectorMetadata.LoadSpec(id, p, prompt, t, reused, hashes, async, key));
        }
        int ns = r.readCount("saves", 24);
        List<ConnectorMetadata.SaveSpec> saves = new ArrayList<>(ns);
        for (int i = 0; i < ns; i++) {
            long id = r.readLong("saves[" + i + "].requestId");
            int prompt = r.readInt("saves[" + i + "].promptTokens", 1, Integer.MAX_VALUE);
            BlockTable t = table(r, "saves[" + i + "]");
            long[] hashes = r.readLongArray("saves[" + i + "].blockHashes");
            long[] key = version >= 2 ? r.readLongArray("saves[" + i + "].lastBlockKey") : new long[0];
            saves.add(new ConnectorMetadata.SaveSpec(id, prompt, t, hashes, key));
        }
        Set<Long> cancels = set(r.readLongArray("cancels"));
        Set<Long> preempted = set(r.readLongArray("preempted"));
        r.expectEnd("ConnectorMetadata");
        return new ConnectorMetadata(step, loads, saves, cancels, preempted);
    }

    private static void table(WireWriter w, BlockTable t) {
        w.writeInt(t.ranks());
        for (int r = 0; r < t.ranks(); r++) {
            w.writeIntArray(t.rankView(r));
        }
    }

    private static BlockTable table(WireReader r, String what) {
        int at = r.offset();
        int rows = r.readCount(what + ".blocks rows", 4);
        if (rows < 1 || rows > MAX_ROWS) {
            throw new MalformedMessageException(at, what + ".blocks: " + rows + " rows outside [1, " + MAX_ROWS
                    + "]");
        }
        int[][] ids = new int[rows][];
        for (int i = 0; i < rows; i++) {
            ids[i] = r.readIntArray(what + ".blocks[" + i + "]", 0, Integer.MAX_VALUE);
        }
        return BlockTable.perRank(ids);
    }

    private static long[] longs(Set<Long> s) {
        return s.stream().mapToLong(Long::longValue).toArray();
    }

    private static Set<Long> set(long[] a) {
        Set<Long> s = new LinkedHashSet<>();
        for (long v : a) {
            s.add(v);
        }
        return s;
    }
}
