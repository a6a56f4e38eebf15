package dev.kvtransfer.aeron;

import dev.kvtransfer.api.transport.TransportConfig;
import dev.kvtransfer.api.transport.TransportProvider;
import dev.kvtransfer.testkit.LayoutGrid;
import dev.kvtransfer.testkit.TransceiverConformanceTest;

/**
 * The whole transfer path — core's CacheTransceiver and the standard formatter (ServiceLoader) — over the Aeron
 * transport with its default settings: every rank of both {@code LocalInstance}s is its own manager on the
 * process's shared embedded media driver, so ranks of one JVM talk {@code aeron:ipc}
 * ({@link AeronUdpTransceiverConformanceTest} repeats the suite over UDP). The grid is the testkit's small standard
 * grid (TP/PP/CP/attention-DP, 1/2/4-byte elements, kvFactor 1, two unsupported pairs): 20 tests in ~5 s here.
 */
class AeronTransceiverConformanceTest extends TransceiverConformanceTest {
    @Override
    protected TransportProvider provider() {
        return new AeronTransportProvider();
    }

    @Override
    protected LayoutGrid grid() {
        return LayoutGrid.standardSmall();
    }

    /**
     * Default settings but the one-copy path off: this suite is the pull over messages (the instances of one JVM are
     * local, so a pull would otherwise move as one-copy writes; {@code AeronSharedMemoryPullConformanceTest} runs
     * the suite that way).
     */
    @Override
    protected TransportConfig baseConfig() {
        return TransportConfig.builder().property(AeronSettings.SHARED_MEMORY_WRITES, "false").build();
    }

    @org.junit.jupiter.api.Test
    @Override
    protected void optional_spec3_12_pullWithoutCoalescingMovesEveryElementInMoreMessages() {
        super.optional_spec3_12_pullWithoutCoalescingMovesEveryElementInMoreMessages();
    }

    @org.junit.jupiter.api.Test
    @Override
    protected void optional_spec3_18_pullsServedInOppositeOrdersArriveWithOneGenerationRequestThread() {
        super.optional_spec3_18_pullsServedInOppositeOrdersArriveWithOneGenerationRequestThread();
    }
}
