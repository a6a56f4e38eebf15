package dev.kvtransfer.examples.tcp;

import dev.kvtransfer.api.transport.TransportProvider;
import dev.kvtransfer.testkit.TransceiverConformanceTest;

/**
 * The whole transfer path (core's CacheTransceiver, the standard formatter found on the test class path) over the
 * tcp plugin: every rank of both instances is its own manager, authenticated with the run's secret.
 */
class TcpTransceiverConformanceTest extends TransceiverConformanceTest {
    @Override
    protected TransportProvider provider() {
        return new TcpTransportProvider();
    }
}
