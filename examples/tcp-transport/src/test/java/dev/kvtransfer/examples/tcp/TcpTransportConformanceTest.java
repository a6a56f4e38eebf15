package dev.kvtransfer.examples.tcp;

import dev.kvtransfer.api.transport.TransportProvider;
import dev.kvtransfer.testkit.TransportConformanceTest;

/** Every rule of the testkit's transport suite (required and optional), against the tcp plugin. */
class TcpTransportConformanceTest extends TransportConformanceTest {
    @Override
    protected TransportProvider provider() {
        return new TcpTransportProvider();
    }
}
