package dev.kvtransfer.formatter.standard;

import dev.kvtransfer.api.layout.TargetRanks;
import dev.kvtransfer.api.model.CacheState;

import java.util.ArrayList;
import java.util.List;

/**
 * Which ranks of a duplicate-head group talk (reference §3, extended to CP): a generation rank receives from one
 * member of each group of context ranks that hold the same heads, and of a context group only the member the
 * generation side's DP rank designates sends. Both sides derive the same choice from the two states alone.
 */
final class PeerSelection {
    private PeerSelection() {
    }

    /**
     * The counterpart positions a receiving rank reads from: all of them, unless the context side duplicates our
     * heads over several TP ranks ({@code peerDupHeadFactor > 1}); then of each duplicate group the one whose TP
     * index matches our DP rank modulo the factor, for every CP and PP slot.
     */
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
