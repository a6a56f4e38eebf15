package dev.kvtransfer.mpi;

import dev.kvtransfer.api.transport.ConnectionManager;
import dev.kvtransfer.api.transport.RankLauncher;
import dev.kvtransfer.api.transport.TransportCapability;
import dev.kvtransfer.api.transport.TransportConfig;
import dev.kvtransfer.api.transport.TransportProvider;

import java.util.EnumSet;
import java.util.Objects;
import java.util.Optional;
import java.util.Set;

/**
 * The {@code "mpi"} transport: ranks are the processes of one {@code MPI_COMM_WORLD} started by {@code mpirun}
 * ({@link #launcher()}); a manager is an endpoint of its process, address {@code rank/endpoint@world}. Constructing
 * the provider touches nothing native; {@link #isAvailable()} loads the JNI library (never initializes MPI),
 * {@link #create} initializes MPI.
 *
 * <p>Capabilities: {@link TransportCapability#CROSS_PROCESS}, meaning: between the processes of one
 * {@code mpirun} job, and with a process outside it (e.g. a child JVM of a rank) when the job runs with Open MPI's
 * {@code ompi-server} ({@code mpirun --ompi-server file:URI}), through MPI dynamic process management
 * ({@link MpiLinks}); without the server an address of another MPI world is refused with {@code NETWORK}, saying
 * so. No {@link TransportCapability#PEER_FAILURE_DETECTION}: Open MPI aborts the whole job when a rank dies, so a
 * surviving rank is killed rather than told {@code PEER_LOST}, and a silent peer ends a wait at its deadline.
 * {@link TransportCapability#ONE_SIDED_WRITE} and {@link TransportCapability#NATIVE_ONE_SIDED_WRITE}: MPI-3 RMA
 * puts into memory attached to the process's dynamic window, granted by the owner's agent ({@link MpiOneSided});
 * {@code mpi.oneSided=emulated} selects {@code EmulatedOneSided} instead (then the writes are not native).
 */
public final class MpiTransportProvider implements TransportProvider {
    /** The provider name. */
    public static final String NAME = "mpi";
    /** Every {@code mpi.*} property this transport reads, with default, accepted values and meaning. */
    public static final java.util.List<dev.kvtransfer.api.ConfigKey> CONFIG_KEYS = MpiSettings.CONFIG_KEYS;

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
        return EnumSet.of(TransportCapability.CROSS_PROCESS, TransportCapability.ONE_SIDED_WRITE,
                TransportCapability.NATIVE_ONE_SIDED_WRITE);
    }

    /**
     * Opens an endpoint of this process, initializing MPI on first use (collective: every rank of the job must
     * create one). Any number may be open at once. Properties: see {@link MpiSettings} (unknown {@code mpi.*} keys
     * are refused). Host and port are ignored: MPI addresses are {@code rank/endpoint@world}.
     */
    @Override
    public ConnectionManager create(TransportConfig config) {
        Objects.requireNonNull(config, "config");
        return MpiConnectionManager.open(config);
    }

    /** @return the mpirun launcher: ranks of this transport are the processes of one {@code mpirun} job */
    @Override
    public Optional<RankLauncher> launcher() {
        return Optional.of(new MpiRankLauncher());
    }
}
