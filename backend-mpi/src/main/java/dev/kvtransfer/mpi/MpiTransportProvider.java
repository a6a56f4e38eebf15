package dev.kvtransfer.mpi;

import dev.kvtransfer.api.transport.ConnectionManager;
import dev.kvtransfer.api.transport.TransportCapability;
import dev.kvtransfer.api.transport.TransportConfig;
import dev.kvtransfer.api.transport.TransportProvider;

import java.util.EnumSet;
import java.util.Objects;
import java.util.Set;

/**
 * The {@code "mpi"} transport: ranks are the processes of one {@code MPI_COMM_WORLD} started by
 * {@code mpirun}; a manager's address is its world rank. Constructing the provider touches nothing native;
 * {@link #isAvailable()} loads the JNI library (never initializes MPI), {@link #create} initializes MPI.
 *
 * <p>Capabilities: {@link TransportCapability#CROSS_PROCESS} only. Open MPI aborts the whole job when a rank
 * dies, so a surviving rank is killed rather than told {@code PEER_LOST}: no
 * {@link TransportCapability#PEER_FAILURE_DETECTION}.
 */
public final class MpiTransportProvider implements TransportProvider {
    /** The provider name. */
    public static final String NAME = "mpi";

    /** Creates the provider (no native work). */
    public MpiTransportProvider() {
    }

    @Override
    public String name() {
        return NAME;
    }

    @Override
    public boolean isAvailable() {
        return unavailabilityCause() == null;
    }

    @Override
    public String unavailabilityCause() {
        try {
            Throwable failure = MpiNative.loadFailure();
            return failure == null ? null : "MPI JNI library not loadable: " + failure;
        } catch (Throwable t) {
            // Never throw from here: a machine without MPI must still list the plugin.
            return "MPI JNI library not loadable: " + t;
        }
    }

    @Override
    public Set<TransportCapability> capabilities() {
        return EnumSet.of(TransportCapability.CROSS_PROCESS);
    }

    /**
     * Starts this process's endpoint, initializing MPI on first use. Properties:
     * {@value MpiConnectionManager#MAX_MESSAGE_BYTES} (chunk size, default 1 GiB; same on every rank).
     * Host and port are ignored: MPI addresses are ranks.
     */
    @Override
    public ConnectionManager create(TransportConfig config) {
        Objects.requireNonNull(config, "config");
        return MpiConnectionManager.open(config);
    }
}
