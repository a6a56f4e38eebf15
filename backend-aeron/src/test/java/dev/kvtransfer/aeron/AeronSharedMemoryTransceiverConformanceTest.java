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
 * The transceiver conformance suite with push as the generation side's mode and a deployment secret: the context
 * ranks write straight into the generation ranks' shared pool files ({@code ShmWriter}), one copy per byte, over the
 * small standard grid (matching and re-sharded TP/PP/CP, attention DP, 1/2/4-byte elements). The suite's own push
 * rule also runs pull, which takes the same path here (every rank local); after the class, bytes must have gone
 * through shared memory.
 */
class AeronSharedMemoryTransceiverConformanceTest extends TransceiverConformanceTest {
    private static final byte[] SECRET = "kvtransfer-shm-conformance-secret-42".getBytes(StandardCharsets.UTF_8);
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

    /** The small grid, generation CP included (a CP rank of a short prompt holds no block to be written). */
    @Override
    protected LayoutGrid grid() {
        return LayoutGrid.standardSmall();
    }

    @Override
    protected TransportConfig baseConfig() {
        return TransportConfig.builder().authSecret(SECRET).build();
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

    /** Push; a pull (rule 3.11 runs both) takes one copy at any size, as these requests are far under the floor. */
    @Override
    protected TransceiverConfig.Builder transceiverConfig() {
        return super.transceiverConfig().transferMode(TransceiverConfig.TransferMode.PUSH).localOneCopyMinBytes(0);
    }
}
