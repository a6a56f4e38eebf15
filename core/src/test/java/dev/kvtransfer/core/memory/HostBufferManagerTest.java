package dev.kvtransfer.core.memory;

import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.memory.MemoryKind;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

class HostBufferManagerTest {
    private final HostBufferManager mm = new HostBufferManager();

    @AfterEach
    void noLeaks() {
        mm.close();
    }

    @Test
    void preTouchWritesOneZeroPerPageInsideTheRangeOnly() {
        long size = 4 * 4096;
        try (MemoryBuffer b = mm.allocate(size, MemoryKind.HOST)) {
            MemoryAccess.fill(b.address(), size, (byte) 0x5A);
            long from = 10;
            long to = 3 * 4096 + 50;
            MemoryAccess.preTouch(b.address() + from, to - from);
            for (long i = 0; i < size; i++) {
                boolean touched = i == from || (i >= from && i < to && i % 4096 == 0);
                assertThat(MemoryAccess.getByte(b.address() + i)).as("byte %d", i)
                        .isEqualTo(touched ? (byte) 0 : (byte) 0x5A);
            }
            MemoryAccess.preTouch(b.address(), 0); // empty range: nothing written
            assertThat(MemoryAccess.getByte(b.address())).isEqualTo((byte) 0x5A);
        }
    }

    @Test
    void allocatesPageAlignedWritableMemoryOfBothHostKinds() {
        for (MemoryKind kind : new MemoryKind[] {MemoryKind.HOST, MemoryKind.PINNED_HOST}) {
            for (long size : new long[] {0, 1, 7, 4095, 4096, 4097, 1 << 20}) {
                try (MemoryBuffer b = mm.allocate(size, kind)) {
                    assertThat(b.size()).isEqualTo(size);
                    assertThat(b.kind()).isEqualTo(kind);
                    assertThat(b.address() % HostBufferManager.PAGE_SIZE).isZero();
                    // Contents are unspecified (not zeroed); every byte must be writable and read back.
                    for (long i = 0; i < size; i += 511) {
                        MemoryAccess.putByte(b.address() + i, (byte) (i * 31 + 7));
                    }
                    for (long i = 0; i < size; i += 511) {
                        assertThat(MemoryAccess.getByte(b.address() + i)).isEqualTo((byte) (i * 31 + 7));
                    }
                }
            }
        }
        assertThat(mm.outstandingBuffers()).isZero();
        assertThat(mm.outstandingBytes()).isZero();
    }

    @Test
    void deviceMemoryIsRefusedClearly() {
        assertThatThrownBy(() -> mm.allocate(16, MemoryKind.DEVICE))
                .isInstanceOf(UnsupportedOperationException.class).hasMessageContaining("DEVICE");
        assertThatThrownBy(() -> mm.allocate(-1, MemoryKind.HOST)).isInstanceOf(IllegalArgumentException.class);
    }

    @Test
    void byteBufferIsDirectLittleEndianOverTheSameMemory() {
        try (MemoryBuffer b = mm.allocate(64, MemoryKind.HOST)) {
            ByteBuffer bb = b.asByteBuffer();
            assertThat(bb.isDirect()).isTrue();
            assertThat(bb.order()).isEqualTo(ByteOrder.LITTLE_ENDIAN);
            assertThat(bb.position()).isZero();
            assertThat(bb.capacity()).isEqualTo(64);
            assertThat(bb.limit()).isEqualTo(64);
            assertThat(MemoryAccess.address(bb)).isEqualTo(b.address());
            bb.putLong(8, 0x0102030405060708L);
            assertThat(MemoryAccess.getByte(b.address() + 8)).isEqualTo((byte) 0x08);
            assertThat(MemoryAccess.getLong(b.address() + 8)).isEqualTo(0x0102030405060708L);
            MemoryAccess.putInt(b.address() + 20, 0xCAFEBABE);
            assertThat(bb.getInt(20)).isEqualTo(0xCAFEBABE);

            MemoryBuffer s = b.slice(16, 32);
            ByteBuffer sb = s.asByteBuffer();
            assertThat(sb.capacity()).isEqualTo(32);
            assertThat(sb.getInt(4)).isEqualTo(0xCAFEBABE);
        }
    }

    @Test
    void slicesAreNonOwningBoundsCheckedViews() {
        MemoryBuffer b = mm.allocate(100, MemoryKind.HOST);
        MemoryBuffer s = b.slice(10, 50);
        assertThat(s.address()).isEqualTo(b.address() + 10);
        assertThat(s.size()).isEqualTo(50);
        MemoryBuffer ss = s.slice(5, 45);
        assertThat(ss.address()).isEqualTo(b.address() + 15);
        assertThat(b.slice(100, 0).size()).isZero();
        assertThatThrownBy(() -> b.slice(90, 11)).isInstanceOf(IndexOutOfBoundsException.class);
        assertThatThrownBy(() -> s.slice(-1, 2)).isInstanceOf(IndexOutOfBoundsException.class);
        assertThatThrownBy(() -> s.slice(0, 51)).isInstanceOf(IndexOutOfBoundsException.class);
        s.close();
        ss.close();
        assertThat(mm.outstandingBuffers()).isEqualTo(1);
        MemoryAccess.putByte(s.address(), (byte) 1); // still valid: the view's close did nothing
        b.close();
        b.close(); // idempotent
        assertThat(mm.outstandingBuffers()).isZero();
        assertThatThrownBy(s::address).isInstanceOf(IllegalStateException.class).hasMessageContaining("closed");
        assertThatThrownBy(b::asByteBuffer).isInstanceOf(IllegalStateException.class);
    }

    @Test
    void copyMovesBytesAcrossChunksAndChecksBounds() {
        long size = 3 * MemoryAccess.COPY_CHUNK + 12345;
        try (MemoryBuffer a = mm.allocate(size, MemoryKind.HOST);
             MemoryBuffer b = mm.allocate(size + 3, MemoryKind.PINNED_HOST)) {
            for (long i = 0; i < size; i++) {
                MemoryAccess.putByte(a.address() + i, (byte) (i * 31 + 7));
            }
            mm.copy(a, 0, b, 3, size);
            mm.synchronize();
            assertBytes(b.address() + 3, size, i -> (byte) (i * 31 + 7));
            mm.copy(a.slice(1, 10), 0, b, 0, 0);
            assertThatThrownBy(() -> mm.copy(a, 1, b, 0, size)).isInstanceOf(IndexOutOfBoundsException.class);
            assertThatThrownBy(() -> mm.copy(a, 0, b, 4, size)).isInstanceOf(IndexOutOfBoundsException.class);
            assertThatThrownBy(() -> mm.copy(a, -1, b, 0, 1)).isInstanceOf(IndexOutOfBoundsException.class);
            assertThatThrownBy(() -> mm.copy(a, 0, b, 0, -1)).isInstanceOf(IndexOutOfBoundsException.class);
        }
    }

    private interface ByteAt {
        byte at(long index);
    }

    /** Checks every byte; one assertion for the first difference (an AssertJ call per byte is slow). */
    private static void assertBytes(long address, long n, ByteAt expected) {
        for (long i = 0; i < n; i++) {
            byte got = MemoryAccess.getByte(address + i);
            if (got != expected.at(i)) {
                assertThat(got).as("byte %d of %d", i, n).isEqualTo(expected.at(i));
            }
        }
    }

    @Test
    void overlappingCopiesBehaveLikeMemmove() {
        long n = 2 * MemoryAccess.COPY_CHUNK + 100;
        try (MemoryBuffer a = mm.allocate(n + 1000, MemoryKind.HOST)) {
            for (long i = 0; i < n; i++) {
                MemoryAccess.putByte(a.address() + i, (byte) (i % 251));
            }
            mm.copy(a, 0, a, 1000, n); // forward overlap: must copy back to front
            assertBytes(a.address() + 1000, n, i -> (byte) (i % 251));
            mm.copy(a, 1000, a, 0, n); // backward overlap
            assertBytes(a.address(), n, i -> (byte) (i % 251));
        }
    }

    @Test
    void closeFailsListingOutstandingBuffersAndSucceedsOnceTheyAreClosed() {
        HostBufferManager m = new HostBufferManager(true);
        MemoryBuffer a = m.allocate(1234, MemoryKind.HOST);
        MemoryBuffer b = m.allocate(77, MemoryKind.PINNED_HOST);
        assertThatThrownBy(m::close).isInstanceOf(IllegalStateException.class)
                .hasMessageContaining("2 outstanding")
                .hasMessageContaining("1234 B HOST")
                .hasMessageContaining("77 B PINNED_HOST")
                .hasMessageContaining("closeFailsListingOutstandingBuffersAndSucceedsOnceTheyAreClosed");
        a.close();
        b.close();
        m.close();
        m.close();
        assertThatThrownBy(() -> m.allocate(1, MemoryKind.HOST)).isInstanceOf(IllegalStateException.class);
    }

    @Test
    void withoutDebugTheReportSaysHowToGetAllocationSites() {
        HostBufferManager m = new HostBufferManager(false);
        MemoryBuffer a = m.allocate(10, MemoryKind.HOST);
        assertThatThrownBy(m::close).hasMessageContaining("-D" + HostBufferManager.DEBUG_PROPERTY + "=true");
        a.close();
        m.close();
    }

    @Test
    void buffersLargerThanTwoGibWork() {
        long size = (1L << 31) + 3 * 4096 + 5;
        try (MemoryBuffer big = mm.allocate(size, MemoryKind.HOST)) {
            MemoryAccess.putLong(big.address() + size - 8, 0x1122334455667788L);
            assertThatThrownBy(big::asByteBuffer).isInstanceOf(UnsupportedOperationException.class)
                    .hasMessageContaining("slice");
            ByteBuffer tail = big.slice(size - 4096, 4096).asByteBuffer();
            assertThat(tail.getLong(4096 - 8)).isEqualTo(0x1122334455667788L);
            try (MemoryBuffer small = mm.allocate(8, MemoryKind.HOST)) {
                mm.copy(big, size - 8, small, 0, 8);
                assertThat(MemoryAccess.getLong(small.address())).isEqualTo(0x1122334455667788L);
            }
        }
    }

    @Test
    void concurrentAllocateAndCloseKeepsCountsRight() throws Exception {
        ExecutorService ex = Executors.newFixedThreadPool(8);
        try {
            List<Future<?>> fs = new ArrayList<>();
            for (int t = 0; t < 8; t++) {
                fs.add(ex.submit(() -> {
                    for (int i = 0; i < 500; i++) {
                        MemoryBuffer b = mm.allocate(64 + i, MemoryKind.HOST);
                        MemoryAccess.putByte(b.address() + 63, (byte) i);
                        b.close();
                    }
                }));
            }
            for (Future<?> f : fs) {
                f.get(30, TimeUnit.SECONDS);
            }
        } finally {
            ex.shutdownNow();
            assertThat(ex.awaitTermination(10, TimeUnit.SECONDS)).isTrue();
        }
        assertThat(mm.outstandingBuffers()).isZero();
        assertThat(mm.outstandingBytes()).isZero();
    }
    /** The bulk copy rate every staging copy is built on; printed to the test's output file (core/README.md). */
    @Test
    void copyThroughputOf256MiB() {
        long size = 256L << 20;
        try (MemoryBuffer a = mm.allocate(size, MemoryKind.HOST);
             MemoryBuffer b = mm.allocate(size, MemoryKind.HOST)) {
            for (long i = 0; i < size; i += 8) {
                MemoryAccess.putLong(a.address() + i, i * 0x9E3779B97F4A7C15L);
            }
            java.lang.management.ThreadMXBean cpu = java.lang.management.ManagementFactory.getThreadMXBean();
            long bestCpu = Long.MAX_VALUE;
            long bestWall = Long.MAX_VALUE;
            for (int rep = 0; rep < 5; rep++) {
                long c0 = cpu.getCurrentThreadCpuTime();
                long w0 = System.nanoTime();
                mm.copy(a, 0, b, 0, size);
                bestWall = Math.min(bestWall, System.nanoTime() - w0);
                bestCpu = Math.min(bestCpu, cpu.getCurrentThreadCpuTime() - c0);
            }
            for (long i = 0; i < size; i += 4096 - 8) {
                assertThat(MemoryAccess.getLong(b.address() + (i & ~7L))).isEqualTo((i & ~7L) * 0x9E3779B97F4A7C15L);
            }
            System.out.printf("HostBufferManager.copy 256 MiB: %.2f GB/s by thread CPU time, %.2f GB/s wall"
                    + " (best of 5)%n", (double) size / bestCpu, (double) size / bestWall);
        }
    }
}
