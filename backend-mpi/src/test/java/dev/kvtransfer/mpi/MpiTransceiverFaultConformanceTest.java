package dev.kvtransfer.mpi;

import dev.kvtransfer.api.transport.TransportProvider;
import dev.kvtransfer.testkit.TransceiverFaultConformanceTest;

/**
 * The testkit's fault rules, unchanged, on the MPI transport (wrapped by the testkit's faulty provider), inside the
 * ranks of an {@code mpirun} job ({@link MpiConformanceIT}), never in surefire's JVM.
 */
public class MpiTransceiverFaultConformanceTest extends TransceiverFaultConformanceTest {
    @Override
    protected TransportProvider provider() {
        return new MpiTransportProvider();
    }
}
