package dev.kvtransfer.api.model;

import dev.kvtransfer.api.layout.PoolLayout;
import dev.kvtransfer.api.wire.MalformedMessageException;
import dev.kvtransfer.api.wire.WireReader;
import dev.kvtransfer.api.wire.WireWriter;

import static dev.kvtransfer.api.model.CacheStateChecks.check;
import static dev.kvtransfer.api.model.CacheStateChecks.isPowerOfTwo;

import java.util.Collections;
import java.util.List;
import java.util.Objects;

/**
 * What a rank knows about its instance's KV-cache shape: the model (global KV heads per layer, head size,
 * tokens per block), the parallel layout (TP, PP, CP, attention DP, layers per PP rank), the element type and
 * the attention kind. Immutable; build with {@link #builder()}.
 *
 * <p>Heads are the model's <em>global</em> KV heads per layer. What one rank holds is derived
 * ({@link #kvHeadsPerRank(int)}): MLA holds 1; otherwise with {@code g = }{@link #tpPerDpGroup()} ranks
 * sharing a layer's heads, {@code H/g} heads when {@code g <= H}, else 1 head duplicated on {@code g/H}
 * ranks. Ranks are laid out {@code rank = pp * (TP*CP) + tp * CP + cp} (CP fastest).
 */
public final class CacheState {
    /** Largest accepted TP, PP, CP or DP size. */
    public static final int MAX_PARALLELISM = 4096;
    /** Largest accepted layer count. */
    public static final int MAX_LAYERS = 65_536;
    /** Largest accepted head count, head size or tokens per block. */
    public static final int MAX_DIM = 1 << 20;
    /** Largest accepted number of ranks ({@code TP * PP * CP}), checked without overflow. */
    public static final int MAX_WORLD_SIZE = 1 << 16;

    static final int WIRE_TAG = 0x43; // 'C'
    static final int HYBRID_WIRE_TAG = 0x48; // 'H': the fields, then a RecurrentStateShape
    static final int WINDOWED_WIRE_TAG = 0x57; // 'W': the fields, hybrid flag [+ shape], then WindowGroups

    private final List<Integer> kvHeadsPerLayer;
    private final int sizePerHead;
    private final int tokensPerBlock;
    private final int tensorParallelism;
    private final int pipelineParallelism;
    private final int contextParallelism;
    private final boolean attentionDpEnabled;
    private final int dpRank;
    private final int dpSize;
    private final List<Integer> attentionLayersPerPp;
    private final DataType dataType;
    private final AttentionType attentionType;
    private final int kvFactor;
    private final boolean blockReuse;
    private final PoolLayout poolLayout;
    private final int indexerDimPerHead;
    private final int indexerKCacheQuantBlockSize;
    private final boolean indexerKCacheUseFp4;
    private final boolean partialReuse;
    private final RecurrentStateShape recurrentState;
    private final WindowGroups windowGroups;
    private final int[] firstLayerOfPp;

    private CacheState(Builder b, List<Integer> layersPerPp, int kvFactor, RecurrentStateShape recurrent) {
        this.recurrentState = recurrent;
        this.windowGroups = b.windowGroups;
        this.kvHeadsPerLayer = b.kvHeadsPerLayer;
        this.sizePerHead = b.sizePerHead;
        this.tokensPerBlock = b.tokensPerBlock;
        this.tensorParallelism = b.tensorParallelism;
        this.pipelineParallelism = b.pipelineParallelism;
        this.contextParallelism = b.contextParallelism;
        this.attentionDpEnabled = b.attentionDpEnabled;
        this.dpRank = b.dpRank;
        this.dpSize = b.dpSize;
        this.attentionLayersPerPp = layersPerPp;
        this.dataType = b.dataType;
        this.attentionType = b.attentionType;
        this.kvFactor = kvFactor;
        this.blockReuse = b.blockReuse;
        this.poolLayout = b.poolLayout;
        this.indexerDimPerHead = b.indexerDimPerHead;
        this.indexerKCacheQuantBlockSize = b.indexerKCacheQuantBlockSize;
        this.indexerKCacheUseFp4 = b.indexerKCacheUseFp4;
        this.partialReuse = b.partialReuse;
        this.firstLayerOfPp = new int[pipelineParallelism + 1];
        for (int p = 0; p < pipelineParallelism; p++) {
            firstLayerOfPp[p + 1] = firstLayerOfPp[p] + layersPerPp.get(p);
        }
    }

    /**
     * A new builder with defaults: TP = PP = CP = 1, attention DP off, FLOAT16, DEFAULT attention, kvFactor 2
     * (1 for MLA), block reuse off, layers split evenly over PP ranks.
     *
     * @return a builder
     */
    public static Builder builder() {
        return new Builder();
    }

    /**
     * A builder holding this state's values.
     *
     * @return a builder
     */
    public Builder toBuilder() {
        return new Builder().kvHeadsPerLayer(kvHeadsPerLayer).sizePerHead(sizePerHead).tokensPerBlock(tokensPerBlock)
                .tensorParallelism(tensorParallelism).pipelineParallelism(pipelineParallelism)
                .contextParallelism(contextParallelism).attentionDp(attentionDpEnabled, dpRank, dpSize)
                .attentionLayersPerPp(attentionLayersPerPp).dataType(dataType).attentionType(attentionType)
                .kvFactor(kvFactor).blockReuse(blockReuse).poolLayout(poolLayout)
                .indexerKCache(indexerDimPerHead, indexerKCacheQuantBlockSize, indexerKCacheUseFp4)
                .partialReuse(partialReuse)
                .recurrentState(recurrentState).windowGroups(windowGroups);
    }

    /** @return the attention window of every attention layer (VSWA), or {@code null}: every layer attends fully */
    public WindowGroups windowGroups() {
        return windowGroups;
    }

    /** @return the recurrent layers of a hybrid model (resolved PP split), or {@code null} for attention only */
    public RecurrentStateShape recurrentState() {
        return recurrentState;
    }

    /**
     * @return whether every rank of the instance has an indexer-K pool (MLA sparse attention, DeepSeek-V3.2): a
     *         block pool sharing the main pool's block ids, {@link #indexerDimPerHead()} bytes per token and layer
     */
    public boolean hasIndexerKCache() {
        return indexerDimPerHead > 0;
    }

    /** @return the indexer-K pool's bytes per token and layer; 0 without one */
    public int indexerDimPerHead() {
        return indexerDimPerHead;
    }

    /** @return the indexer-K cache's quantization block size (0: not quantized in blocks, or no indexer pool) */
    public int indexerKCacheQuantBlockSize() {
        return indexerKCacheQuantBlockSize;
    }

    /** @return whether the indexer-K cache is stored as FP4 (TensorRT-LLM's {@code indexerKCacheUseFp4}) */
    public boolean indexerKCacheUseFp4() {
        return indexerKCacheUseFp4;
    }

    /**
     * The same state with another attention-DP rank (the DP rank that serves one request).
     *
     * @param newDpRank the DP rank
     * @return a new state
     */
    public CacheState withDpRank(int newDpRank) {
        return toBuilder().attentionDp(attentionDpEnabled, newDpRank, dpSize).build();
    }

    /** @return the model's global KV heads, one entry per layer */
    public List<Integer> kvHeadsPerLayer() {
        return kvHeadsPerLayer;
    }

    /** @return number of attention layers of the model */
    public int numLayers() {
        return kvHeadsPerLayer.size();
    }

    /** @return elements per head */
    public int sizePerHead() {
        return sizePerHead;
    }

    /** @return tokens per KV block */
    public int tokensPerBlock() {
        return tokensPerBlock;
    }

    /** @return tensor parallelism */
    public int tensorParallelism() {
        return tensorParallelism;
    }

    /** @return pipeline parallelism */
    public int pipelineParallelism() {
        return pipelineParallelism;
    }

    /** @return context parallelism */
    public int contextParallelism() {
        return contextParallelism;
    }

    /** @return whether attention data parallelism is on */
    public boolean attentionDpEnabled() {
        return attentionDpEnabled;
    }

    /** @return the attention-DP rank this state describes (0 when DP is off) */
    public int dpRank() {
        return dpRank;
    }

    /** @return the attention-DP size (1 when DP is off) */
    public int dpSize() {
        return dpSize;
    }

    /** @return attention layers held by each PP rank; entries may be 0 */
    public List<Integer> attentionLayersPerPp() {
        return attentionLayersPerPp;
    }

    /** @return the element type */
    public DataType dataType() {
        return dataType;
    }

    /** @return the attention kind */
    public AttentionType attentionType() {
        return attentionType;
    }

    /** @return 2 for K and V planes, 1 for K only (MLA) */
    public int kvFactor() {
        return kvFactor;
    }

    /** @return whether block reuse is on */
    public boolean blockReuse() {
        return blockReuse;
    }

    /** @return whether a prefix hit may end inside a block, a private copy (TensorRT-LLM's enablePartialReuse) */
    public boolean partialReuse() {
        return partialReuse;
    }

    /**
     * How this rank's pool stores its blocks (an engine's choice, the same on every rank of an instance). Any
     * two pool layouts convert into each other; it is carried so that both sides can plan the same messages.
     *
     * @return the pool layout ({@link PoolLayout#BLOCK} unless set)
     */
    public PoolLayout poolLayout() {
        return poolLayout;
    }

    /**
     * The same state with another pool layout.
     *
     * @param layout the pool layout
     * @return a new state
     */
    public CacheState withPoolLayout(PoolLayout layout) {
        return toBuilder().poolLayout(layout).build();
    }

    /** @return number of ranks: TP * PP * CP */
    public int worldSize() {
        return tensorParallelism * pipelineParallelism * contextParallelism;
    }

    /**
     * TP rank of a rank index.
     *
     * @param rank rank index in this instance
     * @return its TP rank
     */
    public int tpRank(int rank) {
        CacheStateChecks.index("rank", rank, worldSize());
        return (rank % (tensorParallelism * contextParallelism)) / contextParallelism;
    }

    /**
     * PP rank of a rank index.
     *
     * @param rank rank index in this instance
     * @return its PP rank
     */
    public int ppRank(int rank) {
        CacheStateChecks.index("rank", rank, worldSize());
        return rank / (tensorParallelism * contextParallelism);
    }

    /**
     * CP rank of a rank index.
     *
     * @param rank rank index in this instance
     * @return its CP rank
     */
    public int cpRank(int rank) {
        CacheStateChecks.index("rank", rank, worldSize());
        return rank % contextParallelism;
    }

    /**
     * Rank index of a (PP, TP, CP) coordinate: {@code pp * (TP*CP) + tp * CP + cp}.
     *
     * @param pp PP rank
     * @param tp TP rank
     * @param cp CP rank
     * @return the rank index
     */
    public int rankOf(int pp, int tp, int cp) {
        if (pp < 0 || pp >= pipelineParallelism || tp < 0 || tp >= tensorParallelism
                || cp < 0 || cp >= contextParallelism) {
            throw new IllegalArgumentException("coordinate (pp=" + pp + ", tp=" + tp + ", cp=" + cp
                    + ") outside TP" + tensorParallelism + " PP" + pipelineParallelism + " CP" + contextParallelism);
        }
        return pp * (tensorParallelism * contextParallelism) + tp * contextParallelism + cp;
    }

    /**
     * First global layer held by a PP rank.
     *
     * @param ppRank the PP rank
     * @return the global layer index
     */
    public int firstLayer(int ppRank) {
        CacheStateChecks.index("ppRank", ppRank, pipelineParallelism);
        return firstLayerOfPp[ppRank];
    }

    /**
     * Number of layers held by a PP rank.
     *
     * @param ppRank the PP rank
     * @return the layer count, possibly 0
     */
    public int layerCount(int ppRank) {
        CacheStateChecks.index("ppRank", ppRank, pipelineParallelism);
        return attentionLayersPerPp.get(ppRank);
    }

    /**
     * TP ranks that share one request's attention heads: {@code TP / dpSize} with attention DP, else TP.
     *
     * @return the TP group size for heads
     */
    public int tpPerDpGroup() {
        return attentionDpEnabled ? tensorParallelism / dpSize : tensorParallelism;
    }

    /**
     * KV heads one rank holds for a layer.
     *
     * @param layer global layer index
     * @return heads per rank
     */
    public int kvHeadsPerRank(int layer) {
        if (attentionType == AttentionType.MLA) {
            return 1;
        }
        int h = kvHeadsPerLayer.get(layer);
        int g = tpPerDpGroup();
        return g <= h ? h / g : 1;
    }

    /**
     * KV heads one rank holds, for a model whose layers all have the same head count.
     *
     * @return heads per rank
     * @throws IllegalStateException if layers have different head counts
     */
    public int kvHeadsPerRank() {
        requireUniformHeads();
        return kvHeadsPerRank(0);
    }

    /**
     * How many TP ranks hold the same heads: {@code g / H} when {@code g = tpPerDpGroup() > H}, else 1.
     * For MLA every rank of the group holds the same latent head, so it is {@code g}.
     *
     * @return the duplication factor
     */
    public int headDuplication() {
        int g = tpPerDpGroup();
        if (attentionType == AttentionType.MLA) {
            return g;
        }
        requireUniformHeads();
        int h = kvHeadsPerLayer.get(0);
        return g > h ? g / h : 1;
    }

    /**
     * First global KV head held by a TP rank (0 for MLA).
     *
     * @param tpRank the TP rank
     * @return the global head index
     */
    public int firstGlobalHead(int tpRank) {
        CacheStateChecks.index("tpRank", tpRank, tensorParallelism);
        if (attentionType == AttentionType.MLA) {
            return 0;
        }
        requireUniformHeads();
        int h = kvHeadsPerLayer.get(0);
        int g = tpPerDpGroup();
        int t = tpRank % g;
        return g <= h ? t * (h / g) : t / (g / h);
    }

    /** @return whether every layer has the same global KV head count */
    public boolean uniformHeads() {
        int h0 = kvHeadsPerLayer.get(0);
        for (int h : kvHeadsPerLayer) {
            if (h != h0) {
                return false;
            }
        }
        return true;
    }

    private void requireUniformHeads() {
        if (!uniformHeads()) {
            throw new IllegalStateException("layers have different KV head counts " + kvHeadsPerLayer);
        }
    }

    /**
     * Encodes this state as a whole message: magic, format version, then {@link #writeTo(WireWriter)}.
     *
     * @return the encoded bytes
     */
    public byte[] toBytes() {
        WireWriter w = WireWriter.message();
        writeTo(w);
        return w.toByteArray();
    }

    /**
     * Decodes a whole message written by {@link #toBytes()}.
     *
     * @param bytes the message
     * @return the state
     * @throws MalformedMessageException on any bad byte, including trailing bytes
     */
    public static CacheState fromBytes(byte[] bytes) {
        Objects.requireNonNull(bytes, "bytes");
        WireReader r = WireReader.message(bytes);
        CacheState state = readFrom(r);
        r.expectEnd("CacheState");
        return state;
    }

    /**
     * Writes this state (a tag byte, then the fields) without a message header.
     *
     * @param w the writer
     */
    public void writeTo(WireWriter w) {
        CacheStateWire.write(this, w);
    }

    /**
     * Reads a state written by {@link #writeTo(WireWriter)}; every field is range-checked and the result is
     * validated like a built one.
     *
     * @param r the reader
     * @return the state
     * @throws MalformedMessageException on any bad byte
     */
    public static CacheState readFrom(WireReader r) {
        return CacheStateWire.read(r);
    }

    @Override
    public boolean equals(Object o) {
        if (!(o instanceof CacheState s)) {
            return false;
        }
        return this == s || sizePerHead == s.sizePerHead && tokensPerBlock == s.tokensPerBlock
                && tensorParallelism == s.tensorParallelism && pipelineParallelism == s.pipelineParallelism
                && contextParallelism == s.contextParallelism && attentionDpEnabled == s.attentionDpEnabled
                && dpRank == s.dpRank && dpSize == s.dpSize && kvFactor == s.kvFactor && blockReuse == s.blockReuse
                && kvHeadsPerLayer.equals(s.kvHeadsPerLayer) && attentionLayersPerPp.equals(s.attentionLayersPerPp)
                && dataType == s.dataType && attentionType == s.attentionType && poolLayout.equals(s.poolLayout)
                && indexerDimPerHead == s.indexerDimPerHead
                && indexerKCacheQuantBlockSize == s.indexerKCacheQuantBlockSize && partialReuse == s.partialReuse
                && indexerKCacheUseFp4 == s.indexerKCacheUseFp4
                && Objects.equals(recurrentState, s.recurrentState) && Objects.equals(windowGroups, s.windowGroups);
    }

    @Override
    public int hashCode() {
        return Objects.hash(kvHeadsPerLayer, sizePerHead, tokensPerBlock, tensorParallelism, pipelineParallelism,
                contextParallelism, attentionDpEnabled, dpRank, dpSize, attentionLayersPerPp, dataType,
                attentionType, kvFactor, blockReuse, poolLayout, indexerDimPerHead, indexerKCacheQuantBlockSize,
                partialReuse, recurrentState, windowGroups, indexerKCacheUseFp4);
    }

    @Override
    public String toString() {
        String heads = uniformHeads()
                ? numLayers() + "x" + kvHeadsPerLayer.get(0)
                : kvHeadsPerLayer.toString();
        return "CacheState{TP" + tensorParallelism + " PP" + pipelineParallelism + " CP" + contextParallelism
                + (attentionDpEnabled ? " DP" + dpRank + "/" + dpSize : "")
                + " layers/pp=" + attentionLayersPerPp + " heads=" + heads + " D=" + sizePerHead
                + " T=" + tokensPerBlock + " " + dataType + " " + attentionType + " kvF=" + kvFactor
                + (blockReuse ? " reuse" : "") + (partialReuse ? " partial" : "") + (poolLayout.equals(PoolLayout.BLOCK) ? "" : " pool=" + poolLayout)
                + (hasIndexerKCache() ? " indexerK=" + indexerDimPerHead + "/q" + indexerKCacheQuantBlockSize
                        + (indexerKCacheUseFp4 ? "/fp4" : "") : "")
                + (recurrentState != null ? " " + recurrentState : "")
                + (windowGroups != null ? " " + windowGroups : "") + "}";
    }

    /**
     * The even split of {@code layers} over {@code pp} ranks, remainder to the first ranks.
     *
     * @param layers layer count
     * @param pp     PP size
     * @return layers per PP rank
     */
    public static List<Integer> evenLayerSplit(int layers, int pp) {
        return CacheStateChecks.evenLayerSplit(layers, pp);
    }

    /** Builds a {@link CacheState}; {@link #build()} validates and names the offending field and value. */
    public static final class Builder {
        private List<Integer> kvHeadsPerLayer = List.of();
        private int sizePerHead;
        private int tokensPerBlock;
        private int tensorParallelism = 1;
        private int pipelineParallelism = 1;
        private int contextParallelism = 1;
        private boolean attentionDpEnabled;
        private int dpRank;
        private int dpSize = 1;
        private List<Integer> attentionLayersPerPp;
        private DataType dataType = DataType.FLOAT16;
        private AttentionType attentionType = AttentionType.DEFAULT;
        private Integer kvFactor;
        private boolean blockReuse;
        private PoolLayout poolLayout = PoolLayout.BLOCK;
        private int indexerDimPerHead;
        private int indexerKCacheQuantBlockSize;
        private boolean indexerKCacheUseFp4;
        private boolean partialReuse;
        private RecurrentStateShape recurrentState;
        private WindowGroups windowGroups;

        private Builder() {
        }

        /**
         * The model's global KV heads of every layer.
         *
         * @param heads one entry per layer
         * @return this builder
         */
        public Builder kvHeadsPerLayer(List<Integer> heads) {
            Objects.requireNonNull(heads, "heads");
            for (Integer h : heads) {
                Objects.requireNonNull(h, "kvHeadsPerLayer element");
            }
            this.kvHeadsPerLayer = List.copyOf(heads);
            return this;
        }

        /**
         * Every layer has {@code heads} global KV heads.
         *
         * @param layers number of layers
         * @param heads  global KV heads per layer
         * @return this builder
         */
        public Builder uniformKvHeads(int layers, int heads) {
            if (layers < 1 || layers > MAX_LAYERS) {
                throw new IllegalArgumentException("layers must be in [1, " + MAX_LAYERS + "], was " + layers);
            }
            return kvHeadsPerLayer(Collections.nCopies(layers, heads));
        }

        /**
         * @param v elements per head
         * @return this builder
         */
        public Builder sizePerHead(int v) {
            this.sizePerHead = v;
            return this;
        }

        /**
         * @param v tokens per block
         * @return this builder
         */
        public Builder tokensPerBlock(int v) {
            this.tokensPerBlock = v;
            return this;
        }

        /**
         * @param v tensor parallelism
         * @return this builder
         */
        public Builder tensorParallelism(int v) {
            this.tensorParallelism = v;
            return this;
        }

        /**
         * @param v pipeline parallelism
         * @return this builder
         */
        public Builder pipelineParallelism(int v) {
            this.pipelineParallelism = v;
            return this;
        }

        /**
         * @param v context parallelism
         * @return this builder
         */
        public Builder contextParallelism(int v) {
            this.contextParallelism = v;
            return this;
        }

        /**
         * Attention data parallelism.
         *
         * @param enabled whether it is on
         * @param rank    the DP rank this state describes
         * @param size    the DP size
         * @return this builder
         */
        public Builder attentionDp(boolean enabled, int rank, int size) {
            this.attentionDpEnabled = enabled;
            this.dpRank = rank;
            this.dpSize = size;
            return this;
        }

        /**
         * Layers per PP rank (default: even split, remainder to the first ranks). Entries may be 0.
         *
         * @param layers one entry per PP rank
         * @return this builder
         */
        public Builder attentionLayersPerPp(List<Integer> layers) {
            if (layers == null) {
                this.attentionLayersPerPp = null;
                return this;
            }
            for (Integer l : layers) {
                Objects.requireNonNull(l, "attentionLayersPerPp element");
            }
            this.attentionLayersPerPp = List.copyOf(layers);
            return this;
        }

        /**
         * @param v element type
         * @return this builder
         */
        public Builder dataType(DataType v) {
            this.dataType = Objects.requireNonNull(v, "dataType");
            return this;
        }

        /**
         * @param v attention kind
         * @return this builder
         */
        public Builder attentionType(AttentionType v) {
            this.attentionType = Objects.requireNonNull(v, "attentionType");
            return this;
        }

        /**
         * @param v 2 (K and V) or 1 (K only, MLA)
         * @return this builder
         */
        public Builder kvFactor(int v) {
            this.kvFactor = v;
            return this;
        }

        /**
         * @param v whether block reuse is on
         * @return this builder
         */
        public Builder blockReuse(boolean v) {
            this.blockReuse = v;
            return this;
        }

        /**
         * @param v how the rank's pool stores its blocks (default {@link PoolLayout#BLOCK})
         * @return this builder
         */
        public Builder poolLayout(PoolLayout v) {
            this.poolLayout = Objects.requireNonNull(v, "poolLayout");
            return this;
        }

        /**
         * Declares the indexer-K pool every rank has (TensorRT-LLM's {@code hasIndexerKCache},
         * {@code indexerDimPerHead}, {@code indexerKCacheQuantBlockSize}). Both sides of a transfer must declare the
         * same; the formatter refuses a pair that differs, and a cache whose pool differs from the declaration.
         *
         * @param dimPerHead     bytes per token and layer, 0 for no indexer pool (the default)
         * @param quantBlockSize quantization block size, 0 for none; must be 0 without an indexer pool
         * @return this builder
         */
        public Builder indexerKCache(int dimPerHead, int quantBlockSize) {
            return indexerKCache(dimPerHead, quantBlockSize, false);
        }

        /**
         * {@link #indexerKCache(int, int)} for an indexer-K cache that may be stored as FP4 (TensorRT-LLM's
         * {@code indexerKCacheUseFp4}); both sides must declare the same.
         *
         * @param dimPerHead     bytes per token and layer, 0 for no indexer pool
         * @param quantBlockSize quantization block size, 0 for none
         * @param useFp4         whether the pool holds FP4 values; needs an indexer pool
         * @return this builder
         */
        public Builder indexerKCache(int dimPerHead, int quantBlockSize, boolean useFp4) {
            this.indexerDimPerHead = dimPerHead;
            this.indexerKCacheQuantBlockSize = quantBlockSize;
            this.indexerKCacheUseFp4 = useFp4;
            return this;
        }

        /**
         * Declares partial block reuse (TensorRT-LLM's {@code enablePartialReuse}; needs {@link #blockReuse}). A
         * request whose reused prefix ends inside a block is served only when both sides declare it.
         *
         * @param v whether a prefix hit may end inside a block (default false)
         * @return this builder
         */
        public Builder partialReuse(boolean v) {
            this.partialReuse = v;
            return this;
        }

        /**
         * Declares a hybrid model: its layer kinds, PP split of all layers and recurrent state shape. The attention
         * layers per PP rank then follow from it (an explicit {@link #attentionLayersPerPp} must agree).
         *
         * @param v the recurrent layers, or {@code null} for an attention-only model (the default)
         * @return this builder
         */
        public Builder recurrentState(RecurrentStateShape v) {
            this.recurrentState = v;
            return this;
        }

        /**
         * Declares variable sliding-window attention: the window of every attention layer.
         *
         * @param v the windows, or {@code null} for full attention on every layer (the default)
         * @return this builder
         */
        public Builder windowGroups(WindowGroups v) {
            this.windowGroups = v;
            return this;
        }

        /**
         * Validates and builds.
         *
         * @return the state
         * @throws IllegalArgumentException naming the field and value that break a rule
         */
        public CacheState build() {
            int layers = kvHeadsPerLayer.size();
            CacheStateChecks.shape(layers, sizePerHead, tokensPerBlock);
            CacheStateChecks.parallelism(tensorParallelism, pipelineParallelism, contextParallelism,
                    attentionDpEnabled, dpRank, dpSize);
            int g = attentionDpEnabled ? tensorParallelism / dpSize : tensorParallelism;
            check(isPowerOfTwo(g), attentionDpEnabled ? "tensorParallelism/dpSize" : "tensorParallelism", g,
                    "TP per attention-DP group must be a power of two");
            CacheStateChecks.heads(kvHeadsPerLayer, attentionType, g);
            int kvf = CacheStateChecks.kvFactor(kvFactor, attentionType);
            RecurrentStateShape rec = recurrentState == null ? null : RecurrentStateShape.resolve(recurrentState,
                    layers, tensorParallelism, pipelineParallelism, attentionType, attentionLayersPerPp);
            List<Integer> perPp = rec != null ? rec.attentionLayersPerPp()
                    : attentionLayersPerPp != null ? attentionLayersPerPp : evenLayerSplit(layers, pipelineParallelism);
            CacheStateChecks.layersPerPp(perPp, pipelineParallelism, layers);
            CacheStateChecks.windows(windowGroups, layers, attentionType);
            CacheStateChecks.poolLayout(poolLayout, attentionType, sizePerHead);
            CacheStateChecks.indexer(indexerDimPerHead, indexerKCacheQuantBlockSize, indexerKCacheUseFp4);
            check(blockReuse || !partialReuse, "partialReuse", true, "needs blockReuse");
            return new CacheState(this, perPp, kvf, rec);
        }
    }
}
