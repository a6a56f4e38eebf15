package dev.kvtransfer.mpi;

import dev.kvtransfer.api.transport.TransportProvider;
import dev.kvtransfer.testkit.TransportConformanceTest;

/**
 * The testkit's transport rules, unchanged, on the MPI transport. It runs inside every rank of an {@code mpirun}
 * job ({@link MpiJUnitMain}, started by {@link MpiConformanceIT}), never in surefire's JVM: each rule's managers
 * are endpoints of the rank's process talking over MPI (Open MPI's self transport between endpoints of one
 * process), and rule 23's echo child is a JVM the rank starts itself.
 */
public class MpiTransportConformanceTest extends TransportConformanceTest {
    @Override
    protected TransportProvider provider() {
        return new MpiTransportProvider();
    }
}
