package dev.kvtransfer.formatter.support;

import dev.kvtransfer.api.layout.BlockLayout;
import dev.kvtransfer.api.layout.PoolGeometry;
import dev.kvtransfer.api.layout.PoolLayout;
import dev.kvtransfer.api.memory.MemoryBuffer;
import net.jqwik.api.Arbitraries;
import net.jqwik.api.Arbitrary;
import net.jqwik.api.ForAll;
import net.jqwik.api.Property;
import net.jqwik.api.Provide;
import net.jqwik.api.constraints.IntRange;

import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.List;
import java.util.Random;
import java.util.zip.CRC32C;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * {@link ChunkCrc} gives exactly the CRC32C of a separate pass over the message, whatever the chunk boundaries: a
 * message shorter than a chunk, exactly one chunk, one chunk and one byte, many chunks, at odd offsets, with the
 * bytes placed in pieces of any size; through its own chunked copy (summing either side); and through the fused
 * gather / scatter of {@link PartPlan.Cursor} over staged parts of random pool layouts.
 */
class ChunkCrcPropertiesTest {

    /** How a message's length relates to the chunk. */
    enum LengthClass { EMPTY, ONE_BYTE, SHORTER, EXACTLY_ONE, ONE_PLUS_ONE, MANY, MANY_PLUS_ODD }

    private static long length(LengthClass c, long chunk, int many) {
        return switch (c) {
            case EMPTY -> 0;
            case ONE_BYTE -> 1;
            case SHORTER -> Math.max(1, chunk - 1);
            case EXACTLY_ONE -> chunk;
            case ONE_PLUS_ONE -> chunk + 1;
            case MANY -> chunk * many;
            case MANY_PLUS_ODD -> chunk * many + 3;
        };
    }

    private static int separatePass(MemoryBuffer b, long offset, long length) {
        CRC32C crc = new CRC32C();
        ByteBuffer v = b.asByteBuffer();
        v.limit((int) (offset + length)).position((int) offset);
        crc.update(v);
        return (int) crc.getValue();
    }

    private static HeapMemory.Buf random(HeapMemory mem, long size, long seed) {
        HeapMemory.Buf b = mem.allocate(size, null);
        new Random(seed).nextBytes(b.bytes);
        return b;
    }

    @Property(tries = 400)
    void summingPlacedPiecesEqualsOneSeparatePass(@ForAll LengthClass lengthClass,
                                                  @ForAll("chunks") long chunk,
                                                  @ForAll @IntRange(min = 2, max = 9) int many,
                                                  @ForAll @IntRange(min = 0, max = 17) int offset,
                                                  @ForAll @IntRange(min = 1, max = 5000) int piece,
                                                  @ForAll long seed) {
        long length = length(lengthClass, chunk, many);
        HeapMemory mem = new HeapMemory();
        HeapMemory.Buf b = random(mem, offset + length + 7, seed);
        ChunkCrc crc = new ChunkCrc(chunk).begin(b, offset, length);
        // Pieces of varying size, as slices of different segments would be placed.
        Random rnd = new Random(seed ^ piece);
        for (long at = offset; at < offset + length; ) {
            at = Math.min(offset + length, at + 1 + rnd.nextInt(piece));
            crc.placed(at);
        }
        assertThat(crc.finish()).isEqualTo(separatePass(b, offset, length));
    }

    @Property(tries = 300)
    void chunkedCopyMovesEveryByteAndSumsEitherSide(@ForAll LengthClass lengthClass,
                                                    @ForAll("chunks") long chunk,
                                                    @ForAll @IntRange(min = 2, max = 9) int many,
                                                    @ForAll @IntRange(min = 0, max = 17) int srcOffset,
                                                    @ForAll @IntRange(min = 0, max = 17) int dstOffset,
                                                    @ForAll boolean sumSource,
                                                    @ForAll long seed) {
        long length = length(lengthClass, chunk, many);
        HeapMemory mem = new HeapMemory();
        HeapMemory.Buf src = random(mem, srcOffset + length + 5, seed);
        HeapMemory.Buf dst = mem.allocate(dstOffset + length + 5, null);
        ChunkCrc crc = new ChunkCrc(chunk);
        if (sumSource) {
            crc.begin(src, srcOffset, length);
        } else {
            crc.begin(dst, dstOffset, length);
        }
        crc.copy(mem, src, srcOffset, dst, dstOffset, length, sumSource);
        int got = crc.finish();
        for (long i = 0; i < length; i++) {
            assertThat(dst.get(dstOffset + i)).isEqualTo(src.get(srcOffset + i));
        }
        assertThat(got).isEqualTo(separatePass(src, srcOffset, length));
        // One summer serves message after message of the same buffer (the view is kept): still exact.
        assertThat(crc.begin(src, 0, src.size()).finish()).isEqualTo(separatePass(src, 0, src.size()));
    }

    /** A staged part between two pool layouts: layouts, heads, blocks, which side this rank is. */
    record Part(PoolLayout s, PoolLayout r, int blocks, int layers, int heads, int tokens, int dim, int eb,
                boolean headSubset, boolean sender, long chunk) {
    }

    @Provide
    Arbitrary<Long> chunks() {
        return Arbitraries.of(1L, 2L, 7L, 64L, 100L, 4096L, 65536L);
    }

    @Provide
    Arbitrary<Part> parts() {
        PoolLayout[] layouts = {PoolLayout.BLOCK, PoolLayout.LAYER_NHD, PoolLayout.LAYER_HND};
        int[] one248 = {1, 2, 4};
        int[] tokens = {1, 3, 8};
        int[] dims = {1, 5, 16};
        long[] chunks = {1, 7, 100, 1024, 65536};
        return Arbitraries.longs().map(seed -> {
            Random r = new Random(seed);
            return new Part(layouts[r.nextInt(layouts.length)], layouts[r.nextInt(layouts.length)], 1 + r.nextInt(5),
                    1 + r.nextInt(3), one248[r.nextInt(3)], tokens[r.nextInt(3)], dims[r.nextInt(3)],
                    one248[r.nextInt(3)], r.nextBoolean(), r.nextBoolean(), chunks[r.nextInt(chunks.length)]);
        });
    }

    @Property(tries = 300)
    void fusedGatherAndScatterSumExactlyTheWireBytes(@ForAll("parts") Part p, @ForAll boolean direct,
                                                     @ForAll long seed) {
        HeapMemory mem = new HeapMemory();
        int poolHeads = p.headSubset() ? 2 * p.heads() : p.heads();
        BlockLayout l = new BlockLayout(p.layers(), 2, poolHeads, p.tokens(), p.dim(), p.eb());
        PoolLayout self = p.sender() ? p.s() : p.r();
        PoolGeometry sg = PoolGeometry.of(l, p.s(), p.blocks() + 1);
        PoolGeometry rg = PoolGeometry.of(l, p.r(), p.blocks() + 1);
        int[] ids = new int[p.blocks()];
        for (int i = 0; i < ids.length; i++) {
            ids[i] = i + 1;
        }
        int firstHead = p.headSubset() ? p.heads() : 0;
        PartPlan plan = PartPlan.builder().sender(sg, ids, 0, 0, firstHead).receiver(rg, ids, 0, 0, firstHead)
                .shape(p.blocks(), p.layers(), p.heads()).selfIsSender(p.sender())
                .policy(direct ? 0 : Long.MAX_VALUE, direct ? 0 : Long.MAX_VALUE, false).build();
        PoolGeometry g = p.sender() ? sg : rg;
        List<MemoryBuffer> regions = new ArrayList<>();
        for (int i = 0; i < g.regionCount(p.blocks() + 1); i++) {
            regions.add(random(mem, g.regionBytes(i, p.blocks() + 1), seed + i));
        }
        HeapMemory.Buf wire = random(mem, plan.bytes() + 9, ~seed);
        long base = 3 + (seed & 5); // odd and even offsets of the message in staging
        ChunkCrc crc = new ChunkCrc(p.chunk());
        PartPlan.Cursor c = plan.cursor();
        int messages = 0;
        while (c.next()) {
            long at = base;
            c.copy(mem, regions::get, wire, at, !p.sender(), crc.begin(wire, at, c.length()));
            assertThat(crc.finish()).as("message %d of %s, %s", messages, plan, p)
                    .isEqualTo(separatePass(wire, at, c.length()));
            messages++;
        }
        assertThat(messages).isEqualTo(plan.messages());
    }
}
