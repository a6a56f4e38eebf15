package dev.kvtransfer.ucx;

import dev.kvtransfer.api.transport.TransportConfig;
import dev.kvtransfer.api.transport.TransportProvider;
import dev.kvtransfer.testkit.TransceiverFaultConformanceTest;

/**
 * The testkit's fault rules over UCX with {@code ucx.vectoredWrites} on (shared memory with CMA): the instances of
 * this JVM are local, so their pulls move as one-copy writes ({@link UcxSettings#oneCopyWrites()}), each batch one
 * vectored message the owner reads by CMA, whatever their size (control messages lost, delayed or refused, peers
 * lost, deadlines). The two rules that fault a payload message check instead that this path sends none
 * ({@link UcxTransceiverFaultConformanceTest} runs them with the defaults, on messages).
 */
class UcxLocalPullFaultConformanceTest extends TransceiverFaultConformanceTest {
    @Override
    protected TransportProvider provider() {
        return new UcxTransportProvider();
    }

    @Override
    protected TransportConfig baseConfig() {
        return TransportConfig.builder().property(UcxSettings.VECTORED_WRITES, "true").build();
    }

    /** One-copy pulls of every size: rules 4.3 and 4.4 check that no payload message is sent, bytes exact. */
    @Override
    protected boolean payloadAsMessages() {
        return false;
    }
}
