package dev.kvtransfer.ucx;

import dev.kvtransfer.api.transport.TransportProvider;
import dev.kvtransfer.testkit.TransceiverCrossProcessTest;

/** The testkit's cross-process transceiver rules over UCX on loopback (the context instance in a child JVM). */
class UcxTransceiverCrossProcessTest extends TransceiverCrossProcessTest {
    @Override
    protected TransportProvider provider() {
        return new UcxTransportProvider();
    }
}
