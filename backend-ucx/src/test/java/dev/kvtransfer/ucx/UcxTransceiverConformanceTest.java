package dev.kvtransfer.ucx;

import dev.kvtransfer.api.transport.TransportConfig;
import dev.kvtransfer.api.transport.TransportProvider;
import dev.kvtransfer.testkit.LayoutGrid;
import dev.kvtransfer.testkit.TransceiverConformanceTest;

/**
 * The whole transfer path — core's CacheTransceiver and the standard formatter (ServiceLoader) — over the UCX
 * transport: every rank of both {@code LocalInstance}s is its own UCX context, worker and listener on loopback.
 * The grid is the testkit's small standard grid (TP/PP/CP/attention-DP, 1/2/4-byte elements, kvFactor 1, two
 * unsupported pairs), which keeps the suite well under a minute on 2 cores. Pulls of at least
 * {@code kvtransfer.localOneCopyMinBytes} move as one-copy writes ({@link UcxSettings#oneCopyWrites()}); the suite's
 * requests are below it, except the rule about large messages, which runs without CMA to keep its messages.
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

    /** The rule about large messages keeps its pulls on messages: without CMA a write is not one copy. */
    @Override
    protected TransportConfig messageConfig() {
        return baseConfig().toBuilder().property(UcxSettings.CMA, "false").build();
    }
}
