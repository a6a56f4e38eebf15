package dev.kvtransfer.ucx;

import dev.kvtransfer.api.transport.TransportConfig;
import dev.kvtransfer.api.transport.TransportProvider;
import dev.kvtransfer.testkit.TransportConformanceTest;

import java.time.Duration;

/**
 * The transport conformance suite in net mode ({@code ucx.transports=net}): UCX's TCP transport with its peer
 * error mode, the path taken across hosts, exercised here on loopback.
 */
class UcxNetTransportConformanceTest extends TransportConformanceTest {
    @Override
    protected TransportProvider provider() {
        return new UcxTransportProvider();
    }

    @Override
    protected TransportConfig config(String name) {
        return TransportConfig.builder().name(name).defaultTimeout(Duration.ofSeconds(30))
                .property(UcxSettings.TRANSPORTS, "net").build();
    }
}
