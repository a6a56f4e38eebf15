package dev.kvtransfer.crosshost;

import dev.kvtransfer.ucx.UcxTransportProvider;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.io.IOException;
import java.util.Map;

import static org.assertj.core.api.Assertions.assertThat;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

/**
 * UCX over TCP between two network namespaces: the context process (TP2) in one, the generation process (PP2) in
 * the other, each rank's bootstrap listener on its veth address, {@code ucx.transports=net} (UCX's network
 * transports with its peer error mode; the backend sets {@code NET_DEVICES} to the device holding the configured
 * host, here the veth). Over the bare veth and under a 200 Mbit/s token bucket, then both processes on one
 * namespace's loopback; every transfer verified element by element, the KV bytes seen on the generation side's
 * veth, the times reported.
 */
@Timeout(value = 100, threadMode = Timeout.ThreadMode.SEPARATE_THREAD)
class UcxCrossHostTest extends CrossHostTestBase {
    @BeforeAll
    static void ucxAvailable() {
        UcxTransportProvider p = new UcxTransportProvider();
        assumeTrue(p.isAvailable(), p::unavailabilityCause);
    }

    @Test
    void required_01_tcpBetweenNamespacesMovesVerifiedKvBareAndUnder200mbit() throws IOException {
        Map<String, Long> gen = overVethThenRateLimited("ucx", "ucx-tcp", Map.of("ucx.transports", "net"));
        assertThat(gen).as("UCX reports no driver counters").isEmpty();
    }
}
