package dev.kvtransfer.testkit.loopback;

import dev.kvtransfer.api.transport.TransportProvider;
import dev.kvtransfer.testkit.TransceiverFaultConformanceTest;

/** The fault suite on loopback (this module's test formatter moves identical layouts only). */
class LoopbackTransceiverFaultConformanceTest extends TransceiverFaultConformanceTest {
    @Override
    protected TransportProvider provider() {
        return new LoopbackTransportProvider();
    }

    @Override
    protected boolean resharding() {
        return false;
    }
}
