package dev.kvtransfer.aeron;

import dev.kvtransfer.api.transport.TransportProvider;
import dev.kvtransfer.testkit.TransceiverFaultConformanceTest;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * The testkit's fault rules over Aeron with its defaults: the instances of this JVM are local and authenticated, so
 * their pulls move as one-copy writes into the generation pools whatever their size (control messages lost, delayed
 * or refused, peers lost, deadlines). The two rules that fault a payload message check instead that that path sends none
 * ({@link AeronTransceiverFaultConformanceTest} runs them with the path off).
 */
class AeronSharedMemoryFaultConformanceTest extends TransceiverFaultConformanceTest {
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

    /** One-copy pulls of every size: rules 4.3 and 4.4 check that no payload message is sent, bytes exact. */
    @Override
    protected boolean payloadAsMessages() {
        return false;
    }
}
