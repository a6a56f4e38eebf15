package dev.kvtransfer.api.model;

import dev.kvtransfer.api.wire.MalformedMessageException;
import dev.kvtransfer.api.wire.WireReader;
import dev.kvtransfer.api.wire.WireWriter;

import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Objects;

/**
 * The recurrent half of a hybrid model's cache (Mamba / GDN state layers mixed with attention, as in Jamba,
 * Nemotron-H or Qwen3-Next): every layer of the model tagged {@link LayerKind}, how all layers split over PP ranks,
 * and the shape of the two states a recurrent layer keeps per request — a conv state {@code [convChannels][convWidth]}
 * ({@code convWidth} = the conv kernel size minus one) and an SSM state {@code [ssmHeads][ssmHeadDim][ssmStateDim]}.
 * TP splits the conv channels and the SSM heads in contiguous ranges; PP splits layers; the attention layers are the
 * rest of the {@link CacheState} (its {@code kvHeadsPerLayer} lists the attention layers only, in model order).
 *
 * <p>Recurrent layers are numbered {@code 0..recurrentLayers()-1} in model order. {@code layersPerPp} may be empty
 * when building: {@link CacheState.Builder#build()} then splits all layers evenly over PP (remainder to the first
 * ranks) and stores the resolved split, from which the attention and recurrent layers per PP rank follow.
 *
 * @param layerKinds   every layer of the model, in order
 * @param layersPerPp  all layers held by each PP rank (empty: an even split, resolved by the cache state)
 * @param convChannels the model's conv channels per recurrent layer (split over TP)
 * @param convWidth    conv state entries per channel (kernel size minus one)
 * @param ssmHeads     the model's SSM heads per recurrent layer (split over TP)
 * @param ssmHeadDim   elements per SSM head row
 * @param ssmStateDim  SSM state size per head row
 * @param convDataType element type of the conv state
 * @param ssmDataType  element type of the SSM state
 */
public record RecurrentStateShape(List<LayerKind> layerKinds, List<Integer> layersPerPp, int convChannels,
                                  int convWidth, int ssmHeads, int ssmHeadDim, int ssmStateDim,
                                  DataType convDataType, DataType ssmDataType) {
    static final int WIRE_TAG = 0x53; // 'S'

    /** Validates every field; the message names the field and value. */
    public RecurrentStateShape {
        Objects.requireNonNull(layerKinds, "layerKinds");
        Objects.requireNonNull(layersPerPp, "layersPerPp");
        Objects.requireNonNull(convDataType, "convDataType");
        Objects.requireNonNull(ssmDataType, "ssmDataType");
        layerKinds = List.copyOf(layerKinds);
        layersPerPp = List.copyOf(layersPerPp);
        check(layerKinds.size() >= 2 && layerKinds.size() <= CacheState.MAX_LAYERS, "layerKinds.size",
                layerKinds.size(), "must be in [2, " + CacheState.MAX_LAYERS + "]");
        check(layerKinds.contains(LayerKind.RECURRENT) && layerKinds.contains(LayerKind.ATTENTION), "layerKinds",
                pattern(layerKinds), "a hybrid model needs at least one attention and one recurrent layer");
        long sum = 0;
        for (int p = 0; p < layersPerPp.size(); p++) {
            check(layersPerPp.get(p) >= 0, "layersPerPp[" + p + "]", layersPerPp.get(p), "must not be negative");
            sum += layersPerPp.get(p);
        }
        check(layersPerPp.isEmpty() || sum == layerKinds.size(), "layersPerPp", layersPerPp,
                "sums to " + sum + " but the model has " + layerKinds.size() + " layers");
        dim("convChannels", convChannels);
        dim("convWidth", convWidth);
        dim("ssmHeads", ssmHeads);
        dim("ssmHeadDim", ssmHeadDim);
        dim("ssmStateDim", ssmStateDim);
    }

    /**
     * Layer kinds from a pattern: {@code 'A'} attention, {@code 'R'} recurrent, repeated {@code times} (spaces ignored):
     * {@code kinds("AAAR", 2)} is the 3 : 1 model of 8 layers.
     *
     * @param pattern one period of the model
     * @param times   how many periods
     * @return the kinds
     */
    public static List<LayerKind> kinds(String pattern, int times) {
        Objects.requireNonNull(pattern, "pattern");
        List<LayerKind> out = new ArrayList<>();
        for (int i = 0; i < times; i++) {
            for (char c : pattern.toCharArray()) {
                if (c == 'A' || c == 'R') {
                    out.add(c == 'A' ? LayerKind.ATTENTION : LayerKind.RECURRENT);
                } else if (c != ' ') {
                    throw new IllegalArgumentException("pattern " + pattern + ": '" + c + "' is neither A nor R");
                }
            }
        }
        return Collections.unmodifiableList(out);
    }

    /** @return the layer kinds as a string of {@code A} and {@code R} */
    public String pattern() {
        return pattern(layerKinds);
    }

    /** @return number of attention layers (the cache state's {@code kvHeadsPerLayer} size) */
    public int attentionLayers() {
        return count(LayerKind.ATTENTION, 0, layerKinds.size());
    }

    /** @return number of recurrent layers */
    public int recurrentLayers() {
        return count(LayerKind.RECURRENT, 0, layerKinds.size());
    }

    /** @return attention layers per PP rank (needs a resolved {@code layersPerPp}) */
    public List<Integer> attentionLayersPerPp() {
        return perPp(LayerKind.ATTENTION);
    }

    /** @return recurrent layers per PP rank (needs a resolved {@code layersPerPp}) */
    public List<Integer> recurrentLayersPerPp() {
        return perPp(LayerKind.RECURRENT);
    }

    /**
     * @param ppRank a PP rank
     * @return the global recurrent index of the rank's first recurrent layer
     */
    public int firstRecurrentLayer(int ppRank) {
        return count(LayerKind.RECURRENT, 0, firstModelLayer(ppRank));
    }

    /**
     * @param ppRank a PP rank
     * @return recurrent layers the rank holds, possibly 0
     */
    public int recurrentLayerCount(int ppRank) {
        int a = firstModelLayer(ppRank);
        return count(LayerKind.RECURRENT, a, a + layersPerPp.get(ppRank));
    }

    /**
     * @param ppRank a PP rank
     * @return the index in the whole model of the rank's first layer
     */
    public int firstModelLayer(int ppRank) {
        requireResolved();
        Objects.checkIndex(ppRank, layersPerPp.size());
        int a = 0;
        for (int p = 0; p < ppRank; p++) {
            a += layersPerPp.get(p);
        }
        return a;
    }

    /**
     * Whether a rank holds recurrent states: CP rank 0 of every (PP, TP) position whose PP stage has recurrent layers.
     * Context parallelism splits the tokens, not the state, so one CP rank keeps it, on both sides; CP rank 0 is the
     * one every CP split has and the one the reference's CP-less layout maps to.
     *
     * @param state a cache state
     * @param rank  a rank of its instance
     * @return false for an attention-only state
     */
    public static boolean holdsState(CacheState state, int rank) {
        RecurrentStateShape r = state.recurrentState();
        return r != null && state.cpRank(rank) == 0 && r.recurrentLayerCount(state.ppRank(rank)) > 0;
    }

    /**
     * @param tp TP size
     * @return conv channels one rank holds
     */
    public int convChannelsPerRank(int tp) {
        return convChannels / tp;
    }

    /**
     * @param tp TP size
     * @return SSM heads one rank holds
     */
    public int ssmHeadsPerRank(int tp) {
        return ssmHeads / tp;
    }

    /**
     * @param tp TP size
     * @return bytes of one rank's conv state of one layer
     */
    public long convBytesPerRank(int tp) {
        return (long) convChannelsPerRank(tp) * convWidth * convDataType.bytes();
    }

    /**
     * @param tp TP size
     * @return bytes of one rank's SSM state of one layer
     */
    public long ssmBytesPerRank(int tp) {
        return (long) ssmHeadsPerRank(tp) * ssmHeadDim * ssmStateDim * ssmDataType.bytes();
    }

    /**
     * The same shape with another PP split.
     *
     * @param perPp all layers per PP rank
     * @return a new shape
     */
    public RecurrentStateShape withLayersPerPp(List<Integer> perPp) {
        return new RecurrentStateShape(layerKinds, perPp, convChannels, convWidth, ssmHeads, ssmHeadDim, ssmStateDim,
                convDataType, ssmDataType);
    }

    @Override
    public String toString() {
        return "recurrent{" + pattern() + " layers/pp=" + layersPerPp + " conv=" + convChannels + "x" + convWidth
                + " " + convDataType + " ssm=" + ssmHeads + "x" + ssmHeadDim + "x" + ssmStateDim + " " + ssmDataType
                + "}";
    }

    /**
     * Resolves the PP split against a cache state being built and checks it fits the rest of the state; returns
     * the attention layers per PP rank the state must hold.
     */
    static RecurrentStateShape resolve(RecurrentStateShape s, int kvLayers, int tp, int pp, AttentionType type,
                                       List<Integer> explicitAttentionPerPp) {
        RecurrentStateShape r = s.layersPerPp.isEmpty() ? s.withLayersPerPp(CacheState.evenLayerSplit(
                s.layerKinds.size(), pp)) : s;
        check(r.layersPerPp.size() == pp, "recurrentState.layersPerPp", r.layersPerPp,
                "needs one entry per PP rank (" + pp + ")");
        check(type == AttentionType.DEFAULT, "attentionType", type, "a recurrent state goes with DEFAULT attention");
        check(r.attentionLayers() == kvLayers, "recurrentState.layerKinds", r.pattern(), "has "
                + r.attentionLayers() + " attention layers but kvHeadsPerLayer has " + kvLayers);
        check(r.convChannels % tp == 0, "recurrentState.convChannels", r.convChannels,
                "must be divisible by tensorParallelism " + tp);
        check(r.ssmHeads % tp == 0, "recurrentState.ssmHeads", r.ssmHeads,
                "must be divisible by tensorParallelism " + tp);
        check(explicitAttentionPerPp == null || explicitAttentionPerPp.equals(r.attentionLayersPerPp()),
                "attentionLayersPerPp", explicitAttentionPerPp, "the recurrent state's split "
                        + r.layersPerPp + " of " + r.pattern() + " gives " + r.attentionLayersPerPp());
        return r;
    }

    void write(WireWriter w) {
        w.writeByte(WIRE_TAG);
        List<Integer> kinds = new ArrayList<>(layerKinds.size());
        for (LayerKind k : layerKinds) {
            kinds.add(k.ordinal());
        }
        w.writeIntList(kinds);
        w.writeIntList(layersPerPp);
        w.writeInt(convChannels);
        w.writeInt(convWidth);
        w.writeInt(ssmHeads);
        w.writeInt(ssmHeadDim);
        w.writeInt(ssmStateDim);
        w.writeInt(convDataType.wireId());
        w.writeInt(ssmDataType.wireId());
    }

    static RecurrentStateShape read(WireReader r) {
        int start = r.offset();
        int tag = r.readByte("RecurrentStateShape tag");
        if (tag != WIRE_TAG) {
            throw new MalformedMessageException(start, "expected RecurrentStateShape tag " + WIRE_TAG + ", found "
                    + tag);
        }
        List<LayerKind> kinds = new ArrayList<>();
        for (int k : r.readIntList("layerKinds", 0, LayerKind.values().length - 1)) {
            kinds.add(LayerKind.values()[k]);
        }
        List<Integer> perPp = r.readIntList("recurrentState.layersPerPp", 0, CacheState.MAX_LAYERS);
        int conv = r.readInt("convChannels", 1, CacheState.MAX_DIM);
        int width = r.readInt("convWidth", 1, CacheState.MAX_DIM);
        int heads = r.readInt("ssmHeads", 1, CacheState.MAX_DIM);
        int headDim = r.readInt("ssmHeadDim", 1, CacheState.MAX_DIM);
        int stateDim = r.readInt("ssmStateDim", 1, CacheState.MAX_DIM);
        DataType convType = dataType(r, "convDataType");
        DataType ssmType = dataType(r, "ssmDataType");
        try {
            return new RecurrentStateShape(kinds, perPp, conv, width, heads, headDim, stateDim, convType, ssmType);
        } catch (IllegalArgumentException e) {
            throw new MalformedMessageException(start, "invalid RecurrentStateShape: " + e.getMessage());
        }
    }

    private static DataType dataType(WireReader r, String what) {
        int at = r.offset();
        int id = r.readInt(what);
        DataType t = DataType.fromWireId(id);
        if (t == null) {
            throw new MalformedMessageException(at, "unknown " + what + " id " + id);
        }
        return t;
    }

    private List<Integer> perPp(LayerKind kind) {
        requireResolved();
        List<Integer> out = new ArrayList<>(layersPerPp.size());
        int a = 0;
        for (int n : layersPerPp) {
            out.add(count(kind, a, a + n));
            a += n;
        }
        return Collections.unmodifiableList(out);
    }

    private int count(LayerKind kind, int from, int to) {
        int n = 0;
        for (int i = from; i < to; i++) {
            n += layerKinds.get(i) == kind ? 1 : 0;
        }
        return n;
    }

    private void requireResolved() {
        if (layersPerPp.isEmpty()) {
            throw new IllegalStateException("layersPerPp is not resolved yet: take the shape from a built CacheState");
        }
    }

    private static String pattern(List<LayerKind> kinds) {
        StringBuilder b = new StringBuilder(kinds.size());
        for (LayerKind k : kinds) {
            b.append(k == LayerKind.ATTENTION ? 'A' : 'R');
        }
        return b.toString();
    }

    private static void dim(String field, int v) {
        check(v >= 1 && v <= CacheState.MAX_DIM, field, v, "must be in [1, " + CacheState.MAX_DIM + "]");
    }

    private static void check(boolean ok, String field, Object value, String rule) {
        if (!ok) {
            throw new IllegalArgumentException(field + " = " + value + ": " + rule);
        }
    }
}
