package dev.kvtransfer.aeron;

import dev.kvtransfer.api.transport.TransportProvider;
import dev.kvtransfer.testkit.TransportConformanceTest;

/**
 * The testkit's transport rules, run against the Aeron transport. Managers of one JVM talk IPC through the shared
 * embedded driver; {@link AeronUdpTransportConformanceTest} runs the same rules over UDP.
 */
class AeronTransportConformanceTest extends TransportConformanceTest {
    @Override
    protected TransportProvider provider() {
        return new AeronTransportProvider();
    }
}
