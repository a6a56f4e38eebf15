package dev.kvtransfer.memory.cuda;

import dev.kvtransfer.api.memory.MemoryProvider;
import dev.kvtransfer.testkit.MemoryProviderConformanceTest;

/**
 * The testkit's memory-provider suite on a real CUDA device, managers made by the provider itself. Skipped, with
 * the provider's reason, where no CUDA device is usable ({@link RequiresCudaDevice}).
 */
@RequiresCudaDevice
class CudaMemoryProviderGpuConformanceTest extends MemoryProviderConformanceTest {
    @Override
    protected MemoryProvider provider() {
        return new CudaMemoryProvider();
    }
}
