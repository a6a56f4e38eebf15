package dev.kvtransfer.formatter.mla;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.KvTransferException;
import dev.kvtransfer.api.cache.KvCacheView;
import dev.kvtransfer.api.format.CacheFormatter;
import dev.kvtransfer.api.format.Support;
import dev.kvtransfer.api.format.TransferBufferPool;
import dev.kvtransfer.api.format.TransferSession;
import dev.kvtransfer.api.layout.BlockLayout;
import dev.kvtransfer.api.layout.RankMapping;
import dev.kvtransfer.api.layout.TargetRanks;
import dev.kvtransfer.api.memory.BufferManager;
import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.model.CacheState;

import java.util.List;
import java.util.Objects;
import java.util.concurrent.atomic.AtomicReferenceArray;

/**
 * The MLA cache formatter (TensorRT-LLM's {@code MLACacheFormatter}): one latent head per layer, identical on
 * every TP rank of a (DP) group, so the formatter only re-shards layers (PP) and blocks (generation CP), and of
 * the context ranks holding identical bytes only the designated one ({@link MlaMapping#needSendCache}) sends.
 *
 * <p>Sender: one output per (CP, PP) domain slot, {@code [localBlock][layer of the slot][kv][token][dim]}; the
 * layers a peer PP rank shares with this rank are one contiguous run of every block, so an output is filled
 * with one bulk copy per block. Peers that differ only in TP get the same output. Receiver: one input per
 * picked context rank (one per PP-domain slot), scattered back with one bulk copy per block.
 *
 * <p>Zero copy: when a context rank and a generation rank hold exactly the same layers
 * ({@link MlaMapping#sameLayerRange}), a context block is byte for byte the generation block, so the sender
 * sends each block straight from the cache and the receiver receives it straight into its block, one part per
 * block. The same direct path is taken for any PP slot whose run (shared layers of one block) is at least
 * {@link #DEFAULT_DIRECT_RUN_MIN_BYTES}: the run is contiguous on both sides, and one message per block then
 * costs less than staging. Both sides decide from the two states and the run length, so they agree on the part
 * lengths; everything else is staged, one part per peer.
 *
 * <p>Indexer-K pool: when this rank's {@link KvCacheView#indexerKCache()} is present, a second pass moves it
 * with the same peers, part mapping and zero-copy rule, after the main pool's parts, with its own staging.
 * The api's {@code CacheState} does not declare the pool yet, so each side decides from its own cache view:
 * both instances must be configured alike (see the module README).
 *
 * <p>Thread-safe: per-transfer state lives on the stack; the only shared state is a cache of block views.
 */
public final class MlaCacheFormatter implements CacheFormatter {
    /**
     * Default of the smallest run (the layers shared with one peer PP rank, of one block) that moves as its own
     * part straight from / into the caches instead of being staged: above it, one message per block costs
     * less than two extra copies of the bytes.
     */
    public static final long DEFAULT_DIRECT_RUN_MIN_BYTES = 256 * 1024;

    private final Pool main;
    private final Pool indexer;
    private final long directRunMinBytes;

    /**
     * A formatter over one rank's MLA pool (and its indexer-K pool, when the view has one).
     *
     * @param cache   the rank's blocks
     * @param buffers the rank's staging pool; staging is taken through each {@link TransferSession}, which
     *                draws on this pool
     * @throws IllegalArgumentException if the indexer-K pool does not match the main pool's layers and tokens,
     *                                  or is not one {@code uint8} head per layer
     */
    public MlaCacheFormatter(KvCacheView cache, TransferBufferPool buffers) {
        this(cache, buffers, DEFAULT_DIRECT_RUN_MIN_BYTES);
    }

    /**
     * A formatter with another direct-run threshold. Both sides of a transfer must use the same value (they
     * decide independently which parts are per block); package-private so tests can force either path.
     */
    MlaCacheFormatter(KvCacheView cache, TransferBufferPool buffers, long directRunMinBytes) {
        Objects.requireNonNull(cache, "cache");
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
                    || i.localHeads() != 1 || i.elementBytes() != 1) {
                throw new IllegalArgumentException("indexer-K pool layout " + i + " must hold the main pool's "
                        + m.localLayers() + " layers and " + m.tokensPerBlock() + " tokens per block, with kvFactor 1,"
                        + " 1 head and 1-byte (uint8) elements");
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
    public void format(TransferSession session) {
        Objects.requireNonNull(session, "session");
        CacheState self = session.selfState().cacheState();
        int selfIndex = session.selfState().selfIndex();
        CacheState peer = session.peerCacheState();
        requireSupported(session.requestId(), self, peer);
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
        sendPass(session, main, self, selfIndex, peer, targets, blocks);
        if (indexer != null) {
            sendPass(session, indexer, self, selfIndex, peer, targets, blocks);
        }
    }

    @Override
    public void unformat(TransferSession session) {
        Objects.requireNonNull(session, "session");
        CacheState self = session.selfState().cacheState();
        int selfIndex = session.selfState().selfIndex();
        CacheState peer = session.peerCacheState();
        requireSupported(session.requestId(), peer, self);
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
        int[] pick = MlaMapping.pickRecv(targets, self);
        recvPass(session, main, self, selfIndex, peer, targets, pick, blocks);
        if (indexer != null) {
            recvPass(session, indexer, self, selfIndex, peer, targets, pick, blocks);
        }
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

    private static void requireSupported(long requestId, CacheState ctx, CacheState gen) {
        Support s = MlaSupport.check(ctx, gen);
        if (!s.supported()) {
            throw new KvTransferException(ErrorCode.UNSUPPORTED_LAYOUT, requestId, s.reason(), null);
        }
    }

    /**
     * Which PP-domain slots move as direct runs (one part per block, straight from / into the caches) rather
     * than staged (one part per peer). Both sides compute the same answer: the run length {@code Lk * layerBytes}
     * is the same number on both (equal layouts per layer), and equal layer ranges are symmetric.
     */
    private boolean[] directSlots(TargetRanks targets, Pool pool, boolean sameRange) {
        int dPp = targets.domainPp();
        boolean[] direct = new boolean[dPp];
        for (int k = 0; k < dPp; k++) {
            long run = targets.peerPpDomainLayers().get(k) * pool.layout.layerBytes();
            direct[k] = sameRange || run >= directRunMinBytes;
        }
        return direct;
    }

    private void sendPass(TransferSession session, Pool pool, CacheState self, int selfIndex, CacheState peer,
                          TargetRanks targets, int[] blocks) {
        int n = blocks.length;
        int peers = targets.size();
        int dPp = targets.domainPp();
        int peerCp = peer.contextParallelism();
        long layerBytes = pool.layout.layerBytes();
        // dPp == 1 means this rank's layers lie inside one generation PP rank's; equality of the ranges is
        // the same for every peer of the domain (they differ in TP and CP only).
        boolean sameRange = dPp == 1 && MlaMapping.sameLayerRange(self, selfIndex, peer, targets.peerRanks().get(0));
        boolean[] direct = directSlots(targets, pool, sameRange);
        int outputs = MlaMapping.outputCount(targets);
        long[] sizes = new long[outputs];
        int[] staged = new int[outputs]; // output -> staging buffer index; -1 when direct or empty
        int nonEmpty = 0;
        for (int o = 0; o < outputs; o++) {
            int cp = o / dPp; // the CP domain starts at generation CP rank 0 (context CP is 1)
            long count = MlaMapping.blocksOfCpRank(n, peerCp, cp);
            sizes[o] = count * targets.peerPpDomainLayers().get(o % dPp) * layerBytes;
            staged[o] = sizes[o] == 0 || direct[o % dPp] ? -1 : nonEmpty++;
        }
        MemoryBuffer[] stage = null;
        if (nonEmpty > 0) {
            long[] stageSizes = new long[nonEmpty];
            for (int o = 0; o < outputs; o++) {
                if (staged[o] >= 0) {
                    stageSizes[staged[o]] = sizes[o];
                }
            }
            stage = session.stagingBuffers(stageSizes);
            BufferManager copier = session.bufferManager();
            for (int o = 0; o < outputs; o++) {
                if (staged[o] < 0) {
                    continue;
                }
                int k = o % dPp;
                int first = MlaMapping.firstBlockOfCpRank(n, peerCp, o / dPp);
                int count = MlaMapping.blocksOfCpRank(n, peerCp, o / dPp);
                long srcOffset = layerOffset(targets, k) * layerBytes;
                long run = targets.peerPpDomainLayers().get(k) * layerBytes;
                MemoryBuffer dst = stage[staged[o]];
                for (int i = 0; i < count; i++) {
                    copier.copy(pool.block(blocks[first + i]), srcOffset, dst, i * run, run);
                }
            }
            copier.synchronize();
        }
        MemoryBuffer[] staging = stage;
        int[] all = new int[peers];
        for (int p = 0; p < peers; p++) {
            all[p] = p;
        }
        session.forEachPeer(all, p -> {
            int o = MlaMapping.outputIndex(targets, p);
            if (sizes[o] == 0) {
                return; // this generation CP rank gets no block of this request
            }
            int k = o % dPp;
            long start = System.nanoTime();
            if (direct[k]) {
                int cp = o / dPp;
                int first = MlaMapping.firstBlockOfCpRank(n, peerCp, cp);
                int count = MlaMapping.blocksOfCpRank(n, peerCp, cp);
                long srcOffset = layerOffset(targets, k) * layerBytes;
                long run = targets.peerPpDomainLayers().get(k) * layerBytes;
                for (int i = 0; i < count; i++) {
                    session.send(p, pool.block(blocks[first + i]), srcOffset, run);
                }
            } else {
                session.send(p, staging[staged[o]], 0, sizes[o]);
            }
            session.recordMeasure(p, start, System.nanoTime(), sizes[o]);
        });
    }

    private void recvPass(TransferSession session, Pool pool, CacheState self, int selfIndex, CacheState peer,
                          TargetRanks targets, int[] pick, int[] blocks) {
        int n = blocks.length;
        if (n == 0) {
            return; // this CP rank gets no block of the request; the sender sends it nothing
        }
        int dPp = targets.domainPp();
        long layerBytes = pool.layout.layerBytes();
        boolean sameRange = dPp == 1
                && MlaMapping.sameLayerRange(self, selfIndex, peer, targets.peerRanks().get(pick[0]));
        boolean[] direct = directSlots(targets, pool, sameRange);
        long[] sizes = new long[dPp];
        int[] staged = new int[dPp]; // PP slot -> staging buffer index; -1 when direct
        int nonEmpty = 0;
        for (int k = 0; k < dPp; k++) {
            sizes[k] = (long) n * targets.peerPpDomainLayers().get(k) * layerBytes;
            staged[k] = direct[k] ? -1 : nonEmpty++;
        }
        MemoryBuffer[] stage = null;
        if (nonEmpty > 0) {
            long[] stageSizes = new long[nonEmpty];
            for (int k = 0; k < dPp; k++) {
                if (staged[k] >= 0) {
                    stageSizes[staged[k]] = sizes[k];
                }
            }
            stage = session.stagingBuffers(stageSizes);
        }
        MemoryBuffer[] staging = stage;
        BufferManager copier = session.bufferManager();
        session.forEachPeer(pick, p -> {
            int k = p % dPp; // picked positions are one TP slot's PP slots, in order
            long dstOffset = layerOffset(targets, k) * layerBytes;
            long run = targets.peerPpDomainLayers().get(k) * layerBytes;
            long start = System.nanoTime();
            if (direct[k]) {
                for (int i = 0; i < n; i++) {
                    session.recv(p, pool.block(blocks[i]), dstOffset, run);
                }
                session.recordMeasure(p, start, System.nanoTime(), sizes[k]);
                return;
            }
            MemoryBuffer src = staging[staged[k]];
            session.recv(p, src, 0, sizes[k]);
            long end = System.nanoTime();
            for (int i = 0; i < n; i++) {
                copier.copy(src, i * run, pool.block(blocks[i]), dstOffset, run);
            }
            // Copies issued on this (possibly pooled) thread must be complete before the blocks are handed over.
            copier.synchronize();
            session.recordMeasure(p, start, end, sizes[k]);
        });
    }

    /** First local layer (of this rank's block) shared with PP-domain slot {@code k}. */
    private static long layerOffset(TargetRanks targets, int k) {
        long offset = 0;
        for (int j = 0; j < k; j++) {
            offset += targets.peerPpDomainLayers().get(j);
        }
        return offset;
    }

    /** One pool of this rank (main or indexer-K) with a cache of its block views: no per-block garbage. */
    private static final class Pool {
        private final String name;
        private final KvCacheView view;
        private final BlockLayout layout;
        private final AtomicReferenceArray<MemoryBuffer> blocks;

        Pool(String name, KvCacheView view) {
            this.name = name;
            this.view = view;
            this.layout = Objects.requireNonNull(view.layout(), name + " layout");
            this.blocks = new AtomicReferenceArray<>(view.blockCount());
        }

        MemoryBuffer block(int blockId) {
            if (blockId < 0 || blockId >= blocks.length()) {
                throw new IndexOutOfBoundsException(name + " block id " + blockId + " outside [0, " + blocks.length()
                        + ")");
            }
            MemoryBuffer b = blocks.get(blockId);
            if (b == null) {
                // KvCacheView promises a stable buffer per block, so a racing duplicate is harmless.
                b = view.block(blockId);
                blocks.lazySet(blockId, b);
            }
            return b;
        }

        void requireLayout(long requestId, CacheState state, int rank) {
            BlockLayout expected = BlockLayout.of(state, rank);
            if (!layout.equals(expected)) {
                throw new KvTransferException(ErrorCode.INTERNAL, requestId, name + " cache view layout " + layout
                        + " of rank " + rank + " does not match its CacheState's " + expected, null);
            }
        }
    }
}
