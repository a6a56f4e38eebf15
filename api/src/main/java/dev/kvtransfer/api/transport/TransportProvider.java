package dev.kvtransfer.api.transport;

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
}
