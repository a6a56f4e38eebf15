package dev.kvtransfer.memory.cuda;

import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.memory.MemoryKind;
import dev.kvtransfer.core.memory.HostBufferManager;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
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

/**
 * What every {@link CudaBufferManager} must do, whatever runtime is under it: run here on the host-memory fake
 * ({@link CudaBufferManagerOnFakeRuntimeTest}) and on a GPU ({@link CudaBufferManagerGpuTest}). Rule-numbered
 * names, as the testkit's suites.
 */
abstract class CudaBufferManagerContract {
    protected CudaBufferManager cuda;
    protected HostBufferManager host;

    /** @return a fresh manager (closed by the suite after each test) */
    protected abstract CudaBufferManager newManager();

    @BeforeEach
    void open() {
        cuda = newManager();
        host = new HostBufferManager();
    }

    @AfterEach
    void closeAndCheckLeaks() {
        // close() fails naming any buffer a test left open.
        cuda.close();
        host.close();
    }

    /** Fills a host-addressable buffer with a position-dependent pattern. */
    static void pattern(MemoryBuffer b, int seed) {
        ByteBuffer bb = b.asByteBuffer();
        for (int i = 0; i < bb.capacity(); i++) {
            bb.put(i, (byte) (i * 31 + seed * 7 + (i >>> 8)));
        }
    }

    static byte expected(long i, int seed) {
        return (byte) (i * 31 + seed * 7 + (i >>> 8));
    }

    @Test
    void required_1_1_hostDeviceDeviceHostRoundTripAtOddOffsetsAndSizes() {
        for (long n : new long[] {1, 4095, (1 << 20) + 3}) {
            try (MemoryBuffer src = host.allocate(n + 16, MemoryKind.HOST);
                 MemoryBuffer d1 = cuda.allocate(n + 32, MemoryKind.DEVICE);
                 MemoryBuffer d2 = cuda.allocate(n + 8, MemoryKind.DEVICE);
                 MemoryBuffer back = host.allocate(n + 5, MemoryKind.HOST)) {
                pattern(src, (int) n);
                cuda.copy(src, 16, d1, 31, n);
                cuda.copy(d1, 31, d2, 7, n);
                cuda.copy(d2, 7, back, 5, n);
                cuda.synchronize();
                ByteBuffer b = back.asByteBuffer();
                for (int i = 0; i < n; i++) {
                    assertThat(b.get(5 + i)).as("byte %d of %d", i, n).isEqualTo(expected(16 + i, (int) n));
                }
            }
        }
    }

    @Test
    void required_1_2_pinnedBuffersAreHostAddressableLittleEndianAndShareMemoryWithTheirSlices() {
        try (MemoryBuffer pinned = cuda.allocate(8192, MemoryKind.PINNED_HOST);
             MemoryBuffer dev = cuda.allocate(8192, MemoryKind.DEVICE);
             MemoryBuffer pinned2 = cuda.allocate(8192, MemoryKind.PINNED_HOST)) {
            assertThat(pinned.kind()).isEqualTo(MemoryKind.PINNED_HOST);
            ByteBuffer bb = pinned.asByteBuffer();
            assertThat(bb.isDirect()).isTrue();
            assertThat(bb.order()).isEqualTo(ByteOrder.LITTLE_ENDIAN);
            assertThat(bb.capacity()).isEqualTo(8192);
            assertThat(bb.position()).isZero();
            bb.putLong(0, 0x0102030405060708L);
            assertThat(bb.get(0)).isEqualTo((byte) 0x08);
            MemoryBuffer view = pinned.slice(4096, 4096);
            view.asByteBuffer().putLong(0, 42L);
            assertThat(bb.getLong(4096)).isEqualTo(42L);

            cuda.copy(pinned, 0, dev, 0, 8192);
            cuda.copy(dev, 0, pinned2, 0, 8192);
            cuda.synchronize();
            assertThat(pinned2.asByteBuffer().getLong(0)).isEqualTo(0x0102030405060708L);
            assertThat(pinned2.asByteBuffer().getLong(4096)).isEqualTo(42L);
        }
    }

    @Test
    void required_1_3_deviceMemoryHasNoByteBuffer() {
        try (MemoryBuffer dev = cuda.allocate(4096, MemoryKind.DEVICE)) {
            assertThat(dev.kind()).isEqualTo(MemoryKind.DEVICE);
            assertThat(dev.address()).isNotZero();
            assertThatThrownBy(dev::asByteBuffer).isInstanceOf(UnsupportedOperationException.class)
                    .hasMessageContaining("DEVICE memory");
            assertThatThrownBy(() -> dev.slice(0, 16).asByteBuffer())
                    .isInstanceOf(UnsupportedOperationException.class).hasMessageContaining("DEVICE memory");
        }
    }

    @Test
    void required_1_4_hostAllocationsServeARankWhosePoolIsOnTheDevice() {
        try (MemoryBuffer h = cuda.allocate(8192 + 3, MemoryKind.HOST);
             MemoryBuffer h2 = cuda.allocate(8192 + 3, MemoryKind.HOST);
             MemoryBuffer d = cuda.allocate(8192 + 3, MemoryKind.DEVICE)) {
            assertThat(h.kind()).isEqualTo(MemoryKind.HOST);
            assertThat(h.address() % 4096).isZero();
            assertThat(cuda.outstandingBuffers()).isEqualTo(3);
            java.nio.ByteBuffer bb = h.asByteBuffer();
            for (int i = 0; i < bb.capacity(); i++) {
                bb.put(i, (byte) (i * 7 + 1));
            }
            cuda.copy(h, 0, d, 0, h.size());      // host to device on the stream
            cuda.copy2d(h, 0, 4096, h2, 0, 4096, 4096, 2); // host to host on the CPU
            cuda.synchronize();
            cuda.copy(d, 1, h2, 8192, 2);
            cuda.synchronize();
            java.nio.ByteBuffer back = h2.asByteBuffer();
            for (int i = 0; i < 8192; i++) {
                assertThat(back.get(i)).as("byte %d", i).isEqualTo((byte) (i * 7 + 1));
            }
            assertThat(back.get(8192)).isEqualTo((byte) 8);
            assertThat(back.get(8193)).isEqualTo((byte) 15);
        }
        assertThatThrownBy(() -> cuda.allocate(-1, MemoryKind.DEVICE)).isInstanceOf(IllegalArgumentException.class);
        assertThat(cuda.outstandingBuffers()).isZero();
    }

    @Test
    void required_2_1_everyCopyIsBoundsChecked() {
        try (MemoryBuffer dev = cuda.allocate(4096, MemoryKind.DEVICE);
             MemoryBuffer h = host.allocate(1024, MemoryKind.HOST)) {
            assertThatThrownBy(() -> cuda.copy(h, 0, dev, 0, 1025)).isInstanceOf(IndexOutOfBoundsException.class);
            assertThatThrownBy(() -> cuda.copy(h, 1, dev, 0, 1024)).isInstanceOf(IndexOutOfBoundsException.class);
            assertThatThrownBy(() -> cuda.copy(dev, 4000, h, 0, 97)).isInstanceOf(IndexOutOfBoundsException.class);
            assertThatThrownBy(() -> cuda.copy(h, 0, dev, 4095, 2)).isInstanceOf(IndexOutOfBoundsException.class);
            assertThatThrownBy(() -> cuda.copy(h, -1, dev, 0, 1)).isInstanceOf(IndexOutOfBoundsException.class);
            assertThatThrownBy(() -> cuda.copy(h, 0, dev, -1, 1)).isInstanceOf(IndexOutOfBoundsException.class);
            assertThatThrownBy(() -> cuda.copy(h, 0, dev, 0, -1)).isInstanceOf(IndexOutOfBoundsException.class);
            assertThatThrownBy(() -> cuda.copy(h, Long.MAX_VALUE, dev, 0, 2))
                    .isInstanceOf(IndexOutOfBoundsException.class);
            // A slice's bounds are its own, not its parent's.
            MemoryBuffer view = dev.slice(1024, 1024);
            assertThatThrownBy(() -> cuda.copy(h, 0, view, 1, 1024)).isInstanceOf(IndexOutOfBoundsException.class);
            assertThatThrownBy(() -> dev.slice(4000, 97)).isInstanceOf(IndexOutOfBoundsException.class);
        }
    }

    @Test
    void required_2_2_everyCopy2dIsChecked() {
        try (MemoryBuffer dev = cuda.allocate(4096, MemoryKind.DEVICE);
             MemoryBuffer h = host.allocate(4096, MemoryKind.HOST)) {
            // Last row ends one byte past the destination.
            assertThatThrownBy(() -> cuda.copy2d(h, 0, 1024, dev, 1, 1024, 1024, 4))
                    .isInstanceOf(IndexOutOfBoundsException.class);
            assertThatThrownBy(() -> cuda.copy2d(h, 0, 1025, dev, 0, 1024, 1024, 4))
                    .isInstanceOf(IndexOutOfBoundsException.class);
            assertThatThrownBy(() -> cuda.copy2d(h, 0, Long.MAX_VALUE / 2, dev, 0, 1024, 16, 4))
                    .isInstanceOf(IndexOutOfBoundsException.class);
            assertThatThrownBy(() -> cuda.copy2d(h, 0, 512, dev, 0, 1024, 1024, 2))
                    .isInstanceOf(IllegalArgumentException.class).hasMessageContaining("below rowBytes");
            assertThatThrownBy(() -> cuda.copy2d(h, 0, 1024, dev, 0, 1024, -1, 2))
                    .isInstanceOf(IllegalArgumentException.class);
            assertThatThrownBy(() -> cuda.copy2d(h, 0, 1024, dev, 0, 1024, 16, -1))
                    .isInstanceOf(IllegalArgumentException.class);
            assertThatThrownBy(() -> cuda.copy2d(h, -16, 1024, dev, 0, 1024, 16, 2))
                    .isInstanceOf(IndexOutOfBoundsException.class);
        }
    }

    @Test
    void required_2_3_overlappingRangesAreRefusedDisjointOnesOfOneBufferCopy() {
        try (MemoryBuffer dev = cuda.allocate(8192, MemoryKind.DEVICE);
             MemoryBuffer h = host.allocate(8192, MemoryKind.HOST);
             MemoryBuffer back = host.allocate(8192, MemoryKind.HOST)) {
            assertThatThrownBy(() -> cuda.copy(dev, 0, dev, 100, 200)).isInstanceOf(IllegalArgumentException.class)
                    .hasMessageContaining("overlap");
            assertThatThrownBy(() -> cuda.copy2d(dev, 0, 1024, dev, 512, 1024, 512, 4))
                    .isInstanceOf(IllegalArgumentException.class).hasMessageContaining("overlap");
            pattern(h, 3);
            cuda.copy(h, 0, dev, 0, 4096);
            cuda.copy(dev, 0, dev, 4096, 4096);
            cuda.copy(dev, 4096, back, 0, 4096);
            cuda.synchronize();
            for (int i = 0; i < 4096; i++) {
                assertThat(back.asByteBuffer().get(i)).isEqualTo(expected(i, 3));
            }
        }
    }

    @Test
    void required_2_4_copy2dGathersAndScattersRows() {
        int rows = 8;
        int pitch = 1024;
        int rowBytes = 256;
        try (MemoryBuffer src = host.allocate(rows * pitch, MemoryKind.HOST);
             MemoryBuffer dev = cuda.allocate(rows * rowBytes, MemoryKind.DEVICE);
             MemoryBuffer back = host.allocate(rows * pitch + 64, MemoryKind.HOST)) {
            pattern(src, 9);
            // Gather: the second quarter of every 1 KiB row into a packed device buffer.
            cuda.copy2d(src, 256, pitch, dev, 0, rowBytes, rowBytes, rows);
            // Scatter: back into every 1 KiB row, at byte 64 + 512.
            back.asByteBuffer().put(0, (byte) 0x5A);
            cuda.copy2d(dev, 0, rowBytes, back, 64 + 512, pitch, rowBytes, rows);
            cuda.synchronize();
            ByteBuffer b = back.asByteBuffer();
            for (int r = 0; r < rows; r++) {
                for (int i = 0; i < rowBytes; i++) {
                    assertThat(b.get(64 + 512 + r * pitch + i)).as("row %d byte %d", r, i)
                            .isEqualTo(expected(256 + (long) r * pitch + i, 9));
                }
            }
            assertThat(b.get(0)).as("bytes between rows are untouched").isEqualTo((byte) 0x5A);
            // One row, and no row at all: pitches do not matter then.
            cuda.copy2d(src, 0, 0, dev, 0, 0, 128, 1);
            cuda.copy2d(src, 0, 0, dev, 0, 0, 128, 0);
            cuda.copy2d(src, 0, 0, dev, 0, 0, 0, 5);
            cuda.copy(dev, 0, back, 0, 128);
            cuda.synchronize();
            for (int i = 0; i < 128; i++) {
                assertThat(b.get(i)).isEqualTo(expected(i, 9));
            }
        }
    }

    @Test
    void required_3_1_copiesOnTheStreamRunInIssueOrder() {
        int n = 1 << 16;
        try (MemoryBuffer h = host.allocate(n, MemoryKind.HOST);
             MemoryBuffer d1 = cuda.allocate(n, MemoryKind.DEVICE);
             MemoryBuffer d2 = cuda.allocate(n, MemoryKind.DEVICE);
             MemoryBuffer p = cuda.allocate(n, MemoryKind.PINNED_HOST)) {
            pattern(h, 1);
            cuda.copy(h, 0, d1, 0, n);
            cuda.copy(d1, 0, d2, 0, n);
            cuda.copy(d2, 0, p, 0, n);
            cuda.synchronize();
            ByteBuffer b = p.asByteBuffer();
            for (int i = 0; i < n; i += 97) {
                assertThat(b.get(i)).isEqualTo(expected(i, 1));
            }
        }
    }

    @Test
    void required_3_2_threadsShareOneManager() throws Exception {
        int threads = 4;
        int n = 1 << 18;
        ExecutorService pool = Executors.newFixedThreadPool(threads);
        try {
            List<Future<Boolean>> results = new ArrayList<>();
            for (int t = 0; t < threads; t++) {
                int seed = t;
                results.add(pool.submit(() -> {
                    try (MemoryBuffer h = host.allocate(n, MemoryKind.HOST);
                         MemoryBuffer d = cuda.allocate(n, MemoryKind.DEVICE);
                         MemoryBuffer back = cuda.allocate(n, MemoryKind.PINNED_HOST)) {
                        pattern(h, seed);
                        for (int round = 0; round < 8; round++) {
                            cuda.copy(h, 0, d, 0, n);
                            cuda.copy(d, 0, back, 0, n);
                        }
                        cuda.synchronize();
                        ByteBuffer b = back.asByteBuffer();
                        for (int i = 0; i < n; i += 61) {
                            if (b.get(i) != expected(i, seed)) {
                                return false;
                            }
                        }
                        return true;
                    }
                }));
            }
            for (Future<Boolean> f : results) {
                assertThat(f.get(60, TimeUnit.SECONDS)).isTrue();
            }
        } finally {
            pool.shutdownNow();
            assertThat(pool.awaitTermination(30, TimeUnit.SECONDS)).isTrue();
        }
    }

    @Test
    void required_4_1_closeRefusesWhileBuffersAreOutstandingAndNamesThem() {
        MemoryBuffer a = cuda.allocate(1000, MemoryKind.DEVICE);
        MemoryBuffer b = cuda.allocate(24, MemoryKind.PINNED_HOST);
        assertThat(cuda.outstandingBuffers()).isEqualTo(2);
        assertThat(cuda.outstandingBytes()).isEqualTo(1024);
        assertThatThrownBy(cuda::close).isInstanceOf(IllegalStateException.class)
                .hasMessageContaining("2 outstanding buffer(s), 1024 bytes")
                .hasMessageContaining(a.toString()).hasMessageContaining(b.toString());
        assertThat(cuda.describeOutstanding()).contains("1000 B DEVICE").contains("24 B PINNED_HOST");
        a.close();
        b.close();
        assertThat(cuda.outstandingBuffers()).isZero();
        assertThat(cuda.outstandingBytes()).isZero();
        cuda.close();
        cuda.close(); // idempotent
        assertThatThrownBy(() -> cuda.allocate(1, MemoryKind.DEVICE)).isInstanceOf(IllegalStateException.class)
                .hasMessageContaining("closed");
        assertThatThrownBy(cuda::synchronize).isInstanceOf(IllegalStateException.class);
    }

    @Test
    void required_4_2_slicesAreViewsAndOwningBuffersCloseOnce() {
        MemoryBuffer a = cuda.allocate(4096, MemoryKind.DEVICE);
        MemoryBuffer view = a.slice(1024, 2048);
        MemoryBuffer inner = view.slice(1024, 16);
        assertThat(view.address()).isEqualTo(a.address() + 1024);
        assertThat(inner.address()).isEqualTo(a.address() + 2048);
        assertThat(inner.kind()).isEqualTo(MemoryKind.DEVICE);
        view.close(); // views own nothing
        inner.close();
        assertThat(cuda.outstandingBuffers()).isEqualTo(1);
        assertThat(view.address()).isEqualTo(a.address() + 1024);
        a.close();
        a.close(); // idempotent
        assertThat(cuda.outstandingBuffers()).isZero();
        assertThatThrownBy(a::address).isInstanceOf(IllegalStateException.class).hasMessageContaining("closed");
        assertThatThrownBy(view::address).isInstanceOf(IllegalStateException.class);
        assertThatThrownBy(() -> a.slice(0, 1)).isInstanceOf(IllegalStateException.class);
        try (MemoryBuffer h = host.allocate(16, MemoryKind.HOST)) {
            assertThatThrownBy(() -> cuda.copy(h, 0, inner, 0, 16)).isInstanceOf(IllegalStateException.class);
        }
    }

    @Test
    void required_4_3_emptyBuffersHaveAnAddressAndCopyNothing() {
        try (MemoryBuffer d = cuda.allocate(0, MemoryKind.DEVICE);
             MemoryBuffer p = cuda.allocate(0, MemoryKind.PINNED_HOST)) {
            assertThat(d.size()).isZero();
            assertThat(d.address()).isNotZero();
            assertThat(p.asByteBuffer().capacity()).isZero();
            cuda.copy(p, 0, d, 0, 0);
            cuda.synchronize();
        }
    }
}
