package dev.kvtransfer.formatter.standard;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.KvTransferException;
import dev.kvtransfer.api.format.PeerPool;
import dev.kvtransfer.api.format.TransferSession;
import dev.kvtransfer.api.layout.BlockDistribution;
import dev.kvtransfer.api.layout.PoolGeometry;
import dev.kvtransfer.api.layout.TargetRanks;
import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.memory.MemoryKind;
import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.formatter.support.PeerWriteSink;
import dev.kvtransfer.formatter.support.PushWrites;
import dev.kvtransfer.formatter.support.WritePlan;

import java.util.function.IntFunction;

/**
 * The one-sided push of {@link StandardCacheFormatter}: writes this rank's parts of a layer range straight into
 * the peers' pools ({@link TransferSession#peerPool}) with a {@link WritePlan} per part, through the grants
 * ({@link PeerWriteSink}): pool to pool where runs are contiguous in both pools, staged into the destination's
 * order first where that needs fewer, larger entries, or where the transport cannot read the pool's memory. The
 * formatter has checked the session and clipped the split plan; this class plans each part's writes against the
 * peer's pool as the peer declared it, and writes them. Thread-safe: per-request state on the stack, one reusable
 * write batch per thread ({@link PushWrites}).
 */
final class PushWriter {
    private final PoolGeometry geometry;
    private final IntFunction<MemoryBuffer> regions;
    private final MemoryKind poolKind;
    private final long minDirectEntryBytes;
    private final long stagingChunk;

    /**
     * @param geometry            this rank's pool geometry
     * @param regions             this rank's regions by index
     * @param poolKind            where the pool lives (a transport that does not accept it gets staged entries)
     * @param minDirectEntryBytes smallest average direct entry (below it a part is staged when that needs fewer)
     * @param stagingChunk        largest staging chunk of a staged part
     */
    PushWriter(PoolGeometry geometry, IntFunction<MemoryBuffer> regions, MemoryKind poolKind,
               long minDirectEntryBytes, long stagingChunk) {
        this.geometry = geometry;
        this.regions = regions;
        this.poolKind = poolKind;
        this.minDirectEntryBytes = minDirectEntryBytes;
        this.stagingChunk = stagingChunk;
    }

    /**
     * Writes every non-empty part of {@code plan} (already clipped to the layer range) into its peer's pool;
     * returns on remote completion of every entry.
     */
    void push(TransferSession session, CacheState peer, TargetRanks t, int[] ids, SplitPlan plan) {
        WritePlan[] plans = new WritePlan[t.size()];
        PeerPool[] pools = new PeerPool[t.size()];
        // A pool the transport cannot read (device memory without DEVICE_MEMORY) is gathered into staging first.
        boolean poolOk = session.transportAccepts(poolKind);
        for (SplitPlan.Part part : plan.parts) {
            if (part.blockCount == 0 || part.layerCount == 0) {
                continue; // nothing of this peer's blocks after the reused prefix, or none of the range's layers
            }
            PeerPool pool = peerPool(session, peer, t, part);
            try {
                plans[part.peer] = WritePlan.builder()
                        .sender(geometry, ids, part.firstBlock, part.firstLayer, part.firstHead)
                        .receiver(pool.geometry(), pool.blockIds(), part.peerFirstBlock, part.peerFirstLayer,
                                part.peerFirstHead)
                        .shape(part.blockCount, part.layerCount, part.headCount)
                        .policy(minDirectEntryBytes, stagingChunk).sourceDirect(poolOk).build();
            } catch (IllegalArgumentException e) {
                throw new KvTransferException(ErrorCode.INTERNAL, session.requestId(), "cannot plan the writes into "
                        + "generation rank " + pool.rank() + " (" + part + "): " + e.getMessage(), e);
            }
            pools[part.peer] = pool;
        }
        PushWrites.writeAll(session, plans, pools, regions);
    }

    /** The pool of the part's peer, checked against what this rank expects of it. */
    private static PeerPool peerPool(TransferSession session, CacheState peer, TargetRanks t, SplitPlan.Part part) {
        int rank = t.peerRanks().get(part.peer);
        PeerPool pool = session.peerPool(part.peer);
        if (pool == null) {
            throw new KvTransferException(ErrorCode.INTERNAL, session.requestId(), "push session without the pool of "
                    + "generation rank " + rank + " (position " + part.peer + ")", null);
        }
        int expected = BlockDistribution.count(session.totalBlocks(), peer.contextParallelism(), peer.cpRank(rank));
        if (pool.rank() != rank || pool.blockCount() != expected || !pool.blockLayout().equals(part.peerLayout)
                || !pool.state().poolLayout().equals(peer.poolLayout())) {
            throw new KvTransferException(ErrorCode.INTERNAL, session.requestId(), "the pool of generation rank "
                    + rank + " is " + pool + " with " + pool.blockLayout() + "; expected rank " + rank + ", "
                    + expected + " blocks, " + part.peerLayout + " in a " + peer.poolLayout() + " pool", null);
        }
        return pool;
    }
}
