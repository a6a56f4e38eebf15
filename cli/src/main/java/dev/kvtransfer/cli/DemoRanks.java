package dev.kvtransfer.cli;

import dev.kvtransfer.api.layout.BlockDistribution;
import dev.kvtransfer.api.model.CacheState;

import java.util.ArrayList;
import java.util.List;

/** Which ranks of an instance serve a request, and how many of its blocks each holds. */
final class DemoRanks {
    private DemoRanks() {
    }

    /**
     * Ranks serving request {@code index}: with attention DP only the ranks of DP group {@code index % dpSize};
     * ranks of a PP stage without layers never take part.
     */
    static List<Integer> serving(CacheState s, int index) {
        List<Integer> out = new ArrayList<>();
        int group = s.attentionDpEnabled() ? index % s.dpSize() : 0;
        for (int r = 0; r < s.worldSize(); r++) {
            if (s.layerCount(s.ppRank(r)) == 0) {
                continue;
            }
            if (s.attentionDpEnabled() && s.tpRank(r) / s.tpPerDpGroup() != group) {
                continue;
            }
            out.add(r);
        }
        return out;
    }

    /** Blocks of the request held by a rank (its CP share of all blocks). */
    static int blocksOnRank(CacheState s, int rank, int totalBlocks) {
        return BlockDistribution.count(totalBlocks, s.contextParallelism(), s.cpRank(rank));
    }

    static int totalBlocks(CacheState s, int isl) {
        return BlockDistribution.blocksFor(isl, s.tokensPerBlock());
    }
}
