package dev.kvtransfer.ucx;

import dev.kvtransfer.api.transport.TransportConfig;
import dev.kvtransfer.api.transport.TransportProvider;
import dev.kvtransfer.testkit.TransceiverFaultConformanceTest;

/**
 * The testkit's fault rules over UCX (shared memory between the instances of this JVM, the standard formatter),
 * without CMA: the rules fault payload messages, which a local pull of at least a MiB does not send with it (it moves
 * as one-copy writes); {@link UcxLocalPullFaultConformanceTest} runs them on that path.
 */
class UcxTransceiverFaultConformanceTest extends TransceiverFaultConformanceTest {
    @Override
    protected TransportProvider provider() {
        return new UcxTransportProvider();
    }

    @Override
    protected TransportConfig baseConfig() {
        return TransportConfig.builder().property(UcxSettings.CMA, "false").build();
    }
}
