package dev.kvtransfer.api.layout;

import java.util.Locale;
import java.util.Objects;

/**
 * How a rank's KV pool stores its blocks in memory: which region holds the plane {@code (local layer, kv)} of block
 * {@code b}, and in which order its elements lie. The logical content of a block is always
 * {@code [localLayer][kv][localHead][token][dim]} ({@link BlockLayout}); the pool layout only says where each
 * element lives.
 *
 * <ul>
 *   <li>{@link Kind#BLOCK}: TensorRT-LLM's block-major pool. Block {@code b} is one contiguous run holding
 *       {@code [layer][kv][head][token][dim]}.</li>
 *   <li>{@link Kind#LAYER_NHD}: vLLM / Mooncake. One region per (local layer, kv) with its own base address
 *       ({@code kv_caches_base_addr[2*layer+kv]}); inside it block {@code b} at {@code b * planeBytes}, holding
 *       {@code [token][head][dim]}.</li>
 *   <li>{@link Kind#LAYER_HND}: one region per (local layer, kv); inside it block {@code b} holding
 *       {@code [head][token][dim]}.</li>
 * </ul>
 *
 * <p>A split latent ({@link #ropeDim()} {@code > 0}, MLA with a layer kind only): each latent row of {@code D}
 * elements is stored as two segments in two regions per (layer, kv): segment 0 ("nope") holds dims
 * {@code [0, D-R)}, segment 1 ("rope") dims {@code [D-R, D)}, each in the kind's order with its own row width.
 * Without a split a plane has one segment holding every dim.
 *
 * @param kind    the kind
 * @param ropeDim elements of the rope part of a split latent row, 0 = not split
 */
public record PoolLayout(Kind kind, int ropeDim) {
    /** TensorRT-LLM's block-major pool, the default. */
    public static final PoolLayout BLOCK = new PoolLayout(Kind.BLOCK, 0);
    /** vLLM's per-(layer, kv) regions, tokens before heads. */
    public static final PoolLayout LAYER_NHD = new PoolLayout(Kind.LAYER_NHD, 0);
    /** Per-(layer, kv) regions, heads before tokens. */
    public static final PoolLayout LAYER_HND = new PoolLayout(Kind.LAYER_HND, 0);

    /** The pool kinds, with their wire ids and cli names. */
    public enum Kind {
        /** One region, block-major. */
        BLOCK(0, "block"),
        /** One region per (layer, kv), {@code [block][token][head][dim]}. */
        LAYER_NHD(1, "layer-nhd"),
        /** One region per (layer, kv), {@code [block][head][token][dim]}. */
        LAYER_HND(2, "layer-hnd");

        private final int wireId;
        private final String cliName;

        Kind(int wireId, String cliName) {
            this.wireId = wireId;
            this.cliName = cliName;
        }

        /** @return the id in the wire format */
        public int wireId() {
            return wireId;
        }

        /** @return the name used on the command line ({@code block}, {@code layer-nhd}, {@code layer-hnd}) */
        public String cliName() {
            return cliName;
        }

        /**
         * @param id a wire id
         * @return the kind, or {@code null} when unknown
         */
        public static Kind fromWireId(int id) {
            for (Kind k : values()) {
                if (k.wireId == id) {
                    return k;
                }
            }
            return null;
        }

        /**
         * @param name a cli name or enum name, case-insensitive
         * @return the kind
         * @throws IllegalArgumentException naming the accepted names
         */
        public static Kind parse(String name) {
            Objects.requireNonNull(name, "name");
            String n = name.trim().toLowerCase(Locale.ROOT).replace('_', '-');
            for (Kind k : values()) {
                if (k.cliName.equals(n)) {
                    return k;
                }
            }
            throw new IllegalArgumentException("unknown pool layout '" + name + "': expected block, layer-nhd or "
                    + "layer-hnd");
        }
    }

    /**
     * Validates.
     *
     * @param kind    the kind
     * @param ropeDim rope elements, 0 = not split
     */
    public PoolLayout {
        Objects.requireNonNull(kind, "kind");
        if (ropeDim < 0) {
            throw new IllegalArgumentException("ropeDim = " + ropeDim + ": must be >= 0");
        }
        if (ropeDim > 0 && kind == Kind.BLOCK) {
            throw new IllegalArgumentException("ropeDim = " + ropeDim + ": a split latent needs a layer pool "
                    + "(layer-nhd or layer-hnd), not block");
        }
    }

    /**
     * @param kind a kind
     * @return that kind without a split latent
     */
    public static PoolLayout of(Kind kind) {
        return new PoolLayout(kind, 0);
    }

    /** @return 2 for a split latent, else 1 */
    public int segments() {
        return ropeDim > 0 ? 2 : 1;
    }

    /** @return whether this is a split MLA latent */
    public boolean splitLatent() {
        return ropeDim > 0;
    }

    @Override
    public String toString() {
        return kind.cliName() + (ropeDim > 0 ? "+rope" + ropeDim : "");
    }
}
