package dev.kvtransfer.aeron;

import dev.kvtransfer.api.transport.TransportConfig;
import dev.kvtransfer.api.transport.TransportProvider;
import dev.kvtransfer.core.TransceiverConfig;
import dev.kvtransfer.testkit.LayoutGrid;
import dev.kvtransfer.testkit.TransceiverConformanceTest;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;

import java.nio.charset.StandardCharsets;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * The transceiver conformance suite in pull mode (the default) with a deployment secret: every rank of both
 * instances is local, so the generation ranks register push grants and the context ranks write straight into their
 * shared pool files ({@code ShmWriter}), one copy per byte, over the small standard grid (matching and re-sharded
 * TP/PP/CP, attention DP, 1/2/4-byte elements), with the size floor at 0 since these requests are small. After the
 * class, bytes must have gone through shared memory.
 */
class AeronSharedMemoryPullConformanceTest extends TransceiverConformanceTest {
    private static final byte[] SECRET = "kvtransfer-shm-pull-conformance-secret".getBytes(StandardCharsets.UTF_8);
    private static long copiedBefore;

    @BeforeAll
    static void before() {
        copiedBefore = ShmWriter.copiedBytes();
    }

    @AfterAll
    static void bytesWentThroughSharedMemory() {
        assertThat(ShmWriter.copiedBytes() - copiedBefore).as("bytes copied through shared pool files").isPositive();
    }

    @Override
    protected TransportProvider provider() {
        return new AeronTransportProvider();
    }

    @Override
    protected LayoutGrid grid() {
        return LayoutGrid.standardSmall();
    }

    @Override
    protected TransportConfig baseConfig() {
        return TransportConfig.builder().authSecret(SECRET).build();
    }

    /** The small grid's requests are far under the default floor: one copy at any size, so every pull takes it. */
    @Override
    protected TransceiverConfig.Builder transceiverConfig() {
        return super.transceiverConfig().localOneCopyMinBytes(0);
    }

    /** Every rank is local and authenticated: a pull moves as one-copy writes too. */
    @Override
    protected boolean localPullWrites() {
        return true;
    }

    /** The rule about large messages keeps its pulls on messages: the one-copy path off. */
    @Override
    protected TransportConfig messageConfig() {
        return baseConfig().toBuilder().property(AeronSettings.SHARED_MEMORY_WRITES, "false").build();
    }
}
