package dev.kvtransfer.formatter.standard;

import dev.kvtransfer.api.transport.TransportConfig;
import dev.kvtransfer.api.transport.TransportProvider;
import dev.kvtransfer.testkit.LayoutGrid;
import dev.kvtransfer.testkit.TransceiverConformanceTest;
import dev.kvtransfer.testkit.loopback.LoopbackTransportProvider;

/**
 * Core's whole protocol over hybrid models ({@link LayoutGrid#hybrid()}): every pair's KV blocks and recurrent states
 * move in one transfer through two LocalInstances over loopback, every block and state element checked (the states
 * poisoned first), and the refused recurrent pairs fail before a byte moves.
 */
class LoopbackHybridTransceiverConformanceTest extends TransceiverConformanceTest {
    @Override
    protected TransportProvider provider() {
        return new LoopbackTransportProvider();
    }

    @Override
    protected LayoutGrid grid() {
        return LayoutGrid.hybrid();
    }

    @Override
    protected TransportConfig baseConfig() {
        return TransportConfig.builder().property(LoopbackTransportProvider.FABRIC_PROPERTY,
                "hybrid-transceiver-conformance").build();
    }
}
