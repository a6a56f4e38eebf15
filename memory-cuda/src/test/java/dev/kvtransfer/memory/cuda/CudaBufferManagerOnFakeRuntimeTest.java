package dev.kvtransfer.memory.cuda;

import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.memory.MemoryKind;
import org.junit.jupiter.api.Test;

import java.nio.ByteBuffer;
import java.util.concurrent.TimeUnit;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/**
 * The manager's contract on {@link FakeCudaRuntime} (host memory posing as a device), plus what only a fake can
 * observe: which CUDA calls are made (none before a check fails), the stream-ordering and deadline behaviour, and
 * the registered path for pinned allocations above the {@code cudaHostAlloc} limit. Runs everywhere.
 */
class CudaBufferManagerOnFakeRuntimeTest extends CudaBufferManagerContract {
    private FakeCudaRuntime fake;

    @Override
    protected CudaBufferManager newManager() {
        fake = new FakeCudaRuntime(0);
        return new CudaBufferManager(fake, TimeUnit.SECONDS.toNanos(10), 1 << 20, false);
    }

    @Test
    void fake_1_checksFailBeforeAnyCudaCall() {
        try (MemoryBuffer dev = cuda.allocate(4096, MemoryKind.DEVICE);
             MemoryBuffer h = host.allocate(1024, MemoryKind.HOST)) {
            long before = fake.calls().size();
            fake.refuseCalls(true);
            assertThatThrownBy(() -> cuda.copy(h, 0, dev, 0, 1025)).isInstanceOf(IndexOutOfBoundsException.class);
            assertThatThrownBy(() -> cuda.copy(dev, 4095, h, 0, 2)).isInstanceOf(IndexOutOfBoundsException.class);
            assertThatThrownBy(() -> cuda.copy(dev, 0, dev, 1, 2)).isInstanceOf(IllegalArgumentException.class);
            assertThatThrownBy(() -> cuda.copy2d(h, 0, 512, dev, 0, 1024, 512, 3))
                    .isInstanceOf(IndexOutOfBoundsException.class);
            assertThatThrownBy(() -> cuda.copy2d(h, 0, 256, dev, 0, 1024, 512, 2))
                    .isInstanceOf(IllegalArgumentException.class);
            // HOST memory (a rank's control buffers) and HOST-to-HOST copies need no CUDA call at all.
            try (MemoryBuffer h1 = cuda.allocate(64, MemoryKind.HOST)) {
                cuda.copy(h, 0, h1, 0, 64);
                cuda.copy2d(h, 0, 128, h1, 0, 32, 32, 2);
            }
            assertThatThrownBy(() -> cuda.allocate(-5, MemoryKind.DEVICE))
                    .isInstanceOf(IllegalArgumentException.class);
            assertThatThrownBy(dev::asByteBuffer).isInstanceOf(UnsupportedOperationException.class);
            // Nothing to copy: no call either.
            cuda.copy(h, 0, dev, 0, 0);
            cuda.copy2d(h, 0, 16, dev, 0, 16, 16, 0);
            fake.refuseCalls(false);
            assertThat(fake.calls()).hasSize((int) before);
        }
    }

    @Test
    void fake_2_directionsFollowTheBufferKinds() {
        try (MemoryBuffer d1 = cuda.allocate(64, MemoryKind.DEVICE);
             MemoryBuffer d2 = cuda.allocate(64, MemoryKind.DEVICE);
             MemoryBuffer p = cuda.allocate(64, MemoryKind.PINNED_HOST);
             MemoryBuffer h = host.allocate(64, MemoryKind.HOST)) {
            cuda.copy(h, 0, d1, 0, 64);
            cuda.copy(d1, 0, d2, 0, 64);
            cuda.copy(d2, 0, p, 0, 64);
            cuda.copy(p, 0, h, 0, 64);
            cuda.copy(d1, 0, h, 0, 64);
            cuda.copy(p, 0, d1, 0, 64);
            cuda.synchronize();
            assertThat(fake.calls()).filteredOn(c -> c.startsWith("memcpyAsync")).containsExactly(
                    "memcpyAsync HOST_TO_DEVICE 64", "memcpyAsync DEVICE_TO_DEVICE 64",
                    "memcpyAsync DEVICE_TO_HOST 64", "memcpyAsync HOST_TO_HOST 64",
                    "memcpyAsync DEVICE_TO_HOST 64", "memcpyAsync HOST_TO_DEVICE 64");
        }
    }

    @Test
    void fake_3_copy2dIsOneCallUnlessAPitchExceedsTheDeviceLimit() {
        try (MemoryBuffer d = cuda.allocate(16 * 4096, MemoryKind.DEVICE);
             MemoryBuffer h = host.allocate(16 * 4096, MemoryKind.HOST)) {
            cuda.copy2d(h, 0, 4096, d, 0, 1024, 1024, 16);
            assertThat(fake.callCount("memcpy2DAsync")).isEqualTo(1);
            assertThat(fake.calls()).contains("memcpy2DAsync HOST_TO_DEVICE 1024x16 pitch 4096/1024");
            cuda.copy2d(h, 0, 4096, d, 0, 1024, 1024, 1);
            assertThat(fake.callCount("memcpy2DAsync")).isEqualTo(1);
            assertThat(fake.callCount("memcpyAsync")).isEqualTo(1);
            fake.maxPitch(2048);
            cuda.copy2d(h, 0, 4096, d, 0, 1024, 1024, 16);
            assertThat(fake.callCount("memcpy2DAsync")).isEqualTo(1);
            assertThat(fake.callCount("memcpyAsync")).isEqualTo(1 + 16);
            cuda.synchronize();
        }
    }

    @Test
    void fake_4_synchronizeHasADeadlineAndReleasesItsEvent() {
        CudaBufferManager shortDeadline = new CudaBufferManager(fake, TimeUnit.MILLISECONDS.toNanos(50), 1 << 20,
                false);
        try (MemoryBuffer d = shortDeadline.allocate(64, MemoryKind.DEVICE);
             MemoryBuffer h = host.allocate(64, MemoryKind.HOST)) {
            shortDeadline.copy(h, 0, d, 0, 64);
            fake.stall(true);
            long t0 = System.nanoTime();
            assertThatThrownBy(shortDeadline::synchronize).isInstanceOf(IllegalStateException.class)
                    .hasMessageContaining("not complete after 50 ms");
            assertThat(System.nanoTime() - t0).isLessThan(TimeUnit.SECONDS.toNanos(5));
            assertThat(fake.openFences()).isZero();
            // The buffer is not freed under a copy that may still run: close fails and it stays outstanding.
            assertThatThrownBy(d::close).isInstanceOf(IllegalStateException.class)
                    .hasMessageContaining("not complete");
            assertThat(shortDeadline.outstandingBuffers()).isEqualTo(1);
            fake.stall(false);
        }
        assertThat(shortDeadline.outstandingBuffers()).isZero();
        assertThat(fake.queuedCopies()).isZero();
    }

    @Test
    void fake_5_closingABufferWaitsForTheCopiesAlreadyIssued() {
        fake.pollsBeforeDone(3);
        MemoryBuffer d = cuda.allocate(1 << 16, MemoryKind.DEVICE);
        MemoryBuffer p = cuda.allocate(1 << 16, MemoryKind.PINNED_HOST);
        try (MemoryBuffer h = host.allocate(1 << 16, MemoryKind.HOST)) {
            pattern(h, 4);
            cuda.copy(h, 0, d, 0, 1 << 16);
            cuda.copy(d, 0, p, 0, 1 << 16);
            assertThat(fake.queuedCopies()).isEqualTo(2);
            // The fake fails the test if memory is freed while a queued copy touches it.
            d.close();
            assertThat(fake.queuedCopies()).isZero();
            assertThat(p.asByteBuffer().get(1234)).isEqualTo(expected(1234, 4));
            p.close();
        }
        assertThat(fake.liveAllocations()).isZero();
    }

    @Test
    void fake_6_largePinnedAllocationsAreRegisteredPageAlignedHostMemory() {
        long big = (1 << 20) + 12345; // above this manager's cudaHostAlloc limit of 1 MiB
        try (MemoryBuffer p = cuda.allocate(big, MemoryKind.PINNED_HOST);
             MemoryBuffer d = cuda.allocate(big, MemoryKind.DEVICE);
             MemoryBuffer small = cuda.allocate(4096, MemoryKind.PINNED_HOST)) {
            assertThat(fake.callCount("hostRegister")).isEqualTo(1);
            assertThat(fake.callCount("hostAlloc")).isEqualTo(1);
            assertThat(p.address() % HostMemory.PAGE).isZero();
            assertThat(p.size()).isEqualTo(big);
            ByteBuffer last = p.slice(big - 8, 8).asByteBuffer();
            last.putLong(0, 0xCAFEBABEL);
            cuda.copy(p, big - 8, d, 0, 8);
            cuda.copy(d, 0, small, 0, 8);
            cuda.synchronize();
            assertThat(small.asByteBuffer().getLong(0)).isEqualTo(0xCAFEBABEL);
        }
        assertThat(fake.callCount("hostUnregister")).isEqualTo(1);
        assertThat(fake.liveAllocations()).isZero();
    }

    @Test
    void fake_7_closingTheManagerDestroysItsStreamOnce() {
        cuda.allocate(8, MemoryKind.DEVICE).close();
        cuda.close();
        assertThat(fake.destroyed()).isTrue();
        assertThat(fake.callCount("destroy")).isEqualTo(1);
        cuda.close();
        assertThat(fake.callCount("destroy")).isEqualTo(1);
        assertThat(fake.liveAllocations()).isZero();
    }

    @Test
    void fake_8_debugModeNamesTheAllocationSite() {
        FakeCudaRuntime other = new FakeCudaRuntime(3);
        CudaBufferManager debug = new CudaBufferManager(other, TimeUnit.SECONDS.toNanos(10), 1 << 20, true);
        MemoryBuffer leaked = debug.allocate(77, MemoryKind.DEVICE);
        assertThatThrownBy(debug::close).isInstanceOf(IllegalStateException.class)
                .hasMessageContaining("device 3").hasMessageContaining("77 B DEVICE")
                .hasMessageContaining("fake_8_debugModeNamesTheAllocationSite");
        leaked.close();
        debug.close();
    }

    @Test
    void fake_9_describeDeviceAsksTheRuntime() {
        assertThat(cuda.device()).isZero();
        assertThat(cuda.describeDevice()).isEqualTo("fake device 0 (host memory)");
        assertThat(cuda.toString()).contains("device 0").contains("outstanding=0");
    }
}
