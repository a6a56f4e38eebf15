package dev.kvtransfer.api.cache;

import dev.kvtransfer.api.layout.BlockLayout;
import dev.kvtransfer.api.memory.MemoryBuffer;

/**
 * How a serving engine lends its paged KV pool to kvtransfer: every block has the same {@link BlockLayout}
 * and a stable {@link MemoryBuffer}. Implementations must be safe for concurrent reads of different blocks;
 * the engine must not free or reuse a block while a transfer holds it.
 */
public interface KvCacheView {
    /** @return the layout of every block of this pool */
    BlockLayout layout();

    /**
     * The memory of one block.
     *
     * @param blockId block index in the pool
     * @return a view of exactly {@code layout().blockBytes()} bytes
     * @throws IndexOutOfBoundsException for an unknown block id
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
}
