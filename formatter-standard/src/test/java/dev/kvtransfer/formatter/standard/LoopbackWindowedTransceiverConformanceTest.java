package dev.kvtransfer.formatter.standard;

import dev.kvtransfer.api.transport.TransportConfig;
import dev.kvtransfer.api.transport.TransportProvider;
import dev.kvtransfer.testkit.LayoutGrid;
import dev.kvtransfer.testkit.TransceiverConformanceTest;
import dev.kvtransfer.testkit.WindowedGrid;
import dev.kvtransfer.testkit.loopback.LoopbackTransportProvider;

/**
 * Core's whole protocol over sliding-window caches ({@link WindowedGrid.windowed()}): every pair moves through two
 * LocalInstances over loopback, every element inside each layer's window checked against the pattern, every element
 * of a windowed layer before its window checked to still hold the poison written before the transfer, and the pairs
 * whose windows differ refused before a byte moves.
 */
class LoopbackWindowedTransceiverConformanceTest extends TransceiverConformanceTest {
    @Override
    protected TransportProvider provider() {
        return new LoopbackTransportProvider();
    }

    @Override
    protected LayoutGrid grid() {
        return WindowedGrid.windowed();
    }

    /** 8 tokens a block: rule 2's 200 prompts of up to 40 tokens hold up to 1000 blocks at once. */
    @Override
    protected int blocksPerRank() {
        return 2048;
    }

    @Override
    protected TransportConfig baseConfig() {
        return TransportConfig.builder().property(LoopbackTransportProvider.FABRIC_PROPERTY,
                "windowed-transceiver-conformance").build();
    }
}
