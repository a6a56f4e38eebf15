package dev.kvtransfer.ucx;

import dev.kvtransfer.api.memory.BufferManager;
import dev.kvtransfer.api.transport.TransportProvider;
import dev.kvtransfer.testkit.TransportConformanceTest;

/**
 * The UCX transport passes the transport conformance suite. DEVICE_MEMORY is declared only where UCX reports
 * CUDA; the device rule then runs with JCuda device buffers (no GPU here: the suite asserts the refusal).
 */
class UcxTransportConformanceTest extends TransportConformanceTest {
    @Override
    protected TransportProvider provider() {
        return new UcxTransportProvider();
    }

    @Override
    protected BufferManager deviceBufferManager() {
        return CudaBufferManager.tryCreate();
    }
}
