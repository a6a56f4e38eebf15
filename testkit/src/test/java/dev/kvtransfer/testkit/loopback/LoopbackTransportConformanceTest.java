package dev.kvtransfer.testkit.loopback;

import dev.kvtransfer.api.transport.TransportProvider;
import dev.kvtransfer.testkit.TransportConformanceTest;

/** The loopback transport passes the transport conformance suite. */
class LoopbackTransportConformanceTest extends TransportConformanceTest {
    @Override
    protected TransportProvider provider() {
        return new LoopbackTransportProvider();
    }
}
