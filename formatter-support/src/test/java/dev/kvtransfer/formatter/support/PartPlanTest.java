package dev.kvtransfer.formatter.support;

import dev.kvtransfer.api.layout.BlockLayout;
import dev.kvtransfer.api.layout.PoolGeometry;
import dev.kvtransfer.api.layout.PoolLayout;
import dev.kvtransfer.api.memory.MemoryBuffer;
import org.junit.jupiter.api.Test;

import java.util.ArrayList;
import java.util.List;
import java.util.Random;
import java.util.function.IntFunction;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * {@link PartPlan}: both sides derive the same messages from the same facts, and moving them (direct or staged)
 * puts every element of the part exactly where it belongs in any pair of pool layouts, touching nothing else.
 */
class PartPlanTest {
    private static final byte UNTOUCHED = 0x5A;

    /** A pool of some geometry in heap memory. */
    private static final class Pool {
        final PoolGeometry g;
        final int blocks;
        final HeapMemory.Buf[] regions;

        Pool(HeapMemory mem, PoolGeometry g, int blocks) {
            this.g = g;
            this.blocks = blocks;
            this.regions = new HeapMemory.Buf[g.regionCount(blocks)];
            for (int r = 0; r < regions.length; r++) {
                regions[r] = mem.allocate(g.regionBytes(r, blocks), null);
                java.util.Arrays.fill(regions[r].bytes, UNTOUCHED);
            }
        }

        IntFunction<MemoryBuffer> lookup() {
            return i -> regions[i];
        }

        byte get(int b, int l, int kv, int h, int t, int d, int k) {
            return regions[g.regionOfElement(b, l, kv, d)].get(g.offset(b, l, kv, h, t, d) + k);
        }

        void put(int b, int l, int kv, int h, int t, int d, int k, byte v) {
            regions[g.regionOfElement(b, l, kv, d)].put(g.offset(b, l, kv, h, t, d) + k, v);
        }
    }

    private static byte value(int block, int layer, int kv, int head, int token, int dim, int k) {
        long z = block * 0x9E3779B97F4A7C15L + layer * 0xBF58476D1CE4E5B9L + kv * 0x94D049BB133111EBL
                + head * 0x2545F4914F6CDD1DL + token * 0x632BE59BD9B4E019L + dim * 0x85EBCA77C2B2AE63L + k * 31L;
        z = (z ^ (z >>> 30)) * 0xBF58476D1CE4E5B9L;
        z = (z ^ (z >>> 27)) * 0x94D049BB133111EBL;
        byte v = (byte) (z ^ (z >>> 31));
        return v == UNTOUCHED ? 0 : v;
    }

    private record Case(PoolGeometry sg, PoolGeometry rg, int[] sIds, int[] rIds, int sFirst, int rFirst, int blocks,
                        int sL0, int rL0, int layers, int sH0, int rH0, int heads, boolean idsKnown, long minBoth,
                        long minOne, boolean perPart, long merge) {
        PartPlan plan(boolean sender) {
            return PartPlan.builder()
                    .sender(sg, sender || idsKnown ? sIds : null, sFirst, sL0, sH0)
                    .receiver(rg, !sender || idsKnown ? rIds : null, rFirst, rL0, rH0)
                    .shape(blocks, layers, heads).selfIsSender(sender).policy(minBoth, minOne, perPart)
                    .mergeBlocks(merge).build();
        }
    }

    private static PoolLayout pool(Random rnd, boolean mla, int dims) {
        PoolLayout.Kind k = PoolLayout.Kind.values()[rnd.nextInt(3)];
        if (mla && k != PoolLayout.Kind.BLOCK && rnd.nextBoolean()) {
            return new PoolLayout(k, 1 + rnd.nextInt(dims - 1));
        }
        return PoolLayout.of(k);
    }

    /** Block ids with some consecutive runs, distinct, below the pool size. */
    private static int[] ids(Random rnd, int n, int poolBlocks) {
        List<Integer> free = new ArrayList<>();
        for (int i = 0; i < poolBlocks; i++) {
            free.add(i);
        }
        int[] out = new int[n];
        int i = 0;
        while (i < n) {
            int start = free.get(rnd.nextInt(free.size()));
            int len = 1 + rnd.nextInt(4);
            for (int j = 0; j < len && i < n && free.contains(start + j); j++) {
                out[i++] = start + j;
                free.remove(Integer.valueOf(start + j));
            }
        }
        return out;
    }

    private static Case randomCase(Random rnd) {
        boolean mla = rnd.nextInt(3) == 0;
        int dims = 2 + rnd.nextInt(5);
        int tokens = 1 + rnd.nextInt(4);
        int eb = new int[] {1, 2, 4}[rnd.nextInt(3)];
        int kvF = mla ? 1 : 1 + rnd.nextInt(2);
        int heads = mla ? 1 : 1 + rnd.nextInt(3);
        int sHs = mla ? 1 : heads * (1 + rnd.nextInt(2));
        int rHs = mla ? 1 : heads * (1 + rnd.nextInt(2));
        int layers = 1 + rnd.nextInt(3);
        int sLayers = layers + rnd.nextInt(2);
        int rLayers = layers + rnd.nextInt(2);
        int blocks = rnd.nextInt(6);
        int sBlocks = blocks + rnd.nextInt(2);
        int rBlocks = blocks + rnd.nextInt(2);
        int sPool = sBlocks + 1 + rnd.nextInt(8);
        int rPool = rBlocks + 1 + rnd.nextInt(8);
        PoolLayout sp = pool(rnd, mla, dims);
        PoolLayout rp = pool(rnd, mla, dims);
        BlockLayout sl = new BlockLayout(sLayers, kvF, sHs, tokens, dims, eb);
        BlockLayout rl = new BlockLayout(rLayers, kvF, rHs, tokens, dims, eb);
        PoolGeometry sg = PoolGeometry.of(sl, sp, sp.kind() == PoolLayout.Kind.BLOCK ? 1 + rnd.nextInt(3) : sPool);
        PoolGeometry rg = PoolGeometry.of(rl, rp, rp.kind() == PoolLayout.Kind.BLOCK ? 1 + rnd.nextInt(3) : rPool);
        long[] thresholds = {0, 64, Long.MAX_VALUE};
        return new Case(sg, rg, ids(rnd, sBlocks, sPool), ids(rnd, rBlocks, rPool), sBlocks - blocks,
                rBlocks - blocks, blocks, rnd.nextInt(sLayers - layers + 1), rnd.nextInt(rLayers - layers + 1), layers,
                rnd.nextInt(sHs / heads) * heads, rnd.nextInt(rHs / heads) * heads, heads, rnd.nextBoolean(),
                thresholds[rnd.nextInt(3)], thresholds[rnd.nextInt(3)], rnd.nextBoolean(),
                new long[] {0, 1, 3L * sl.blockBytes() / 2, 3L * sl.blockBytes(), Long.MAX_VALUE}[rnd.nextInt(5)]);
    }

    private static int poolBlocks(PoolGeometry g, int[] ids) {
        int max = 0;
        for (int id : ids) {
            max = Math.max(max, id + 1);
        }
        return max;
    }

    @Test
    void everyPairOfLayoutsMovesEveryElementOfThePartAndNothingElse() {
        Random rnd = new Random(12);
        java.util.EnumMap<PartPlan.Mode, Integer> modes = new java.util.EnumMap<>(PartPlan.Mode.class);
        int joined = 0;
        for (int iter = 0; iter < 3000; iter++) {
            Case c = randomCase(rnd);
            run(c, modes, "case " + iter + " " + c);
            Case unjoined = new Case(c.sg, c.rg, c.sIds, c.rIds, c.sFirst, c.rFirst, c.blocks, c.sL0, c.rL0,
                    c.layers, c.sH0, c.rH0, c.heads, c.idsKnown, c.minBoth, c.minOne, c.perPart, 0);
            joined += c.plan(true).messages() < unjoined.plan(true).messages() ? 1 : 0;
        }
        assertThat(modes.keySet()).as("modes exercised").containsExactlyInAnyOrder(PartPlan.Mode.values());
        assertThat(joined).as("cases where whole blocks joined into fewer messages").isPositive();
    }

    @Test
    void blockPoolsHoldingWholeBlocksJoinThemAndStillMoveEveryElement() {
        Random rnd = new Random(13);
        java.util.EnumMap<PartPlan.Mode, Integer> modes = new java.util.EnumMap<>(PartPlan.Mode.class);
        int joined = 0;
        for (int iter = 0; iter < 1500; iter++) {
            int layers = 1 + rnd.nextInt(3);
            int heads = 1 + rnd.nextInt(3);
            int kvF = 1 + rnd.nextInt(2);
            BlockLayout l = new BlockLayout(layers, kvF, heads, 1 + rnd.nextInt(4), 2 + rnd.nextInt(4),
                    new int[] {1, 2, 4}[rnd.nextInt(3)]);
            int blocks = 1 + rnd.nextInt(8);
            int sBlocks = blocks + rnd.nextInt(2);
            int rBlocks = blocks + rnd.nextInt(2);
            PoolGeometry sg = PoolGeometry.of(l, PoolLayout.BLOCK, 1 + rnd.nextInt(6));
            PoolGeometry rg = PoolGeometry.of(l, PoolLayout.BLOCK, 1 + rnd.nextInt(6));
            long cap = new long[] {1, l.blockBytes(), 2 * l.blockBytes(), 3 * l.blockBytes() + 1, Long.MAX_VALUE}[
                    rnd.nextInt(5)];
            Case c = new Case(sg, rg, ids(rnd, sBlocks, sBlocks + 1 + rnd.nextInt(6)),
                    ids(rnd, rBlocks, rBlocks + 1 + rnd.nextInt(6)), sBlocks - blocks, rBlocks - blocks, blocks, 0,
                    0, layers, 0, 0, heads, true, 0, 0, false, cap);
            run(c, modes, "case " + iter + " " + c);
            joined += c.plan(true).messages() < blocks ? 1 : 0;
        }
        assertThat(modes.keySet()).containsExactly(PartPlan.Mode.BOTH_DIRECT_BLOCKS);
        assertThat(joined).as("cases where whole blocks joined into fewer messages").isGreaterThan(300);
    }

    private static void run(Case c, java.util.Map<PartPlan.Mode, Integer> modes, String what) {
        HeapMemory mem = new HeapMemory();
        Pool src = new Pool(mem, c.sg, poolBlocks(c.sg, c.sIds) + 1);
        Pool dst = new Pool(mem, c.rg, poolBlocks(c.rg, c.rIds) + 1);
        BlockLayout sl = c.sg.blockLayout();
        // Fill the part's elements of the sender with their part coordinates, the rest with other values.
        for (int i = 0; i < c.sIds.length; i++) {
            for (int l = 0; l < sl.localLayers(); l++) {
                for (int kv = 0; kv < sl.kvFactor(); kv++) {
                    for (int h = 0; h < sl.localHeads(); h++) {
                        for (int t = 0; t < sl.tokensPerBlock(); t++) {
                            for (int d = 0; d < sl.sizePerHead(); d++) {
                                for (int k = 0; k < sl.elementBytes(); k++) {
                                    int pi = i - c.sFirst;
                                    int pl = l - c.sL0;
                                    int ph = h - c.sH0;
                                    boolean in = pi >= 0 && pi < c.blocks && pl >= 0 && pl < c.layers && ph >= 0
                                            && ph < c.heads;
                                    src.put(c.sIds[i], l, kv, h, t, d, k, in ? value(pi, pl, kv, ph, t, d, k)
                                            : value(-1 - i, l, kv, h, t, d, k));
                                }
                            }
                        }
                    }
                }
            }
        }
        PartPlan sp = c.plan(true);
        PartPlan rp = c.plan(false);
        assertThat(rp.mode()).as(what).isEqualTo(sp.mode());
        assertThat(rp.messages()).as(what).isEqualTo(sp.messages());
        assertThat(sp.bytes()).isEqualTo((long) c.blocks * c.layers * sl.kvFactor() * c.heads * sl.tokensPerBlock()
                * sl.sizePerHead() * sl.elementBytes());
        modes.merge(sp.mode(), 1, Integer::sum);
        HeapMemory.Buf wire = mem.allocate(sp.bytes(), null);
        PartPlan.Cursor s = sp.cursor();
        PartPlan.Cursor r = rp.cursor();
        int n = 0;
        long covered = 0;
        while (s.next()) {
            assertThat(r.next()).as(what + " receiver has message " + n).isTrue();
            assertThat(r.length()).as(what + " message " + n).isEqualTo(s.length());
            assertThat(r.streamOffset()).as(what + " message " + n).isEqualTo(s.streamOffset());
            assertThat(s.streamOffset()).as(what + " messages in order").isEqualTo(covered);
            covered += s.length();
            if (sp.selfDirect()) {
                mem.copy(src.regions[s.region()], s.offset(), wire, s.streamOffset(), s.length());
            } else {
                s.copy(mem, src.lookup(), wire, s.streamOffset(), false);
            }
            if (rp.selfDirect()) {
                mem.copy(wire, r.streamOffset(), dst.regions[r.region()], r.offset(), r.length());
            } else {
                r.copy(mem, dst.lookup(), wire, r.streamOffset(), true);
            }
            n++;
        }
        assertThat(r.next()).as(what).isFalse();
        assertThat(n).as(what).isEqualTo(sp.messages());
        assertThat(covered).as(what).isEqualTo(sp.bytes());
        BlockLayout rl = c.rg.blockLayout();
        for (int i = 0; i < c.rIds.length; i++) {
            for (int l = 0; l < rl.localLayers(); l++) {
                for (int kv = 0; kv < rl.kvFactor(); kv++) {
                    for (int h = 0; h < rl.localHeads(); h++) {
                        for (int t = 0; t < rl.tokensPerBlock(); t++) {
                            for (int d = 0; d < rl.sizePerHead(); d++) {
                                for (int k = 0; k < rl.elementBytes(); k++) {
                                    int pi = i - c.rFirst;
                                    int pl = l - c.rL0;
                                    int ph = h - c.rH0;
                                    boolean in = pi >= 0 && pi < c.blocks && pl >= 0 && pl < c.layers && ph >= 0
                                            && ph < c.heads;
                                    byte got = dst.get(c.rIds[i], l, kv, h, t, d, k);
                                    byte want = in ? value(pi, pl, kv, ph, t, d, k) : UNTOUCHED;
                                    if (got != want) {
                                        throw new AssertionError(what + " " + sp + ": receiver block #" + i + " layer "
                                                + l + " kv " + kv + " head " + h + " token " + t + " dim " + d
                                                + " byte " + k + (in ? " (in the part)" : " (outside)") + ": got "
                                                + got + ", want " + want);
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }

    private static PoolGeometry g(BlockLayout l, PoolLayout p, int bpr) {
        return PoolGeometry.of(l, p, bpr);
    }

    private static int[] range(int from, int n) {
        int[] a = new int[n];
        for (int i = 0; i < n; i++) {
            a[i] = from + i;
        }
        return a;
    }

    @Test
    void layerNhdOnBothSidesCoalescesRunsConsecutiveOnBothSides() {
        // 8 heads, 2 layers, K+V; ids consecutive except one break on the receiver.
        BlockLayout l = new BlockLayout(2, 2, 8, 16, 128, 2);
        int[] s = range(10, 8);
        int[] r = {3, 4, 5, 6, 20, 21, 22, 23};
        PartPlan p = PartPlan.builder().sender(g(l, PoolLayout.LAYER_NHD, 64), s, 0, 0, 0)
                .receiver(g(l, PoolLayout.LAYER_NHD, 64), r, 0, 0, 0).shape(8, 2, 8).selfIsSender(true).build();
        assertThat(p.mode()).isEqualTo(PartPlan.Mode.BOTH_DIRECT_RUNS);
        assertThat(p.messages()).isEqualTo(2 * 2 * 2); // 2 runs x (2 layers x K,V)
        PartPlan.Cursor c = p.cursor();
        assertThat(c.next()).isTrue();
        assertThat(c.length()).isEqualTo(4 * l.planeBytes());
        assertThat(c.region()).isZero();
        assertThat(c.offset()).isEqualTo(10 * l.planeBytes());
        PartPlan without = PartPlan.builder().sender(g(l, PoolLayout.LAYER_NHD, 64), s, 0, 0, 0)
                .receiver(g(l, PoolLayout.LAYER_NHD, 64), null, 0, 0, 0).shape(8, 2, 8).selfIsSender(true).build();
        assertThat(without.mode()).isEqualTo(PartPlan.Mode.BOTH_DIRECT_BLOCKS);
        assertThat(without.messages()).isEqualTo(8 * 2 * 2);
    }

    @Test
    void blockPoolsMoveWholeRowsOneMessagePerBlock() {
        BlockLayout l = new BlockLayout(4, 2, 8, 16, 128, 2);
        PartPlan p = PartPlan.builder().sender(g(l, PoolLayout.BLOCK, 16), range(0, 5), 0, 0, 0)
                .receiver(g(l, PoolLayout.BLOCK, 16), range(0, 5), 0, 0, 0).shape(5, 4, 8).selfIsSender(false)
                .build();
        assertThat(p.mode()).isEqualTo(PartPlan.Mode.BOTH_DIRECT_BLOCKS);
        assertThat(p.messages()).isEqualTo(5);
        // TP2 -> TP1: the receiver's units are 4 of its 8 heads: one message per (layer, kv) when both go direct.
        BlockLayout half = new BlockLayout(4, 2, 4, 16, 128, 2);
        PartPlan both = PartPlan.builder().sender(g(half, PoolLayout.BLOCK, 1), range(0, 5), 0, 0, 0)
                .receiver(g(l, PoolLayout.BLOCK, 1), range(0, 5), 0, 0, 4).shape(5, 4, 4).selfIsSender(false).build();
        assertThat(both.mode()).isEqualTo(PartPlan.Mode.BOTH_DIRECT_BLOCKS);
        assertThat(both.messages()).isEqualTo(5 * 4 * 2);
        PartPlan one = PartPlan.builder().sender(g(half, PoolLayout.BLOCK, 1), range(0, 5), 0, 0, 0)
                .receiver(g(l, PoolLayout.BLOCK, 1), range(0, 5), 0, 0, 4).shape(5, 4, 4).selfIsSender(false)
                .policy(Long.MAX_VALUE, 0, false).build();
        assertThat(one.mode()).isEqualTo(PartPlan.Mode.ONE_DIRECT_BLOCKS);
        assertThat(one.peerDirect()).isTrue();
        assertThat(one.selfDirect()).isFalse();
        assertThat(one.messages()).isEqualTo(5);
    }

    @Test
    void blockPoolsJoinWholeBlocksAdjacentInBothPoolsUpToTheCap() {
        BlockLayout l = new BlockLayout(4, 2, 8, 16, 128, 2);
        long row = l.blockBytes();
        // 8 blocks, consecutive on both sides, one region each: one message of all of them.
        PartPlan all = PartPlan.builder().sender(g(l, PoolLayout.BLOCK, 64), range(0, 8), 0, 0, 0)
                .receiver(g(l, PoolLayout.BLOCK, 64), range(20, 8), 0, 0, 0).shape(8, 4, 8).selfIsSender(true)
                .mergeBlocks(1L << 30).build();
        assertThat(all.mode()).isEqualTo(PartPlan.Mode.BOTH_DIRECT_BLOCKS);
        assertThat(all.messages()).isEqualTo(1);
        PartPlan.Cursor c = all.cursor();
        assertThat(c.next()).isTrue();
        assertThat(c.length()).isEqualTo(8 * row);
        assertThat(c.offset()).isZero();
        assertThat(c.next()).isFalse();
        // A region boundary of the receiver (16 blocks per region: 20..31 | 32..) and an id break of the sender
        // (4 -> 9) split it; the cap of 3 rows splits the rest.
        PartPlan split = PartPlan.builder().sender(g(l, PoolLayout.BLOCK, 64), new int[] {0, 1, 2, 3, 4, 9, 10, 11},
                        0, 0, 0).receiver(g(l, PoolLayout.BLOCK, 16), range(26, 8), 0, 0, 0).shape(8, 4, 8)
                .selfIsSender(false).mergeBlocks(3 * row).build();
        List<Long> lengths = new ArrayList<>();
        List<Long> offsets = new ArrayList<>();
        PartPlan.Cursor s = split.cursor();
        while (s.next()) {
            lengths.add(s.length() / row);
            offsets.add(s.offset() / row);
        }
        // receiver ids 26..31 | 32, 33; sender 0..4 | 9..11: breaks before part blocks 5 (both) and 6 (region).
        assertThat(lengths).containsExactly(3L, 2L, 1L, 2L);
        assertThat(offsets).containsExactly(10L, 13L, 15L, 0L);
        assertThat(split.messages()).isEqualTo(4);
        // Without the peer's ids, or with merging off, one message per block.
        PartPlan noIds = PartPlan.builder().sender(g(l, PoolLayout.BLOCK, 64), range(0, 8), 0, 0, 0)
                .receiver(g(l, PoolLayout.BLOCK, 64), null, 0, 0, 0).shape(8, 4, 8).selfIsSender(true)
                .mergeBlocks(1L << 30).build();
        assertThat(noIds.messages()).isEqualTo(8);
        // A head subset (TP2 -> TP1) is not a whole row: nothing joins across blocks.
        BlockLayout half = new BlockLayout(4, 2, 4, 16, 128, 2);
        PartPlan heads = PartPlan.builder().sender(g(half, PoolLayout.BLOCK, 64), range(0, 5), 0, 0, 0)
                .receiver(g(l, PoolLayout.BLOCK, 64), range(0, 5), 0, 0, 4).shape(5, 4, 4).selfIsSender(false)
                .mergeBlocks(1L << 30).build();
        assertThat(heads.messages()).isEqualTo(5 * 4 * 2);
        assertThat(all.toString()).contains("whole blocks joined");
    }

    @Test
    void layerNhdToBlockStagesOnTheTransposingSenderAndReceivesRowsInPlace() {
        BlockLayout l = new BlockLayout(2, 2, 8, 16, 128, 2);
        PartPlan p = PartPlan.builder().sender(g(l, PoolLayout.LAYER_NHD, 64), range(0, 6), 0, 0, 0)
                .receiver(g(l, PoolLayout.BLOCK, 6), range(0, 6), 0, 0, 0).shape(6, 2, 8).selfIsSender(true).build();
        assertThat(p.mode()).isEqualTo(PartPlan.Mode.ONE_DIRECT_BLOCKS);
        assertThat(p.selfDirect()).isFalse();
        assertThat(p.peerDirect()).isTrue();
        assertThat(p.messages()).isEqualTo(6);
    }

    @Test
    void sameStreamOnlyForTheSameBytesInTheSameMessages() {
        BlockLayout l = new BlockLayout(2, 2, 8, 16, 128, 2);
        BlockLayout half = new BlockLayout(2, 2, 4, 16, 128, 2);
        int[] ids = range(0, 6);
        // Two peers holding the same 4 of our 8 heads (duplicated on their side), one with a broken id run.
        PartPlan a = PartPlan.builder().sender(g(l, PoolLayout.LAYER_NHD, 64), ids, 0, 0, 4)
                .receiver(g(half, PoolLayout.LAYER_NHD, 64), range(10, 6), 0, 0, 0).shape(6, 2, 4)
                .selfIsSender(true).build();
        PartPlan b = PartPlan.builder().sender(g(l, PoolLayout.LAYER_NHD, 64), ids, 0, 0, 4)
                .receiver(g(half, PoolLayout.LAYER_NHD, 64), range(30, 6), 0, 0, 0).shape(6, 2, 4)
                .selfIsSender(true).build();
        PartPlan c = PartPlan.builder().sender(g(l, PoolLayout.LAYER_NHD, 64), ids, 0, 0, 4)
                .receiver(g(half, PoolLayout.LAYER_NHD, 64), new int[] {1, 2, 3, 9, 10, 11}, 0, 0, 0)
                .shape(6, 2, 4).selfIsSender(true).build();
        PartPlan d = PartPlan.builder().sender(g(l, PoolLayout.LAYER_NHD, 64), ids, 0, 0, 0)
                .receiver(g(half, PoolLayout.LAYER_NHD, 64), range(10, 6), 0, 0, 0).shape(6, 2, 4)
                .selfIsSender(true).build();
        assertThat(a.selfDirect()).as("a head subset of a token-major pool is staged").isFalse();
        assertThat(a.sameStream(b)).isTrue();
        assertThat(a.sameStream(c)).as("the runs split elsewhere").isFalse();
        assertThat(a.sameStream(d)).as("other heads").isFalse();
    }

    @Test
    void emptyPartsHaveNoMessages() {
        BlockLayout l = new BlockLayout(2, 2, 8, 16, 128, 2);
        PartPlan p = PartPlan.builder().sender(g(l, PoolLayout.LAYER_NHD, 64), range(0, 6), 6, 0, 0)
                .receiver(g(l, PoolLayout.BLOCK, 6), range(0, 6), 6, 0, 0).shape(0, 2, 8).selfIsSender(true).build();
        assertThat(p.mode()).isEqualTo(PartPlan.Mode.EMPTY);
        assertThat(p.cursor().next()).isFalse();
        assertThat(p.bytes()).isZero();
    }
}
