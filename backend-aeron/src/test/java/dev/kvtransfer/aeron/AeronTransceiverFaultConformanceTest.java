package dev.kvtransfer.aeron;

import dev.kvtransfer.api.transport.TransportProvider;
import dev.kvtransfer.testkit.TransceiverFaultConformanceTest;

/** The testkit's fault rules over Aeron (IPC between the instances of this JVM, the standard formatter). */
class AeronTransceiverFaultConformanceTest extends TransceiverFaultConformanceTest {
    @Override
    protected TransportProvider provider() {
        return new AeronTransportProvider();
    }
}
