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

    /**
     * Copies {@code rows} runs of {@code rowBytes} bytes: row {@code i} from {@code srcOffset + i * srcPitch} to
     * {@code dstOffset + i * dstPitch} (a strided gather or scatter, {@code cudaMemcpy2DAsync}'s shape). The
     * default issues one {@link #copy} per row; a device manager does it in one call. Rows must not overlap
     * in the destination.
     *
     * @param src       source
     * @param srcOffset first byte of row 0 in the source
     * @param srcPitch  bytes from one source row to the next (at least {@code rowBytes} unless {@code rows <= 1})
     * @param dst       destination
     * @param dstOffset first byte of row 0 in the destination
     * @param dstPitch  bytes from one destination row to the next (at least {@code rowBytes} unless
     *                  {@code rows <= 1})
     * @param rowBytes  bytes per row
     * @param rows      number of rows, at least 0
     * @throws IndexOutOfBoundsException if any row leaves its buffer
     * @throws IllegalArgumentException  for a negative count or overlapping destination rows
     */
    default void copy2d(MemoryBuffer src, long srcOffset, long srcPitch, MemoryBuffer dst, long dstOffset,
                        long dstPitch, long rowBytes, long rows) {
        if (rows < 0 || rowBytes < 0) {
            throw new IllegalArgumentException("rows = " + rows + ", rowBytes = " + rowBytes + ": must be >= 0");
        }
        if (rows > 1 && (srcPitch < rowBytes || dstPitch < rowBytes)) {
            throw new IllegalArgumentException("pitches " + srcPitch + " / " + dstPitch + " below rowBytes "
                    + rowBytes);
        }
        for (long i = 0; i < rows; i++) {
            copy(src, srcOffset + i * srcPitch, dst, dstOffset + i * dstPitch, rowBytes);
        }
    }

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
