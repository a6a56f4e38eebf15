package dev.kvtransfer.mpi;

import dev.kvtransfer.api.transport.TransportProvider;
import dev.kvtransfer.testkit.TransceiverConformanceTest;

/**
 * The testkit's transceiver rules, unchanged, on the MPI transport: both {@code LocalInstance}s live in one rank
 * (ranks as threads), each of their ranks with its own manager, i.e. its own MPI endpoint of this process. Runs
 * inside the ranks of an {@code mpirun} job ({@link MpiConformanceIT}), never in surefire's JVM.
 */
public class MpiTransceiverConformanceTest extends TransceiverConformanceTest {
    @Override
    protected TransportProvider provider() {
        return new MpiTransportProvider();
    }

    @org.junit.jupiter.api.Test
    @Override
    protected void optional_spec3_12_pullWithoutCoalescingMovesEveryElementInMoreMessages() {
        super.optional_spec3_12_pullWithoutCoalescingMovesEveryElementInMoreMessages();
    }
}
