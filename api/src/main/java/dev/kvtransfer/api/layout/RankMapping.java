package dev.kvtransfer.api.layout;

import dev.kvtransfer.api.model.CacheState;

import java.util.ArrayList;
import java.util.List;
import java.util.Objects;

/**
 * Which peer ranks hold the data a rank needs (or need its data): the mapping of TensorRT-LLM's
 * {@code targetIRanks}, with the rank layout {@code rank = pp*(TP*CP) + tp*CP + cp} and peers enumerated
 * CP-major, then TP, then PP. Symmetric: g lists c as a peer exactly when c lists g. Pure and thread-safe.
 *
 * <p>A rank whose PP stage owns no layer gets {@link TargetRanks#EMPTY}; a peer PP rank that owns no layer
 * never appears in anyone's list (the PP domain holds only peer PP ranks sharing at least one layer, in PP
 * order, so with an empty peer stage in the middle the kept PP ranks need not be consecutive).
 */
public final class RankMapping {
    private RankMapping() {
    }

    /**
     * Computes the target ranks of {@code selfIndex} in the instance described by {@code self}, in the peer
     * instance described by {@code peer}.
     *
     * @param peer      the other instance's cache state
     * @param self      this instance's cache state
     * @param selfIndex this rank's index in its instance
     * @return the peers and domain sizes; {@link TargetRanks#EMPTY} when this rank owns no layer
     * @throws IllegalArgumentException if the models differ in layer count or the index is out of range
     */
    public static TargetRanks targetRanks(CacheState peer, CacheState self, int selfIndex) {
        Objects.requireNonNull(peer, "peer");
        Objects.requireNonNull(self, "self");
        // Memo by identity: the control plane asks for the same (peer, self, rank) in every request, with the
        // same state instances (a decoded peer state is reused for identical bytes, see TransceiverState).
        int slot = (System.identityHashCode(peer) * 31 + System.identityHashCode(self) + selfIndex) & (MEMO - 1);
        Memo m = MEMOS.get(slot);
        if (m != null && m.peer == peer && m.self == self && m.selfIndex == selfIndex) {
            return m.ranks;
        }
        TargetRanks t = compute(peer, self, selfIndex);
        MEMOS.set(slot, new Memo(peer, self, selfIndex, t));
        return t;
    }

    private static final int MEMO = 64;
    private static final java.util.concurrent.atomic.AtomicReferenceArray<Memo> MEMOS =
            new java.util.concurrent.atomic.AtomicReferenceArray<>(MEMO);

    /** One remembered answer (the states are immutable, so is the answer). */
    private record Memo(CacheState peer, CacheState self, int selfIndex, TargetRanks ranks) {
    }

    private static TargetRanks compute(CacheState peer, CacheState self, int selfIndex) {
        if (selfIndex < 0 || selfIndex >= self.worldSize()) {
            throw new IllegalArgumentException("selfIndex " + selfIndex + " outside [0, " + self.worldSize() + ")");
        }
        if (peer.numLayers() != self.numLayers()) {
            throw new IllegalArgumentException("layer counts differ: self " + self.numLayers() + ", peer "
                    + peer.numLayers());
        }
        int selfTp = self.tpRank(selfIndex);
        int selfPp = self.ppRank(selfIndex);
        int selfCp = self.cpRank(selfIndex);

        // PP: the peer PP ranks whose layer range overlaps ours.
        int s0 = self.firstLayer(selfPp);
        int s1 = s0 + self.layerCount(selfPp);
        if (s1 == s0) {
            return TargetRanks.EMPTY;
        }
        // Only peers that share at least one layer are kept. Upstream keeps a zero-layer peer PP rank that
        // sits inside our range (with count 0); that peer's own list is empty, so keeping it would break
        // symmetry and make the ranks of the domain non-contiguous. Hence the explicit list of kept PP ranks.
        int[] keptPp = new int[peer.pipelineParallelism()];
        List<Integer> peerLayers = new ArrayList<>();
        for (int k = 0; k < peer.pipelineParallelism(); k++) {
            int a = peer.firstLayer(k);
            int b = a + peer.layerCount(k);
            int overlap = Math.min(b, s1) - Math.max(a, s0);
            if (overlap > 0) {
                keptPp[peerLayers.size()] = k;
                peerLayers.add(overlap);
            }
        }
        int domainPp = peerLayers.size();

        // TP, attention-DP aware.
        int sG = self.tpPerDpGroup();
        int pG = peer.tpPerDpGroup();
        int peerDpRank = peer.attentionDpEnabled() ? peer.dpRank() : 0;
        int t = selfTp % sG;
        int domainTp;
        int tpStart;
        if (sG <= pG) {
            domainTp = pG / sG;
            tpStart = t * domainTp + peerDpRank * pG;
        } else {
            domainTp = 1;
            tpStart = t / (sG / pG) + peerDpRank * pG;
        }

        // CP.
        int selfCpSize = self.contextParallelism();
        int peerCpSize = peer.contextParallelism();
        int domainCp;
        int cpStart;
        if (selfCpSize <= peerCpSize) {
            domainCp = peerCpSize / selfCpSize;
            cpStart = selfCp * domainCp;
        } else {
            domainCp = 1;
            cpStart = selfCp / (selfCpSize / peerCpSize);
        }

        List<Integer> ranks = new ArrayList<>(domainTp * domainPp * domainCp);
        for (int cp = cpStart; cp < cpStart + domainCp; cp++) {
            for (int tp = tpStart; tp < tpStart + domainTp; tp++) {
                for (int k = 0; k < domainPp; k++) {
                    ranks.add(peer.rankOf(keptPp[k], tp, cp));
                }
            }
        }

        // Head duplication (TP larger than the KV head count).
        long selfHeads = (long) self.kvHeadsPerRank(0) * sG;
        long peerHeads = (long) peer.kvHeadsPerRank(0) * pG;
        int dup = selfHeads > peerHeads ? (int) (selfHeads / peerHeads) : 1;
        int peerDup = peerHeads > selfHeads ? (int) (peerHeads / selfHeads) : 1;
        return new TargetRanks(ranks, domainTp, domainPp, domainCp, dup, peerDup, peerLayers);
    }
}
