package dev.kvtransfer.api.memory;

/**
 * Allocates and copies {@link MemoryBuffer}s of one or more {@link MemoryKind}s.
 *
 * <p>Thread-safe. {@link #close()} fails loudly, naming the buffers still open, when any is outstanding.
 */
public interface BufferManager extends AutoCloseable {
    /**
     * Allocates zeroed-or-not (unspecified) memory.
     *
     * @param bytes size in bytes, at least 0
     * @param kind  where the memory lives
     * @return an owning buffer
     * @throws UnsupportedOperationException if this manager cannot allocate that kind
     */
    MemoryBuffer allocate(long bytes, MemoryKind kind);

    /**
     * Copies bytes between buffers (any kinds this manager supports); may be asynchronous for device memory
     * until {@link #synchronize()}.
     *
     * @param src       source
     * @param srcOffset first source byte
     * @param dst       destination
     * @param dstOffset first destination byte
     * @param bytes     byte count
     * @throws IndexOutOfBoundsException if either range leaves its buffer
     */
    void copy(MemoryBuffer src, long srcOffset, MemoryBuffer dst, long dstOffset, long bytes);

    /** Waits until every copy issued by this thread has completed. */
    void synchronize();

    /**
     * Checks that no buffer is outstanding and releases the manager.
     *
     * @throws IllegalStateException listing the outstanding buffers
     */
    @Override
    void close();
}
