package dev.kvtransfer.formatter.standard;

import dev.kvtransfer.api.transport.TransportConfig;
import dev.kvtransfer.api.transport.TransportProvider;
import dev.kvtransfer.testkit.LayoutGrid;
import dev.kvtransfer.testkit.TransceiverConformanceTest;
import dev.kvtransfer.testkit.loopback.LoopbackTransportProvider;

/**
 * The whole transfer path — core's CacheTransceiver, the standard formatter (found through ServiceLoader) and
 * the testkit's loopback transport — passes the transceiver conformance suite over the full standard grid plus
 * context CP (about 130 supported pairs, each run through two LocalInstances). It lives here because core
 * cannot test-depend on testkit (testkit depends on core).
 */
class LoopbackTransceiverConformanceTest extends TransceiverConformanceTest {
    @Override
    protected TransportProvider provider() {
        return new LoopbackTransportProvider();
    }

    @Override
    protected LayoutGrid grid() {
        return LayoutGrid.standardFull().plus(LayoutGrid.contextCp());
    }

    @Override
    protected TransportConfig baseConfig() {
        // A fabric of our own: other suites in this JVM cannot reach (or be reached by) these ranks.
        return TransportConfig.builder().property(LoopbackTransportProvider.FABRIC_PROPERTY, "transceiver-conformance")
                .build();
    }

    @org.junit.jupiter.api.Test
    @Override
    protected void optional_spec3_12_pullWithoutCoalescingMovesEveryElementInMoreMessages() {
        super.optional_spec3_12_pullWithoutCoalescingMovesEveryElementInMoreMessages();
    }

    @org.junit.jupiter.api.Test
    @Override
    protected void optional_spec3_18_pullsServedInOppositeOrdersArriveWithOneGenerationRequestThread() {
        super.optional_spec3_18_pullsServedInOppositeOrdersArriveWithOneGenerationRequestThread();
    }
}
