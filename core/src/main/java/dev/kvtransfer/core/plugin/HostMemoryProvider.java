package dev.kvtransfer.core.plugin;

import dev.kvtransfer.api.memory.BufferManager;
import dev.kvtransfer.api.memory.MemoryKind;
import dev.kvtransfer.api.memory.MemoryProvider;
import dev.kvtransfer.core.memory.HostBufferManager;

import java.util.EnumSet;
import java.util.Map;
import java.util.Objects;
import java.util.Set;

/**
 * The {@value #NAME} memory provider: core's {@link HostBufferManager} (off-heap, page-aligned host memory), so that
 * the memory plugins a deployment has ({@code kvtransfer plugins}, {@link Plugins#memoryProvider}) always include
 * the one that needs nothing installed. Property {@value #DEBUG} ({@code true}/{@code false}): record allocation
 * stacks for leak reports.
 */
public final class HostMemoryProvider implements MemoryProvider {
    /** The provider name. */
    public static final String NAME = "host";
    /** Allocation-stack recording for leak reports (default: the {@value HostBufferManager#DEBUG_PROPERTY} system property). */
    public static final String DEBUG = "host.debug";

    /** Creates the provider. */
    public HostMemoryProvider() {
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
    public Set<MemoryKind> kinds() {
        return EnumSet.of(MemoryKind.HOST, MemoryKind.PINNED_HOST);
    }

    @Override
    public BufferManager create(Map<String, String> properties) {
        Objects.requireNonNull(properties, "properties");
        for (Map.Entry<String, String> e : properties.entrySet()) {
            if (e.getKey().startsWith("host.") && !e.getKey().equals(DEBUG)) {
                throw new IllegalArgumentException("unknown property " + e.getKey() + " = '" + e.getValue()
                        + "' for memory provider " + NAME + "; known: " + DEBUG);
            }
        }
        String debug = properties.get(DEBUG);
        if (debug == null) {
            return new HostBufferManager();
        }
        if (!debug.equals("true") && !debug.equals("false")) {
            throw new IllegalArgumentException("property " + DEBUG + " = '" + debug + "': must be true or false");
        }
        return new HostBufferManager(Boolean.parseBoolean(debug));
    }

    @Override
    public String toString() {
        return "HostMemoryProvider{" + NAME + "}";
    }
}
