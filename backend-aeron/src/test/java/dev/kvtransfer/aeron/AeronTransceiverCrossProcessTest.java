package dev.kvtransfer.aeron;

import dev.kvtransfer.api.transport.TransportProvider;
import dev.kvtransfer.core.TransceiverConfig;
import dev.kvtransfer.testkit.TransceiverCrossProcessTest;

import java.util.Map;

/**
 * The testkit's cross-process transceiver rules over Aeron UDP on loopback (the context instance in a child JVM).
 * A silent peer fails calls with PEER_LOST after 2 s here, so the kill rule ends quickly.
 */
class AeronTransceiverCrossProcessTest extends TransceiverCrossProcessTest {
    @Override
    protected TransportProvider provider() {
        return new AeronTransportProvider();
    }

    @Override
    protected Map<String, String> transportProperties() {
        return Map.of(AeronSettings.PEER_TIMEOUT_MS, "2000");
    }

    /** The context process killed mid-push (emulated one-sided writes): fails in bound, a fresh one is pushed. */
    @org.junit.jupiter.api.Test
    void contextKilledMidPushFailsTheRequestInBoundAndAFreshOneIsServed() throws Exception {
        killedContext(TransceiverConfig.TransferMode.PUSH, 7100);
    }
}
