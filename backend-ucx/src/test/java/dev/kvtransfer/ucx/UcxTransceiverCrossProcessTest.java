package dev.kvtransfer.ucx;

import dev.kvtransfer.api.transport.TransportProvider;
import dev.kvtransfer.core.TransceiverConfig;
import dev.kvtransfer.testkit.TransceiverCrossProcessTest;
import org.junit.jupiter.api.Test;

/**
 * The testkit's cross-process transceiver rules over UCX on loopback with its default settings (the context
 * instance in a child JVM; one-sided writes {@code ucx.oneSided=auto}, emulated in shm mode), plus the context
 * process killed mid-push: the request in flight fails in bound and a fresh context's request is pushed and
 * verified. The testkit's leak check runs after the class (no descriptor, thread or buffer left).
 */
class UcxTransceiverCrossProcessTest extends TransceiverCrossProcessTest {
    @Override
    protected TransportProvider provider() {
        return new UcxTransportProvider();
    }

    @Test
    void contextKilledMidPushFailsTheRequestInBoundAndAFreshOneIsServed() throws Exception {
        killedContext(TransceiverConfig.TransferMode.PUSH, 7200);
    }
}
