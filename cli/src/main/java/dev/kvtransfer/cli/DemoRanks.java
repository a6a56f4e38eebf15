package dev.kvtransfer.cli;

import dev.kvtransfer.api.layout.BlockDistribution;
import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.api.model.RecurrentStateShape;

import java.util.ArrayList;
import java.util.List;

/** Which ranks of an instance serve a request, and how many of its blocks each holds. */
final class DemoRanks {
    /**
     * Added to a request id for the poison written into a windowed request's generation blocks after the reused
     * prefix before the transfer (no demo request id comes near it).
     */
    static final long WINDOW_POISON = 1L << 42;

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

    /** Bytes of a request's blocks on one rank, with its recurrent states (a hybrid model's CP rank 0). */
    static long perRankBytes(CacheState s, int rank, int totalBlocks) {
        int layers = s.layerCount(s.ppRank(rank));
        long blockBytes = (long) layers * s.kvFactor() * s.kvHeadsPerRank() * s.tokensPerBlock() * s.sizePerHead()
                * s.dataType().bytes();
        long states = 0;
        if (RecurrentStateShape.holdsState(s, rank)) {
            RecurrentStateShape r = s.recurrentState();
            states = r.recurrentLayerCount(s.ppRank(rank))
                    * (r.convBytesPerRank(s.tensorParallelism()) + r.ssmBytesPerRank(s.tensorParallelism()));
        }
        return blockBytes * blocksOnRank(s, rank, totalBlocks) + states;
    }

    /** The largest {@link #perRankBytes} over an instance's ranks. */
    static long maxPerRankBytes(CacheState s, int totalBlocks) {
        long max = 0;
        for (int r = 0; r < s.worldSize(); r++) {
            max = Math.max(max, perRankBytes(s, r, totalBlocks));
        }
        return max;
    }

    static int totalBlocks(CacheState s, int isl) {
        return BlockDistribution.blocksFor(isl, s.tokensPerBlock());
    }

    /**
     * The prefix-cache key of each of a request's blocks, chained as a prefix cache chains them (block
     * {@code b}'s hash covers blocks {@code 0..b}). Both instances derive them from the request id, so they agree;
     * a generation side with other hashes is refused by the context side.
     *
     * @param requestId the context request id
     * @param blocks    how many
     * @return one hash per block
     */
    static long[] blockHashes(long requestId, int blocks) {
        long[] h = new long[blocks];
        long prev = dev.kvtransfer.core.pattern.KvPattern.mix(requestId ^ 0x5DEECE66DL);
        for (int b = 0; b < blocks; b++) {
            prev = dev.kvtransfer.core.pattern.KvPattern.mix(prev + 0x9E3779B97F4A7C15L * (b + 1));
            h[b] = prev;
        }
        return h;
    }
}
