package dev.kvtransfer.api.transport;

import dev.kvtransfer.api.memory.MemoryBuffer;

import java.util.Arrays;
import java.util.Objects;

/**
 * The entries of one {@link Connection#write}: (local buffer, offset) → (remote region, offset), length. A
 * reusable flyweight over parallel arrays: {@link #clear()} and refill it per batch; adding entries allocates
 * only when the arrays grow. Every entry is checked against its region's descriptor when added. Not
 * thread-safe.
 */
public final class WriteBatch {
    private MemoryBuffer[] sources;
    private long[] sourceOffsets;
    private RegionDescriptor[] targets;
    private long[] targetOffsets;
    private long[] lengths;
    private int size;
    private long totalBytes;

    /** An empty batch with room for 16 entries. */
    public WriteBatch() {
        this(16);
    }

    /**
     * An empty batch.
     *
     * @param capacity entries before the arrays grow
     */
    public WriteBatch(int capacity) {
        int c = Math.max(1, capacity);
        sources = new MemoryBuffer[c];
        sourceOffsets = new long[c];
        targets = new RegionDescriptor[c];
        targetOffsets = new long[c];
        lengths = new long[c];
    }

    /**
     * Adds an entry.
     *
     * @param source       local memory to read
     * @param sourceOffset first byte in {@code source}
     * @param target       the region to write (owned by the connection's peer)
     * @param targetOffset first byte in the region
     * @param length       bytes, at least 0
     * @return this batch
     * @throws IndexOutOfBoundsException when the source range leaves {@code source} or the target range leaves
     *                                   the region's descriptor
     */
    public WriteBatch add(MemoryBuffer source, long sourceOffset, RegionDescriptor target, long targetOffset,
                          long length) {
        Objects.requireNonNull(source, "source");
        Objects.requireNonNull(target, "target");
        Objects.checkFromIndexSize(sourceOffset, length, source.size());
        if (!target.contains(targetOffset, length)) {
            throw new IndexOutOfBoundsException("write of " + length + " bytes at offset " + targetOffset
                    + " leaves region #" + target.regionId() + " of " + target.length() + " bytes at "
                    + target.owner());
        }
        if (size == lengths.length) {
            int c = size * 2;
            sources = Arrays.copyOf(sources, c);
            sourceOffsets = Arrays.copyOf(sourceOffsets, c);
            targets = Arrays.copyOf(targets, c);
            targetOffsets = Arrays.copyOf(targetOffsets, c);
            lengths = Arrays.copyOf(lengths, c);
        }
        sources[size] = source;
        sourceOffsets[size] = sourceOffset;
        targets[size] = target;
        targetOffsets[size] = targetOffset;
        lengths[size] = length;
        size++;
        totalBytes += length;
        return this;
    }

    /** Removes every entry (keeps the arrays). */
    public void clear() {
        Arrays.fill(sources, 0, size, null);
        Arrays.fill(targets, 0, size, null);
        size = 0;
        totalBytes = 0;
    }

    /** @return number of entries */
    public int size() {
        return size;
    }

    /** @return bytes of all entries */
    public long totalBytes() {
        return totalBytes;
    }

    /**
     * @param i entry index
     * @return its source buffer
     */
    public MemoryBuffer source(int i) {
        Objects.checkIndex(i, size);
        return sources[i];
    }

    /**
     * @param i entry index
     * @return its source offset
     */
    public long sourceOffset(int i) {
        Objects.checkIndex(i, size);
        return sourceOffsets[i];
    }

    /**
     * @param i entry index
     * @return its target region
     */
    public RegionDescriptor target(int i) {
        Objects.checkIndex(i, size);
        return targets[i];
    }

    /**
     * @param i entry index
     * @return its offset in the target region
     */
    public long targetOffset(int i) {
        Objects.checkIndex(i, size);
        return targetOffsets[i];
    }

    /**
     * @param i entry index
     * @return its length
     */
    public long length(int i) {
        Objects.checkIndex(i, size);
        return lengths[i];
    }

    @Override
    public String toString() {
        return "WriteBatch{" + size + " entries, " + totalBytes + " B}";
    }
}
