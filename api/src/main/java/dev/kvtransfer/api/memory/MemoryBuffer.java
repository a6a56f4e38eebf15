package dev.kvtransfer.api.memory;

import java.nio.ByteBuffer;

/**
 * A contiguous range of off-heap memory with a stable address. Transports send and receive straight from it.
 *
 * <p>Ownership: the buffer returned by {@link BufferManager#allocate} owns its memory and must be closed once;
 * a {@link #slice} is a view that shares the parent's memory, whose {@code close()} does nothing, and which is
 * valid only while the parent is open. Reading and writing the bytes from several threads is the caller's
 * business (no locking); the metadata methods are thread-safe.
 */
public interface MemoryBuffer extends AutoCloseable {
    /** @return the address of the first byte */
    long address();

    /** @return the length in bytes */
    long size();

    /** @return where the bytes live */
    MemoryKind kind();

    /**
     * A view of part of this buffer.
     *
     * @param offset first byte of the view
     * @param length bytes in the view
     * @return the view (not owning)
     * @throws IndexOutOfBoundsException if the range leaves the buffer
     */
    MemoryBuffer slice(long offset, long length);

    /**
     * The whole buffer as a direct, little-endian {@link ByteBuffer} positioned at 0.
     *
     * @return a new buffer object over the same memory
     * @throws UnsupportedOperationException for device memory or a buffer above {@code Integer.MAX_VALUE} bytes
     */
    ByteBuffer asByteBuffer();

    /**
     * Releases the memory (owning buffers) or does nothing (views). Idempotent.
     */
    @Override
    void close();
}
