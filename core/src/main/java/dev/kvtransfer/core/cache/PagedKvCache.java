package dev.kvtransfer.core.cache;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.KvTransferException;
import dev.kvtransfer.api.cache.KvCacheView;
import dev.kvtransfer.api.layout.BlockLayout;
import dev.kvtransfer.api.memory.BufferManager;
import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.memory.MemoryKind;
import dev.kvtransfer.core.memory.MemoryAccess;

import java.util.Arrays;
import java.util.BitSet;
import java.util.HashMap;
import java.util.Map;
import java.util.Objects;

/**
 * The reference paged KV pool: {@code numBlocks} blocks of one {@link BlockLayout} in host memory, handed out
 * per request and freed explicitly, as a serving engine's block manager would. An engine with its own pool
 * implements {@link KvCacheView} instead.
 *
 * <p>The pool is allocated in chunks of at most {@value #MAX_CHUNK_BYTES} bytes (whole blocks per chunk; one
 * block per chunk when a block is larger), so a pool may exceed 2 GiB while every block is contiguous. Block
 * views are created once, so {@link #block(int)} allocates nothing.
 *
 * <p>Blocks are handed out lowest id first. {@link #allocate} on a request that already holds blocks appends
 * to it (a request grows while it decodes). When the pool cannot satisfy a request, {@link #allocate} throws
 * {@link KvTransferException} with {@link ErrorCode#INTERNAL} — running out of KV blocks is the engine's
 * admission-control bug, not a transport or peer failure — naming the request, the blocks asked for and the
 * free count; nothing is allocated in that case.
 *
 * <p>An optional indexer-K pool (MLA sparse attention) shares block ids with the main pool:
 * {@link #PagedKvCache(BufferManager, BlockLayout, BlockLayout, int)}.
 *
 * <p>The pool's pages are touched once when it is created (one byte per 4 KiB page, see
 * {@link MemoryAccess#preTouch}), so that the first transfers into it do not pay the page faults.
 *
 * <p>Thread-safe: allocation bookkeeping is synchronized; {@link #block(int)} is lock-free.
 */
public final class PagedKvCache implements KvCacheView, AutoCloseable {
    /** Largest single allocation backing the pool. */
    public static final long MAX_CHUNK_BYTES = 1L << 30;

    private final BlockPool main;
    private final BlockPool indexer;
    private final int numBlocks;
    private final BitSet free;
    private final Map<Long, int[]> owned = new HashMap<>();
    private boolean closed;

    /**
     * A pool of host memory.
     *
     * @param buffers   where the pool's memory comes from ({@link MemoryKind#HOST})
     * @param layout    the layout of every block
     * @param numBlocks number of blocks, at least 1
     */
    public PagedKvCache(BufferManager buffers, BlockLayout layout, int numBlocks) {
        this(buffers, layout, null, numBlocks);
    }

    /**
     * A pool with an indexer-K pool whose blocks share this pool's block ids.
     *
     * @param buffers       where the pools' memory comes from ({@link MemoryKind#HOST})
     * @param layout        the layout of every main block
     * @param indexerLayout the layout of every indexer-K block, or {@code null} for none
     * @param numBlocks     number of blocks, at least 1
     */
    public PagedKvCache(BufferManager buffers, BlockLayout layout, BlockLayout indexerLayout, int numBlocks) {
        Objects.requireNonNull(buffers, "buffers");
        Objects.requireNonNull(layout, "layout");
        if (numBlocks < 1) {
            throw new IllegalArgumentException("numBlocks = " + numBlocks + ": must be at least 1");
        }
        this.numBlocks = numBlocks;
        this.main = new BlockPool(buffers, layout, numBlocks);
        BlockPool idx = null;
        if (indexerLayout != null) {
            try {
                idx = new BlockPool(buffers, indexerLayout, numBlocks);
            } catch (RuntimeException | Error e) {
                main.close();
                throw e;
            }
        }
        this.indexer = idx;
        this.free = new BitSet(numBlocks);
        free.set(0, numBlocks);
    }

    @Override
    public BlockLayout layout() {
        return main.layout();
    }

    @Override
    public MemoryBuffer block(int blockId) {
        return main.block(blockId);
    }

    @Override
    public int blockCount() {
        return numBlocks;
    }

    @Override
    public KvCacheView indexerKCache() {
        return indexer;
    }

    /**
     * Takes free blocks for a request (lowest ids first), appending to the blocks it already holds.
     *
     * @param requestId the request
     * @param blocks    how many blocks, at least 0
     * @return the ids just taken, in order
     * @throws KvTransferException {@link ErrorCode#INTERNAL} when fewer than {@code blocks} are free
     */
    public synchronized int[] allocate(long requestId, int blocks) {
        if (blocks < 0) {
            throw new IllegalArgumentException("blocks = " + blocks + ": must be at least 0");
        }
        checkOpen();
        int available = free.cardinality();
        if (blocks > available) {
            throw new KvTransferException(ErrorCode.INTERNAL, requestId, "KV cache pool exhausted: request "
                    + requestId + " needs " + blocks + " blocks, " + available + " of " + numBlocks + " are free",
                    null);
        }
        int[] ids = new int[blocks];
        int next = 0;
        for (int i = 0; i < blocks; i++) {
            next = free.nextSetBit(next);
            ids[i] = next;
            free.clear(next);
        }
        int[] before = owned.get(requestId);
        if (before == null) {
            owned.put(requestId, ids.clone());
        } else {
            int[] all = Arrays.copyOf(before, before.length + blocks);
            System.arraycopy(ids, 0, all, before.length, blocks);
            owned.put(requestId, all);
        }
        return ids;
    }

    /**
     * The blocks a request holds, in allocation order.
     *
     * @param requestId the request
     * @return a copy of its block ids
     * @throws IllegalArgumentException when the request holds no blocks
     */
    public synchronized int[] blocksOf(long requestId) {
        int[] ids = owned.get(requestId);
        if (ids == null) {
            throw new IllegalArgumentException("request " + requestId + " holds no blocks of this KV cache");
        }
        return ids.clone();
    }

    /**
     * Gives a request's blocks back. Freeing a request that holds none does nothing (idempotent).
     *
     * @param requestId the request
     */
    public synchronized void free(long requestId) {
        int[] ids = owned.remove(requestId);
        if (ids != null) {
            for (int id : ids) {
                free.set(id);
            }
        }
    }

    /** @return blocks not held by any request */
    public synchronized int freeBlocks() {
        return free.cardinality();
    }

    /** @return the requests holding blocks */
    public synchronized int requestCount() {
        return owned.size();
    }

    private void checkOpen() {
        if (closed) {
            throw new IllegalStateException("PagedKvCache is closed");
        }
    }

    /** Releases the pool's memory (whether or not requests still hold blocks). Idempotent. */
    @Override
    public void close() {
        synchronized (this) {
            if (closed) {
                return;
            }
            closed = true;
            owned.clear();
        }
        main.close();
        if (indexer != null) {
            indexer.close();
        }
    }

    @Override
    public String toString() {
        return "PagedKvCache{" + numBlocks + " blocks of " + main.layout().blockBytes() + " B, "
                + (indexer == null ? "" : "indexer " + indexer.layout().blockBytes() + " B/block, ")
                + "free=" + freeBlocks() + "}";
    }

    /** The memory of one pool: chunks of whole blocks, and one precomputed view per block. */
    private static final class BlockPool implements KvCacheView {
        private final BlockLayout layout;
        private final MemoryBuffer[] chunks;
        private final MemoryBuffer[] blocks;
        private volatile boolean closed;

        BlockPool(BufferManager buffers, BlockLayout layout, int numBlocks) {
            this.layout = layout;
            long blockBytes = layout.blockBytes();
            int perChunk = blockBytes == 0 ? numBlocks
                    : (int) Math.max(1, Math.min(numBlocks, MAX_CHUNK_BYTES / blockBytes));
            int chunkCount = (numBlocks + perChunk - 1) / perChunk;
            this.chunks = new MemoryBuffer[chunkCount];
            this.blocks = new MemoryBuffer[numBlocks];
            try {
                for (int c = 0; c < chunkCount; c++) {
                    int first = c * perChunk;
                    int n = Math.min(perChunk, numBlocks - first);
                    chunks[c] = buffers.allocate(blockBytes * n, MemoryKind.HOST);
                    // Resident before the first transfer, as an engine's KV pool is when it starts serving.
                    MemoryAccess.preTouch(chunks[c].address(), chunks[c].size());
                    for (int i = 0; i < n; i++) {
                        blocks[first + i] = chunks[c].slice(i * blockBytes, blockBytes);
                    }
                }
            } catch (RuntimeException | Error e) {
                close();
                throw e;
            }
        }

        @Override
        public BlockLayout layout() {
            return layout;
        }

        @Override
        public MemoryBuffer block(int blockId) {
            Objects.checkIndex(blockId, blocks.length);
            if (closed) {
                throw new IllegalStateException("PagedKvCache is closed");
            }
            return blocks[blockId];
        }

        @Override
        public int blockCount() {
            return blocks.length;
        }

        void close() {
            closed = true;
            for (MemoryBuffer c : chunks) {
                if (c != null) {
                    c.close();
                }
            }
        }

        @Override
        public String toString() {
            return "PagedKvCache.indexerK{" + blocks.length + " blocks of " + layout.blockBytes() + " B}";
        }
    }
}
