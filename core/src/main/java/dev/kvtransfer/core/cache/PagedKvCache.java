package dev.kvtransfer.core.cache;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.KvTransferException;
import dev.kvtransfer.api.cache.KvCacheView;
import dev.kvtransfer.api.layout.BlockLayout;
import dev.kvtransfer.api.layout.PoolGeometry;
import dev.kvtransfer.api.layout.PoolLayout;
import dev.kvtransfer.api.memory.BufferManager;
import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.memory.MemoryKind;
import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.core.memory.HostBufferManager;
import dev.kvtransfer.core.memory.MemoryAccess;

import java.util.Arrays;
import java.util.BitSet;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;

/**
 * The reference paged KV pool: {@code numBlocks} blocks of one {@link BlockLayout}, stored in any
 * {@link PoolLayout}, handed out per request and freed explicitly, as a serving engine's block manager would. An
 * engine with its own pool implements {@link KvCacheView} instead.
 *
 * <ul>
 *   <li>{@link PoolLayout.Kind#BLOCK}: the pool is allocated in chunks of at most {@value #MAX_CHUNK_BYTES} bytes
 *       (whole blocks per chunk; one block per chunk when a block is larger), so a pool may exceed 2 GiB while
 *       every block is contiguous. Each chunk is a region; {@link #blocksPerRegion()} is the blocks per chunk.
 *       Block views are created once, so {@link #block(int)} allocates nothing.</li>
 *   <li>{@link PoolLayout.Kind#LAYER_NHD} / {@link PoolLayout.Kind#LAYER_HND} (and a split MLA latent): one
 *       allocation per (local layer, kv, segment) holding every block, {@code numBlocks * segmentPlaneBytes}
 *       bytes (vLLM's {@code kv_caches_base_addr}); {@link #blocksPerRegion()} is {@code numBlocks}.
 *       {@link #block(int)} throws {@link UnsupportedOperationException}: a block is not contiguous there.</li>
 * </ul>
 * Where an element lives is {@link #geometry()}; {@link #region(int)} returns the same view on every call.
 *
 * <p>Memory kind: {@link MemoryKind#HOST} by default; host pools are touched once when created (one byte per
 * 4 KiB page, see {@link MemoryAccess#preTouch}), so the first transfers into them do not pay the page faults.
 * A {@link MemoryKind#DEVICE} pool (from a device {@link BufferManager}) is never touched or read by the CPU.
 *
 * <p>Blocks are handed out lowest id first. {@link #allocate} on a request that already holds blocks appends
 * to it (a request grows while it decodes). When the pool cannot satisfy a request, {@link #allocate} throws
 * {@link KvTransferException} with {@link ErrorCode#INTERNAL} — running out of KV blocks is the engine's
 * admission-control bug, not a transport or peer failure — naming the request, the blocks asked for and the
 * free count; nothing is allocated in that case.
 *
 * <p>An optional indexer-K pool (MLA sparse attention) shares block ids with the main pool; it is always a block
 * pool: {@link #PagedKvCache(BufferManager, BlockLayout, BlockLayout, int)}.
 *
 * <p>Thread-safe: allocation bookkeeping is synchronized; {@link #block(int)} and {@link #region(int)} are
 * lock-free.
 */
public final class PagedKvCache implements KvCacheView, AutoCloseable {
    /** Largest single allocation backing a block pool. */
    public static final long MAX_CHUNK_BYTES = 1L << 30;

    private final Pool main;
    private final Pool indexer;
    private final int numBlocks;
    private final BitSet free;
    private final Map<Long, int[]> owned = new HashMap<>();
    private boolean closed;
    private volatile RecurrentStatePool recurrent;

    /**
     * A block pool of host memory.
     *
     * @param buffers   where the pool's memory comes from ({@link MemoryKind#HOST})
     * @param layout    the layout of every block
     * @param numBlocks number of blocks, at least 1
     */
    public PagedKvCache(BufferManager buffers, BlockLayout layout, int numBlocks) {
        this(buffers, layout, null, numBlocks);
    }

    /**
     * A block pool with an indexer-K pool whose blocks share this pool's block ids.
     *
     * @param buffers       where the pools' memory comes from ({@link MemoryKind#HOST})
     * @param layout        the layout of every main block
     * @param indexerLayout the layout of every indexer-K block, or {@code null} for none
     * @param numBlocks     number of blocks, at least 1
     */
    public PagedKvCache(BufferManager buffers, BlockLayout layout, BlockLayout indexerLayout, int numBlocks) {
        this(buffers, layout, PoolLayout.BLOCK, MemoryKind.HOST, indexerLayout, numBlocks);
    }

    /**
     * A pool in a given pool layout.
     *
     * @param buffers    where the pool's memory comes from
     * @param layout     the layout of every block
     * @param poolLayout how the pool stores its blocks
     * @param kind       where the memory lives ({@link MemoryKind#HOST} or {@link MemoryKind#PINNED_HOST}: touched
     *                   at creation; {@link MemoryKind#DEVICE}: never touched by the CPU)
     * @param numBlocks  number of blocks, at least 1
     */
    public PagedKvCache(BufferManager buffers, BlockLayout layout, PoolLayout poolLayout, MemoryKind kind,
                        int numBlocks) {
        this(buffers, layout, poolLayout, kind, null, numBlocks);
    }

    /**
     * A pool in a given pool layout, with an optional indexer-K block pool sharing its block ids.
     *
     * @param buffers       where the pools' memory comes from
     * @param layout        the layout of every main block
     * @param poolLayout    how the main pool stores its blocks
     * @param kind          where the memory lives
     * @param indexerLayout the layout of every indexer-K block, or {@code null} for none
     * @param numBlocks     number of blocks, at least 1
     * @throws IllegalArgumentException for a split latent whose rope part is not below the head size
     */
    public PagedKvCache(BufferManager buffers, BlockLayout layout, PoolLayout poolLayout, MemoryKind kind,
                        BlockLayout indexerLayout, int numBlocks) {
        Objects.requireNonNull(buffers, "buffers");
        Objects.requireNonNull(layout, "layout");
        Objects.requireNonNull(poolLayout, "poolLayout");
        Objects.requireNonNull(kind, "kind");
        if (numBlocks < 1) {
            throw new IllegalArgumentException("numBlocks = " + numBlocks + ": must be at least 1");
        }
        this.numBlocks = numBlocks;
        this.main = new Pool("main", buffers, layout, poolLayout, kind, numBlocks);
        Pool idx = null;
        if (indexerLayout != null) {
            try {
                idx = new Pool("indexer-K", buffers, indexerLayout, PoolLayout.BLOCK, kind, numBlocks);
            } catch (RuntimeException | Error e) {
                main.close();
                throw e;
            }
        }
        this.indexer = idx;
        this.free = new BitSet(numBlocks);
        free.set(0, numBlocks);
    }

    /**
     * The pool of one rank of an instance: its {@code BlockLayout.of(state, rank)} in {@code state.poolLayout()},
     * host memory.
     *
     * @param buffers   where the pool's memory comes from
     * @param state     the instance's cache state
     * @param rank      the rank
     * @param numBlocks number of blocks, at least 1
     * @return the pool
     */
    public static PagedKvCache of(BufferManager buffers, CacheState state, int rank, int numBlocks) {
        return of(buffers, state, rank, numBlocks, MemoryKind.HOST);
    }

    /**
     * The pool of one rank of an instance in a given memory kind.
     *
     * @param buffers   where the pool's memory comes from
     * @param state     the instance's cache state
     * @param rank      the rank
     * @param numBlocks number of blocks, at least 1
     * @param kind      where the memory lives
     * @return the pool
     */
    public static PagedKvCache of(BufferManager buffers, CacheState state, int rank, int numBlocks,
                                  MemoryKind kind) {
        Objects.requireNonNull(state, "state");
        return new PagedKvCache(buffers, BlockLayout.of(state, rank), state.poolLayout(), kind, null, numBlocks);
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

    @Override
    public PoolLayout poolLayout() {
        return main.poolLayout();
    }

    @Override
    public int blocksPerRegion() {
        return main.blocksPerRegion();
    }

    @Override
    public PoolGeometry geometry() {
        return main.geometry();
    }

    @Override
    public int regionCount() {
        return main.regionCount();
    }

    @Override
    public MemoryBuffer region(int index) {
        return main.region(index);
    }

    @Override
    public List<MemoryBuffer> regions() {
        return main.regions();
    }

    /** @return where the pool's memory lives */
    public MemoryKind memoryKind() {
        return main.kind;
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
        RecurrentStatePool states = recurrent;
        if (states != null) {
            states.allocateIfAbsent(requestId); // one state per request, beside its first blocks
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
        RecurrentStatePool states = recurrent;
        if (states != null) {
            states.free(requestId);
        }
    }

    /**
     * Gives a request's blocks back only when it holds exactly {@code blockIds} (so a caller that allocated under
     * another key, or already freed and reallocated, is never robbed).
     *
     * @param requestId the request
     * @param blockIds  the blocks it is expected to hold, in allocation order
     * @return whether they were freed
     */
    public synchronized boolean freeIfHeld(long requestId, int[] blockIds) {
        if (!Arrays.equals(owned.get(requestId), blockIds)) {
            return false;
        }
        free(requestId);
        return true;
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

    /**
     * Lends a hybrid model's recurrent states through this view ({@link #recurrentState()}); this cache closes it.
     * From then on {@link #allocate} gives a request its states with its first blocks and {@link #free} frees them.
     *
     * @param states the rank's recurrent states
     * @return this cache
     */
    public PagedKvCache attachRecurrentState(RecurrentStatePool states) {
        this.recurrent = Objects.requireNonNull(states, "states");
        return this;
    }

    @Override
    public RecurrentStatePool recurrentState() {
        return recurrent;
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
        RecurrentStatePool states = recurrent;
        if (states != null) {
            states.close();
        }
        if (indexer != null) {
            indexer.close();
        }
    }

    @Override
    public String toString() {
        return "PagedKvCache{" + numBlocks + " blocks of " + main.layout().blockBytes() + " B, " + main.poolLayout()
                + (main.kind == MemoryKind.HOST ? "" : " " + main.kind) + ", "
                + (indexer == null ? "" : "indexer " + indexer.layout().blockBytes() + " B/block, ")
                + "free=" + freeBlocks() + "}";
    }

    /** The memory of one pool: its regions (chunks of blocks, or one per plane segment) and views made once. */
    private static final class Pool implements KvCacheView {
        private final String name;
        private final BlockLayout layout;
        private final PoolLayout poolLayout;
        private final MemoryKind kind;
        private final PoolGeometry geometry;
        private final MemoryBuffer[] regions;
        private final MemoryBuffer[] blocks;
        private final List<MemoryBuffer> regionList;
        private final int numBlocks;
        private volatile boolean closed;

        Pool(String name, BufferManager buffers, BlockLayout layout, PoolLayout poolLayout, MemoryKind kind,
             int numBlocks) {
            this.name = name;
            this.layout = layout;
            this.poolLayout = poolLayout;
            this.kind = kind;
            this.numBlocks = numBlocks;
            int perRegion;
            if (poolLayout.kind() == PoolLayout.Kind.BLOCK) {
                long blockBytes = layout.blockBytes();
                perRegion = blockBytes == 0 ? numBlocks
                        : (int) Math.max(1, Math.min(numBlocks, MAX_CHUNK_BYTES / blockBytes));
            } else {
                perRegion = numBlocks;
            }
            this.geometry = PoolGeometry.of(layout, poolLayout, perRegion);
            int count = geometry.regionCount(numBlocks);
            this.regions = new MemoryBuffer[count];
            this.blocks = poolLayout.kind() == PoolLayout.Kind.BLOCK ? new MemoryBuffer[numBlocks] : null;
            try {
                for (int r = 0; r < count; r++) {
                    long bytes = geometry.regionBytes(r, numBlocks);
                    // Shared where the host allows, so a peer process of this host can write it with one copy.
                    regions[r] = buffers instanceof HostBufferManager h && kind != MemoryKind.DEVICE
                            ? h.allocatePool(bytes, kind) : buffers.allocate(bytes, kind);
                    if (kind != MemoryKind.DEVICE) {
                        // Resident before the first transfer, as an engine's KV pool is when it starts serving.
                        MemoryAccess.preTouch(regions[r].address(), regions[r].size());
                    }
                }
                if (blocks != null) {
                    long blockBytes = layout.blockBytes();
                    for (int b = 0; b < numBlocks; b++) {
                        blocks[b] = regions[b / perRegion].slice((b % perRegion) * blockBytes, blockBytes);
                    }
                }
            } catch (RuntimeException | Error e) {
                close();
                throw e;
            }
            this.regionList = List.of(regions);
        }

        @Override
        public BlockLayout layout() {
            return layout;
        }

        @Override
        public PoolLayout poolLayout() {
            return poolLayout;
        }

        @Override
        public int blocksPerRegion() {
            return geometry.blocksPerRegion();
        }

        @Override
        public PoolGeometry geometry() {
            return geometry;
        }

        @Override
        public int regionCount() {
            return regions.length;
        }

        @Override
        public MemoryBuffer region(int index) {
            Objects.checkIndex(index, regions.length);
            checkOpen();
            return regions[index];
        }

        @Override
        public List<MemoryBuffer> regions() {
            checkOpen();
            return regionList;
        }

        @Override
        public MemoryBuffer block(int blockId) {
            if (blocks == null) {
                throw new UnsupportedOperationException("PagedKvCache " + name + " pool is " + poolLayout
                        + ": a block is not contiguous there; use region(int) and geometry() (or planeSegment)");
            }
            Objects.checkIndex(blockId, blocks.length);
            checkOpen();
            return blocks[blockId];
        }

        @Override
        public int blockCount() {
            return numBlocks;
        }

        private void checkOpen() {
            if (closed) {
                throw new IllegalStateException("PagedKvCache is closed");
            }
        }

        void close() {
            closed = true;
            for (MemoryBuffer c : regions) {
                if (c != null) {
                    c.close();
                }
            }
        }

        @Override
        public String toString() {
            return "PagedKvCache." + name + "{" + poolLayout + ", " + layout.blockBytes() + " B/block, "
                    + regions.length + " regions}";
        }
    }
}
