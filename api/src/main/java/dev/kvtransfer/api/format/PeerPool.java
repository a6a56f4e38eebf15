package dev.kvtransfer.api.format;

import dev.kvtransfer.api.layout.BlockLayout;
import dev.kvtransfer.api.layout.PoolGeometry;
import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.api.transport.RegionDescriptor;

import java.util.List;
import java.util.Objects;

/**
 * Where a peer rank's blocks of one request live, for a one-sided push: its cache state (with its pool layout), its
 * rank, its block ids of the request (reused ones included, in order), its pool's blocks per region, and the
 * descriptors of its registered regions in the pool's region order ({@code KvCacheView.regions()}). With
 * {@link #geometry()} a writer computes the region and offset of every element it writes.
 *
 * @param state           the peer's cache state
 * @param rank            the peer's rank index in its instance
 * @param blockIds        the peer rank's block ids of the request
 * @param blocksPerRegion blocks per region of the peer's pool
 * @param regions         the peer pool's registered regions, by region index
 */
public record PeerPool(CacheState state, int rank, int[] blockIds, int blocksPerRegion,
                       List<RegionDescriptor> regions) {
    /**
     * Validates.
     *
     * @param state           peer state
     * @param rank            peer rank
     * @param blockIds        peer block ids
     * @param blocksPerRegion blocks per region
     * @param regions         region descriptors
     */
    public PeerPool {
        Objects.requireNonNull(state, "state");
        Objects.requireNonNull(blockIds, "blockIds");
        regions = List.copyOf(regions);
        blockIds = blockIds.clone();
        if (blocksPerRegion < 1) {
            throw new IllegalArgumentException("blocksPerRegion = " + blocksPerRegion + ": must be >= 1");
        }
    }

    /** @return a copy of the block ids */
    @Override
    public int[] blockIds() {
        return blockIds.clone();
    }

    /** @return the peer's block layout */
    public BlockLayout blockLayout() {
        return BlockLayout.of(state, rank);
    }

    /** @return where every element of the peer's pool lives */
    public PoolGeometry geometry() {
        return PoolGeometry.of(blockLayout(), state.poolLayout(), blocksPerRegion);
    }
}
