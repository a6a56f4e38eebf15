package dev.kvtransfer.core.testsupport;

import dev.kvtransfer.api.transport.ConnectionManager;
import dev.kvtransfer.api.transport.TransportCapability;
import dev.kvtransfer.api.transport.TransportConfig;
import dev.kvtransfer.api.transport.TransportProvider;

import java.util.Set;

/** A discovered transport that reports itself unavailable, as a UCX plugin on a machine without libucp. */
public final class UnavailableTransportProvider implements TransportProvider {
    @Override
    public String name() {
        return "nativeonly";
    }

    @Override
    public boolean isAvailable() {
        return false;
    }

    @Override
    public String unavailabilityCause() {
        return "libnative.so missing";
    }

    @Override
    public Set<TransportCapability> capabilities() {
        return Set.of();
    }

    @Override
    public ConnectionManager create(TransportConfig config) {
        throw new UnsupportedOperationException("nativeonly is not available: libnative.so missing");
    }
}
