package dev.kvtransfer.cli;

import dev.kvtransfer.api.memory.BufferManager;
import dev.kvtransfer.api.memory.MemoryKind;
import dev.kvtransfer.api.memory.MemoryProvider;
import dev.kvtransfer.core.memory.HostBufferManager;
import dev.kvtransfer.core.plugin.Plugins;

import java.util.Map;
import java.util.function.Supplier;

/**
 * Where the demo's KV pools live ({@code --pool-memory}): host memory from core's {@link HostBufferManager}, or
 * device memory from the {@code cuda} {@link MemoryProvider}, found through the plugin SPI like every other plugin
 * (class path or plugin directory; only api types are used, so the plugin keeps its own class loader). One manager
 * of that provider serves a whole instance: the pools ({@code DEVICE}), their staging ({@code PINNED_HOST}) and
 * core's control buffers ({@code HOST}).
 */
final class PoolMemory {
    /** The memory plugin a device pool needs. */
    static final String CUDA = "cuda";

    private final MemoryKind kind;
    private final MemoryProvider provider;
    private final int device;

    private PoolMemory(MemoryKind kind, MemoryProvider provider, int device) {
        this.kind = kind;
        this.provider = provider;
        this.device = device;
    }

    /**
     * Resolves the options before anything starts.
     *
     * @param options the demo's options
     * @param plugins what was discovered
     * @return the pool memory
     * @throws IllegalArgumentException naming the option and the reason when the pools cannot be placed as asked:
     *                                  no {@code cuda} plugin, the plugin's {@code unavailabilityCause()}, or an
     *                                  option a device pool does not support
     */
    static PoolMemory resolve(DemoOptions options, Plugins plugins) {
        MemoryKind kind = options.poolKind();
        if (kind != MemoryKind.DEVICE) {
            return new PoolMemory(kind, null, 0);
        }
        if (options.cudaDevice < 0) {
            throw new IllegalArgumentException("--cuda-device " + options.cudaDevice + ": must be 0 or more");
        }
        if (options.backend.equals("mpi")) {
            throw new IllegalArgumentException("--pool-memory device: not with --backend mpi (its ranks allocate "
                    + "host pools)");
        }
        if (options.push()) {
            throw new IllegalArgumentException("--pool-memory device: not with --mode push (the generation ranks "
                    + "would register device memory for one-sided writes, which only a transport with "
                    + "DEVICE_MEMORY and native one-sided writes accepts)");
        }
        if (options.dumpDir != null) {
            throw new IllegalArgumentException("--pool-memory device: not with --dump-dir (dumps read the pools on "
                    + "the CPU)");
        }
        MemoryProvider found = null;
        for (MemoryProvider p : plugins.memoryProviders()) {
            if (CUDA.equals(Plugins.safeName(p, MemoryProvider::name))) {
                found = p;
            }
        }
        if (found == null) {
            throw new IllegalArgumentException("--pool-memory device needs the '" + CUDA + "' memory plugin "
                    + "(memory-cuda), which is not on the class path or in a plugin directory; found: "
                    + plugins.describeMemoryProviders());
        }
        boolean available;
        String cause;
        try {
            available = found.isAvailable();
            cause = found.unavailabilityCause();
        } catch (RuntimeException | LinkageError e) {
            available = false;
            cause = e.toString();
        }
        if (!available) {
            throw new IllegalArgumentException("--pool-memory device: CUDA is not usable here: " + cause);
        }
        return new PoolMemory(kind, found, options.cudaDevice);
    }

    /** @return where the pools live */
    MemoryKind kind() {
        return kind;
    }

    /** @return makes an instance's buffer manager */
    Supplier<BufferManager> factory() {
        if (provider == null) {
            return HostBufferManager::new;
        }
        return () -> provider.create(Map.of("cuda.device", Integer.toString(device)));
    }
}
