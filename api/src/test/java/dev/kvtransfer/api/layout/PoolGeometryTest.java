package dev.kvtransfer.api.layout;

import dev.kvtransfer.api.cache.KvCacheView;
import dev.kvtransfer.api.memory.MemoryBuffer;
import org.junit.jupiter.api.Test;

import java.util.BitSet;
import java.util.List;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatExceptionOfType;
import static org.assertj.core.api.Assertions.assertThatIllegalArgumentException;

/** {@link PoolGeometry}: offsets worked by hand for every pool kind, and every byte covered exactly once. */
class PoolGeometryTest {
    // 2 layers, K+V, 3 heads, 4 tokens, 5 dims, 2-byte elements: plane 120 B, block 480 B.
    private static final BlockLayout L = new BlockLayout(2, 2, 3, 4, 5, 2);

    @Test
    void blockPoolIsBlockLayoutInsideChunksOfBlocks() {
        PoolGeometry g = PoolGeometry.of(L, PoolLayout.BLOCK, 4);
        assertThat(g.regionCount(10)).isEqualTo(3);
        assertThat(g.regionBytes(2, 10)).isEqualTo(2 * 480);
        assertThat(g.region(5, 1, 1, 0)).isEqualTo(1);
        assertThat(g.planeOffset(5, 1, 1, 0)).isEqualTo(480 + 240 + 120);
        assertThat(g.offset(5, 1, 1, 2, 3, 4)).isEqualTo(480 + L.offset(1, 1, 2, 3, 4));
        assertThat(g.headStride(0)).isEqualTo(40);
        assertThat(g.tokenStride(0)).isEqualTo(10);
        assertThat(g.blockStride(0)).isEqualTo(480);
        assertThat(g.adjacent(4, 5)).isTrue();
        assertThat(g.adjacent(3, 4)).as("different chunk").isFalse();
        assertThat(g.planesPerGroup()).isEqualTo(1);
    }

    @Test
    void layerNhdIsTokenHeadDimPerLayerAndKv() {
        PoolGeometry g = PoolGeometry.of(L, PoolLayout.LAYER_NHD, 10);
        assertThat(g.regionCount(10)).isEqualTo(4); // (layer, kv)
        assertThat(g.regionBytes(3, 10)).isEqualTo(10 * 120);
        assertThat(g.region(7, 1, 0, 0)).isEqualTo(2);
        assertThat(g.planeOffset(7, 1, 0, 0)).isEqualTo(7 * 120);
        // [token][head][dim]: token 3, head 2, dim 4
        assertThat(g.offset(7, 1, 0, 2, 3, 4)).isEqualTo(7 * 120 + ((3 * 3 + 2) * 5 + 4) * 2);
        assertThat(g.tokenStride(0)).isEqualTo(30);
        assertThat(g.headStride(0)).isEqualTo(10);
        assertThat(g.tokensOuter()).isTrue();
    }

    @Test
    void layerHndIsHeadTokenDimPerLayerAndKv() {
        PoolGeometry g = PoolGeometry.of(L, PoolLayout.LAYER_HND, 10);
        assertThat(g.offset(7, 1, 1, 2, 3, 4)).isEqualTo(7 * 120 + ((2 * 4 + 3) * 5 + 4) * 2);
        assertThat(g.region(7, 1, 1, 0)).isEqualTo(3);
        assertThat(g.tokensOuter()).isFalse();
    }

    @Test
    void chunkedLayerPoolNumbersRegionsGroupMajor() {
        PoolGeometry g = PoolGeometry.of(L, PoolLayout.LAYER_HND, 4);
        assertThat(g.regionCount(10)).isEqualTo(3 * 4);
        assertThat(g.region(5, 0, 1, 0)).isEqualTo(4 + 1);
        assertThat(g.planeOffset(5, 0, 1, 0)).isEqualTo(120);
        assertThat(g.regionBytes(8, 10)).isEqualTo(2 * 120);
    }

    @Test
    void splitLatentHasNopeAndRopeRegions() {
        // MLA: 3 layers, kv 1, 1 head, 4 tokens, latent 10 of which rope 4, 2 bytes.
        BlockLayout mla = new BlockLayout(3, 1, 1, 4, 10, 2);
        PoolGeometry g = PoolGeometry.of(mla, new PoolLayout(PoolLayout.Kind.LAYER_NHD, 4), 8);
        assertThat(g.segments()).isEqualTo(2);
        assertThat(g.segmentDims(0)).isEqualTo(6);
        assertThat(g.segmentFirstDim(1)).isEqualTo(6);
        assertThat(g.segmentDims(1)).isEqualTo(4);
        assertThat(g.regionCount(8)).isEqualTo(6);
        assertThat(g.regionBytes(0, 8)).isEqualTo(8 * 4 * 6 * 2);
        assertThat(g.regionBytes(1, 8)).isEqualTo(8 * 4 * 4 * 2);
        assertThat(g.segmentOf(5)).isZero();
        assertThat(g.segmentOf(6)).isEqualTo(1);
        assertThat(g.regionOfElement(2, 1, 0, 7)).isEqualTo(3);
        assertThat(g.offset(2, 1, 0, 0, 3, 7)).isEqualTo(2 * 32 + (3 * 4 + 1) * 2);
        assertThat(g.offset(2, 1, 0, 0, 3, 5)).isEqualTo(2 * 48 + (3 * 6 + 5) * 2);
    }

    @Test
    void everyElementHasOneByteRangeAndTheRegionsAreCoveredExactly() {
        BlockLayout mla = new BlockLayout(2, 1, 1, 3, 7, 2);
        for (PoolGeometry g : List.of(PoolGeometry.of(L, PoolLayout.BLOCK, 3), PoolGeometry.of(L, PoolLayout.BLOCK, 1),
                PoolGeometry.of(L, PoolLayout.LAYER_NHD, 5), PoolGeometry.of(L, PoolLayout.LAYER_HND, 2),
                PoolGeometry.of(mla, new PoolLayout(PoolLayout.Kind.LAYER_HND, 3), 5),
                PoolGeometry.of(mla, new PoolLayout(PoolLayout.Kind.LAYER_NHD, 2), 4))) {
            int n = 5;
            BlockLayout b = g.blockLayout();
            BitSet[] seen = new BitSet[g.regionCount(n)];
            long total = 0;
            for (int r = 0; r < seen.length; r++) {
                seen[r] = new BitSet();
                total += g.regionBytes(r, n);
            }
            assertThat(total).as("%s bytes", g).isEqualTo(n * b.blockBytes());
            int eb = b.elementBytes();
            for (int blk = 0; blk < n; blk++) {
                for (int l = 0; l < b.localLayers(); l++) {
                    for (int kv = 0; kv < b.kvFactor(); kv++) {
                        for (int h = 0; h < b.localHeads(); h++) {
                            for (int t = 0; t < b.tokensPerBlock(); t++) {
                                for (int d = 0; d < b.sizePerHead(); d++) {
                                    int r = g.regionOfElement(blk, l, kv, d);
                                    long off = g.offset(blk, l, kv, h, t, d);
                                    assertThat(off + eb).isLessThanOrEqualTo(g.regionBytes(r, n));
                                    assertThat(seen[r].get((int) off)).as("%s overlap", g).isFalse();
                                    seen[r].set((int) off, (int) off + eb);
                                }
                            }
                        }
                    }
                }
            }
            for (int r = 0; r < seen.length; r++) {
                assertThat(seen[r].cardinality()).as("%s region %d covered", g, r).isEqualTo(g.regionBytes(r, n));
            }
        }
    }

    @Test
    void rejectsNonsense() {
        assertThatIllegalArgumentException().isThrownBy(() -> PoolGeometry.of(L, PoolLayout.BLOCK, 0))
                .withMessageContaining("blocksPerRegion");
        assertThatIllegalArgumentException().isThrownBy(() -> PoolGeometry.of(new BlockLayout(1, 1, 1, 1, 4, 1),
                new PoolLayout(PoolLayout.Kind.LAYER_NHD, 4), 1)).withMessageContaining("ropeDim");
        assertThatExceptionOfType(IndexOutOfBoundsException.class)
                .isThrownBy(() -> PoolGeometry.of(L, PoolLayout.BLOCK, 1).segmentDims(1));
    }

    @Test
    void anOldViewIsABlockPoolWhoseRegionsAreItsBlocks() {
        HeapMemory mem = new HeapMemory();
        MemoryBuffer[] blocks = {mem.allocate(L.blockBytes(), null), mem.allocate(L.blockBytes(), null)};
        KvCacheView old = new KvCacheView() {
            @Override
            public BlockLayout layout() {
                return L;
            }

            @Override
            public MemoryBuffer block(int blockId) {
                return blocks[blockId];
            }

            @Override
            public int blockCount() {
                return 2;
            }
        };
        assertThat(old.poolLayout()).isEqualTo(PoolLayout.BLOCK);
        assertThat(old.blocksPerRegion()).isEqualTo(1);
        assertThat(old.regionCount()).isEqualTo(2);
        assertThat(old.regions()).containsExactly(blocks[0], blocks[1]);
        MemoryBuffer plane = old.planeSegment(1, 1, 1, 0);
        assertThat(plane.address()).isEqualTo(blocks[1].address() + 360);
        assertThat(plane.size()).isEqualTo(120);
        assertThatExceptionOfType(IndexOutOfBoundsException.class).isThrownBy(() -> old.planeSegment(0, 0, 0, 1));
    }

    @Test
    void aViewWithAnotherGeometryMustImplementRegion() {
        KvCacheView v = new KvCacheView() {
            @Override
            public BlockLayout layout() {
                return L;
            }

            @Override
            public MemoryBuffer block(int blockId) {
                throw new UnsupportedOperationException();
            }

            @Override
            public int blockCount() {
                return 2;
            }

            @Override
            public PoolLayout poolLayout() {
                return PoolLayout.LAYER_NHD;
            }

            @Override
            public int blocksPerRegion() {
                return 2;
            }
        };
        assertThatExceptionOfType(UnsupportedOperationException.class).isThrownBy(() -> v.region(0))
                .withMessageContaining("layer-nhd").withMessageContaining("region(int)");
    }
}
