package dev.kvtransfer.api.cache;

import dev.kvtransfer.api.layout.BlockLayout;
import dev.kvtransfer.api.layout.PoolGeometry;
import dev.kvtransfer.api.layout.PoolLayout;
import dev.kvtransfer.api.memory.MemoryBuffer;

import java.util.AbstractList;
import java.util.List;
import java.util.Objects;

/**
 * How a serving engine lends its paged KV pool to kvtransfer: every block has the same {@link BlockLayout}
 * (its logical content, {@code [localLayer][kv][localHead][token][dim]}), and the pool stores the blocks in one
 * of the {@link PoolLayout}s. Implementations must be safe for concurrent reads of different blocks; the engine
 * must not free or reuse a block while a transfer holds it.
 *
 * <p>Memory is lent as <em>regions</em>: stable buffers that together cover every byte of the pool (what a
 * transport registers). Where an element lives is {@link #geometry()}: region index and offset as a pure function
 * of {@link #layout()}, {@link #poolLayout()} and {@link #blocksPerRegion()}. A view written before pool layouts
 * existed implements only {@link #layout()}, {@link #block(int)} and {@link #blockCount()}: it is a
 * {@link PoolLayout#BLOCK} pool whose regions are its blocks, one each, and everything below has a default for it.
 */
public interface KvCacheView {
    /** @return the layout of every block of this pool */
    BlockLayout layout();

    /**
     * The memory of one block, for {@link PoolLayout#BLOCK} pools.
     *
     * @param blockId block index in the pool
     * @return a view of exactly {@code layout().blockBytes()} bytes
     * @throws IndexOutOfBoundsException      for an unknown block id
     * @throws UnsupportedOperationException for a layer pool (a block is not contiguous there), naming the pool
     *                                       layout
     */
    MemoryBuffer block(int blockId);

    /** @return number of blocks in the pool */
    int blockCount();

    /**
     * The optional second pool of the MLA indexer-K cache (one {@code uint8} "head" per layer per block,
     * block ids shared with this pool).
     *
     * @return the indexer pool, or {@code null} when the cache has none
     */
    default KvCacheView indexerKCache() {
        return null;
    }

    /**
     * The recurrent states of a hybrid model's recurrent layers (one per request and layer, not per block), when the
     * rank's {@code CacheState} declares a {@link dev.kvtransfer.api.model.RecurrentStateShape}.
     *
     * @return the states, or {@code null} when the cache has none
     */
    default RecurrentStateView recurrentState() {
        return null;
    }

    /** @return how the pool stores its blocks; {@link PoolLayout#BLOCK} unless overridden */
    default PoolLayout poolLayout() {
        return PoolLayout.BLOCK;
    }

    /**
     * Blocks one region holds: for a block pool the blocks per backing buffer (1 when every block is its own
     * buffer, the default), for a layer pool usually {@link #blockCount()} (one region per (layer, kv, segment)).
     *
     * @return at least 1
     */
    default int blocksPerRegion() {
        return 1;
    }

    /** @return where every element lives ({@link PoolGeometry#of} of this view's layouts) */
    default PoolGeometry geometry() {
        return PoolGeometry.of(layout(), poolLayout(), blocksPerRegion());
    }

    /** @return number of regions: {@code geometry().regionCount(blockCount())} */
    default int regionCount() {
        return geometry().regionCount(blockCount());
    }

    /**
     * One region: the registration unit; region {@code i} holds {@code geometry().regionBytes(i, blockCount())}
     * bytes. The default serves block pools with one region per block ({@code block(index)}); a view with any
     * other geometry must override it.
     *
     * @param index region index in {@code [0, regionCount())}
     * @return a stable view of the region (the same object on every call is best: formatters call it often)
     * @throws IndexOutOfBoundsException      for an unknown index
     * @throws UnsupportedOperationException if the view overrides the geometry but not this method
     */
    default MemoryBuffer region(int index) {
        if (poolLayout().kind() != PoolLayout.Kind.BLOCK || blocksPerRegion() != 1) {
            throw new UnsupportedOperationException(getClass().getName() + " is a " + poolLayout() + " pool with "
                    + blocksPerRegion() + " blocks per region but does not implement KvCacheView.region(int)");
        }
        return block(index);
    }

    /** @return every region in index order (a view over {@link #region(int)}; covers every byte of the pool) */
    default List<MemoryBuffer> regions() {
        int n = regionCount();
        return new AbstractList<>() {
            @Override
            public MemoryBuffer get(int index) {
                return region(index);
            }

            @Override
            public int size() {
                return n;
            }
        };
    }

    /**
     * Where one block's slice of a (layer, kv, segment) plane lives: {@code segmentPlaneBytes(segment)} bytes in
     * the pool layout's internal order ({@code [head][token][w]} for block and layer-hnd pools,
     * {@code [token][head][w]} for layer-nhd), {@code w} the segment's dims. Creates a slice per call; hot loops
     * use {@link #region(int)} and {@link #geometry()} instead.
     *
     * @param blockId    block id
     * @param localLayer local layer
     * @param kv         kv plane
     * @param segment    0, or 1 for the rope part of a split latent
     * @return a view of the slice
     */
    default MemoryBuffer planeSegment(int blockId, int localLayer, int kv, int segment) {
        PoolGeometry g = geometry();
        BlockLayout l = layout();
        Objects.checkIndex(blockId, blockCount());
        Objects.checkIndex(localLayer, l.localLayers());
        Objects.checkIndex(kv, l.kvFactor());
        Objects.checkIndex(segment, g.segments());
        return region(g.region(blockId, localLayer, kv, segment))
                .slice(g.planeOffset(blockId, localLayer, kv, segment), g.segmentPlaneBytes(segment));
    }
}
