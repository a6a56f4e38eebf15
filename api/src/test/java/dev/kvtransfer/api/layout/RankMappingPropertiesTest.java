package dev.kvtransfer.api.layout;

import dev.kvtransfer.api.TestStates;
import dev.kvtransfer.api.model.AttentionType;
import dev.kvtransfer.api.model.CacheState;
import org.junit.jupiter.api.Test;

import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Set;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.fail;

/**
 * Exhaustive properties of {@link RankMapping} over every pair of context / generation layouts with
 * TP, PP in {1, 2, 4, 8} and CP in {1, 2} (32 layouts with the even layer split and 24 with empty PP stages
 * between owning ones: 3136 pairs), for several models: 4 layers (PP 8 leaves empty stages),
 * 10 layers (uneven splits), 16 layers; 8 KV heads, 2 KV heads (TP above heads) and MLA. Plus attention DP on
 * either side. Loops rather than random sampling: the space is small enough to cover completely.
 */
class RankMappingPropertiesTest {
    private static final int[] TP_PP = {1, 2, 4, 8};
    private static final int[] CP = {1, 2};
    private static final int[] LAYERS = {4, 10, 16};
    /** KV heads per layer; 0 stands for MLA (one latent head). */
    private static final int[] HEADS = {8, 2, 0};
    /** Blocks of the request under CP: 5 so that CP 2 splits it unevenly, [3, 2]. */
    private static final int BLOCKS = 5;

    private static int pairs;
    private static long rankChecks;

    /**
     * Every TP x PP x CP layout with the default (even) layer split, plus, for PP above 1, a "holey" split in
     * which every even PP rank owns no layer (so empty stages lead and sit between owning ones).
     */
    private static List<CacheState> layouts(int layers, int heads) {
        List<CacheState> out = new ArrayList<>();
        for (int tp : TP_PP) {
            for (int pp : TP_PP) {
                for (int cp : CP) {
                    CacheState.Builder b = TestStates.base(tp, pp, cp, layers, heads == 0 ? 1 : heads);
                    if (heads == 0) {
                        b.attentionType(AttentionType.MLA);
                    }
                    out.add(b.build());
                    if (pp > 1) {
                        out.add(b.attentionLayersPerPp(holeySplit(layers, pp)).build());
                    }
                }
            }
        }
        return out;
    }

    private static List<Integer> holeySplit(int layers, int pp) {
        List<Integer> owning = CacheState.evenLayerSplit(layers, pp / 2);
        List<Integer> out = new ArrayList<>();
        for (int p = 0; p < pp; p++) {
            out.add(p % 2 == 0 ? 0 : owning.get(p / 2));
        }
        return out;
    }

    @Test
    void allLayoutPairsSatisfyTheMappingProperties() {
        pairs = 0;
        rankChecks = 0;
        for (int layers : LAYERS) {
            for (int heads : HEADS) {
                List<CacheState> all = layouts(layers, heads);
                for (CacheState ctx : all) {
                    for (CacheState gen : all) {
                        checkPair(ctx, gen);
                    }
                }
            }
        }
        assertThat(pairs).isEqualTo(LAYERS.length * HEADS.length * 56 * 56);
        System.out.printf("rank mapping properties: %d layout pairs, %d rank checks%n", pairs, rankChecks);
    }

    @Test
    void attentionDpOnEitherSideSatisfiesTheMappingProperties() {
        int checked = 0;
        for (int heads : new int[] {8, 2}) {
            for (int ctxTp : TP_PP) {
                for (int genTp : TP_PP) {
                    for (int ctxDp : dpSizes(ctxTp)) {
                        for (int genDp : dpSizes(genTp)) {
                            if (ctxDp == 0 && genDp == 0) {
                                continue; // covered above
                            }
                            for (int ctxPp : new int[] {1, 2}) {
                                for (int genPp : new int[] {1, 4}) {
                                    checkDpPair(ctxTp, ctxPp, ctxDp, genTp, genPp, genDp, 8, heads);
                                    checked++;
                                }
                            }
                        }
                    }
                }
            }
        }
        assertThat(checked).isGreaterThan(500);
    }

    /** DP sizes to try: 0 = DP off, then every divisor of TP that leaves a power-of-two group. */
    private static int[] dpSizes(int tp) {
        List<Integer> out = new ArrayList<>(List.of(0));
        for (int d = 1; d <= tp; d *= 2) {
            out.add(d);
        }
        return out.stream().mapToInt(Integer::intValue).toArray();
    }

    private static CacheState withDp(int tp, int pp, int dpSize, int dpRank, int layers, int heads) {
        CacheState.Builder b = TestStates.base(tp, pp, 1, layers, heads);
        if (dpSize > 0) {
            b.attentionDp(true, dpRank, dpSize);
        }
        return b.build();
    }

    /** The DP group a rank belongs to (0 without DP). */
    private static int dpGroup(CacheState s, int rank) {
        return s.attentionDpEnabled() ? s.tpRank(rank) / s.tpPerDpGroup() : 0;
    }

    /**
     * Under attention DP a request is served by one DP group on each side; each side's state carries that
     * group's dpRank. For every pair of serving groups: ranks of the serving gen group list only ranks of the
     * serving ctx group, the relation is symmetric, and coverage holds.
     */
    private static void checkDpPair(int ctxTp, int ctxPp, int ctxDp, int genTp, int genPp, int genDp, int layers,
                                    int heads) {
        for (int rc = 0; rc < Math.max(1, ctxDp); rc++) {
            for (int rg = 0; rg < Math.max(1, genDp); rg++) {
                CacheState ctx = withDp(ctxTp, ctxPp, ctxDp, rc, layers, heads);
                CacheState gen = withDp(genTp, genPp, genDp, rg, layers, heads);
                String where = describe(ctx, gen);
                boolean[][] ctxLists = new boolean[ctx.worldSize()][gen.worldSize()];
                for (int c = 0; c < ctx.worldSize(); c++) {
                    if (dpGroup(ctx, c) != rc) {
                        continue;
                    }
                    TargetRanks r = RankMapping.targetRanks(gen, ctx, c);
                    checkShape(r, gen, ctx, c, where + " ctx rank " + c);
                    for (int g : r.peerRanks()) {
                        if (dpGroup(gen, g) != rg) {
                            fail("%s: ctx rank %d lists gen rank %d outside the serving DP group %d", where, c, g, rg);
                        }
                        ctxLists[c][g] = true;
                    }
                }
                for (int g = 0; g < gen.worldSize(); g++) {
                    if (dpGroup(gen, g) != rg) {
                        continue;
                    }
                    TargetRanks r = RankMapping.targetRanks(ctx, gen, g);
                    checkShape(r, ctx, gen, g, where + " gen rank " + g);
                    Set<Integer> listed = new HashSet<>(r.peerRanks());
                    for (int c = 0; c < ctx.worldSize(); c++) {
                        if (dpGroup(ctx, c) != rc) {
                            if (listed.contains(c)) {
                                fail("%s: gen rank %d lists ctx rank %d outside the serving DP group %d",
                                        where, g, c, rc);
                            }
                            continue;
                        }
                        if (listed.contains(c) != ctxLists[c][g]) {
                            fail("%s: asymmetric: gen %d lists ctx %d = %s, ctx lists gen = %s", where, g, c,
                                    listed.contains(c), ctxLists[c][g]);
                        }
                    }
                    checkCoverage(ctx, gen, g, r, where);
                }
            }
        }
    }

    private static void checkPair(CacheState ctx, CacheState gen) {
        pairs++;
        String where = describe(ctx, gen);
        boolean[][] ctxLists = new boolean[ctx.worldSize()][gen.worldSize()];
        for (int c = 0; c < ctx.worldSize(); c++) {
            TargetRanks r = RankMapping.targetRanks(gen, ctx, c);
            checkShape(r, gen, ctx, c, where + " ctx rank " + c);
            for (int g : r.peerRanks()) {
                ctxLists[c][g] = true;
            }
        }
        for (int g = 0; g < gen.worldSize(); g++) {
            TargetRanks r = RankMapping.targetRanks(ctx, gen, g);
            checkShape(r, ctx, gen, g, where + " gen rank " + g);
            boolean[] genLists = new boolean[ctx.worldSize()];
            for (int c : r.peerRanks()) {
                genLists[c] = true;
            }
            for (int c = 0; c < ctx.worldSize(); c++) {
                if (genLists[c] != ctxLists[c][g]) {
                    fail("%s: asymmetric: gen %d lists ctx %d = %s, but ctx %d lists gen %d = %s", where, g, c,
                            genLists[c], c, g, ctxLists[c][g]);
                }
            }
            checkCoverage(ctx, gen, g, r, where);
        }
    }

    /**
     * Size, empty-rank and PP-slot properties of one result.
     */
    private static void checkShape(TargetRanks r, CacheState peer, CacheState self, int selfIndex, String where) {
        rankChecks++;
        int selfPp = self.ppRank(selfIndex);
        int s0 = self.firstLayer(selfPp);
        int s1 = s0 + self.layerCount(selfPp);
        if (s0 == s1) {
            if (!r.equals(TargetRanks.EMPTY)) {
                fail("%s: owns no layer but got %s", where, r);
            }
            return;
        }
        if (r.size() != r.domainTp() * r.domainPp() * r.domainCp() || r.size() == 0) {
            fail("%s: %d peers but domains TP%d PP%d CP%d", where, r.size(), r.domainTp(), r.domainPp(), r.domainCp());
        }
        if (new HashSet<>(r.peerRanks()).size() != r.size()) {
            fail("%s: duplicate peers %s", where, r.peerRanks());
        }
        if (r.peerPpDomainLayers().size() != r.domainPp()) {
            fail("%s: %d PP-domain layer counts for domainPp %d", where, r.peerPpDomainLayers().size(), r.domainPp());
        }
        int sum = 0;
        int prevPp = -1;
        for (int k = 0; k < r.domainPp(); k++) {
            int pp = peer.ppRank(r.peerRanks().get(k));
            if (pp <= prevPp) {
                fail("%s: PP slots not in increasing PP order: %s", where, r.peerRanks());
            }
            prevPp = pp;
            int a = peer.firstLayer(pp);
            int b = a + peer.layerCount(pp);
            int overlap = Math.min(b, s1) - Math.max(a, s0);
            if (overlap <= 0 || overlap != r.peerPpDomainLayers().get(k)) {
                fail("%s: PP slot %d (peer pp %d) shares %d layers, result says %d", where, k, pp, overlap,
                        r.peerPpDomainLayers().get(k));
            }
            sum += overlap;
        }
        if (sum != s1 - s0) {
            fail("%s: PP domain covers %d layers, self owns %d", where, sum, s1 - s0);
        }
        for (int p = 0; p < r.size(); p++) {
            int peerRank = r.peerRanks().get(p);
            if (peerRank < 0 || peerRank >= peer.worldSize()) {
                fail("%s: peer rank %d outside the peer instance", where, peerRank);
            }
            int slot = p % r.domainPp();
            if (peer.ppRank(peerRank) != peer.ppRank(r.peerRanks().get(slot))) {
                fail("%s: position %d (rank %d) is not in PP slot %d", where, p, peerRank, slot);
            }
            if (r.peerLayers(p) != r.peerPpDomainLayers().get(slot)) {
                fail("%s: peerLayers(%d) disagrees with slot %d", where, p, slot);
            }
        }
    }

    /**
     * The connections a generation rank receives from, as reference §3 {@code pickRecvConnections}: all of
     * them without peer head duplication, else for each TP-domain index i with
     * {@code i % peerDup == selfDpRankOr0 % peerDup} the domainPp positions {@code i*domainPp + j}. Positions
     * repeat per CP-domain index (CP is outermost).
     */
    private static List<Integer> picked(TargetRanks r, CacheState gen) {
        List<Integer> out = new ArrayList<>();
        int peerDup = r.peerDupHeadFactor();
        if (peerDup <= 1) {
            for (int p = 0; p < r.size(); p++) {
                out.add(p);
            }
            return out;
        }
        int selfDpRankOr0 = gen.attentionDpEnabled() ? gen.dpRank() : 0;
        for (int cp = 0; cp < r.domainCp(); cp++) {
            int base = cp * r.domainTp() * r.domainPp();
            for (int i = 0; i < r.domainTp(); i++) {
                if (i % peerDup == selfDpRankOr0 % peerDup) {
                    for (int j = 0; j < r.domainPp(); j++) {
                        out.add(base + i * r.domainPp() + j);
                    }
                }
            }
        }
        return out;
    }

    /** Global heads [first, first + count) a rank holds. */
    private static int[] heads(CacheState s, int rank) {
        if (s.attentionType() == AttentionType.MLA) {
            return new int[] {0, 1};
        }
        return new int[] {s.firstGlobalHead(s.tpRank(rank)), s.kvHeadsPerRank()};
    }

    /** Global blocks [first, first + count) a rank holds. */
    private static int[] blocks(CacheState s, int rank) {
        int cp = s.contextParallelism();
        int r = s.cpRank(rank);
        return new int[] {BlockDistribution.firstGlobalBlock(BLOCKS, cp, r), BlockDistribution.count(BLOCKS, cp, r)};
    }

    /**
     * Every (global layer, global head, global block) the generation rank needs is supplied by exactly one of
     * the peers it picks.
     */
    private static void checkCoverage(CacheState ctx, CacheState gen, int g, TargetRanks r, String where) {
        int pp = gen.ppRank(g);
        int l0 = gen.firstLayer(pp);
        int nl = gen.layerCount(pp);
        if (nl == 0) {
            return;
        }
        int[] h = heads(gen, g);
        int[] b = blocks(gen, g);
        int[] count = new int[nl * h[1] * Math.max(1, b[1])];
        for (int p : picked(r, gen)) {
            int c = r.peerRanks().get(p);
            int cpp = ctx.ppRank(c);
            int la = Math.max(l0, ctx.firstLayer(cpp));
            int lb = Math.min(l0 + nl, ctx.firstLayer(cpp) + ctx.layerCount(cpp));
            int[] ch = heads(ctx, c);
            int ha = Math.max(h[0], ch[0]);
            int hb = Math.min(h[0] + h[1], ch[0] + ch[1]);
            int[] cb = blocks(ctx, c);
            int ba = Math.max(b[0], cb[0]);
            int bb = Math.min(b[0] + b[1], cb[0] + cb[1]);
            for (int l = la; l < lb; l++) {
                for (int hh = ha; hh < hb; hh++) {
                    for (int bl = ba; bl < bb; bl++) {
                        count[((l - l0) * h[1] + (hh - h[0])) * Math.max(1, b[1]) + (bl - b[0])]++;
                    }
                }
            }
        }
        for (int l = 0; l < nl; l++) {
            for (int hh = 0; hh < h[1]; hh++) {
                for (int bl = 0; bl < b[1]; bl++) {
                    int n = count[(l * h[1] + hh) * Math.max(1, b[1]) + bl];
                    if (n != 1) {
                        fail("%s: gen rank %d gets (layer %d, head %d, block %d) %d times from picks %s of %s",
                                where, g, l0 + l, h[0] + hh, b[0] + bl, n, picked(r, gen), r);
                    }
                }
            }
        }
    }

    private static String describe(CacheState ctx, CacheState gen) {
        return "ctx " + ctx + " -> gen " + gen;
    }
}
