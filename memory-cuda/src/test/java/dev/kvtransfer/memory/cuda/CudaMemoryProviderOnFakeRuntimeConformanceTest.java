package dev.kvtransfer.memory.cuda;

import dev.kvtransfer.api.memory.BufferManager;
import dev.kvtransfer.api.memory.MemoryProvider;
import dev.kvtransfer.testkit.MemoryProviderConformanceTest;

import java.util.concurrent.TimeUnit;

/**
 * The testkit's memory-provider suite on the CUDA provider, its managers on {@link FakeCudaRuntime} (host memory
 * posing as a device), so the device kinds and host <-> device copies are checked on every machine. Discovery and
 * availability are the real provider's (unavailable here without a GPU, and then its {@code create} must refuse).
 */
class CudaMemoryProviderOnFakeRuntimeConformanceTest extends MemoryProviderConformanceTest {
    @Override
    protected MemoryProvider provider() {
        return new CudaMemoryProvider();
    }

    @Override
    protected BufferManager createManager() {
        return new CudaBufferManager(new FakeCudaRuntime(0), TimeUnit.SECONDS.toNanos(10), 1 << 20, false);
    }
}
