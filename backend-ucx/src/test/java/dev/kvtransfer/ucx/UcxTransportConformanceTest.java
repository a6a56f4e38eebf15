package dev.kvtransfer.ucx;

import dev.kvtransfer.api.memory.BufferManager;
import dev.kvtransfer.api.transport.TransportProvider;
import dev.kvtransfer.testkit.TransportConformanceTest;

/**
 * The UCX transport passes the transport conformance suite with its default settings (shm mode on loopback,
 * {@code ucx.oneSided=auto}, which emulates one-sided writes over tagged messages there;
 * {@link UcxNativeOneSidedConformanceTest} runs the native RMA path). DEVICE_MEMORY is declared only where UCX reports
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
