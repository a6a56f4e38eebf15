package dev.kvtransfer.memory.cuda;

import java.util.Map;

/** {@link DeviceKvPoolContract} on a real device; skipped, with the reason, where none is usable. */
@RequiresCudaDevice
class DeviceKvPoolGpuTest extends DeviceKvPoolContract {
    @Override
    protected CudaBufferManager newManager() {
        return new CudaMemoryProvider().create(Map.of());
    }
}
