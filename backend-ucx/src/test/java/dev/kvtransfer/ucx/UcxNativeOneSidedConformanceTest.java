package dev.kvtransfer.ucx;

import dev.kvtransfer.api.transport.TransportCapability;
import dev.kvtransfer.api.transport.TransportConfig;
import dev.kvtransfer.api.transport.TransportProvider;
import dev.kvtransfer.testkit.TransportConformanceTest;
import org.junit.jupiter.api.Test;

import java.time.Duration;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * The transport conformance suite with native one-sided writes ({@code ucx.oneSided=native}: UCX RMA, puts +
 * flush into {@code ucp_mem_map}ped memory; shm mode). The default ({@code auto}) emulates them in shm mode, which
 * {@link UcxTransportConformanceTest} runs; the one-sided rules (bytes land exactly and only where asked,
 * out-of-range / deregistered / forged writes refused, notification after data, close and peer loss wake waiters)
 * hold for both.
 */
class UcxNativeOneSidedConformanceTest extends TransportConformanceTest {
    @Override
    protected TransportProvider provider() {
        return new UcxTransportProvider();
    }

    @Override
    protected TransportConfig config(String name) {
        return TransportConfig.builder().name(name).defaultTimeout(Duration.ofSeconds(30))
                .property(UcxSettings.ONE_SIDED, "native").build();
    }

    @Test
    void theseManagersWriteNatively() {
        try (UcxConnectionManager m = new UcxConnectionManager(config("native-caps"))) {
            assertThat(m.capabilities()).contains(TransportCapability.NATIVE_ONE_SIDED_WRITE);
        }
    }
}
