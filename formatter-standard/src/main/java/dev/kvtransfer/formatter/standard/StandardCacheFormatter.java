package dev.kvtransfer.formatter.standard;

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
import dev.kvtransfer.api.model.AttentionType;
import dev.kvtransfer.api.model.CacheState;

import java.util.ArrayList;
import java.util.List;
import java.util.Objects;
import java.util.concurrent.atomic.AtomicReferenceArray;

/**
 * The formatter for MHA/GQA caches ({@link AttentionType#DEFAULT}): re-shards heads (TP, including TP larger
 * than the KV head count), layers (PP, uneven and zero-layer stages), blocks (CP on one side) and attention-DP
 * groups between a context and a generation instance, moving elements as raw bytes of any width.
 *
 * <p>Zero copy where the layout allows it: when a part holds all of this rank's heads, each block's share (a
 * layer range) is one contiguous run of the block, and it is sent from (or received into) the cache directly,
 * one message per block; a side that shares its heads with several peers stages instead. Staging copies are bulk
 * copies of contiguous runs through the session's {@link BufferManager}: one {@code [head range][token][dim]}
 * run per (block, layer, kv), done row by row so copying overlaps the transfer. See {@link SplitPlan} for
 * the mapping and formatter-standard/README.md for the formulas.
 *
 * <p>Thread-safe: all per-request state lives on the stack of {@link #format}/{@link #unformat}; the only shared
 * state is a lazily filled, benignly racy table of block views.
 */
public final class StandardCacheFormatter implements CacheFormatter {
    private final KvCacheView cache;
    private final TransferBufferPool buffers;
    /** Block views by id, fetched once: the hot loops then allocate nothing per block. */
    private final AtomicReferenceArray<MemoryBuffer> blockViews;

    /**
     * A formatter over one rank's KV pool.
     *
     * @param cache   the rank's blocks
     * @param buffers the rank's staging pool (used by the session that core builds over it)
     */
    public StandardCacheFormatter(KvCacheView cache, TransferBufferPool buffers) {
        this.cache = Objects.requireNonNull(cache, "cache");
        this.buffers = Objects.requireNonNull(buffers, "buffers");
        this.blockViews = new AtomicReferenceArray<>(cache.blockCount());
    }

    /** @return the staging pool this formatter was created with */
    public TransferBufferPool bufferPool() {
        return buffers;
    }

    @Override
    public void format(TransferSession session) {
        Objects.requireNonNull(session, "session");
        CacheState self = session.selfState().cacheState();
        int selfIndex = session.selfState().selfIndex();
        CacheState peer = session.peerCacheState();
        TargetRanks t = session.targets();
        if (t.isEmpty() || !needSendCache(self, selfIndex, peer, t)) {
            return; // a zero-layer stage, or another rank of our duplicate-head group sends
        }
        int[] ids = session.blockIds();
        SplitPlan plan = plan(session, self, selfIndex, peer, t, true);
        BlockLayout layout = checkLayout(session, self, selfIndex, ids, plan);
        MemoryBuffer[] staging = staging(session, plan);
        BufferManager bm = session.bufferManager();
        List<SplitPlan.Part> parts = plan.parts;
        int[] reps = new int[parts.size()];
        SplitPlan.Part[] byRep = new SplitPlan.Part[t.size()];
        MemoryBuffer[] bufByRep = new MemoryBuffer[t.size()];
        for (int i = 0; i < reps.length; i++) {
            SplitPlan.Part part = parts.get(i);
            reps[i] = part.peers[0];
            byRep[reps[i]] = part;
            bufByRep[reps[i]] = staging[i];
        }
        session.forEachPeer(reps, rep -> {
            SplitPlan.Part part = byRep[rep];
            if (part.blockCount == 0) {
                return; // the peer's CP range holds none of our blocks; it expects nothing either
            }
            long start = System.nanoTime();
            long rowBytes = part.rowBytes();
            if (part.selfContiguous) {
                // Each row is one run of our block: send it from the cache, one message per block (zero copy).
                long rowOff = part.firstLayer * layout.layerBytes();
                for (int b = 0; b < part.blockCount; b++) {
                    MemoryBuffer blk = block(ids[part.firstBlock + b]);
                    for (int peerIndex : part.peers) {
                        session.send(peerIndex, blk, rowOff, rowBytes);
                    }
                }
            } else {
                // Gather and send row by row: the next row's copy overlaps the previous row's transfer.
                MemoryBuffer buf = bufByRep[rep];
                for (int b = 0; b < part.blockCount; b++) {
                    gather(bm, layout, ids, part, b, buf, b * rowBytes);
                    bm.synchronize(); // a device manager's copies may be asynchronous until here
                    for (int peerIndex : part.peers) {
                        session.send(peerIndex, buf, b * rowBytes, rowBytes);
                    }
                }
            }
            long end = System.nanoTime();
            for (int peerIndex : part.peers) {
                session.recordMeasure(peerIndex, start, end, part.bytes);
            }
        });
    }

    @Override
    public void unformat(TransferSession session) {
        Objects.requireNonNull(session, "session");
        CacheState self = session.selfState().cacheState();
        int selfIndex = session.selfState().selfIndex();
        CacheState peer = session.peerCacheState();
        TargetRanks t = session.targets();
        if (t.isEmpty()) {
            return; // a zero-layer stage receives nothing
        }
        int[] ids = session.blockIds();
        SplitPlan plan = plan(session, self, selfIndex, peer, t, false);
        BlockLayout layout = checkLayout(session, self, selfIndex, ids, plan);
        MemoryBuffer[] staging = staging(session, plan);
        BufferManager bm = session.bufferManager();
        List<SplitPlan.Part> parts = plan.parts;
        int[] peers = new int[parts.size()];
        SplitPlan.Part[] byPeer = new SplitPlan.Part[t.size()];
        MemoryBuffer[] bufByPeer = new MemoryBuffer[t.size()];
        for (int i = 0; i < peers.length; i++) {
            peers[i] = parts.get(i).peers[0];
            byPeer[peers[i]] = parts.get(i);
            bufByPeer[peers[i]] = staging[i];
        }
        session.forEachPeer(peers, p -> {
            SplitPlan.Part part = byPeer[p];
            if (part.blockCount == 0) {
                return;
            }
            long start = System.nanoTime();
            long rowBytes = part.rowBytes();
            if (part.selfContiguous) {
                // Each row is one run of our block: receive straight into the cache (zero copy).
                long rowOff = part.firstLayer * layout.layerBytes();
                for (int b = 0; b < part.blockCount; b++) {
                    session.recv(p, block(ids[part.firstBlock + b]), rowOff, rowBytes);
                }
            } else {
                // Receive and scatter row by row: the next row arrives while this one is copied.
                MemoryBuffer buf = bufByPeer[p];
                for (int b = 0; b < part.blockCount; b++) {
                    session.recv(p, buf, b * rowBytes, rowBytes);
                    scatter(bm, layout, ids, part, b, buf, b * rowBytes);
                }
            }
            session.recordMeasure(p, start, System.nanoTime(), part.bytes);
        });
        bm.synchronize();
    }

    private SplitPlan plan(TransferSession session, CacheState self, int selfIndex, CacheState peer, TargetRanks t,
                           boolean sender) {
        Support s = inquireSupport(self, peer);
        if (!s.supported()) {
            throw new KvTransferException(ErrorCode.UNSUPPORTED_LAYOUT, session.requestId(), s.reason(), null);
        }
        try {
            return sender
                    ? SplitPlan.forSender(self, selfIndex, peer, t, session.totalBlocks())
                    : SplitPlan.forReceiver(self, selfIndex, peer, t, pickRecvConnections(self, selfIndex, peer),
                    session.totalBlocks());
        } catch (RuntimeException e) {
            throw new KvTransferException(ErrorCode.INTERNAL, session.requestId(), "cannot plan the "
                    + (sender ? "split" : "concat") + " of rank " + selfIndex + " of " + self + " against " + peer
                    + ": " + e.getMessage(), e);
        }
    }

    private BlockLayout checkLayout(TransferSession session, CacheState self, int selfIndex, int[] ids,
                                    SplitPlan plan) {
        BlockLayout expected = BlockLayout.of(self, selfIndex);
        BlockLayout actual = cache.layout();
        if (!expected.equals(actual)) {
            throw new KvTransferException(ErrorCode.INTERNAL, session.requestId(), "the cache's block layout "
                    + actual + " is not rank " + selfIndex + "'s layout " + expected + " of " + self, null);
        }
        if (ids.length != plan.localBlocks) {
            throw new KvTransferException(ErrorCode.INTERNAL, session.requestId(), "rank " + selfIndex + " has "
                    + ids.length + " blocks but holds " + plan.localBlocks + " of the request's "
                    + session.totalBlocks() + " under CP " + self.contextParallelism(), null);
        }
        return actual;
    }

    private static MemoryBuffer[] staging(TransferSession session, SplitPlan plan) {
        List<SplitPlan.Part> parts = plan.parts;
        int staged = 0;
        for (SplitPlan.Part p : parts) {
            if (!p.selfContiguous && p.bytes > 0) {
                staged++;
            }
        }
        MemoryBuffer[] out = new MemoryBuffer[parts.size()];
        if (staged == 0) {
            return out;
        }
        long[] sizes = new long[staged];
        int j = 0;
        for (SplitPlan.Part p : parts) {
            if (!p.selfContiguous && p.bytes > 0) {
                sizes[j++] = p.bytes;
            }
        }
        MemoryBuffer[] got = session.stagingBuffers(sizes);
        j = 0;
        for (int i = 0; i < parts.size(); i++) {
            SplitPlan.Part p = parts.get(i);
            if (!p.selfContiguous && p.bytes > 0) {
                out[i] = got[j++];
            }
        }
        return out;
    }

    /**
     * Copies block {@code b}'s row of a part (its heads of its layers, {@code [layer][kv][head][token][dim]}) out of
     * the cache into the staging buffer at {@code off}: one {@code [head range][token][dim]} run per (layer, kv).
     * Only used when the part holds some of our heads, not all (else the row is contiguous and sent directly).
     */
    private void gather(BufferManager bm, BlockLayout l, int[] ids, SplitPlan.Part part, int b, MemoryBuffer dst,
                        long off) {
        long run = part.headCount * l.headBytes();
        long headOff = part.firstHead * l.headBytes();
        MemoryBuffer blk = block(ids[part.firstBlock + b]);
        for (int layer = part.firstLayer; layer < part.firstLayer + part.layerCount; layer++) {
            long layerOff = layer * l.layerBytes() + headOff;
            for (int kv = 0; kv < l.kvFactor(); kv++) {
                bm.copy(blk, layerOff + kv * l.planeBytes(), dst, off, run);
                off += run;
            }
        }
    }

    /** The inverse of {@link #gather}: block {@code b}'s row of a received part into the cache. */
    private void scatter(BufferManager bm, BlockLayout l, int[] ids, SplitPlan.Part part, int b, MemoryBuffer src,
                         long off) {
        long run = part.headCount * l.headBytes();
        long headOff = part.firstHead * l.headBytes();
        MemoryBuffer blk = block(ids[part.firstBlock + b]);
        for (int layer = part.firstLayer; layer < part.firstLayer + part.layerCount; layer++) {
            long layerOff = layer * l.layerBytes() + headOff;
            for (int kv = 0; kv < l.kvFactor(); kv++) {
                bm.copy(src, off, blk, layerOff + kv * l.planeBytes(), run);
                off += run;
            }
        }
    }

    private MemoryBuffer block(int id) {
        MemoryBuffer b = blockViews.get(id);
        if (b == null) {
            b = cache.block(id);
            blockViews.set(id, b); // racing threads store equivalent views of the same stable block
        }
        return b;
    }

    /**
     * Checks the fields both sides must share and the CP combination. Every mismatch is listed with the field
     * and both values.
     */
    @Override
    public Support inquireSupport(CacheState self, CacheState peer) {
        Objects.requireNonNull(self, "self");
        Objects.requireNonNull(peer, "peer");
        List<String> why = new ArrayList<>();
        if (self.attentionType() != AttentionType.DEFAULT || peer.attentionType() != AttentionType.DEFAULT) {
            why.add("attentionType: self " + self.attentionType() + ", peer " + peer.attentionType()
                    + " (the standard formatter handles DEFAULT attention only; MLA needs the mla formatter)");
        }
        if (self.dataType() != peer.dataType()) {
            why.add("dataType: self " + self.dataType() + ", peer " + peer.dataType() + " (no conversion)");
        }
        if (self.kvFactor() != peer.kvFactor()) {
            why.add("kvFactor: self " + self.kvFactor() + ", peer " + peer.kvFactor());
        }
        if (self.tokensPerBlock() != peer.tokensPerBlock()) {
            why.add("tokensPerBlock: self " + self.tokensPerBlock() + ", peer " + peer.tokensPerBlock());
        }
        if (self.sizePerHead() != peer.sizePerHead()) {
            why.add("sizePerHead: self " + self.sizePerHead() + ", peer " + peer.sizePerHead());
        }
        if (self.numLayers() != peer.numLayers()) {
            why.add("layer count (kvHeadsPerLayer.size): self " + self.numLayers() + ", peer " + peer.numLayers());
        }
        boolean uniform = true;
        if (!self.uniformHeads()) {
            why.add("kvHeadsPerLayer: self has non-uniform head counts " + self.kvHeadsPerLayer()
                    + " (every layer must have the same KV heads)");
            uniform = false;
        }
        if (!peer.uniformHeads()) {
            why.add("kvHeadsPerLayer: peer has non-uniform head counts " + peer.kvHeadsPerLayer()
                    + " (every layer must have the same KV heads)");
            uniform = false;
        }
        if (uniform && !self.kvHeadsPerLayer().get(0).equals(peer.kvHeadsPerLayer().get(0))) {
            why.add("kvHeadsPerLayer: self " + self.kvHeadsPerLayer().get(0) + " KV heads, peer "
                    + peer.kvHeadsPerLayer().get(0) + " (the model's heads must be the same on both sides)");
        }
        int sc = self.contextParallelism();
        int pc = peer.contextParallelism();
        if (sc > 1 && pc > 1 && sc != pc) {
            why.add("contextParallelism: self " + sc + ", peer " + pc + " (context CP > 1 is supported only when"
                    + " the other side has CP 1 or the same CP; unequal CP > 1 on both sides would need blocks"
                    + " from ranks outside the target mapping)");
        }
        return why.isEmpty() ? Support.yes() : Support.no(String.join("; ", why));
    }

    @Override
    public List<Integer> counterparts(CacheState self, int selfIndex, CacheState peer) {
        return RankMapping.targetRanks(peer, self, selfIndex).peerRanks();
    }

    /**
     * All counterparts, unless the context side duplicates our heads over several TP ranks
     * ({@code peerDupHeadFactor > 1}); then of each duplicate group the one whose TP index matches our DP rank
     * modulo the factor, for every CP and PP slot (reference §3, extended to CP).
     */
    @Override
    public List<Integer> pickRecvConnections(CacheState self, int selfIndex, CacheState peer) {
        Objects.requireNonNull(self, "self");
        Objects.requireNonNull(peer, "peer");
        TargetRanks t = RankMapping.targetRanks(peer, self, selfIndex);
        return pick(self, t);
    }

    static List<Integer> pick(CacheState self, TargetRanks t) {
        int n = t.size();
        List<Integer> out = new ArrayList<>(n);
        int peerDup = t.peerDupHeadFactor();
        if (peerDup <= 1) {
            for (int p = 0; p < n; p++) {
                out.add(p);
            }
            return out;
        }
        int selfDp = self.attentionDpEnabled() ? self.dpRank() : 0;
        for (int c = 0; c < t.domainCp(); c++) {
            for (int i = 0; i < t.domainTp(); i++) {
                if (i % peerDup == selfDp % peerDup) {
                    for (int j = 0; j < t.domainPp(); j++) {
                        out.add((c * t.domainTp() + i) * t.domainPp() + j);
                    }
                }
            }
        }
        return out;
    }

    @Override
    public boolean needSendCache(CacheState self, int selfIndex, CacheState peer) {
        Objects.requireNonNull(self, "self");
        Objects.requireNonNull(peer, "peer");
        return needSendCache(self, selfIndex, peer, RankMapping.targetRanks(peer, self, selfIndex));
    }

    /**
     * Reference §3: a rank sends unless it belongs to a duplicate-head group ({@code dupHeadFactor > 1}) and is
     * not the member designated by the peer's DP rank.
     */
    static boolean needSendCache(CacheState self, int selfIndex, CacheState peer, TargetRanks t) {
        if (t.isEmpty()) {
            return false;
        }
        int dup = t.dupHeadFactor();
        if (dup <= 1) {
            return true;
        }
        int tpRank = self.tpRank(selfIndex);
        int g = self.attentionDpEnabled() ? tpRank % self.tpPerDpGroup() : tpRank;
        int peerDp = peer.attentionDpEnabled() ? peer.dpRank() : 0;
        return peerDp % dup == g % dup;
    }
}
