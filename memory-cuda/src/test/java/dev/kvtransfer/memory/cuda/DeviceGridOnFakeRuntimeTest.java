package dev.kvtransfer.memory.cuda;

import java.util.concurrent.TimeUnit;

/** {@link DeviceGridContract} on the host-memory fake runtime: runs everywhere. */
class DeviceGridOnFakeRuntimeTest extends DeviceGridContract {
    @Override
    protected CudaBufferManager newManager() {
        return new CudaBufferManager(new FakeCudaRuntime(0), TimeUnit.SECONDS.toNanos(10),
                CudaBufferManager.HOST_ALLOC_LIMIT, false);
    }
}
