package dev.kvtransfer.testkit;

import dev.kvtransfer.api.layout.BlockLayout;
import dev.kvtransfer.api.layout.PoolLayout;
import dev.kvtransfer.api.model.AttentionType;
import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.api.model.DataType;
import dev.kvtransfer.api.model.RecurrentStateShape;
import dev.kvtransfer.api.model.WindowGroups;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.List;
import java.util.Objects;
import java.util.function.Predicate;

/**
 * Lists of context/generation layout pairs ({@link LayoutPair}) for conformance suites: the presets
 * {@link #standardFull()}, {@link #standardSmall()} and {@link #contextCp()}, and a {@link #builder()} for other
 * grids (MLA: {@code attentionType(MLA)}, {@code kvFactor(1)}, {@code heads(1)}, DP on either side, gen CP).
 *
 * <p>Shapes are kept small (head size 4, 16 tokens per block, a few layers) so a whole grid runs in seconds;
 * prompt lengths do not fill the last block.
 */
public final class LayoutGrid {
    /** Prompt lengths used by the presets: 2, 1, 4 and 5 blocks of 16 tokens, none full. */
    public static final List<Integer> DEFAULT_PROMPTS = List.of(30, 10, 60, 80);

    private final List<LayoutPair> pairs;

    private LayoutGrid(List<LayoutPair> pairs) {
        this.pairs = List.copyOf(pairs);
    }

    /**
     * A grid of given pairs.
     *
     * @param pairs the pairs
     * @return the grid
     */
    public static LayoutGrid of(List<LayoutPair> pairs) {
        return new LayoutGrid(Objects.requireNonNull(pairs, "pairs"));
    }

    /** @return every pair, supported and not */
    public List<LayoutPair> pairs() {
        return pairs;
    }

    /** @return the pairs a formatter must move */
    public List<LayoutPair> supported() {
        return pairs.stream().filter(LayoutPair::supported).toList();
    }

    /** @return the pairs a formatter must refuse */
    public List<LayoutPair> unsupported() {
        return pairs.stream().filter(p -> !p.supported()).toList();
    }

    /** @return number of pairs */
    public int size() {
        return pairs.size();
    }

    /**
     * The pairs matching a condition.
     *
     * @param keep the condition
     * @return a new grid
     */
    public LayoutGrid filter(Predicate<LayoutPair> keep) {
        return new LayoutGrid(pairs.stream().filter(keep).toList());
    }

    /**
     * This grid followed by another.
     *
     * @param other more pairs
     * @return a new grid
     */
    public LayoutGrid plus(LayoutGrid other) {
        List<LayoutPair> all = new ArrayList<>(pairs);
        all.addAll(other.pairs);
        return new LayoutGrid(all);
    }

    @Override
    public String toString() {
        return "LayoutGrid{" + pairs.size() + " pairs}";
    }

    /**
     * The pool layouts a standard (MHA/GQA) cache can have on either side: block, layer-nhd, layer-hnd.
     *
     * @return the layouts
     */
    public static List<PoolLayout> standardPoolLayouts() {
        return List.of(PoolLayout.BLOCK, PoolLayout.LAYER_NHD, PoolLayout.LAYER_HND);
    }

    /**
     * The pool layouts of an MLA cache: the three kinds and both layer kinds with the latent split into its nope
     * and rope parts.
     *
     * @param ropeDim rope elements of the split latent (below the grid's head size)
     * @return the layouts
     */
    public static List<PoolLayout> mlaPoolLayouts(int ropeDim) {
        return List.of(PoolLayout.BLOCK, PoolLayout.LAYER_NHD, PoolLayout.LAYER_HND,
                new PoolLayout(PoolLayout.Kind.LAYER_NHD, ropeDim), new PoolLayout(PoolLayout.Kind.LAYER_HND, ropeDim));
    }

    /**
     * A representative cross product of pool layouts and this grid: supported pair {@code k} gets combination
     * {@code k % n²} of (context layout, generation layout), context-major; refused pairs keep their states. The
     * grid keeps its size.
     *
     * @param layouts the layouts each side can take
     * @return a new grid
     */
    public LayoutGrid withPoolLayouts(List<PoolLayout> layouts) {
        List<LayoutPair> out = new ArrayList<>(pairs.size());
        int k = 0;
        int n = layouts.size();
        for (LayoutPair p : pairs) {
            if (!p.supported()) {
                out.add(p);
                continue;
            }
            int c = k++ % (n * n);
            out.add(withPools(p, layouts.get(c / n), layouts.get(c % n)));
        }
        return new LayoutGrid(out);
    }

    /**
     * Every supported pair of this grid once per (context layout, generation layout) combination.
     *
     * @param layouts the layouts each side can take
     * @return a new grid of {@code supported * n²} pairs
     */
    public LayoutGrid everyPoolLayoutPair(List<PoolLayout> layouts) {
        List<LayoutPair> out = new ArrayList<>();
        for (LayoutPair p : supported()) {
            for (PoolLayout c : layouts) {
                for (PoolLayout g : layouts) {
                    out.add(withPools(p, c, g));
                }
            }
        }
        return new LayoutGrid(out);
    }

    /**
     * Prefix reuse on every supported pair: request {@code i} reuses {@code perRequest[i % n]} leading blocks
     * ({@link LayoutPair#ALL_BLOCKS} = all of them).
     *
     * @param perRequest reused blocks per request index
     * @return a new grid
     */
    public LayoutGrid withReuse(Integer... perRequest) {
        List<Integer> r = List.of(perRequest);
        return new LayoutGrid(pairs.stream().map(p -> p.supported() ? p.withReuse(r) : p).toList());
    }

    /**
     * Every {@code step}-th supported pair, from the first (refused pairs are dropped).
     *
     * @param step the stride, at least 1
     * @return a new grid
     */
    public LayoutGrid sample(int step) {
        if (step < 1) {
            throw new IllegalArgumentException("step = " + step + ": must be at least 1");
        }
        List<LayoutPair> s = supported();
        List<LayoutPair> out = new ArrayList<>();
        for (int i = 0; i < s.size(); i += step) {
            out.add(s.get(i));
        }
        return new LayoutGrid(out);
    }

    /**
     * Every supported pair with its heads widened ({@code sizePerHead} multiplied alike on both sides) until a block
     * of every rank that holds layers has at least {@code bytes}: blocks large enough that a transport switches to
     * its large-message path and a formatter moves runs of them straight from and into the pools.
     *
     * @param bytes the smallest block wanted
     * @return a new grid of the supported pairs, widened
     */
    public LayoutGrid withBlocksOfAtLeast(long bytes) {
        List<LayoutPair> out = new ArrayList<>();
        for (LayoutPair p : supported()) {
            long smallest = Math.min(smallestBlock(p.ctx()), smallestBlock(p.gen()));
            int widen = (int) Math.max(1, (bytes + smallest - 1) / smallest);
            out.add(p.with(p.name() + " | heads x" + widen,
                    p.ctx().toBuilder().sizePerHead(p.ctx().sizePerHead() * widen).build(),
                    p.gen().toBuilder().sizePerHead(p.gen().sizePerHead() * widen).build()));
        }
        return new LayoutGrid(out);
    }

    /**
     * One pair in each (context, generation) pool-layout combination that this grid's supported pairs use: its first
     * pair whose two sides have the same parallelism (so a part holds whole blocks and runs can coalesce), else its
     * first pair.
     *
     * @return a new grid, as many pairs as combinations
     */
    public LayoutGrid onePairPerPoolLayoutCombination() {
        List<LayoutPair> s = supported();
        if (s.isEmpty()) {
            return new LayoutGrid(List.of());
        }
        LayoutPair base = s.stream().filter(p -> sameParallelism(p.ctx(), p.gen())).findFirst().orElse(s.get(0));
        java.util.Map<List<PoolLayout>, LayoutPair> out = new java.util.LinkedHashMap<>();
        for (LayoutPair p : s) {
            out.computeIfAbsent(List.of(p.ctx().poolLayout(), p.gen().poolLayout()), k -> k.get(0).equals(
                    base.ctx().poolLayout()) && k.get(1).equals(base.gen().poolLayout()) ? base
                    : base.with(base.name() + " | pools " + k.get(0) + " -> " + k.get(1),
                    base.ctx().withPoolLayout(k.get(0)), base.gen().withPoolLayout(k.get(1))));
        }
        return new LayoutGrid(new ArrayList<>(out.values()));
    }

    private static boolean sameParallelism(CacheState a, CacheState b) {
        return a.tensorParallelism() == b.tensorParallelism() && a.pipelineParallelism() == b.pipelineParallelism()
                && a.contextParallelism() == b.contextParallelism() && !a.attentionDpEnabled()
                && !b.attentionDpEnabled();
    }

    /**
     * @param s a cache state
     * @return bytes of the smallest block of a rank of the state that holds layers
     */
    public static long smallestBlock(CacheState s) {
        long min = Long.MAX_VALUE;
        for (int r = 0; r < s.worldSize(); r++) {
            long b = BlockLayout.of(s, r).blockBytes();
            if (b > 0) {
                min = Math.min(min, b);
            }
        }
        return min;
    }

    private static LayoutPair withPools(LayoutPair p, PoolLayout c, PoolLayout g) {
        if (c.equals(PoolLayout.BLOCK) && g.equals(PoolLayout.BLOCK)) {
            return p;
        }
        return p.with(p.name() + " | pools " + c + " -> " + g, p.ctx().withPoolLayout(c), p.gen().withPoolLayout(g));
    }


    /** @return a builder with the preset shape: 4 layers, 4 KV heads, head size 4, 16 tokens/block, FLOAT16 */
    public static Builder builder() {
        return new Builder();
    }

    /**
     * The standard formatter's grid (every pair it must support): context x generation TP, PP in {1, 2, 4} (81 pairs,
     * data types of 1, 2 and 4 bytes in rotation); uneven PP splits; zero-layer PP ranks (first, middle, last);
     * TP larger than the KV head count (heads 2 and 1) on either side; generation CP 2 and 4 (alone and with TP,
     * PP, DP and duplicated heads); attention DP on either and both sides; kvFactor 1; 8-byte elements; and one
     * unsupported pair per field the formatter checks. Every pair moves {@link #DEFAULT_PROMPTS}.
     *
     * @return the grid
     */
    public static LayoutGrid standardFull() {
        return StandardGrid.full();
    }

    /**
     * The standard formatter's conformance grid with pool layouts and prefix reuse: {@link #standardFull()} plus
     * {@link #contextCp()} with the (context, generation) pool layouts of {@link #standardPoolLayouts()} in rotation
     * (every combination on 15 or more parallelism pairs) and reuse {@code [0, all, 1, 3]} over the four prompts;
     * plus every pool-layout pair (3 x 3) on six shapes (zero copy, TP both ways with PP, generation CP, duplicated
     * heads, attention DP) with reuse {@code [1, 0, 2, all]}.
     *
     * @return the grid
     */
    public static LayoutGrid standardConformance() {
        LayoutGrid rotated = standardFull().plus(contextCp()).withPoolLayouts(standardPoolLayouts())
                .withReuse(0, LayoutPair.ALL_BLOCKS, 1, 3);
        return rotated.plus(standardPoolShapes().everyPoolLayoutPair(standardPoolLayouts())
                .withReuse(1, 0, 2, LayoutPair.ALL_BLOCKS));
    }

    /**
     * Six shapes every pool-layout pair is checked on: TP1 to TP1, TP2 to TP1, TP1 PP2 to TP2, generation CP 2,
     * duplicated heads (TP4 to TP2 with 2 heads), attention DP to PP2.
     *
     * @return the grid (block pools)
     */
    public static LayoutGrid standardPoolShapes() {
        Builder b = builder();
        b.dataTypes(DataType.FLOAT16, DataType.FP8, DataType.FLOAT32);
        b.pair(Side.of(1, 1), Side.of(1, 1));
        b.pair(Side.of(2, 1), Side.of(1, 1));
        b.pair(Side.of(1, 2), Side.of(2, 1));
        b.pair(Side.of(1, 1), Side.of(1, 1).cp(2));
        b.pair(Side.of(2, 1).dp(2), Side.of(1, 2));
        b.heads(2);
        b.pair(Side.of(4, 1), Side.of(2, 1));
        return b.build();
    }

    /**
     * A dozen representative pairs for slow (network) backends: zero copy, TP both ways, PP, uneven and
     * zero-layer PP, duplicated heads, generation CP, attention DP on either side, 1- and 4-byte elements,
     * kvFactor 1, plus two unsupported pairs.
     *
     * @return the grid
     */
    public static LayoutGrid standardSmall() {
        Builder b = builder();
        b.pair(Side.of(1, 1), Side.of(1, 1));
        b.pair(Side.of(2, 1), Side.of(1, 1));
        b.dataType(DataType.FP8);
        b.pair(Side.of(1, 1), Side.of(2, 2));
        b.dataType(DataType.FLOAT32);
        b.pair(Side.of(2, 2), Side.of(4, 1));
        b.dataType(DataType.FLOAT16);
        b.pair(Side.of(1, 1), Side.of(1, 1).cp(2));
        b.pair(Side.of(2, 1).dp(2), Side.of(2, 1));
        b.pair(Side.of(1, 1), Side.of(2, 1).dp(2));
        b.pair(Side.of(1, 2).layers(4, 0), Side.of(1, 2));
        b.heads(2);
        b.pair(Side.of(4, 1), Side.of(2, 1));
        b.heads(4);
        b.layers(10);
        b.pair(Side.of(1, 4).layers(3, 3, 2, 2), Side.of(2, 2));
        b.layers(4);
        b.kvFactor(1);
        b.pair(Side.of(2, 1), Side.of(1, 2));
        b.kvFactor(null);
        b.unsupported("dataType", b.state(Side.of(1, 1)), b.copy().dataType(DataType.FLOAT32).state(Side.of(1, 1)));
        b.unsupported("tokensPerBlock", b.state(Side.of(1, 1)), b.copy().tokensPerBlock(32).state(Side.of(1, 1)));
        return b.build();
    }

    /**
     * Context CP (beyond upstream, which splits CP on the generation side only): a context instance with CP &gt; 1
     * sending to generation CP 1 or the same CP. The standard formatter supports these; core's block bookkeeping must
     * then give every context CP rank its contiguous share of the request's blocks.
     *
     * @return the grid
     */
    public static LayoutGrid contextCp() {
        Builder b = builder();
        b.pair(Side.of(1, 1).cp(2), Side.of(1, 1));
        b.pair(Side.of(2, 1).cp(2), Side.of(1, 2));
        b.pair(Side.of(1, 2).cp(4), Side.of(2, 2));
        b.pair(Side.of(1, 1).cp(2), Side.of(2, 1).cp(2));
        b.dataType(DataType.INT8);
        b.pair(Side.of(2, 2).cp(2), Side.of(1, 1).cp(2));
        return b.build();
    }

    /**
     * Hybrid models (attention layers with recurrent state layers, 3 : 1 as in Jamba or Qwen3-Next, and one starting
     * with a recurrent layer): TP both ways (channels and SSM heads re-split), PP both ways (even and uneven splits of
     * all layers), generation and context CP (the state on CP rank 0), TP above the KV heads on either side, 1-, 2-
     * and 4-byte KV elements, and one
     * unsupported pair per recurrent field the standard formatter checks. The KV blocks and the recurrent states of
     * each request move in one transfer.
     *
     * @return the grid
     */
    public static LayoutGrid hybrid() {
        Builder b = builder().layers(6).heads(4);
        RecurrentStateShape shape = new RecurrentStateShape(RecurrentStateShape.kinds("AAAR", 2), List.of(), 8, 3, 4,
                4, 8, DataType.FLOAT16, DataType.FLOAT32);
        b.recurrent(shape).dataTypes(DataType.FLOAT16, DataType.INT8, DataType.FLOAT32);
        b.pair(Side.of(1, 1), Side.of(1, 1));
        b.pair(Side.of(2, 1), Side.of(1, 1));
        b.pair(Side.of(1, 1), Side.of(2, 1));
        b.pair(Side.of(1, 2), Side.of(1, 1));
        b.pair(Side.of(1, 1), Side.of(1, 2));
        b.pair(Side.of(2, 2), Side.of(4, 1));
        b.pair(Side.of(1, 4), Side.of(2, 2));
        b.pair(Side.of(1, 2).layers(5, 3), Side.of(2, 1));
        b.pair(Side.of(4, 1), Side.of(1, 2).layers(2, 6));
        b.pair(Side.of(1, 1), Side.of(1, 1).cp(2));
        b.pair(Side.of(2, 1), Side.of(1, 2).cp(2));
        b.pair(Side.of(1, 1).cp(2), Side.of(1, 1));
        b.pair(Side.of(2, 1).cp(2), Side.of(1, 2));
        // TP above the KV heads (as Qwen3-Next's 2 KV heads under TP4): one rank per duplicate group sends the KV,
        // every rank its own slice of the states.
        b.heads(2);
        b.pair(Side.of(4, 1), Side.of(1, 1));
        b.pair(Side.of(1, 1), Side.of(4, 1));
        b.pair(Side.of(4, 1), Side.of(2, 2));
        b.heads(4);
        b.recurrent(new RecurrentStateShape(RecurrentStateShape.kinds("RAAA", 2), List.of(), 16, 2, 2, 8, 4,
                DataType.BFLOAT16, DataType.FLOAT16));
        b.pair(Side.of(1, 2), Side.of(2, 1));
        b.pair(Side.of(2, 1), Side.of(1, 2).layers(5, 3));
        b.recurrent(shape).dataTypes(DataType.FLOAT16);
        CacheState base = b.state(Side.of(1, 1));
        b.unsupported("recurrentState", base, b.copy().recurrent(null).layers(6).state(Side.of(1, 1)));
        b.unsupported("recurrentState.layerKinds", base, b.copy().recurrent(new RecurrentStateShape(
                RecurrentStateShape.kinds("AARAAAAR", 1), List.of(), 8, 3, 4, 4, 8, DataType.FLOAT16,
                DataType.FLOAT32)).state(Side.of(1, 1)));
        b.unsupported("recurrentState.ssmStateDim", base, b.copy().recurrent(new RecurrentStateShape(
                shape.layerKinds(), List.of(), 8, 3, 4, 4, 16, DataType.FLOAT16, DataType.FLOAT32))
                .state(Side.of(2, 1)));
        b.unsupported("recurrentState.convDataType", base, b.copy().recurrent(new RecurrentStateShape(
                shape.layerKinds(), List.of(), 8, 3, 4, 4, 8, DataType.FLOAT32, DataType.FLOAT32))
                .state(Side.of(1, 1)));
        b.unsupported("recurrentState.layersPerPp", b.state(Side.of(1, 2).layers(3, 5)), b.state(Side.of(1, 2)));
        // The context side of each refused pair is servable on its own (the transceiver suite checks it still is).
        b.unsupported("attentionDp", base, b.state(Side.of(2, 1).dp(2)));
        return b.build();
    }

    /** One unsupported pair per field the standard formatter checks. */
    static void addStandardRejections(Builder b) {
        b.dataType(DataType.FLOAT16).layers(4).heads(4).kvFactor(null);
        CacheState base = b.state(Side.of(1, 1));
        b.unsupported("dataType", base, b.copy().dataType(DataType.FLOAT32).state(Side.of(2, 1)));
        b.unsupported("tokensPerBlock", base, b.copy().tokensPerBlock(32).state(Side.of(1, 1)));
        b.unsupported("sizePerHead", base, b.copy().sizePerHead(8).state(Side.of(1, 2)));
        b.unsupported("layer count", base, b.copy().layers(6).state(Side.of(1, 1)));
        b.unsupported("kvFactor", base, b.copy().kvFactor(1).state(Side.of(1, 1)));
        b.unsupported("kvHeadsPerLayer", base, b.copy().heads(8).state(Side.of(2, 1)));
        CacheState nonUniform = base.toBuilder().kvHeadsPerLayer(List.of(4, 4, 2, 2)).build();
        b.unsupported("non-uniform", nonUniform, base);
        b.unsupported("attentionType", b.copy().attentionType(AttentionType.MLA).heads(1).state(Side.of(1, 1)),
                b.copy().attentionType(AttentionType.MLA).heads(1).state(Side.of(2, 1)));
        b.unsupported("contextParallelism", b.state(Side.of(1, 1).cp(2)), b.state(Side.of(1, 1).cp(4)));
    }

    /**
     * One instance's parallel layout, for the builder.
     *
     * @param tp          tensor parallelism
     * @param pp          pipeline parallelism
     * @param cp          context parallelism
     * @param dpSize      attention-DP size, 0 = attention DP off
     * @param layersPerPp layers per PP rank, or {@code null} for the even split
     */
    public record Side(int tp, int pp, int cp, int dpSize, List<Integer> layersPerPp) {
        /**
         * Validates.
         *
         * @param tp          TP
         * @param pp          PP
         * @param cp          CP
         * @param dpSize      DP size or 0
         * @param layersPerPp layer split or null
         */
        public Side {
            if (tp < 1 || pp < 1 || cp < 1 || dpSize < 0) {
                throw new IllegalArgumentException("Side TP" + tp + " PP" + pp + " CP" + cp + " DP" + dpSize);
            }
            layersPerPp = layersPerPp == null ? null : List.copyOf(layersPerPp);
        }

        /**
         * TP x PP, CP 1, no attention DP, even layer split.
         *
         * @param tp tensor parallelism
         * @param pp pipeline parallelism
         * @return the side
         */
        public static Side of(int tp, int pp) {
            return new Side(tp, pp, 1, 0, null);
        }

        /**
         * @param v context parallelism
         * @return a copy with that CP
         */
        public Side cp(int v) {
            return new Side(tp, pp, v, dpSize, layersPerPp);
        }

        /**
         * @param size attention-DP size (TP must divide by it)
         * @return a copy with attention DP on
         */
        public Side dp(int size) {
            return new Side(tp, pp, cp, size, layersPerPp);
        }

        /**
         * @param perPp layers of each PP rank (entries may be 0)
         * @return a copy with that split
         */
        public Side layers(Integer... perPp) {
            return new Side(tp, pp, cp, dpSize, Arrays.asList(perPp));
        }

        @Override
        public String toString() {
            return "TP" + tp + " PP" + pp + (layersPerPp != null ? layersPerPp.toString() : "")
                    + (cp > 1 ? " CP" + cp : "") + (dpSize > 0 ? " DP" + dpSize : "");
        }
    }

    /**
     * Builds a grid. The model settings (layers, heads, head size, tokens per block, data type rotation,
     * attention type, kvFactor, prompt lengths) apply to the pairs added after they are set; each added pair takes
     * the next data type of the rotation.
     */
    public static final class Builder {
        private int layers = 4;
        private int heads = 4;
        private int sizePerHead = 4;
        private int tokensPerBlock = 16;
        private List<DataType> dataTypes = List.of(DataType.FLOAT16);
        private int nextType;
        private AttentionType attentionType = AttentionType.DEFAULT;
        private Integer kvFactor;
        private List<Integer> prompts = DEFAULT_PROMPTS;
        private PoolLayout ctxPool = PoolLayout.BLOCK;
        private PoolLayout genPool = PoolLayout.BLOCK;
        private RecurrentStateShape recurrent;
        private WindowGroups windows;
        private final List<LayoutPair> pairs = new ArrayList<>();

        private Builder() {
        }

        /**
         * A builder with this one's model settings and no pairs (for building states of a variant shape).
         *
         * @return the copy
         */
        public Builder copy() {
            Builder c = new Builder();
            c.layers = layers;
            c.heads = heads;
            c.sizePerHead = sizePerHead;
            c.tokensPerBlock = tokensPerBlock;
            c.dataTypes = dataTypes;
            c.nextType = nextType;
            c.attentionType = attentionType;
            c.kvFactor = kvFactor;
            c.prompts = prompts;
            c.ctxPool = ctxPool;
            c.genPool = genPool;
            c.recurrent = recurrent;
            c.windows = windows;
            return c;
        }

        /**
         * Sliding-window attention (VSWA): the window of every attention layer.
         *
         * @param v the windows, or {@code null} for full attention everywhere
         * @return this builder
         */
        public Builder windows(WindowGroups v) {
            this.windows = v;
            return this;
        }

        /**
         * A hybrid model: its layer kinds and recurrent state shape; the attention layer count follows from the kinds,
         * and a side's {@code layers(...)} then splits all layers (attention and recurrent) over PP.
         *
         * @param v the recurrent layers, or {@code null} for attention only
         * @return this builder
         */
        public Builder recurrent(RecurrentStateShape v) {
            this.recurrent = v;
            return this;
        }

        /**
         * @param v model layer count
         * @return this builder
         */
        public Builder layers(int v) {
            this.layers = v;
            return this;
        }

        /**
         * @param v global KV heads per layer (MLA: 1)
         * @return this builder
         */
        public Builder heads(int v) {
            this.heads = v;
            return this;
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
         * @param v the data type of the following pairs
         * @return this builder
         */
        public Builder dataType(DataType v) {
            return dataTypes(v);
        }

        /**
         * @param v data types given to the following pairs in rotation
         * @return this builder
         */
        public Builder dataTypes(DataType... v) {
            if (v.length == 0) {
                throw new IllegalArgumentException("at least one data type");
            }
            this.dataTypes = List.of(v);
            this.nextType = 0;
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
         * @param v kvFactor, or {@code null} for the default of the attention type
         * @return this builder
         */
        public Builder kvFactor(Integer v) {
            this.kvFactor = v;
            return this;
        }

        /**
         * @param ctx pool layout of the context side of the following pairs
         * @param gen pool layout of the generation side of the following pairs
         * @return this builder
         */
        public Builder poolLayouts(PoolLayout ctx, PoolLayout gen) {
            this.ctxPool = Objects.requireNonNull(ctx, "ctx");
            this.genPool = Objects.requireNonNull(gen, "gen");
            return this;
        }

        /**
         * @param v prompt lengths of the following pairs
         * @return this builder
         */
        public Builder promptLengths(Integer... v) {
            this.prompts = List.of(v);
            return this;
        }

        /**
         * The cache state of a side with the current model settings (the current data type; the rotation does
         * not advance).
         *
         * @param s the side
         * @return the state
         */
        public CacheState state(Side s) {
            return state(s, dataTypes.get(nextType % dataTypes.size()));
        }

        private CacheState state(Side s, DataType type) {
            CacheState.Builder c = CacheState.builder()
                    .uniformKvHeads(recurrent == null ? layers : recurrent.attentionLayers(), heads)
                    .sizePerHead(sizePerHead)
                    .tokensPerBlock(tokensPerBlock)
                    .tensorParallelism(s.tp())
                    .pipelineParallelism(s.pp())
                    .contextParallelism(s.cp())
                    .dataType(type)
                    .attentionType(attentionType);
            if (s.dpSize() > 0) {
                c.attentionDp(true, 0, s.dpSize());
            }
            if (recurrent != null) {
                c.recurrentState(recurrent.withLayersPerPp(s.layersPerPp() == null ? List.of() : s.layersPerPp()));
            } else if (s.layersPerPp() != null) {
                c.attentionLayersPerPp(s.layersPerPp());
            }
            if (kvFactor != null) {
                c.kvFactor(kvFactor);
            }
            c.windowGroups(windows);
            return c.build();
        }

        /**
         * Adds a supported pair with the current model settings.
         *
         * @param ctx context side
         * @param gen generation side
         * @return this builder
         */
        public Builder pair(Side ctx, Side gen) {
            DataType type = dataTypes.get(nextType++ % dataTypes.size());
            CacheState c = state(ctx, type).withPoolLayout(ctxPool);
            CacheState g = state(gen, type).withPoolLayout(genPool);
            String pools = ctxPool.equals(PoolLayout.BLOCK) && genPool.equals(PoolLayout.BLOCK) ? ""
                    : " | pools " + ctxPool + " -> " + genPool;
            return pair("ctx " + ctx + " -> gen " + gen + " | " + shape(c) + pools, c, g);
        }

        /**
         * Adds a supported pair of explicit states.
         *
         * @param name readable name
         * @param ctx  context state
         * @param gen  generation state
         * @return this builder
         */
        public Builder pair(String name, CacheState ctx, CacheState gen) {
            pairs.add(new LayoutPair(name, ctx, gen, prompts, null));
            return this;
        }

        /**
         * Adds a pair a formatter must refuse, with a word its reason must contain.
         *
         * @param field the word (usually the field name)
         * @param ctx   context state
         * @param gen   generation state
         * @return this builder
         */
        public Builder unsupported(String field, CacheState ctx, CacheState gen) {
            Objects.requireNonNull(field, "field");
            pairs.add(new LayoutPair("unsupported " + field + ": ctx " + ctx + " -> gen " + gen, ctx, gen, prompts,
                    field));
            return this;
        }

        /** @return the grid */
        public LayoutGrid build() {
            return new LayoutGrid(Collections.unmodifiableList(new ArrayList<>(pairs)));
        }

        private static String shape(CacheState s) {
            return "L" + s.numLayers() + " H" + s.kvHeadsPerLayer().get(0) + " D" + s.sizePerHead() + " T"
                    + s.tokensPerBlock() + " " + s.dataType() + (s.attentionType() == AttentionType.MLA ? " MLA" : "")
                    + " kvF" + s.kvFactor()
                    + (s.recurrentState() == null ? "" : " hybrid " + s.recurrentState().pattern())
                    + (s.windowGroups() == null ? "" : " windows " + s.windowGroups().compact());
        }
    }
}
