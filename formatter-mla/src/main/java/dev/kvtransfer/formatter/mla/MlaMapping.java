package dev.kvtransfer.formatter.mla;

import dev.kvtransfer.api.layout.BlockDistribution;
import dev.kvtransfer.api.layout.RankMapping;
import dev.kvtransfer.api.layout.TargetRanks;
import dev.kvtransfer.api.model.CacheState;

import java.util.ArrayList;
import java.util.List;
import java.util.Objects;

/**
 * The rank arithmetic of the MLA formatter (reference §3, "MLA formatter"), as pure functions so the sender, the
 * receiver, the tests and tools (the demo's dump) agree on one definition.
 *
 * <p>MLA keeps one latent head per layer and every TP rank of a (DP) group holds the same bytes, so of the
 * context ranks holding identical data only one, the <em>designated</em> sender, sends to a generation rank;
 * the others take part in the handshake and the ready signal only. Generation-side context parallelism splits
 * the request's blocks contiguously over the generation CP ranks ({@link BlockDistribution}); context CP must
 * be 1.
 */
public final class MlaMapping {
    private MlaMapping() {
    }

    /**
     * Whether a context rank sends payload to the generation ranks of a request (reference §3
     * {@code needSendCache}, with the rank layout {@code rank = pp*(TP*CP) + tp*CP + cp}).
     *
     * <p>With {@code sG} = TP ranks per context DP group (TP without DP), {@code dG} = the same on the generation
     * side and {@code ddr} = the generation DP rank serving the request (0 without DP): true when
     * {@code sG <= dG}, else when {@code (tpRank % sG) % (sG/dG) == ddr % (sG/dG)}.
     *
     * @param ctx      the context side's state
     * @param ctxIndex the context rank
     * @param gen      the generation side's state (its DP rank is the one serving the request)
     * @return true when this rank is the designated sender; false also for a rank that owns no layer
     */
    public static boolean needSendCache(CacheState ctx, int ctxIndex, CacheState gen) {
        Objects.requireNonNull(ctx, "ctx");
        Objects.requireNonNull(gen, "gen");
        if (ctx.layerCount(ctx.ppRank(ctxIndex)) == 0) {
            return false;
        }
        int tpRank = ctx.tpRank(ctxIndex);
        int sG = ctx.tpPerDpGroup();
        int dG = gen.tpPerDpGroup();
        if (sG <= dG) {
            return true;
        }
        int ddr = gen.attentionDpEnabled() ? gen.dpRank() : 0;
        int ratio = sG / dG;
        return (tpRank % sG) % ratio == ddr % ratio;
    }

    /**
     * The generation rank's picked positions in its counterpart list (reference §3): one context rank per
     * PP-domain slot, from TP-domain slot {@code selfDpRankOr0 % domainTp}:
     * {@code [i + (selfDpRankOr0 % domainTp) * domainPp for i < domainPp]}.
     *
     * @param targets the generation rank's target ranks ({@code RankMapping.targetRanks(ctx, gen, genIndex)})
     * @param gen     the generation side's state
     * @return positions in {@code targets.peerRanks()}, ascending (PP-slot order); empty for a rank that owns no
     *         layer
     * @throws IllegalArgumentException if the targets span more than one context CP rank (context CP must be 1)
     */
    public static int[] pickRecv(TargetRanks targets, CacheState gen) {
        Objects.requireNonNull(targets, "targets");
        Objects.requireNonNull(gen, "gen");
        if (targets.isEmpty()) {
            return new int[0];
        }
        if (targets.domainCp() != 1) {
            throw new IllegalArgumentException("MLA receive needs a context CP domain of 1, got domainCp="
                    + targets.domainCp() + " (context CP must be 1)");
        }
        int selfDpRankOr0 = gen.attentionDpEnabled() ? gen.dpRank() : 0;
        int base = (selfDpRankOr0 % targets.domainTp()) * targets.domainPp();
        int[] pick = new int[targets.domainPp()];
        for (int i = 0; i < pick.length; i++) {
            pick[i] = base + i;
        }
        return pick;
    }

    /**
     * {@link #pickRecv(TargetRanks, CacheState)} as a list, computing the targets.
     *
     * @param gen      the generation side's state
     * @param genIndex the generation rank
     * @param ctx      the context side's state
     * @return positions in the counterpart list
     */
    public static List<Integer> pickRecvConnections(CacheState gen, int genIndex, CacheState ctx) {
        int[] pick = pickRecv(RankMapping.targetRanks(ctx, gen, genIndex), gen);
        List<Integer> out = new ArrayList<>(pick.length);
        for (int p : pick) {
            out.add(p);
        }
        return List.copyOf(out);
    }

    /**
     * Number of distinct outputs (staging buffers) of a context rank: {@code domainPp * domainCp}.
     *
     * @param targets the context rank's target ranks
     * @return the output count
     */
    public static int outputCount(TargetRanks targets) {
        return targets.domainPp() * targets.domainCp();
    }

    /**
     * The output a context rank sends to the peer at a position: {@code cpIdx * domainPp + ppIdx}, where the
     * peers are enumerated CP-major, then TP, then PP, so {@code cpIdx = p / (domainTp * domainPp)} and
     * {@code ppIdx = p % domainPp}. Peers that differ only in TP get the same output.
     *
     * <p>Upstream writes this as {@code p % (domainPp * domainCp)}, which is the same number for its older
     * TP-major enumeration; with CP-major enumeration the two agree only when {@code domainTp == 1} or
     * {@code domainCp == 1}.
     *
     * @param targets   the context rank's target ranks
     * @param peerIndex a position in {@code targets.peerRanks()}
     * @return the output index in {@code [0, outputCount)}
     */
    public static int outputIndex(TargetRanks targets, int peerIndex) {
        int dPp = targets.domainPp();
        return (peerIndex / (targets.domainTp() * dPp)) * dPp + peerIndex % dPp;
    }

    /**
     * Whether two ranks hold exactly the same global layers: then a block of one is byte for byte a block of
     * the other (MLA blocks have no head dimension to re-shard), and the formatter moves whole blocks straight
     * between the caches.
     *
     * @param a      one side's state
     * @param aIndex a rank of that side
     * @param b      the other side's state
     * @param bIndex a rank of the other side
     * @return whether the layer ranges are equal
     */
    public static boolean sameLayerRange(CacheState a, int aIndex, CacheState b, int bIndex) {
        int aPp = a.ppRank(aIndex);
        int bPp = b.ppRank(bIndex);
        return a.firstLayer(aPp) == b.firstLayer(bPp) && a.layerCount(aPp) == b.layerCount(bPp);
    }

    /**
     * Blocks a generation CP rank receives (contiguous split, the remainder to the lowest CP ranks).
     *
     * @param totalBlocks the request's blocks on the context side
     * @param genCp       generation CP size
     * @param cpRank      generation CP rank
     * @return the count
     */
    public static int blocksOfCpRank(int totalBlocks, int genCp, int cpRank) {
        return BlockDistribution.count(totalBlocks, genCp, cpRank);
    }

    /**
     * Index, among the context rank's blocks of the request, of a generation CP rank's first block.
     *
     * @param totalBlocks the request's blocks on the context side
     * @param genCp       generation CP size
     * @param cpRank      generation CP rank
     * @return the first global block
     */
    public static int firstBlockOfCpRank(int totalBlocks, int genCp, int cpRank) {
        return BlockDistribution.firstGlobalBlock(totalBlocks, genCp, cpRank);
    }
}
