package dev.kvtransfer.api.model;

import dev.kvtransfer.api.layout.PoolLayout;
import dev.kvtransfer.api.wire.MalformedMessageException;
import dev.kvtransfer.api.wire.WireReader;
import dev.kvtransfer.api.wire.WireWriter;

/**
 * The wire format of {@link CacheState}: a tag byte, then the fields in declaration order (format version 2 adds
 * the pool layout, version 3 the indexer-K pool: {@code indexerDimPerHead i32}, {@code quantBlockSize i32}, version 4
 * {@code partialReuse bool}). Reading range-checks every field and validates the result like a built state.
 *
 * <p>An FP4 indexer-K cache ({@link CacheState#indexerKCacheUseFp4()}) sets bit 30 ({@code FP4_BIT}) of the
 * {@code quantBlockSize} word, with no new field and no new format version: every other state encodes as before,
 * and a reader that predates the flag range-checks that word and refuses the state as malformed instead of
 * dropping the declaration (a peer that cannot tell FP4 from not FP4 never agrees to a transfer by mistake).
 *
 * <p>A hybrid model's state (one with a {@link RecurrentStateShape}) starts with another tag,
 * {@code HYBRID_WIRE_TAG}, and has its shape after the last field: the encoding of every attention-only state stays
 * byte for byte what it was, and a reader that predates hybrid states refuses one as malformed (unknown tag) instead
 * of dropping its recurrent layers.
 *
 * <p>A state with sliding windows ({@link WindowGroups}) starts with {@code WINDOWED_WIRE_TAG}; after the last field
 * come a {@code bool} (hybrid), the recurrent shape when true, and the windows. States without windows are encoded
 * as before, and an older reader refuses a windowed one (unknown tag) instead of moving blocks outside the windows.
 */
final class CacheStateWire {
    /** The bit of the {@code quantBlockSize} word that declares an FP4 indexer-K cache (above any valid size). */
    static final int FP4_BIT = 1 << 30;

    private CacheStateWire() {
    }

    static void write(CacheState s, WireWriter w) {
        w.writeByte(s.windowGroups() != null ? CacheState.WINDOWED_WIRE_TAG
                : s.recurrentState() == null ? CacheState.WIRE_TAG : CacheState.HYBRID_WIRE_TAG);
        w.writeIntList(s.kvHeadsPerLayer());
        w.writeInt(s.sizePerHead());
        w.writeInt(s.tokensPerBlock());
        w.writeInt(s.tensorParallelism());
        w.writeInt(s.pipelineParallelism());
        w.writeInt(s.contextParallelism());
        w.writeBoolean(s.attentionDpEnabled());
        w.writeInt(s.dpRank());
        w.writeInt(s.dpSize());
        w.writeIntList(s.attentionLayersPerPp());
        w.writeInt(s.dataType().wireId());
        w.writeByte(s.attentionType() == AttentionType.MLA ? 1 : 0);
        w.writeInt(s.kvFactor());
        w.writeBoolean(s.blockReuse());
        // Format version 2.
        w.writeByte(s.poolLayout().kind().wireId());
        w.writeInt(s.poolLayout().ropeDim());
        // Format version 3.
        w.writeInt(s.indexerDimPerHead());
        w.writeInt(s.indexerKCacheQuantBlockSize() | (s.indexerKCacheUseFp4() ? FP4_BIT : 0));
        // Format version 4.
        w.writeBoolean(s.partialReuse());
        if (s.windowGroups() != null) {
            w.writeBoolean(s.recurrentState() != null);
        }
        if (s.recurrentState() != null) {
            s.recurrentState().write(w);
        }
        if (s.windowGroups() != null) {
            s.windowGroups().write(w);
        }
    }

    static CacheState read(WireReader r) {
        int start = r.offset();
        int tag = r.readByte("CacheState tag");
        if (tag != CacheState.WIRE_TAG && tag != CacheState.HYBRID_WIRE_TAG
                && tag != CacheState.WINDOWED_WIRE_TAG) {
            throw new MalformedMessageException(start, "expected CacheState tag " + CacheState.WIRE_TAG + ", found " + tag);
        }
        CacheState.Builder b = CacheState.builder();
        b.kvHeadsPerLayer(r.readIntList("kvHeadsPerLayer", 1, CacheState.MAX_DIM));
        b.sizePerHead(r.readInt("sizePerHead", 1, CacheState.MAX_DIM));
        b.tokensPerBlock(r.readInt("tokensPerBlock", 1, CacheState.MAX_DIM));
        b.tensorParallelism(r.readInt("tensorParallelism", 1, CacheState.MAX_PARALLELISM));
        b.pipelineParallelism(r.readInt("pipelineParallelism", 1, CacheState.MAX_PARALLELISM));
        b.contextParallelism(r.readInt("contextParallelism", 1, CacheState.MAX_PARALLELISM));
        boolean dp = r.readBoolean("attentionDpEnabled");
        int dpRank = r.readInt("dpRank", 0, CacheState.MAX_PARALLELISM);
        int dpSize = r.readInt("dpSize", 1, CacheState.MAX_PARALLELISM);
        b.attentionDp(dp, dpRank, dpSize);
        b.attentionLayersPerPp(r.readIntList("attentionLayersPerPp", 0, CacheState.MAX_LAYERS));
        int dtOffset = r.offset();
        int dt = r.readInt("dataType");
        DataType dataType = DataType.fromWireId(dt);
        if (dataType == null) {
            throw new MalformedMessageException(dtOffset, "unknown dataType id " + dt);
        }
        b.dataType(dataType);
        int atOffset = r.offset();
        int at = r.readByte("attentionType");
        if (at > 1) {
            throw new MalformedMessageException(atOffset, "unknown attentionType " + at);
        }
        b.attentionType(at == 1 ? AttentionType.MLA : AttentionType.DEFAULT);
        b.kvFactor(r.readInt("kvFactor", 1, 2));
        b.blockReuse(r.readBoolean("blockReuse"));
        if (r.version() >= 2) {
            int plOffset = r.offset();
            int kindId = r.readByte("poolLayout");
            PoolLayout.Kind kind = PoolLayout.Kind.fromWireId(kindId);
            if (kind == null) {
                throw new MalformedMessageException(plOffset, "unknown poolLayout id " + kindId);
            }
            int rope = r.readInt("mlaRopeDim", 0, CacheState.MAX_DIM);
            try {
                b.poolLayout(new PoolLayout(kind, rope));
            } catch (IllegalArgumentException e) {
                throw new MalformedMessageException(plOffset, "invalid poolLayout: " + e.getMessage());
            }
        }
        if (r.version() >= 3) {
            int dim = r.readInt("indexerDimPerHead", 0, CacheState.MAX_DIM);
            int quantAt = r.offset();
            int word = r.readInt("indexerKCacheQuantBlockSize");
            int quant = word & ~FP4_BIT;
            if (quant < 0 || quant > CacheState.MAX_DIM) {
                throw new MalformedMessageException(quantAt, "indexerKCacheQuantBlockSize = " + quant
                        + " (word 0x" + Integer.toHexString(word) + "): must be in [0, " + CacheState.MAX_DIM
                        + "], bit 30 (FP4) aside");
            }
            b.indexerKCache(dim, quant, (word & FP4_BIT) != 0);
        }
        if (r.version() >= 4) {
            b.partialReuse(r.readBoolean("partialReuse"));
        }
        boolean windowed = tag == CacheState.WINDOWED_WIRE_TAG;
        if (tag == CacheState.HYBRID_WIRE_TAG || windowed && r.readBoolean("hybrid")) {
            b.recurrentState(RecurrentStateShape.read(r));
        }
        if (windowed) {
            b.windowGroups(WindowGroups.read(r));
        }
        try {
            return b.build();
        } catch (IllegalArgumentException e) {
            throw new MalformedMessageException(start, "invalid CacheState: " + e.getMessage());
        }
    }
}
