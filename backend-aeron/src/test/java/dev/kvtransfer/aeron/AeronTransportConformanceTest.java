package dev.kvtransfer.aeron;

import dev.kvtransfer.api.transport.TransportProvider;
import dev.kvtransfer.testkit.TransportConformanceTest;

/** The testkit's transport rules, run against the Aeron transport (UDP on loopback, embedded driver). */
class AeronTransportConformanceTest extends TransportConformanceTest {
    @Override
    protected TransportProvider provider() {
        return new AeronTransportProvider();
    }
}
