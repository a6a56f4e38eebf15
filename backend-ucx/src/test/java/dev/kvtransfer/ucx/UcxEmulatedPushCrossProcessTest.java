package dev.kvtransfer.ucx;

import dev.kvtransfer.api.transport.TransportProvider;
import dev.kvtransfer.core.TransceiverConfig;
import dev.kvtransfer.testkit.TransceiverCrossProcessTest;
import org.junit.jupiter.api.Test;

import java.util.Map;

/**
 * The testkit's cross-process transceiver rules over UCX with one-sided writes emulated over tagged messages
 * ({@code ucx.oneSided=emulated}), plus the context process killed mid-push: the request in flight fails in
 * bound and a fresh context's request is pushed and verified.
 */
class UcxEmulatedPushCrossProcessTest extends TransceiverCrossProcessTest {
    @Override
    protected TransportProvider provider() {
        return new UcxTransportProvider();
    }

    @Override
    protected Map<String, String> transportProperties() {
        return Map.of(UcxSettings.ONE_SIDED, "emulated");
    }

    @Test
    void contextKilledMidPushFailsTheRequestInBoundAndAFreshOneIsServed() throws Exception {
        killedContext(TransceiverConfig.TransferMode.PUSH, 7200);
    }
}
