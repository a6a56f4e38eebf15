package dev.kvtransfer.ucx;

import dev.kvtransfer.api.transport.TransportConfig;
import dev.kvtransfer.api.transport.TransportProvider;
import dev.kvtransfer.testkit.TransportConformanceTest;

import java.time.Duration;

/**
 * The transport conformance suite with one-sided writes emulated over tagged messages
 * ({@code ucx.oneSided=emulated}, shm mode): the one-sided rules (bytes land exactly and only where asked,
 * out-of-range / deregistered / forged writes refused, notification after data, close and peer loss wake
 * waiters) hold for that path too.
 */
class UcxEmulatedOneSidedConformanceTest extends TransportConformanceTest {
    @Override
    protected TransportProvider provider() {
        return new UcxTransportProvider();
    }

    @Override
    protected TransportConfig config(String name) {
        return TransportConfig.builder().name(name).defaultTimeout(Duration.ofSeconds(30))
                .property(UcxSettings.ONE_SIDED, "emulated").build();
    }
}
