package dev.kvtransfer.api.format;

import dev.kvtransfer.api.layout.BlockLayout;
import dev.kvtransfer.api.layout.PoolGeometry;
import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.api.transport.RegionDescriptor;
import dev.kvtransfer.api.transport.WriteBatch;
import dev.kvtransfer.api.wire.MalformedMessageException;
import dev.kvtransfer.api.wire.WireReader;
import dev.kvtransfer.api.wire.WireWriter;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.Comparator;
import java.util.List;
import java.util.Objects;

/**
 * Where a peer rank's blocks of one request live, for a one-sided push: its cache state (pool layout included),
 * rank, block ids of the request (reused ones included, in order), blocks per region, and the grants it
 * registered for this request. A grant makes bytes {@code [offset, offset + length)} of one of the peer pool's
 * regions writable through its {@link RegionDescriptor}; the peer registers only what this request may write and
 * revokes it when the request ends, so a late writer can never reach blocks that were reused.
 *
 * <p>A formatter computes the region and offset of what it writes with {@link #geometry()} and adds the entry with
 * {@link #add}, which picks the grant covering it. Immutable.
 */
public final class PeerPool {
    /**
     * Bytes of one region a writer may write.
     *
     * @param region     region index in the peer pool ({@code KvCacheView.regions()} order)
     * @param offset     first byte of the grant in the region
     * @param descriptor the registration covering exactly those bytes (its length is the grant's)
     */
    public record Grant(int region, long offset, RegionDescriptor descriptor) {
        /**
         * Validates.
         *
         * @param region     region
         * @param offset     offset
         * @param descriptor descriptor
         */
        public Grant {
            Objects.requireNonNull(descriptor, "descriptor");
            if (region < 0 || offset < 0) {
                throw new IllegalArgumentException("grant region " + region + " offset " + offset);
            }
        }

        /** @return one past the grant's last byte in the region */
        public long end() {
            return offset + descriptor.length();
        }

        /**
         * Writes the grant.
         *
         * @param w the writer
         */
        public void writeTo(WireWriter w) {
            w.writeInt(region);
            w.writeLong(offset);
            descriptor.writeTo(w);
        }

        /**
         * The length of {@link #writeTo}'s bytes.
         *
         * @return bytes
         */
        public int wireSize() {
            return 4 + 8 + descriptor.wireSize();
        }

        /**
         * Writes the same bytes as {@link #writeTo(WireWriter)} at an absolute position in a little-endian buffer.
         *
         * @param dst the buffer, little-endian
         * @param at  where the grant starts
         * @return the bytes written ({@link #wireSize()})
         */
        public int writeTo(java.nio.ByteBuffer dst, int at) {
            dst.putInt(at, region); // absolute puts check their own index
            dst.putLong(at + 4, offset);
            return 12 + descriptor.writeTo(dst, at + 12);
        }

        /**
         * Reads a grant.
         *
         * @param r the reader
         * @return the grant
         */
        public static Grant readFrom(WireReader r) {
            int at = r.offset();
            int region = r.readInt("grant region", 0, Integer.MAX_VALUE);
            long offset = r.readLong("grant offset");
            if (offset < 0) {
                throw new MalformedMessageException(at, "grant offset " + offset + " is negative");
            }
            return new Grant(region, offset, RegionDescriptor.readFrom(r));
        }
    }

    private final CacheState state;
    private final int rank;
    private final int[] blockIds;
    private final int blocksPerRegion;
    private final List<Grant> grants;
    /** Grants sorted by (region, offset), for the lookup in {@link #add}. */
    private final Grant[] sorted;
    private final PoolGeometry geometry;

    /**
     * A peer pool.
     *
     * @param state           the peer's cache state
     * @param rank            the peer's rank index
     * @param blockIds        the peer rank's block ids of the request
     * @param blocksPerRegion blocks per region of the peer's pool
     * @param grants          what the peer registered for this request
     */
    public PeerPool(CacheState state, int rank, int[] blockIds, int blocksPerRegion, List<Grant> grants) {
        this.state = Objects.requireNonNull(state, "state");
        this.rank = rank;
        this.blockIds = Objects.requireNonNull(blockIds, "blockIds").clone();
        if (blocksPerRegion < 1) {
            throw new IllegalArgumentException("blocksPerRegion = " + blocksPerRegion + ": must be >= 1");
        }
        this.blocksPerRegion = blocksPerRegion;
        this.grants = List.copyOf(grants);
        this.sorted = this.grants.toArray(new Grant[0]);
        Arrays.sort(sorted, Comparator.comparingInt(Grant::region).thenComparingLong(Grant::offset));
        this.geometry = PoolGeometry.of(BlockLayout.of(state, rank), state.poolLayout(), blocksPerRegion);
    }

    /** @return the peer's cache state */
    public CacheState state() {
        return state;
    }

    /** @return the peer's rank index */
    public int rank() {
        return rank;
    }

    /** @return a copy of the peer rank's block ids of the request */
    public int[] blockIds() {
        return blockIds.clone();
    }

    /**
     * @param i position in the peer's block list
     * @return that block's id
     */
    public int blockId(int i) {
        return blockIds[i];
    }

    /** @return number of the peer rank's blocks of the request */
    public int blockCount() {
        return blockIds.length;
    }

    /** @return blocks per region of the peer's pool */
    public int blocksPerRegion() {
        return blocksPerRegion;
    }

    /** @return the grants */
    public List<Grant> grants() {
        return grants;
    }

    /** @return the peer's block layout */
    public BlockLayout blockLayout() {
        return geometry.blockLayout();
    }

    /** @return where every element of the peer's pool lives */
    public PoolGeometry geometry() {
        return geometry;
    }

    /**
     * Adds an entry writing {@code length} bytes of {@code source} at {@code sourceOffset} to bytes
     * {@code [regionOffset, regionOffset + length)} of region {@code region} of the peer pool.
     *
     * @param batch        the batch to add to
     * @param source       local memory
     * @param sourceOffset first source byte
     * @param region       region index in the peer pool
     * @param regionOffset first byte in the region
     * @param length       bytes
     * @throws IndexOutOfBoundsException when no single grant covers the range (the peer did not grant it)
     */
    public void add(WriteBatch batch, MemoryBuffer source, long sourceOffset, int region, long regionOffset,
                    long length) {
        Grant g = find(region, regionOffset);
        if (g == null || regionOffset + length > g.end()) {
            throw new IndexOutOfBoundsException("peer rank " + rank + " granted no write of " + length + " bytes at "
                    + "offset " + regionOffset + " of region " + region + " (grants there: " + grantsOf(region)
                    + ")");
        }
        batch.add(source, sourceOffset, g.descriptor(), regionOffset - g.offset(), length);
    }

    private Grant find(int region, long offset) {
        int lo = 0;
        int hi = sorted.length - 1;
        Grant best = null;
        while (lo <= hi) {
            int mid = (lo + hi) >>> 1;
            Grant g = sorted[mid];
            if (g.region() < region || g.region() == region && g.offset() <= offset) {
                if (g.region() == region) {
                    best = g;
                }
                lo = mid + 1;
            } else {
                hi = mid - 1;
            }
        }
        return best != null && offset < best.end() ? best : null;
    }

    private String grantsOf(int region) {
        List<String> out = new ArrayList<>();
        for (Grant g : sorted) {
            if (g.region() == region) {
                out.add("[" + g.offset() + ", " + g.end() + ")");
            }
        }
        return out.isEmpty() ? "none" : String.join(" ", out);
    }

    @Override
    public String toString() {
        return "PeerPool{rank " + rank + ", " + blockIds.length + " blocks, " + state.poolLayout() + ", "
                + grants.size() + " grants}";
    }
}
