package dev.kvtransfer.examples.tcp;

import dev.kvtransfer.api.transport.ConnectionManager;
import dev.kvtransfer.api.transport.TransportCapability;
import dev.kvtransfer.api.transport.TransportConfig;
import dev.kvtransfer.api.transport.TransportProvider;

import java.util.EnumSet;
import java.util.Objects;
import java.util.Set;

/**
 * The {@value #NAME} transport: a small third-party transport plugin over plain TCP with java.nio, written against
 * {@code kvtransfer-api} alone (what a plugin author outside this repository writes). Pure Java, so always
 * available. Each rank listens on {@code TransportConfig.host()}:{@code port()} ({@code 0}: any free port) and is
 * reached at {@code tcp://host:port}.
 *
 * <p>Capabilities: {@link TransportCapability#CROSS_PROCESS}, {@link TransportCapability#PEER_FAILURE_DETECTION}
 * (a peer whose socket closes — its manager closed or its process died — is lost at once; messages it sent before
 * are still delivered) and {@link TransportCapability#ONE_SIDED_WRITE}, emulated with the api's
 * {@link dev.kvtransfer.api.transport.support.EmulatedOneSided}. No device memory.
 *
 * <p>Properties ({@code tcp.*}, unknown ones refused): {@value TcpSettings#CONNECT_TIMEOUT_MS},
 * {@value TcpSettings#HANDSHAKE_TIMEOUT_MS}, {@value TcpSettings#SOCKET_BUFFER_BYTES},
 * {@value TcpSettings#MAX_MESSAGE_BYTES}.
 */
// A single-jar third-party plugin: it uses the api's (deprecated) copy, which the host provides.
@SuppressWarnings("removal")
public final class TcpTransportProvider implements TransportProvider {
    /** The provider name. */
    public static final String NAME = "tcp";

    /** Creates the provider (nothing is opened until {@link #create}). */
    public TcpTransportProvider() {
    }

    @Override
    public String name() {
        return NAME;
    }

    @Override
    public boolean isAvailable() {
        return true;
    }

    @Override
    public String unavailabilityCause() {
        return null;
    }

    @Override
    public Set<TransportCapability> capabilities() {
        return EnumSet.of(TransportCapability.CROSS_PROCESS, TransportCapability.PEER_FAILURE_DETECTION,
                TransportCapability.ONE_SIDED_WRITE, TransportCapability.AUTHENTICATED);
    }

    @Override
    public ConnectionManager create(TransportConfig config) {
        Objects.requireNonNull(config, "config");
        return TcpConnectionManager.open(config, TcpSettings.of(config));
    }

    @Override
    public String toString() {
        return "TcpTransportProvider";
    }
}
