package dev.kvtransfer.formatter.standard;

import dev.kvtransfer.api.layout.BlockDistribution;
import dev.kvtransfer.api.layout.BlockLayout;
import dev.kvtransfer.api.layout.TargetRanks;
import dev.kvtransfer.api.model.CacheState;

import java.util.ArrayList;
import java.util.List;

/**
 * How one rank's share of one request is cut into parts for its peers (sender) or assembled from them
 * (receiver): the split/concat mapping of TensorRT-LLM's {@code cacheSplitConcat} with our CP extension and prefix
 * reuse. How a part's bytes travel (its messages, which side stages) is
 * {@link dev.kvtransfer.formatter.support.PartPlan}.
 *
 * <p>For the peer at position {@code p} of the target ranks (CP-major, then TP, then PP):
 * {@code tpIdx = (p / domainPp) % domainTp}. Peers whose TP index differs only inside a duplicate-head group
 * ({@code peerDupHeadFactor}) share a head group {@code hg = tpIdx / peerDup}. A part covers, of this rank's
 * blocks, the local heads {@code [hg*Hd, hg*Hd + Hd)} with {@code Hd = Hs / (domainTp / peerDup)}, the layers both
 * ranks hold (global ranges intersected, {@code peerPpDomainLayers} of the slot), and the blocks both ranks hold
 * (the intersection of the two ranks' contiguous CP block ranges over the request's {@code totalBlocks}) from the
 * first block after the reused prefix on. Both ranks derive the same rectangle from the two states, so they agree
 * on every part without talking.
 *
 * <p>Computed once per session: O(peers) objects, nothing per block.
 */
final class SplitPlan {
    /** One part: a rectangle of blocks x layers x heads shared with one peer. */
    static final class Part {
        /** Peer position in the target list. */
        final int peer;
        /** First block of the part, as an index into this rank's block list. */
        final int firstBlock;
        /** First block of the part, as an index into the peer rank's block list. */
        final int peerFirstBlock;
        /** Blocks in the part. */
        final int blockCount;
        /** First local layer on this rank. */
        final int firstLayer;
        /** First local layer on the peer. */
        final int peerFirstLayer;
        /** Layers in the part. */
        final int layerCount;
        /** First local head on this rank. */
        final int firstHead;
        /** First local head on the peer. */
        final int peerFirstHead;
        /** Heads in the part. */
        final int headCount;
        /** The peer's block layout. */
        final BlockLayout peerLayout;
        /** Bytes of the whole part. */
        final long bytes;

        Part(int peer, int firstBlock, int peerFirstBlock, int blockCount, int firstLayer, int peerFirstLayer,
             int layerCount, int firstHead, int peerFirstHead, int headCount, BlockLayout peerLayout, long bytes) {
            this.peer = peer;
            this.firstBlock = firstBlock;
            this.peerFirstBlock = peerFirstBlock;
            this.blockCount = blockCount;
            this.firstLayer = firstLayer;
            this.peerFirstLayer = peerFirstLayer;
            this.layerCount = layerCount;
            this.firstHead = firstHead;
            this.peerFirstHead = peerFirstHead;
            this.headCount = headCount;
            this.peerLayout = peerLayout;
            this.bytes = bytes;
        }

        @Override
        public String toString() {
            return "Part{peer=" + peer + " blocks=[" + firstBlock + "+" + blockCount + ") (peer's from "
                    + peerFirstBlock + ") layers=[" + firstLayer + "+" + layerCount + ") (peer's from "
                    + peerFirstLayer + ") heads=[" + firstHead + "+" + headCount + ") (peer's from " + peerFirstHead
                    + ") bytes=" + bytes + "}";
        }
    }

    /** The parts: sender, one per target position in order; receiver, one per pick in pick order. */
    final List<Part> parts;
    /** This rank's block count for the request. */
    final int localBlocks;
    /**
     * The whole share cut into sliding-window runs ({@code StandardCacheFormatter}), made on first use and kept with
     * the remembered plan, so a repeated request shape plans its runs once; benignly racy (immutable lists).
     */
    volatile List<SplitPlan> windowRuns;

    private SplitPlan(List<Part> parts, int localBlocks) {
        this.parts = parts;
        this.localBlocks = localBlocks;
    }

    /**
     * The sender's parts: one per peer (peers sharing duplicated heads get equal rectangles).
     *
     * @param self         this (context) side
     * @param selfIndex    this rank
     * @param peer         the generation side
     * @param t            {@code targetRanks(peer, self, selfIndex)}
     * @param totalBlocks  blocks of the whole request
     * @param reusedBlocks leading global blocks the generation side already holds
     * @return the plan
     */
    static SplitPlan forSender(CacheState self, int selfIndex, CacheState peer, TargetRanks t, int totalBlocks,
                               int reusedBlocks) {
        List<Part> parts = new ArrayList<>(t.size());
        for (int p = 0; p < t.size(); p++) {
            parts.add(part(self, selfIndex, peer, t, p, totalBlocks, reusedBlocks));
        }
        return new SplitPlan(List.copyOf(parts), localBlockCount(self, selfIndex, totalBlocks));
    }

    /**
     * The receiver's parts: one per picked peer, in pick order.
     *
     * @param self         this (generation) side
     * @param selfIndex    this rank
     * @param peer         the context side
     * @param t            {@code targetRanks(peer, self, selfIndex)}
     * @param picks        the picked peer positions
     * @param totalBlocks  blocks of the whole request
     * @param reusedBlocks leading global blocks this side already holds
     * @return the plan
     */
    static SplitPlan forReceiver(CacheState self, int selfIndex, CacheState peer, TargetRanks t, List<Integer> picks,
                                 int totalBlocks, int reusedBlocks) {
        List<Part> parts = new ArrayList<>(picks.size());
        for (int p : picks) {
            parts.add(part(self, selfIndex, peer, t, p, totalBlocks, reusedBlocks));
        }
        return new SplitPlan(List.copyOf(parts), localBlockCount(self, selfIndex, totalBlocks));
    }

    /** Head groups per (CP, PP) slot: {@code domainTp / peerDupHeadFactor}. */
    static int headGroups(TargetRanks t) {
        return Math.max(1, t.domainTp() / Math.max(1, t.peerDupHeadFactor()));
    }

    /** This rank's block count: its share of {@code totalBlocks} under its CP size. */
    static int localBlockCount(CacheState self, int selfIndex, int totalBlocks) {
        return BlockDistribution.count(totalBlocks, self.contextParallelism(), self.cpRank(selfIndex));
    }

    private static Part part(CacheState self, int selfIndex, CacheState peer, TargetRanks t, int p, int totalBlocks,
                             int reusedBlocks) {
        int dPp = t.domainPp();
        int dTp = t.domainTp();
        int tpIdx = (p / dPp) % dTp;
        int peerDup = Math.max(1, t.peerDupHeadFactor());
        int hs = self.kvHeadsPerRank();
        int numHg = headGroups(t);
        if (hs % numHg != 0) {
            throw new IllegalStateException("heads per rank " + hs + " do not split into " + numHg + " head groups ("
                    + "domainTp " + dTp + ", peerDupHeadFactor " + peerDup + ")");
        }
        int hd = hs / numHg;
        int hg = tpIdx / peerDup;
        int peerRank = t.peerRanks().get(p);
        BlockLayout peerLayout = BlockLayout.of(peer, peerRank);

        // Layers both ranks hold: the global ranges intersected.
        int selfPp = self.ppRank(selfIndex);
        int peerPp = peer.ppRank(peerRank);
        int sl0 = self.firstLayer(selfPp);
        int pl0 = peer.firstLayer(peerPp);
        int l0 = Math.max(sl0, pl0);
        int l1 = Math.min(sl0 + self.layerCount(selfPp), pl0 + peer.layerCount(peerPp));
        int layers = Math.max(0, l1 - l0);
        if (layers != t.peerLayers(p)) {
            throw new IllegalStateException("peer rank " + peerRank + " shares layers [" + l0 + ", " + l1
                    + ") but the target ranks say " + t.peerLayers(p));
        }

        // Heads: this rank's local [hg*Hd, +Hd); the same global heads on the peer.
        int firstHead = hg * hd;
        int globalHead = self.firstGlobalHead(self.tpRank(selfIndex)) + firstHead;
        int peerFirstHead = globalHead - peer.firstGlobalHead(peer.tpRank(peerRank));
        if (peerFirstHead < 0 || peerFirstHead + hd > peer.kvHeadsPerRank()) {
            throw new IllegalStateException("global heads [" + globalHead + ", " + (globalHead + hd) + ") are not on"
                    + " peer rank " + peerRank + " (it holds " + peer.kvHeadsPerRank() + " from "
                    + peer.firstGlobalHead(peer.tpRank(peerRank)) + ")");
        }

        // Blocks both ranks hold (the intersection of their contiguous CP ranges), after the reused prefix.
        int s0 = BlockDistribution.firstGlobalBlock(totalBlocks, self.contextParallelism(), self.cpRank(selfIndex));
        int s1 = s0 + BlockDistribution.count(totalBlocks, self.contextParallelism(), self.cpRank(selfIndex));
        int q0 = BlockDistribution.firstGlobalBlock(totalBlocks, peer.contextParallelism(), peer.cpRank(peerRank));
        int q1 = q0 + BlockDistribution.count(totalBlocks, peer.contextParallelism(), peer.cpRank(peerRank));
        int b0 = Math.max(Math.max(s0, q0), reusedBlocks);
        int blocks = Math.max(0, Math.min(s1, q1) - b0);

        BlockLayout l = BlockLayout.of(self, selfIndex);
        long bytes = (long) blocks * layers * l.kvFactor() * hd * l.headBytes();
        return new Part(p, blocks == 0 ? 0 : b0 - s0, blocks == 0 ? 0 : b0 - q0, blocks, l0 - sl0, l0 - pl0, layers,
                firstHead, peerFirstHead, hd, peerLayout, bytes);
    }

    /**
     * The plan restricted to global layers {@code [g0, g1)} (layer-wise transfers): every part keeps its blocks and
     * heads and loses the layers outside the range (a part without layers left holds nothing). O(peers) objects.
     *
     * @param selfFirstLayer this rank's first global layer
     * @param g0             first global layer of the range
     * @param g1             one past its last
     * @return the restricted plan ({@code this} when the range covers every part)
     */
    SplitPlan clip(int selfFirstLayer, int g0, int g1) {
        boolean all = true;
        for (int i = 0; i < parts.size(); i++) { // indexed: no iterator per call (the whole-range clip is per request)
            Part p = parts.get(i);
            int a = selfFirstLayer + p.firstLayer;
            if (p.layerCount > 0 && (a < g0 || a + p.layerCount > g1)) {
                all = false;
                break;
            }
        }
        if (all) {
            return this;
        }
        List<Part> out = new ArrayList<>(parts.size());
        for (Part p : parts) {
            int a = selfFirstLayer + p.firstLayer;
            int c0 = Math.max(a, g0);
            int c1 = Math.min(a + p.layerCount, g1);
            int n = Math.max(0, c1 - c0);
            int shift = n == 0 ? 0 : c0 - a;
            long bytes = p.layerCount == 0 ? 0 : p.bytes / p.layerCount * n;
            out.add(new Part(p.peer, p.firstBlock, p.peerFirstBlock, p.blockCount, p.firstLayer + shift,
                    p.peerFirstLayer + shift, n, p.firstHead, p.peerFirstHead, p.headCount, p.peerLayout, bytes));
        }
        return new SplitPlan(List.copyOf(out), localBlocks);
    }

    /**
     * The plan restricted to global blocks from {@code fromGlobal} on (a sliding window's blocks): every part keeps its
     * layers and heads and loses its blocks before that one. O(peers) objects.
     *
     * @param selfFirstGlobalBlock this rank's first global block (its CP share)
     * @param fromGlobal           first global block to keep
     * @return the restricted plan
     */
    SplitPlan fromBlock(int selfFirstGlobalBlock, int fromGlobal) {
        List<Part> out = new ArrayList<>(parts.size());
        for (Part p : parts) {
            int start = selfFirstGlobalBlock + p.firstBlock;
            int drop = Math.min(p.blockCount, Math.max(0, fromGlobal - start));
            int n = p.blockCount - drop;
            long bytes = p.blockCount == 0 ? 0 : p.bytes / p.blockCount * n;
            out.add(n == 0 ? new Part(p.peer, 0, 0, 0, p.firstLayer, p.peerFirstLayer, p.layerCount, p.firstHead,
                    p.peerFirstHead, p.headCount, p.peerLayout, 0)
                    : new Part(p.peer, p.firstBlock + drop, p.peerFirstBlock + drop, n, p.firstLayer,
                    p.peerFirstLayer, p.layerCount, p.firstHead, p.peerFirstHead, p.headCount, p.peerLayout, bytes));
        }
        return new SplitPlan(List.copyOf(out), localBlocks);
    }

    @Override
    public String toString() {
        return "SplitPlan{localBlocks=" + localBlocks + " parts=" + parts + "}";
    }
}
