package dev.kvtransfer.memory.cuda;

import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.memory.MemoryKind;
import org.junit.jupiter.api.Test;

import java.nio.ByteBuffer;
import java.time.Duration;
import java.util.List;
import java.util.Map;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/**
 * The manager's contract on a real device (JCuda), plus what needs one: pinned allocations above 2 GiB (the
 * {@code cudaHostRegister} path), the provider's {@code create}, device properties and a copy-rate sanity run.
 * Skipped, with the provider's reason, where no CUDA device is usable.
 */
@RequiresCudaDevice
class CudaBufferManagerGpuTest extends CudaBufferManagerContract {
    @Override
    protected CudaBufferManager newManager() {
        return new CudaMemoryProvider().create(Map.of(CudaMemoryProvider.DEVICE, "0"));
    }

    @Test
    void gpu_1_pinnedAllocationAbove2GiBIsUsableEndToEnd() {
        long big = (1L << 31) + 8192;
        try (MemoryBuffer p = cuda.allocate(big, MemoryKind.PINNED_HOST);
             MemoryBuffer d = cuda.allocate(1 << 20, MemoryKind.DEVICE);
             MemoryBuffer back = cuda.allocate(1 << 20, MemoryKind.PINNED_HOST)) {
            assertThat(p.size()).isEqualTo(big);
            assertThatThrownBy(p::asByteBuffer).isInstanceOf(UnsupportedOperationException.class)
                    .hasMessageContaining("slice it first");
            MemoryBuffer tail = p.slice(big - (1 << 20), 1 << 20);
            ByteBuffer t = tail.asByteBuffer();
            for (int i = 0; i < t.capacity(); i += 8) {
                t.putLong(i, big + i);
            }
            cuda.copy(p, big - (1 << 20), d, 0, 1 << 20);
            cuda.copy(d, 0, back, 0, 1 << 20);
            cuda.synchronize();
            ByteBuffer b = back.asByteBuffer();
            for (int i = 0; i < b.capacity(); i += 8) {
                assertThat(b.getLong(i)).isEqualTo(big + i);
            }
        }
    }

    @Test
    void gpu_2_deviceIsDescribedAndProviderValidatesTheOrdinal() {
        assertThat(cuda.describeDevice()).startsWith("device 0: ").contains("compute").contains("MiB");
        CudaMemoryProvider provider = new CudaMemoryProvider();
        assertThat(provider.isAvailable()).isTrue();
        assertThat(provider.unavailabilityCause()).isNull();
        assertThat(provider.deviceCount()).isPositive();
        int missing = provider.deviceCount();
        assertThatThrownBy(() -> provider.create(Map.of(CudaMemoryProvider.DEVICE, Integer.toString(missing))))
                .isInstanceOf(IllegalArgumentException.class).hasMessageContaining("CUDA device(s)");
        try (CudaBufferManager m = new CudaBufferManager(0, Duration.ofSeconds(5), true)) {
            m.allocate(16, MemoryKind.DEVICE).close();
        }
    }

    @Test
    void gpu_3_copyRatesAreMeasurable() {
        List<CudaCopyRates.Rate> rates = CudaCopyRates.measure(cuda, 64L << 20, 3);
        assertThat(rates).extracting(CudaCopyRates.Rate::name).containsExactly("D2D", "H2D pinned", "D2H pinned",
                "H2D pageable", "D2H pageable", "D2D copy2d 32K/64K");
        for (CudaCopyRates.Rate r : rates) {
            System.out.println(r);
            assertThat(r.gigabytesPerSecond()).as(r.name()).isPositive();
        }
    }
}
