package dev.kvtransfer.memory.cuda;

import java.util.Map;

/** {@link DeviceGridContract} on a real device; skipped, with the reason, where none is usable. */
@RequiresCudaDevice
class DeviceGridGpuTest extends DeviceGridContract {
    @Override
    protected CudaBufferManager newManager() {
        return new CudaMemoryProvider().create(Map.of());
    }
}
