package dev.kvtransfer.api.memory;

import java.util.Map;
import java.util.Set;

/**
 * The entry point of a memory plugin (e.g. {@code "host"} in core, {@code "cuda"} in memory-cuda), registered in
 * {@code META-INF/services/dev.kvtransfer.api.memory.MemoryProvider} and selected by {@link #name()}. Like a
 * transport provider it constructs without touching native libraries, so a machine without a GPU still discovers
 * and reports the plugin ({@link #isAvailable()}, {@link #unavailabilityCause()}).
 */
public interface MemoryProvider {
    /** @return the unique name, e.g. {@code "cuda"} */
    String name();

    /** @return whether this provider can allocate on this machine; never throws */
    boolean isAvailable();

    /**
     * @return why it cannot (e.g. "no CUDA driver: libcuda.so.1 not found", "no CUDA device"), or {@code null}
     *         when available
     */
    String unavailabilityCause();

    /** @return the memory kinds the managers of this provider allocate and copy */
    Set<MemoryKind> kinds();

    /**
     * Creates a buffer manager.
     *
     * @param properties provider-specific settings (e.g. {@code cuda.device}); unknown keys of the provider's
     *                   own prefix are refused naming the key and the known ones
     * @return a new manager, the caller's to close
     * @throws IllegalStateException when the provider is not available, with the cause
     */
    BufferManager create(Map<String, String> properties);
}
