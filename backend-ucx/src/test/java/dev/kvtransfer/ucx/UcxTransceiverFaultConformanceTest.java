package dev.kvtransfer.ucx;

import dev.kvtransfer.api.transport.TransportProvider;
import dev.kvtransfer.testkit.TransceiverFaultConformanceTest;

/** The testkit's fault rules over UCX (shared memory between the instances of this JVM, the standard formatter). */
class UcxTransceiverFaultConformanceTest extends TransceiverFaultConformanceTest {
    @Override
    protected TransportProvider provider() {
        return new UcxTransportProvider();
    }
}
