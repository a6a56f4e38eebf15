package dev.kvtransfer.aeron;

import dev.kvtransfer.api.transport.TransportConfig;
import dev.kvtransfer.api.transport.TransportProvider;
import dev.kvtransfer.testkit.TransportConformanceTest;

import java.time.Duration;

/**
 * The testkit's transport rules with {@code aeron.ipc=false}: managers of one JVM then talk UDP on loopback
 * through their shared driver, the path two processes use (the default run, {@link AeronTransportConformanceTest},
 * goes over IPC).
 */
class AeronUdpTransportConformanceTest extends TransportConformanceTest {
    @Override
    protected TransportProvider provider() {
        return new AeronTransportProvider();
    }

    @Override
    protected TransportConfig config(String name) {
        return TransportConfig.builder().name(name).defaultTimeout(Duration.ofSeconds(30))
                .property(AeronSettings.IPC, "false").build();
    }
}
