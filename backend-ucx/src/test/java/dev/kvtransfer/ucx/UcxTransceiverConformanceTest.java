package dev.kvtransfer.ucx;

import dev.kvtransfer.api.transport.TransportConfig;
import dev.kvtransfer.api.transport.TransportProvider;
import dev.kvtransfer.testkit.LayoutGrid;
import dev.kvtransfer.testkit.TransceiverConformanceTest;

/**
 * The whole transfer path — core's CacheTransceiver and the standard formatter (ServiceLoader) — over the UCX
 * transport: every rank of both {@code LocalInstance}s is its own UCX context, worker and listener on loopback.
 * The grid is the testkit's small standard grid (TP/PP/CP/attention-DP, 1/2/4-byte elements, kvFactor 1, two
 * unsupported pairs), which keeps the suite well under a minute on 2 cores.
 */
class UcxTransceiverConformanceTest extends TransceiverConformanceTest {
    @Override
    protected TransportProvider provider() {
        return new UcxTransportProvider();
    }

    @Override
    protected LayoutGrid grid() {
        return LayoutGrid.standardSmall();
    }

    @Override
    protected TransportConfig baseConfig() {
        return TransportConfig.builder().build();
    }

    @org.junit.jupiter.api.Test
    @Override
    protected void optional_spec3_18_pullsServedInOppositeOrdersArriveWithOneGenerationRequestThread() {
        super.optional_spec3_18_pullsServedInOppositeOrdersArriveWithOneGenerationRequestThread();
    }
}
