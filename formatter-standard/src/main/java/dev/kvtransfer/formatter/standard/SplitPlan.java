package dev.kvtransfer.formatter.standard;

import dev.kvtransfer.api.layout.BlockDistribution;
import dev.kvtransfer.api.layout.BlockLayout;
import dev.kvtransfer.api.layout.TargetRanks;
import dev.kvtransfer.api.model.CacheState;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;

/**
 * How one rank's share of one request is cut into parts for its peers (sender) or assembled from them
 * (receiver): the split/concat mapping of TensorRT-LLM's {@code cacheSplitConcat} with our CP extension.
 *
 * <p>For the peer at position {@code p} of the target ranks (CP-major, then TP, then PP):
 * {@code cpIdx = p / (domainTp*domainPp)}, {@code tpIdx = (p / domainPp) % domainTp}, {@code k = p % domainPp}.
 * Peers whose TP index differs only inside a duplicate-head group ({@code peerDupHeadFactor}) share a head
 * group {@code hg = tpIdx / peerDup}. A part covers, of this rank's blocks, the local heads
 * {@code [hg*Hd, hg*Hd + Hd)} with {@code Hd = Hs / (domainTp / peerDup)}, the local layers
 * {@code [P_k, P_k + L_k)} ({@code P_k} = prefix sum of the PP-domain layer counts) and the blocks both ranks hold
 * (the intersection of the two ranks' contiguous CP block ranges over the request's {@code totalBlocks}). Its
 * bytes are ordered {@code [block][layer][kv][head][token][dim]} on both sides, so sender and receiver agree on
 * every part's length without talking.
 *
 * <p>One block's share of a part is a <em>row</em> ({@code layers * kv * Hd * T * D} elements). When the part holds
 * all of a side's heads ({@code Hd == Hs}), each row is one contiguous run of that side's block (its layer range):
 * that side moves the row straight from / into the cache, no staging (zero copy). Both sides know both head
 * counts, and a part always travels as one message per row, so they agree on the message sequence. Since
 * {@code Hd = min(Hs_self, Hs_peer)} for the aligned head ranges of TP splits, at least one side is always
 * contiguous; a part is <em>direct</em> (zero copy end to end) when both are.
 *
 * <p>Computed once per session: O(peers) objects, nothing per block.
 */
final class SplitPlan {
    /** One part: a rectangle of this rank's blocks, sent to (or received from) one or more peers. */
    static final class Part {
        /** Peer positions (in the target list) that get this part; one for a receiver. */
        final int[] peers;
        /** First block of the part, as an index into this rank's block list. */
        final int firstBlock;
        /** Blocks in the part. */
        final int blockCount;
        /** First local layer. */
        final int firstLayer;
        /** Layers in the part. */
        final int layerCount;
        /** First local head. */
        final int firstHead;
        /** Heads in the part. */
        final int headCount;
        /** Whether each row is one contiguous run of our blocks (we hold no other heads than the part's). */
        final boolean selfContiguous;
        /** Whether each row is one contiguous run of the peer's blocks. */
        final boolean peerContiguous;
        /** Both sides contiguous: zero copy end to end. */
        final boolean direct;
        /** Bytes of the whole part. */
        final long bytes;

        Part(int[] peers, int firstBlock, int blockCount, int firstLayer, int layerCount, int firstHead,
             int headCount, boolean selfContiguous, boolean peerContiguous, long bytes) {
            this.peers = peers;
            this.firstBlock = firstBlock;
            this.blockCount = blockCount;
            this.firstLayer = firstLayer;
            this.layerCount = layerCount;
            this.firstHead = firstHead;
            this.headCount = headCount;
            this.selfContiguous = selfContiguous;
            this.peerContiguous = peerContiguous;
            this.direct = selfContiguous && peerContiguous;
            this.bytes = bytes;
        }

        /** @return bytes of one block's share */
        long rowBytes() {
            return blockCount == 0 ? 0 : bytes / blockCount;
        }

        @Override
        public String toString() {
            return "Part{peers=" + Arrays.toString(peers) + " blocks=[" + firstBlock + "+" + blockCount + ")"
                    + " layers=[" + firstLayer + "+" + layerCount + ") heads=[" + firstHead + "+" + headCount + ")"
                    + (selfContiguous ? " selfContiguous" : "") + (peerContiguous ? " peerContiguous" : "")
                    + " bytes=" + bytes + "}";
        }
    }

    /** The parts, in output-buffer order (sender: cpIdx, head group, PP slot; receiver: pick order). */
    final List<Part> parts;
    /** This rank's block count for the request. */
    final int localBlocks;

    private SplitPlan(List<Part> parts, int localBlocks) {
        this.parts = parts;
        this.localBlocks = localBlocks;
    }

    /**
     * The sender's parts: one per distinct (CP index, head group, PP slot), listing every peer that receives it.
     *
     * @param self        this (context) side
     * @param selfIndex   this rank
     * @param peer        the generation side
     * @param t           {@code targetRanks(peer, self, selfIndex)}
     * @param totalBlocks blocks of the whole request
     * @return the plan
     */
    static SplitPlan forSender(CacheState self, int selfIndex, CacheState peer, TargetRanks t, int totalBlocks) {
        int n = t.size();
        int numHg = headGroups(t);
        int outputs = t.domainCp() * numHg * t.domainPp();
        int[][] peersOf = new int[outputs][];
        int[] repPeer = new int[outputs];
        Arrays.fill(repPeer, -1);
        for (int p = 0; p < n; p++) {
            int o = outputIndex(t, p);
            peersOf[o] = peersOf[o] == null ? new int[] {p} : append(peersOf[o], p);
            if (repPeer[o] < 0) {
                repPeer[o] = p;
            }
        }
        List<Part> parts = new ArrayList<>(outputs);
        for (int o = 0; o < outputs; o++) {
            if (peersOf[o] != null) {
                parts.add(part(self, selfIndex, peer, t, repPeer[o], peersOf[o], totalBlocks));
            }
        }
        return new SplitPlan(List.copyOf(parts), localBlockCount(self, selfIndex, totalBlocks));
    }

    /**
     * The receiver's parts: one per picked peer, in pick order.
     *
     * @param self        this (generation) side
     * @param selfIndex   this rank
     * @param peer        the context side
     * @param t           {@code targetRanks(peer, self, selfIndex)}
     * @param picks       the picked peer positions
     * @param totalBlocks blocks of the whole request
     * @return the plan
     */
    static SplitPlan forReceiver(CacheState self, int selfIndex, CacheState peer, TargetRanks t, List<Integer> picks,
                                 int totalBlocks) {
        List<Part> parts = new ArrayList<>(picks.size());
        for (int p : picks) {
            parts.add(part(self, selfIndex, peer, t, p, new int[] {p}, totalBlocks));
        }
        return new SplitPlan(List.copyOf(parts), localBlockCount(self, selfIndex, totalBlocks));
    }

    /** Head groups per (CP, PP) slot: {@code domainTp / peerDupHeadFactor}. */
    static int headGroups(TargetRanks t) {
        return Math.max(1, t.domainTp() / Math.max(1, t.peerDupHeadFactor()));
    }

    /**
     * The output buffer of the peer at position {@code p}: {@code (cpIdx * headGroups + hg) * domainPp + k}. For
     * CP 1 this is upstream's {@code ((p / domainPP) / peerDupHead) * domainPP + p % domainPP}.
     *
     * @param t targets
     * @param p peer position
     * @return the output index
     */
    static int outputIndex(TargetRanks t, int p) {
        int dPp = t.domainPp();
        int dTp = t.domainTp();
        int cpIdx = p / (dTp * dPp);
        int tpIdx = (p / dPp) % dTp;
        int k = p % dPp;
        int hg = tpIdx / Math.max(1, t.peerDupHeadFactor());
        return (cpIdx * headGroups(t) + hg) * dPp + k;
    }

    /** This rank's block count: its share of {@code totalBlocks} under its CP size. */
    static int localBlockCount(CacheState self, int selfIndex, int totalBlocks) {
        return BlockDistribution.count(totalBlocks, self.contextParallelism(), self.cpRank(selfIndex));
    }

    private static Part part(CacheState self, int selfIndex, CacheState peer, TargetRanks t, int p, int[] peers,
                             int totalBlocks) {
        int dPp = t.domainPp();
        int dTp = t.domainTp();
        int k = p % dPp;
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
        int firstLayer = 0;
        for (int j = 0; j < k; j++) {
            firstLayer += t.peerPpDomainLayers().get(j);
        }
        int layers = t.peerPpDomainLayers().get(k);

        // Blocks both ranks hold: the intersection of their contiguous CP ranges.
        int peerRank = t.peerRanks().get(p);
        int selfCp = self.contextParallelism();
        int selfCpRank = self.cpRank(selfIndex);
        int peerCp = peer.contextParallelism();
        int peerCpRank = peer.cpRank(peerRank);
        int s0 = BlockDistribution.firstGlobalBlock(totalBlocks, selfCp, selfCpRank);
        int s1 = s0 + BlockDistribution.count(totalBlocks, selfCp, selfCpRank);
        int q0 = BlockDistribution.firstGlobalBlock(totalBlocks, peerCp, peerCpRank);
        int q1 = q0 + BlockDistribution.count(totalBlocks, peerCp, peerCpRank);
        int b0 = Math.max(s0, q0);
        int blocks = Math.max(0, Math.min(s1, q1) - b0);

        BlockLayout l = BlockLayout.of(self, selfIndex);
        long bytes = (long) blocks * layers * l.kvFactor() * hd * l.headBytes();
        // The peer derives the same Hd (the heads both ranks hold), so it is contiguous exactly when it holds
        // no more heads than that.
        return new Part(peers, b0 - s0, blocks, firstLayer, layers, hg * hd, hd, hd == hs,
                hd == peer.kvHeadsPerRank(), bytes);
    }

    private static int[] append(int[] a, int v) {
        int[] b = Arrays.copyOf(a, a.length + 1);
        b[a.length] = v;
        return b;
    }

    @Override
    public String toString() {
        return "SplitPlan{localBlocks=" + localBlocks + " parts=" + parts + "}";
    }
}
