package dev.kvtransfer.api.transport;

import java.util.Optional;
import java.util.Set;

/**
 * The entry point of a transport plugin, registered in
 * {@code META-INF/services/dev.kvtransfer.api.transport.TransportProvider} (one per jar) and selected by
 * {@link #name()}. Must construct without touching native libraries, so a machine that lacks them still
 * discovers and reports the plugin.
 */
public interface TransportProvider {
    /** @return the unique name, e.g. {@code "aeron"} */
    String name();

    /** @return whether this transport can run on this machine; never throws */
    boolean isAvailable();

    /** @return why it cannot run (e.g. a missing native library), or {@code null} when available */
    String unavailabilityCause();

    /** @return what it can do beyond the required operations */
    Set<TransportCapability> capabilities();

    /**
     * Starts one rank's endpoint.
     *
     * @param config where to listen and how
     * @return a running manager
     * @throws TransportException if it cannot start
     */
    ConnectionManager create(TransportConfig config);

    /**
     * For a transport whose ranks must be started by its own launcher (MPI): the launcher.
     *
     * @return the launcher, or empty when ranks may be started any way (threads, child JVMs)
     */
    default Optional<RankLauncher> launcher() {
        return Optional.empty();
    }

    /**
     * Starts what the processes of this host share (e.g. a standalone media driver), before they start.
     *
     * @param config the settings the processes will use
     * @return what was started (close it after the processes ended), or {@code null} when there is nothing to
     *         share
     */
    default HostSupport startHostSupport(TransportConfig config) {
        return null;
    }

    /**
     * What this transport's own library does on the same channel without kvtransfer's protocol, for benchmarks
     * ({@code kvtransfer bench}) to report ours beside it. Like the provider, obtaining it starts nothing.
     *
     * @return the baseline, or empty when the transport offers none (the default)
     */
    default Optional<RawBaseline> rawBaseline() {
        return Optional.empty();
    }
}
