package dev.kvtransfer.aeron;

import dev.kvtransfer.api.transport.TransportConfig;

/**
 * The transceiver rules again with {@code aeron.ipc=false}: the ranks of both instances then talk UDP on loopback
 * through the shared driver, the path two processes take, so the whole transfer path over UDP (staging, chunking,
 * concurrency, cancel, timeouts, close) is covered in one JVM too. A UDP manager closes in ~170 ms instead of
 * ~10 ms over IPC, which makes this run ~15 s instead of ~5 s.
 */
class AeronUdpTransceiverConformanceTest extends AeronTransceiverConformanceTest {
    @Override
    protected TransportConfig baseConfig() {
        return super.baseConfig().toBuilder().property(AeronSettings.IPC, "false").build();
    }
}
