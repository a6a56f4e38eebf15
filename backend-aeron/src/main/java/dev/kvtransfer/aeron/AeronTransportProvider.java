package dev.kvtransfer.aeron;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.transport.ConnectionManager;
import dev.kvtransfer.api.transport.RawBaseline;
import dev.kvtransfer.api.transport.TransportException;
import dev.kvtransfer.api.transport.TransportCapability;
import dev.kvtransfer.api.transport.TransportConfig;
import dev.kvtransfer.api.transport.TransportProvider;

import java.util.EnumSet;
import java.util.Objects;
import java.util.Optional;
import java.util.Set;

/**
 * The {@code "aeron"} transport: IPC between managers on one media driver, UDP between hosts, through a media
 * driver embedded in the process or one shared by the processes of a host ({@link #startHostSupport}). Pure
 * Java, so it is always available; constructing the provider starts nothing. One-sided writes are emulated.
 */
public final class AeronTransportProvider implements TransportProvider {
    /** The provider name. */
    public static final String NAME = "aeron";

    /** The JVM flag Aeron 1.51 needs on Java 17+. */
    public static final String REQUIRED_JVM_FLAG = "--add-exports=java.base/jdk.internal.misc=ALL-UNNAMED";

    /** Creates the provider (no side effects). */
    public AeronTransportProvider() {
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
            Class.forName("io.aeron.driver.MediaDriver", false, AeronTransportProvider.class.getClassLoader());
        } catch (ClassNotFoundException | LinkageError e) {
            return "io.aeron:aeron-driver is not on the class path: " + e;
        }
        // Agrona 2 (inside Aeron 1.51) reaches jdk.internal.misc.Unsafe; without the export every buffer fails.
        if (!Object.class.getModule().isExported("jdk.internal.misc", AeronTransportProvider.class.getModule())) {
            return "the JVM lacks " + REQUIRED_JVM_FLAG + " (Aeron's Agrona needs jdk.internal.misc.Unsafe)";
        }
        return null;
    }

    @Override
    public Set<TransportCapability> capabilities() {
        // One-sided writes are emulated (EmulatedOneSided): ONE_SIDED_WRITE without NATIVE_ONE_SIDED_WRITE.
        return EnumSet.of(TransportCapability.CROSS_PROCESS, TransportCapability.PEER_FAILURE_DETECTION,
                TransportCapability.ONE_SIDED_WRITE, TransportCapability.AUTHENTICATED);
    }

    /**
     * Starts a media driver the processes of this host share ({@link AeronHostSupport}): give every process its
     * {@link dev.kvtransfer.api.transport.HostSupport#properties()} ({@code aeron.dir}) and peers on it talk
     * {@code aeron:ipc}. The embedded per-process driver stays the default when this is not called.
     *
     * @param config the settings the processes will use (the driver's {@code aeron.*} settings are taken from it)
     * @return the running driver, or {@code null} when {@code config} names an external driver already
     */
    @Override
    public dev.kvtransfer.api.transport.HostSupport startHostSupport(TransportConfig config) {
        Objects.requireNonNull(config, "config");
        AeronSettings s = AeronSettings.from(config); // validates, refuses unknown aeron.* keys
        if (s.externalDir() != null) {
            return null;
        }
        return AeronHostSupport.start(config.properties());
    }

    /**
     * Plain Aeron on the channel our managers use ({@link AeronRawBaseline}: {@code aeron:ipc} on the same driver,
     * or UDP with {@code aeron.ipc=false}; both ends threads of the calling JVM).
     *
     * @return the baseline
     */
    @Override
    public Optional<RawBaseline> rawBaseline() {
        return Optional.of(new AeronRawBaseline());
    }

    @Override
    public ConnectionManager create(TransportConfig config) {
        Objects.requireNonNull(config, "config");
        String cause = unavailabilityCause();
        if (cause != null) {
            throw new TransportException(ErrorCode.NETWORK, "aeron transport unavailable: " + cause);
        }
        return new AeronConnectionManager(Objects.requireNonNull(config, "config"));
    }
}
