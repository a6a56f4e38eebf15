package dev.kvtransfer.aeron;

import dev.kvtransfer.api.transport.TransportConfig;
import dev.kvtransfer.api.transport.TransportProvider;
import dev.kvtransfer.testkit.TransceiverFaultConformanceTest;

/**
 * The testkit's fault rules over Aeron (IPC between the instances of this JVM, the standard formatter), with the
 * one-copy path off: the rules fault payload messages, which a local pull on that path does not send.
 */
class AeronTransceiverFaultConformanceTest extends TransceiverFaultConformanceTest {
    @Override
    protected TransportProvider provider() {
        return new AeronTransportProvider();
    }

    @Override
    protected TransportConfig baseConfig() {
        return TransportConfig.builder().property(AeronSettings.SHARED_MEMORY_WRITES, "false").build();
    }
}
