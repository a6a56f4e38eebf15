package dev.kvtransfer.api.transport;

import dev.kvtransfer.api.memory.MemoryBuffer;

/**
 * Memory a rank registered for one-sided writes ({@link ConnectionManager#register}). Thread-safe.
 */
public interface RegisteredRegion extends AutoCloseable {
    /** @return what a writer needs: serialise it into the request that grants the write */
    RegionDescriptor descriptor();

    /** @return the registered memory */
    MemoryBuffer memory();

    /**
     * Revokes the registration: writes that have not started are refused ({@code CANCELLED}); returns once no
     * write into the region is in progress (bounded by the transport's default timeout; a writer still busy
     * then has its endpoint closed), so the memory may be reused. Idempotent.
     */
    @Override
    void close();
}
