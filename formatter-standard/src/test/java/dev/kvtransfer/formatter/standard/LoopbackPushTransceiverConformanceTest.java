package dev.kvtransfer.formatter.standard;

import dev.kvtransfer.api.transport.TransportConfig;
import dev.kvtransfer.api.transport.TransportProvider;
import dev.kvtransfer.core.TransceiverConfig;
import dev.kvtransfer.testkit.LayoutGrid;
import dev.kvtransfer.testkit.TransceiverConformanceTest;
import dev.kvtransfer.testkit.loopback.LoopbackTransportProvider;

/**
 * The transceiver suite with push as the generation side's mode, on loopback over the small standard grid. It
 * holds the pair whose generation CP rank holds no block of a short prompt: that rank registers no grant, so its
 * info reads as pull, and the context side must still push to its peers instead of refusing the request.
 */
class LoopbackPushTransceiverConformanceTest extends TransceiverConformanceTest {
    @Override
    protected TransportProvider provider() {
        return new LoopbackTransportProvider();
    }

    @Override
    protected LayoutGrid grid() {
        return LayoutGrid.standardSmall();
    }

    @Override
    protected TransportConfig baseConfig() {
        return TransportConfig.builder().property(LoopbackTransportProvider.FABRIC_PROPERTY, "push-conformance")
                .build();
    }

    @Override
    protected TransceiverConfig.Builder transceiverConfig() {
        return super.transceiverConfig().transferMode(TransceiverConfig.TransferMode.PUSH);
    }
}
