package dev.kvtransfer.formatter.mla;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.KvTransferException;
import dev.kvtransfer.api.cache.KvCacheView;
import dev.kvtransfer.api.format.CacheFormatter;
import dev.kvtransfer.api.format.FormatterCapability;
import dev.kvtransfer.api.format.PeerPool;
import dev.kvtransfer.api.format.Support;
import dev.kvtransfer.api.format.TransferBufferPool;
import dev.kvtransfer.api.format.TransferSession;
import dev.kvtransfer.api.layout.BlockLayout;
import dev.kvtransfer.api.layout.PoolGeometry;
import dev.kvtransfer.api.layout.PoolLayout;
import dev.kvtransfer.api.layout.RankMapping;
import dev.kvtransfer.api.layout.TargetRanks;
import dev.kvtransfer.api.memory.BufferManager;
import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.formatter.support.PartPlan;
import dev.kvtransfer.formatter.support.PartStaging;
import dev.kvtransfer.formatter.support.PoolRegions;
import dev.kvtransfer.formatter.support.PushWrites;
import dev.kvtransfer.formatter.support.WritePlan;

import java.util.EnumSet;
import java.util.List;
import java.util.Objects;
import java.util.Set;

/**
 * The MLA cache formatter (TensorRT-LLM's {@code MLACacheFormatter}): one latent head per layer, identical on
 * every TP rank of a (DP) group, so the formatter only re-shards layers (PP) and blocks (generation CP), and of
 * the context ranks holding identical bytes only the designated one ({@link MlaMapping#needSendCache}) sends.
 * Either side's pool may be any {@link PoolLayout}: block, layer-nhd, layer-hnd, or a layer pool whose latent rows
 * are split into their nope and rope parts ({@link PoolLayout#ropeDim()}).
 *
 * <p>Parts: a context rank sends each peer the rectangle it shares with it: the blocks of the peer's CP range
 * after the reused prefix ({@link TransferSession#reusedBlocks()}), the layers of its PP slot. A generation rank
 * receives one such part per picked context rank (one per PP slot). How each part travels is a {@link PartPlan}
 * both sides derive from both pool layouts and both block-id lists: runs of blocks consecutive on both sides
 * coalesce, a side that holds a message contiguously moves it straight from / into its pool, the other stages it
 * with strided copies through the session's {@link BufferManager}. A part moves straight between the pools when
 * its messages average at least {@link #DEFAULT_DIRECT_RUN_MIN_BYTES} (or when both ranks hold the same layers,
 * whatever the size); below that both sides stage and the part is one message. Peers that differ only in TP get
 * the same staged bytes, gathered once.
 *
 * <p>Indexer-K pool: when this rank's {@link KvCacheView#indexerKCache()} is present (a block pool), a second pass
 * moves it with the same peers, part mapping and plan rule, after the main pool's parts, with its own staging.
 * The api's {@code CacheState} does not declare the pool yet, so each side decides from its own cache view:
 * both instances must be configured alike (see the module README).
 *
 * <p>Layer-wise ({@link FormatterCapability#LAYER_RANGES}): {@link #format(TransferSession, int, int)} and
 * {@link #unformat(TransferSession, int, int)} move the parts restricted to a global layer range, the indexer-K pass
 * included (its pool has the main pool's layers). One-sided push ({@link FormatterCapability#PUSH}): {@link #push}
 * writes the designated rank's parts of a layer range straight into every generation rank's pool it serves
 * ({@link TransferSession#peerPool}) with a {@link WritePlan} per part (pool to pool, coalesced runs, or staged into
 * the destination's order where that needs fewer, larger entries); reused blocks are not written. A rank with an
 * indexer-K pool does not declare PUSH: the api's peer pool and core's grants cover the main pool only, so core pulls
 * such requests (see the README).
 *
 * <p>Device pools: where the session's transport does not accept a pool's memory kind
 * ({@link TransferSession#transportAccepts}: {@code DEVICE} without {@code DEVICE_MEMORY}) every part of that pool is
 * staged, direct messages as one copy each through staging (pinned host memory from core for a device pool), in the
 * plan's messages, so the peer plans as before; pushes from it are always staged. Zero copy where the transport
 * declares device memory.
 *
 * <p>Thread-safe: per-transfer state lives on the stack; the only shared state is a cache of region views and one
 * reusable write batch per thread.
 */
public final class MlaCacheFormatter implements CacheFormatter {
    /**
     * Default of the smallest average message that moves straight from / into the pools instead of being staged
     * (one part per peer): above it, one message per run costs less than two extra copies of the bytes.
     */
    public static final long DEFAULT_DIRECT_RUN_MIN_BYTES = 256 * 1024;

    /**
     * Default of the smallest average write entry for which a push part goes straight from the pool; below it the
     * part is staged into the destination's order when that needs fewer entries.
     */
    public static final long DEFAULT_MIN_DIRECT_ENTRY_BYTES = 64 * 1024;

    private final Pool main;
    private final Pool indexer;
    private final long directRunMinBytes;
    private final long minDirectEntryBytes;
    private final long stagingChunk;

    /**
     * A formatter over one rank's MLA pool (and its indexer-K pool, when the view has one).
     *
     * @param cache   the rank's blocks
     * @param buffers the rank's staging pool; staging is taken through each {@link TransferSession}, which
     *                draws on this pool
     * @throws IllegalArgumentException if the indexer-K pool does not match the main pool's layers and tokens,
     *                                  or is not one {@code uint8} head per layer in a block pool
     */
    public MlaCacheFormatter(KvCacheView cache, TransferBufferPool buffers) {
        this(cache, buffers, DEFAULT_DIRECT_RUN_MIN_BYTES);
    }

    /**
     * A formatter with another direct-run threshold. Both sides of a transfer must use the same value (they
     * decide independently how parts travel); package-private so tests can force either path.
     */
    MlaCacheFormatter(KvCacheView cache, TransferBufferPool buffers, long directRunMinBytes) {
        this(cache, buffers, directRunMinBytes, DEFAULT_MIN_DIRECT_ENTRY_BYTES, WritePlan.DEFAULT_STAGING_CHUNK);
    }

    /** With other push policies too (the sender alone decides those); package-private for tests and benchmarks. */
    MlaCacheFormatter(KvCacheView cache, TransferBufferPool buffers, long directRunMinBytes, long minDirectEntryBytes,
                      long stagingChunk) {
        Objects.requireNonNull(cache, "cache");
        if (stagingChunk < 1) {
            throw new IllegalArgumentException("stagingChunk = " + stagingChunk + ": must be at least 1");
        }
        this.minDirectEntryBytes = minDirectEntryBytes;
        this.stagingChunk = stagingChunk;
        Objects.requireNonNull(buffers, "buffers");
        if (directRunMinBytes < 1) {
            throw new IllegalArgumentException("directRunMinBytes = " + directRunMinBytes + ": must be at least 1");
        }
        this.directRunMinBytes = directRunMinBytes;
        this.main = new Pool("main", cache);
        KvCacheView idx = cache.indexerKCache();
        if (idx != null) {
            BlockLayout m = cache.layout();
            BlockLayout i = idx.layout();
            if (i.localLayers() != m.localLayers() || i.tokensPerBlock() != m.tokensPerBlock() || i.kvFactor() != 1
                    || i.localHeads() != 1 || i.elementBytes() != 1
                    || idx.poolLayout().kind() != PoolLayout.Kind.BLOCK) {
                throw new IllegalArgumentException("indexer-K pool layout " + i + " (" + idx.poolLayout()
                        + " pool) must hold the main pool's " + m.localLayers() + " layers and " + m.tokensPerBlock()
                        + " tokens per block, with kvFactor 1, 1 head and 1-byte (uint8) elements, in a block pool");
            }
            this.indexer = new Pool("indexer-K", idx);
        } else {
            this.indexer = null;
        }
    }

    /** @return whether this rank's cache has an indexer-K pool (then every transfer has a second pass) */
    public boolean hasIndexerKCache() {
        return indexer != null;
    }

    @Override
    public Set<FormatterCapability> capabilities() {
        return indexer == null ? EnumSet.of(FormatterCapability.LAYER_RANGES, FormatterCapability.PUSH)
                : EnumSet.of(FormatterCapability.LAYER_RANGES);
    }

    @Override
    public void format(TransferSession session) {
        Objects.requireNonNull(session, "session");
        send(session, 0, Integer.MAX_VALUE);
    }

    @Override
    public void format(TransferSession session, int firstLayer, int layers) {
        Objects.requireNonNull(session, "session");
        CacheFormatter.checkLayerRange(session, firstLayer, layers);
        send(session, firstLayer, firstLayer + layers);
    }

    @Override
    public void unformat(TransferSession session) {
        Objects.requireNonNull(session, "session");
        receive(session, 0, Integer.MAX_VALUE);
    }

    @Override
    public void unformat(TransferSession session, int firstLayer, int layers) {
        Objects.requireNonNull(session, "session");
        CacheFormatter.checkLayerRange(session, firstLayer, layers);
        receive(session, firstLayer, firstLayer + layers);
    }

    /** Sends this rank's parts of global layers {@code [g0, g1)}. */
    private void send(TransferSession session, int g0, int g1) {
        CacheState self = session.selfState().cacheState();
        int selfIndex = session.selfState().selfIndex();
        CacheState peer = session.peerCacheState();
        requireSupported(session.requestId(), self, peer);
        requireDeclaredIndexer(session.requestId(), self, selfIndex);
        TargetRanks targets = session.targets();
        if (targets.isEmpty() || !MlaMapping.needSendCache(self, selfIndex, peer)) {
            // Another rank holding identical bytes sends (or this rank owns no layer): handshake and ready
            // signal only, which core does.
            return;
        }
        main.requireLayout(session.requestId(), self, selfIndex);
        int[] blocks = session.blockIds();
        if (session.totalBlocks() != blocks.length) {
            throw new KvTransferException(ErrorCode.INTERNAL, session.requestId(), "context rank " + selfIndex
                    + " holds " + blocks.length + " blocks of the request but the session says the request has "
                    + session.totalBlocks() + " (context CP is 1, so they must be equal)", null);
        }
        int reused = reused(session);
        sendPass(session, main, self, selfIndex, peer, targets, blocks, reused, peer.poolLayout(), g0, g1);
        if (indexer != null) {
            sendPass(session, indexer, self, selfIndex, peer, targets, blocks, reused, PoolLayout.BLOCK, g0, g1);
        }
    }

    /** Receives this rank's parts of global layers {@code [g0, g1)}. */
    private void receive(TransferSession session, int g0, int g1) {
        CacheState self = session.selfState().cacheState();
        int selfIndex = session.selfState().selfIndex();
        CacheState peer = session.peerCacheState();
        requireSupported(session.requestId(), peer, self);
        requireDeclaredIndexer(session.requestId(), self, selfIndex);
        TargetRanks targets = session.targets();
        if (targets.isEmpty()) {
            return;
        }
        main.requireLayout(session.requestId(), self, selfIndex);
        int[] blocks = session.blockIds();
        int expected = MlaMapping.blocksOfCpRank(session.totalBlocks(), self.contextParallelism(),
                self.cpRank(selfIndex));
        if (blocks.length != expected) {
            throw new KvTransferException(ErrorCode.INTERNAL, session.requestId(), "generation rank " + selfIndex
                    + " (CP rank " + self.cpRank(selfIndex) + " of " + self.contextParallelism() + ") has "
                    + blocks.length + " blocks for the request but its share of " + session.totalBlocks()
                    + " blocks is " + expected, null);
        }
        int reused = reused(session);
        int[] pick = MlaMapping.pickRecv(targets, self);
        recvPass(session, main, self, selfIndex, peer, targets, pick, blocks, reused, peer.poolLayout(), g0, g1);
        if (indexer != null) {
            recvPass(session, indexer, self, selfIndex, peer, targets, pick, blocks, reused, PoolLayout.BLOCK, g0,
                    g1);
        }
    }

    @Override
    public void push(TransferSession session, int firstLayer, int layers) {
        Objects.requireNonNull(session, "session");
        if (indexer != null) {
            throw new UnsupportedOperationException("request " + session.requestId() + ": this rank's cache has an "
                    + "indexer-K pool, which a push cannot write (the peer pool and its grants cover the main pool "
                    + "only); this formatter does not declare PUSH");
        }
        PushWrites.requirePushSession(session);
        CacheFormatter.checkLayerRange(session, firstLayer, layers);
        CacheState self = session.selfState().cacheState();
        int selfIndex = session.selfState().selfIndex();
        CacheState peer = session.peerCacheState();
        requireSupported(session.requestId(), self, peer);
        TargetRanks targets = session.targets();
        if (targets.isEmpty() || !MlaMapping.needSendCache(self, selfIndex, peer)) {
            return; // another rank holding identical bytes writes, or this rank owns no layer
        }
        main.requireLayout(session.requestId(), self, selfIndex);
        int[] blocks = session.blockIds();
        if (session.totalBlocks() != blocks.length) {
            throw new KvTransferException(ErrorCode.INTERNAL, session.requestId(), "context rank " + selfIndex
                    + " holds " + blocks.length + " blocks of the request but the session says the request has "
                    + session.totalBlocks() + " (context CP is 1, so they must be equal)", null);
        }
        int reused = reused(session);
        int n = session.totalBlocks();
        int peers = targets.size();
        WritePlan[] plans = new WritePlan[peers];
        PeerPool[] pools = new PeerPool[peers];
        int cPp = self.ppRank(selfIndex);
        int cl0 = self.firstLayer(cPp);
        for (int p = 0; p < peers; p++) {
            int genIndex = targets.peerRanks().get(p);
            int genCp = peer.cpRank(genIndex);
            int q0 = MlaMapping.firstBlockOfCpRank(n, peer.contextParallelism(), genCp);
            int q1 = q0 + MlaMapping.blocksOfCpRank(n, peer.contextParallelism(), genCp);
            int b0 = Math.max(q0, reused);
            int gPp = peer.ppRank(genIndex);
            int gl0 = peer.firstLayer(gPp);
            int l0 = Math.max(Math.max(cl0, gl0), firstLayer);
            int l1 = Math.min(Math.min(cl0 + self.layerCount(cPp), gl0 + peer.layerCount(gPp)), firstLayer + layers);
            if (q1 - b0 <= 0 || l1 - l0 <= 0) {
                continue;
            }
            PeerPool pool = session.peerPool(p);
            BlockLayout peerLayout = BlockLayout.of(peer, genIndex);
            if (pool == null || pool.rank() != genIndex || pool.blockCount() != q1 - q0
                    || !pool.blockLayout().equals(peerLayout) || !pool.state().poolLayout().equals(peer.poolLayout())) {
                throw new KvTransferException(ErrorCode.INTERNAL, session.requestId(), "the pool of generation rank "
                        + genIndex + " is " + pool + (pool == null ? "" : " with " + pool.blockLayout())
                        + "; expected " + (q1 - q0) + " blocks of " + peerLayout + " in a " + peer.poolLayout()
                        + " pool", null);
            }
            try {
                plans[p] = WritePlan.builder().sender(main.geometry, blocks, b0, l0 - cl0, 0)
                        .receiver(pool.geometry(), pool.blockIds(), b0 - q0, l0 - gl0, 0)
                        .shape(q1 - b0, l1 - l0, 1).policy(minDirectEntryBytes, stagingChunk)
                        .sourceDirect(session.transportAccepts(main.regions.kind())).build();
            } catch (IllegalArgumentException e) {
                throw new KvTransferException(ErrorCode.INTERNAL, session.requestId(), "cannot plan the writes into "
                        + "generation rank " + genIndex + ": " + e.getMessage(), e);
            }
            pools[p] = pool;
        }
        PushWrites.writeAll(session, plans, pools, main.regions);
    }

    private static int reused(TransferSession session) {
        int reused = session.reusedBlocks();
        if (reused < 0 || reused > session.totalBlocks()) {
            throw new KvTransferException(ErrorCode.INTERNAL, session.requestId(), "reusedBlocks " + reused
                    + " outside [0, " + session.totalBlocks() + "]", null);
        }
        return reused;
    }

    @Override
    public Support inquireSupport(CacheState self, CacheState peer) {
        return MlaSupport.inquire(self, peer);
    }

    @Override
    public List<Integer> counterparts(CacheState self, int selfIndex, CacheState peer) {
        Objects.requireNonNull(self, "self");
        Objects.requireNonNull(peer, "peer");
        return RankMapping.targetRanks(peer, self, selfIndex).peerRanks();
    }

    @Override
    public List<Integer> pickRecvConnections(CacheState self, int selfIndex, CacheState peer) {
        Objects.requireNonNull(self, "self");
        Objects.requireNonNull(peer, "peer");
        return MlaMapping.pickRecvConnections(self, selfIndex, peer);
    }

    @Override
    public boolean needSendCache(CacheState self, int selfIndex, CacheState peer) {
        return MlaMapping.needSendCache(self, selfIndex, peer);
    }

    /**
     * This rank's cache view must hold the indexer-K pool its state declares (the peer plans its parts from the
     * declaration): a pool the state does not declare, or a declared one that is missing or of another width, is
     * refused before a byte moves, so the two sides can never disagree on the second pass unseen.
     */
    private void requireDeclaredIndexer(long requestId, CacheState self, int selfIndex) {
        int viewDim = indexer == null ? 0 : indexer.layout.sizePerHead() * indexer.layout.elementBytes();
        if (viewDim != self.indexerDimPerHead()) {
            throw new KvTransferException(ErrorCode.UNSUPPORTED_LAYOUT, requestId, "rank " + selfIndex + "'s cache "
                    + (indexer == null ? "has no indexer-K pool" : "has an indexer-K pool of " + viewDim + " B/token")
                    + " but its CacheState declares " + MlaSupport.indexer(self) + " (declare the pool with "
                    + "CacheState.Builder.indexerKCache)", null);
        }
    }

    private static void requireSupported(long requestId, CacheState ctx, CacheState gen) {
        Support s = MlaSupport.check(ctx, gen);
        if (!s.supported()) {
            throw new KvTransferException(ErrorCode.UNSUPPORTED_LAYOUT, requestId, s.reason(), null);
        }
    }

    /**
     * The part shared with the peer at position {@code p} (sender: the peer's CP range; receiver: this rank's),
     * after the reused prefix, and how it travels. {@code null} when it holds no block.
     *
     * @param ctxIndex the context rank (self on the sender, the peer on the receiver)
     * @param genIndex the generation rank
     */
    private PartPlan plan(TransferSession session, Pool pool, boolean sender, CacheState ctx, int ctxIndex,
                          CacheState gen, int genIndex, int[] ctxIds, int[] genIds, int reused,
                          PoolLayout peerPool, int g0Layer, int g1Layer) {
        int n = session.totalBlocks();
        int genCp = gen.cpRank(genIndex);
        int g0 = MlaMapping.firstBlockOfCpRank(n, gen.contextParallelism(), genCp);
        int g1 = g0 + MlaMapping.blocksOfCpRank(n, gen.contextParallelism(), genCp);
        int b0 = Math.max(g0, reused);
        int count = g1 - b0;
        int cPp = ctx.ppRank(ctxIndex);
        int gPp = gen.ppRank(genIndex);
        int cl0 = ctx.firstLayer(cPp);
        int gl0 = gen.firstLayer(gPp);
        int l0 = Math.max(Math.max(cl0, gl0), g0Layer);
        int layers = Math.min(Math.min(cl0 + ctx.layerCount(cPp), gl0 + gen.layerCount(gPp)), g1Layer) - l0;
        if (count <= 0 || layers <= 0) {
            return null;
        }
        BlockLayout own = pool.layout;
        BlockLayout peerLayout = new BlockLayout(sender ? gen.layerCount(gPp) : ctx.layerCount(cPp), own.kvFactor(),
                1, own.tokensPerBlock(), own.sizePerHead(), own.elementBytes());
        PoolGeometry peerGeometry = PoolGeometry.of(peerLayout, peerPool, 1);
        PoolGeometry ctxGeometry = sender ? pool.geometry : peerGeometry;
        PoolGeometry genGeometry = sender ? peerGeometry : pool.geometry;
        // Same layers on both ranks: a block of one is a block of the other, moved straight whatever its size.
        boolean sameRange = MlaMapping.sameLayerRange(ctx, ctxIndex, gen, genIndex);
        long threshold = sameRange ? 0 : directRunMinBytes;
        try {
            return PartPlan.builder()
                    .sender(ctxGeometry, ctxIds, b0, l0 - cl0, 0)
                    .receiver(genGeometry, genIds, b0 - g0, l0 - gl0, 0)
                    .shape(count, layers, 1).selfIsSender(sender).policy(threshold, threshold, true).build();
        } catch (IllegalArgumentException e) {
            throw new KvTransferException(ErrorCode.INTERNAL, session.requestId(), "cannot plan the " + pool.name
                    + " part between context rank " + ctxIndex + " and generation rank " + genIndex + ": "
                    + e.getMessage(), e);
        }
    }

    private void sendPass(TransferSession session, Pool pool, CacheState self, int selfIndex, CacheState peer,
                          TargetRanks targets, int[] blocks, int reused, PoolLayout peerPool, int g0, int g1) {
        int peers = targets.size();
        PartPlan[] plans = new PartPlan[peers];
        int active = 0;
        for (int p = 0; p < peers; p++) {
            plans[p] = plan(session, pool, true, self, selfIndex, peer, targets.peerRanks().get(p), blocks,
                    session.peerBlockIds(p), reused, peerPool, g0, g1);
            active += plans[p] == null ? 0 : 1;
        }
        // Staged parts that are the same stream (peers that differ only in TP) share one gather.
        int[] rep = new int[peers];
        int staged = 0;
        for (int p = 0; p < peers; p++) {
            rep[p] = p;
            if (plans[p] == null || !pool.staged(session, plans[p])) {
                continue;
            }
            for (int q = 0; q < p; q++) {
                if (rep[q] == q && plans[q] != null && pool.staged(session, plans[q])
                        && plans[q].sameStream(plans[p])) {
                    rep[p] = q;
                    break;
                }
            }
            staged += rep[p] == p ? 1 : 0;
        }
        int[] gathered = new int[staged];
        int j = 0;
        for (int p = 0; p < peers; p++) {
            if (plans[p] != null && pool.staged(session, plans[p]) && rep[p] == p) {
                gathered[j++] = p;
            }
        }
        MemoryBuffer[] staging = PartStaging.buffers(session, gathered, plans, peers,
                session.transportAccepts(pool.regions.kind()));
        if (staged > 0) {
            BufferManager copier = session.bufferManager();
            for (int p : gathered) {
                // The whole part is one message when staged: fill it before the sends start.
                PartPlan.Cursor c = plans[p].cursor();
                while (c.next()) {
                    c.copy(copier, pool.regions, staging[p], c.streamOffset(), false);
                }
            }
            copier.synchronize();
        }
        int[] all = new int[active];
        int k = 0;
        for (int p = 0; p < peers; p++) {
            if (plans[p] != null) {
                all[k++] = p;
            }
        }
        session.forEachPeer(all, p -> {
            PartPlan pp = plans[p];
            long start = System.nanoTime();
            PartPlan.Cursor c = pp.cursor();
            if (!pool.staged(session, pp)) {
                while (c.next()) {
                    session.send(p, pool.region(c.region()), c.offset(), c.length());
                }
            } else {
                MemoryBuffer buf = staging[rep[p]];
                while (c.next()) {
                    session.send(p, buf, c.streamOffset(), c.length());
                }
            }
            session.recordMeasure(p, start, System.nanoTime(), pp.bytes());
        });
    }

    private void recvPass(TransferSession session, Pool pool, CacheState self, int selfIndex, CacheState peer,
                          TargetRanks targets, int[] pick, int[] blocks, int reused, PoolLayout peerPool, int g0,
                          int g1) {
        int peers = targets.size();
        PartPlan[] plans = new PartPlan[peers];
        int active = 0;
        for (int p : pick) {
            plans[p] = plan(session, pool, false, peer, targets.peerRanks().get(p), self, selfIndex,
                    session.peerBlockIds(p), blocks, reused, peerPool, g0, g1);
            if (plans[p] != null) {
                active++;
            }
        }
        if (active == 0) {
            return; // nothing after the reused prefix, or no block on this CP rank: the sender sends nothing
        }
        int[] actives = new int[active];
        int k = 0;
        for (int p : pick) {
            if (plans[p] != null) {
                actives[k++] = p;
            }
        }
        MemoryBuffer[] staging = PartStaging.buffers(session, actives, plans, peers,
                session.transportAccepts(pool.regions.kind()));
        BufferManager copier = session.bufferManager();
        session.forEachPeer(actives, p -> {
            PartPlan pp = plans[p];
            long start = System.nanoTime();
            PartPlan.Cursor c = pp.cursor();
            if (!pool.staged(session, pp)) {
                while (c.next()) {
                    session.recv(p, pool.region(c.region()), c.offset(), c.length());
                }
                session.recordMeasure(p, start, System.nanoTime(), pp.bytes());
                return;
            }
            MemoryBuffer src = staging[p];
            long end = start;
            while (c.next()) {
                session.recv(p, src, c.streamOffset(), c.length());
                end = System.nanoTime();
                c.copy(copier, pool.regions, src, c.streamOffset(), true);
            }
            // Copies issued on this (possibly pooled) thread must be complete before the blocks are handed over.
            copier.synchronize();
            session.recordMeasure(p, start, end, pp.bytes());
        });
    }

    /** One pool of this rank (main or indexer-K) with a cache of its region views: no per-block garbage. */
    private static final class Pool {
        private final String name;
        private final KvCacheView view;
        private final BlockLayout layout;
        private final PoolGeometry geometry;
        /** Its region views, and where the pool lives. */
        private final PoolRegions regions;

        Pool(String name, KvCacheView view) {
            this.name = name;
            this.view = view;
            this.layout = Objects.requireNonNull(view.layout(), name + " layout");
            this.geometry = view.geometry();
            this.regions = new PoolRegions(view);
        }

        /**
         * Whether this rank moves a part of this pool through staging: its plan stages, or the session's transport
         * does not accept the pool's memory (a device pool without DEVICE_MEMORY; each direct message is then one
         * copy through staging, the messages stay the plan's).
         */
        boolean staged(TransferSession session, PartPlan pp) {
            return PartStaging.staged(pp, session.transportAccepts(regions.kind()));
        }

        MemoryBuffer region(int index) {
            return regions.region(index);
        }

        void requireLayout(long requestId, CacheState state, int rank) {
            BlockLayout expected = BlockLayout.of(state, rank);
            if (!layout.equals(expected)) {
                throw new KvTransferException(ErrorCode.INTERNAL, requestId, name + " cache view layout " + layout
                        + " of rank " + rank + " does not match its CacheState's " + expected, null);
            }
            if (!view.poolLayout().equals(state.poolLayout())) {
                throw new KvTransferException(ErrorCode.INTERNAL, requestId, name + " cache view's pool layout "
                        + view.poolLayout() + " of rank " + rank + " is not the " + state.poolLayout()
                        + " its CacheState declares (the peer plans its messages from the state)", null);
            }
            if (geometry.layerKind() && geometry.blocksPerRegion() < view.blockCount()) {
                throw new KvTransferException(ErrorCode.INTERNAL, requestId, name + " cache view's " + geometry
                        + " splits its " + view.blockCount() + " blocks over several regions per plane; a layer"
                        + " pool must hold every block of a (layer, kv, segment) in one region", null);
            }
        }
    }
}
