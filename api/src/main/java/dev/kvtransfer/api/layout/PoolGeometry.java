package dev.kvtransfer.api.layout;

import java.util.Objects;

/**
 * Where every element of a rank's KV pool lives: the registration <em>region</em> and the byte offset inside it of
 * {@code (block, local layer, kv, segment, local head, token, dim)}, as a pure function of the rank's
 * {@link BlockLayout}, its {@link PoolLayout} and the number of blocks one region holds. A formatter uses it for
 * its own pool and for the peer's (to know which runs are contiguous there); a one-sided writer uses it to compute
 * the byte address of an element of a peer's registered regions.
 *
 * <p>Regions, numbered from 0:
 * <ul>
 *   <li>{@link PoolLayout.Kind#BLOCK}: region {@code r} holds blocks {@code [r*B, r*B + B)} ({@code B} =
 *       {@link #blocksPerRegion()}), block {@code b} at {@code (b % B) * blockBytes}, inside it
 *       {@code [layer][kv][head][token][dim]} ({@link BlockLayout#offset}). A pool that lends one buffer per block
 *       has {@code B = 1}.</li>
 *   <li>{@link PoolLayout.Kind#LAYER_NHD} / {@link PoolLayout.Kind#LAYER_HND}: one region per
 *       {@code (layer, kv, segment)} and group of {@code B} blocks; region
 *       {@code (b / B) * P + (layer * kvFactor + kv) * S + segment} with {@code S} = {@link #segments()} and
 *       {@code P = localLayers * kvFactor * S} ({@link #planesPerGroup()}). Block {@code b}'s slice of the plane
 *       segment starts at {@code (b % B) * segmentPlaneBytes(segment)} and holds {@code [token][head][w]} (NHD) or
 *       {@code [head][token][w]} (HND), {@code w} the segment's dims. A pool with one region per
 *       {@code (layer, kv, segment)} (vLLM's {@code kv_caches_base_addr}) has {@code B} = its block count.</li>
 * </ul>
 *
 * <p>Segments: without a split latent one segment holds dims {@code [0, D)}; with {@link PoolLayout#ropeDim()}
 * {@code R > 0}, segment 0 holds {@code [0, D-R)} and segment 1 {@code [D-R, D)}.
 *
 * <p>Immutable; every method is arithmetic only (no allocation).
 */
public final class PoolGeometry {
    private final BlockLayout block;
    private final PoolLayout pool;
    private final int blocksPerRegion;
    private final boolean layerKind;
    private final boolean tokensOuter;
    private final int segments;
    private final int planesPerGroup;
    private final int eb;

    private PoolGeometry(BlockLayout block, PoolLayout pool, int blocksPerRegion) {
        this.block = Objects.requireNonNull(block, "block");
        this.pool = Objects.requireNonNull(pool, "pool");
        if (blocksPerRegion < 1) {
            throw new IllegalArgumentException("blocksPerRegion = " + blocksPerRegion + ": must be at least 1");
        }
        if (pool.ropeDim() >= block.sizePerHead()) {
            throw new IllegalArgumentException("pool layout " + pool + ": ropeDim " + pool.ropeDim()
                    + " must be below sizePerHead " + block.sizePerHead());
        }
        this.blocksPerRegion = blocksPerRegion;
        this.layerKind = pool.kind() != PoolLayout.Kind.BLOCK;
        this.tokensOuter = pool.kind() == PoolLayout.Kind.LAYER_NHD;
        this.segments = pool.segments();
        this.planesPerGroup = block.localLayers() * block.kvFactor() * segments;
        this.eb = block.elementBytes();
    }

    /**
     * The geometry of a pool.
     *
     * @param block           the rank's block layout
     * @param pool            how the pool stores it
     * @param blocksPerRegion blocks one region holds (block pools: blocks per buffer; layer pools: usually the
     *                        pool's block count)
     * @return the geometry
     * @throws IllegalArgumentException for {@code blocksPerRegion < 1} or a rope part not below the head size
     */
    public static PoolGeometry of(BlockLayout block, PoolLayout pool, int blocksPerRegion) {
        // Remembered per (layout instance, pool instance, blocks per region): geometries are immutable and every
        // request's plan asks for the same few. 64 direct-mapped entries; a miss (or an invalid argument) computes.
        int slot = ((System.identityHashCode(block) * 31 + System.identityHashCode(pool)) * 31 + blocksPerRegion)
                & (OF_SLOTS - 1);
        PoolGeometry e = OF[slot];
        if (e != null && e.block == block && e.pool == pool && e.blocksPerRegion == blocksPerRegion) {
            return e;
        }
        PoolGeometry g = new PoolGeometry(block, pool, blocksPerRegion);
        OF[slot] = g;
        return g;
    }

    private static final int OF_SLOTS = 64;
    // Geometries are immutable (final fields): unsynchronized slots are safe to share between threads.
    private static final PoolGeometry[] OF = new PoolGeometry[OF_SLOTS];

    /** @return the block layout (logical content of a block) */
    public BlockLayout blockLayout() {
        return block;
    }

    /** @return the pool layout */
    public PoolLayout poolLayout() {
        return pool;
    }

    /** @return blocks one region holds */
    public int blocksPerRegion() {
        return blocksPerRegion;
    }

    /** @return whether the pool has one region per (layer, kv, segment) */
    public boolean layerKind() {
        return layerKind;
    }

    /** @return whether tokens come before heads inside a block's plane ({@link PoolLayout.Kind#LAYER_NHD}) */
    public boolean tokensOuter() {
        return tokensOuter;
    }

    /** @return segments per plane: 2 for a split latent, else 1 */
    public int segments() {
        return segments;
    }

    /** @return regions per group of blocks of a layer pool ({@code localLayers * kvFactor * segments}); 1 for block pools */
    public int planesPerGroup() {
        return layerKind ? planesPerGroup : 1;
    }

    /**
     * @param segment a segment
     * @return its first dim
     */
    public int segmentFirstDim(int segment) {
        checkSegment(segment);
        return segment == 0 ? 0 : block.sizePerHead() - pool.ropeDim();
    }

    /**
     * @param segment a segment
     * @return its dims
     */
    public int segmentDims(int segment) {
        checkSegment(segment);
        if (segments == 1) {
            return block.sizePerHead();
        }
        return segment == 0 ? block.sizePerHead() - pool.ropeDim() : pool.ropeDim();
    }

    /**
     * @param dim a dim in {@code [0, sizePerHead)}
     * @return the segment holding it
     */
    public int segmentOf(int dim) {
        return segments == 2 && dim >= block.sizePerHead() - pool.ropeDim() ? 1 : 0;
    }

    /** @return bytes of one block's slice of one (layer, kv, segment) plane: all local heads and tokens */
    public long segmentPlaneBytes(int segment) {
        return (long) block.localHeads() * block.tokensPerBlock() * segmentDims(segment) * eb;
    }

    /**
     * @param segment a segment
     * @return bytes from one head to the next inside a block's slice of a plane segment
     */
    public long headStride(int segment) {
        return tokensOuter ? (long) segmentDims(segment) * eb
                : (long) block.tokensPerBlock() * segmentDims(segment) * eb;
    }

    /**
     * @param segment a segment
     * @return bytes from one token to the next inside a block's slice of a plane segment
     */
    public long tokenStride(int segment) {
        return tokensOuter ? (long) block.localHeads() * segmentDims(segment) * eb : (long) segmentDims(segment) * eb;
    }

    /**
     * @param segment a segment
     * @return bytes from a block's slice of a plane segment to the next block's in the same region
     */
    public long blockStride(int segment) {
        return layerKind ? segmentPlaneBytes(segment) : block.blockBytes();
    }

    /**
     * Regions of a pool of {@code numBlocks} blocks.
     *
     * @param numBlocks blocks of the pool
     * @return {@code ceil(numBlocks / B)} for block pools, {@code ceil(numBlocks / B) * P} for layer pools
     */
    public int regionCount(int numBlocks) {
        int groups = (numBlocks + blocksPerRegion - 1) / blocksPerRegion;
        return layerKind ? Math.multiplyExact(groups, planesPerGroup) : groups;
    }

    /**
     * Bytes of one region of a pool of {@code numBlocks} blocks (the last group may hold fewer blocks).
     *
     * @param region    the region
     * @param numBlocks blocks of the pool
     * @return its size
     */
    public long regionBytes(int region, int numBlocks) {
        Objects.checkIndex(region, regionCount(numBlocks));
        int group = layerKind ? region / planesPerGroup : region;
        int blocks = Math.min(blocksPerRegion, numBlocks - group * blocksPerRegion);
        if (!layerKind) {
            return blocks * block.blockBytes();
        }
        int segment = (region % planesPerGroup) % segments;
        return blocks * segmentPlaneBytes(segment);
    }

    /**
     * The region holding a block's slice of a plane segment.
     *
     * @param blockId block id
     * @param layer   local layer
     * @param kv      kv plane
     * @param segment segment (0 unless split)
     * @return the region index
     */
    public int region(int blockId, int layer, int kv, int segment) {
        int group = blockId / blocksPerRegion;
        if (!layerKind) {
            return group;
        }
        return group * planesPerGroup + (layer * block.kvFactor() + kv) * segments + segment;
    }

    /**
     * Offset, inside {@link #region}, of the first byte of a block's slice of a plane segment.
     *
     * @param blockId block id
     * @param layer   local layer
     * @param kv      kv plane
     * @param segment segment (0 unless split)
     * @return the byte offset
     */
    public long planeOffset(int blockId, int layer, int kv, int segment) {
        int inGroup = blockId % blocksPerRegion;
        if (!layerKind) {
            return inGroup * block.blockBytes() + layer * block.layerBytes() + kv * block.planeBytes();
        }
        return inGroup * segmentPlaneBytes(segment);
    }

    /**
     * Offset of one element inside its {@link #region(int, int, int, int) region}; its segment is
     * {@link #segmentOf}{@code (dim)}.
     *
     * @param blockId block id
     * @param layer   local layer
     * @param kv      kv plane
     * @param head    local head
     * @param token   token in block
     * @param dim     dim in {@code [0, sizePerHead)}
     * @return the byte offset
     */
    public long offset(int blockId, int layer, int kv, int head, int token, int dim) {
        int s = segmentOf(dim);
        return planeOffset(blockId, layer, kv, s) + head * headStride(s) + token * tokenStride(s)
                + (long) (dim - segmentFirstDim(s)) * eb;
    }

    /**
     * The region of one element ({@link #region(int, int, int, int)} of its segment).
     *
     * @param blockId block id
     * @param layer   local layer
     * @param kv      kv plane
     * @param dim     dim in {@code [0, sizePerHead)}
     * @return the region index
     */
    public int regionOfElement(int blockId, int layer, int kv, int dim) {
        return region(blockId, layer, kv, segmentOf(dim));
    }

    /**
     * Whether block {@code next}'s slice of every plane segment directly follows block {@code prev}'s in the same
     * region ({@code next == prev + 1} inside one group of {@link #blocksPerRegion()}).
     *
     * @param prev a block id
     * @param next another block id
     * @return whether they are adjacent
     */
    public boolean adjacent(int prev, int next) {
        return next == prev + 1 && prev / blocksPerRegion == next / blocksPerRegion;
    }

    private void checkSegment(int segment) {
        if (segment < 0 || segment >= segments) {
            throw new IndexOutOfBoundsException("segment " + segment + " of a pool with " + segments
                    + " segment(s) (" + pool + ")");
        }
    }

    @Override
    public boolean equals(Object o) {
        return o instanceof PoolGeometry g && g.block.equals(block) && g.pool.equals(pool)
                && g.blocksPerRegion == blocksPerRegion;
    }

    @Override
    public int hashCode() {
        return Objects.hash(block, pool, blocksPerRegion);
    }

    @Override
    public String toString() {
        return "PoolGeometry{" + pool + ", " + block + ", " + blocksPerRegion + " blocks/region}";
    }
}
