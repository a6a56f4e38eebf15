package dev.kvtransfer.ucx.internal;

import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.memory.MemoryKind;
import org.openucx.jucx.UcxUtils;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.Objects;

/**
 * Page-aligned off-heap host memory for this module's benchmark and tests (the module depends on the api only,
 * not on core's {@code HostBufferManager}). Not API: the memory is a direct {@link ByteBuffer}, freed by the
 * garbage collector once the buffer and its slices are unreachable; {@link #close()} only marks it closed.
 */
public final class DirectMemoryBuffer implements MemoryBuffer {
    private static final int PAGE = 4096;

    private final ByteBuffer memory;
    private final long address;
    private final long size;
    private final boolean owner;
    private volatile boolean closed;

    private DirectMemoryBuffer(ByteBuffer memory, long address, long size, boolean owner) {
        this.memory = memory;
        this.address = address;
        this.size = size;
        this.owner = owner;
    }

    /**
     * Allocates page-aligned host memory.
     *
     * @param bytes size, at most {@code Integer.MAX_VALUE - 4096}
     * @return the owning buffer
     */
    public static DirectMemoryBuffer allocate(long bytes) {
        if (bytes < 0 || bytes > Integer.MAX_VALUE - 2 * PAGE) {
            throw new IllegalArgumentException("bytes = " + bytes + ": must be in [0, " + (Integer.MAX_VALUE - 2 * PAGE)
                    + "]");
        }
        int rounded = (int) ((bytes + PAGE - 1) / PAGE * PAGE);
        // alignedSlice rounds both ends to the page, so ask for one page more than the rounded size.
        ByteBuffer aligned = ByteBuffer.allocateDirect(rounded + PAGE).alignedSlice(PAGE);
        ByteBuffer view = aligned.slice(0, (int) bytes).order(ByteOrder.LITTLE_ENDIAN);
        return new DirectMemoryBuffer(view, UcxUtils.getAddress(view), bytes, true);
    }

    @Override
    public long address() {
        return address;
    }

    @Override
    public long size() {
        return size;
    }

    @Override
    public MemoryKind kind() {
        return MemoryKind.HOST;
    }

    @Override
    public MemoryBuffer slice(long offset, long length) {
        Objects.checkFromIndexSize(offset, length, size);
        ByteBuffer s = memory.slice((int) offset, (int) length).order(ByteOrder.LITTLE_ENDIAN);
        return new DirectMemoryBuffer(s, address + offset, length, false);
    }

    @Override
    public ByteBuffer asByteBuffer() {
        if (closed) {
            throw new IllegalStateException("buffer closed");
        }
        return memory.duplicate().order(ByteOrder.LITTLE_ENDIAN).clear();
    }

    /** @return whether this owning buffer was closed */
    public boolean isClosed() {
        return closed;
    }

    @Override
    public void close() {
        if (owner) {
            closed = true;
        }
    }

    @Override
    public String toString() {
        return "DirectMemoryBuffer{0x" + Long.toHexString(address) + ", " + size + " bytes" + (owner ? "" : ", view")
                + "}";
    }
}
