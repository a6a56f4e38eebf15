package dev.kvtransfer.aeron;

import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.memory.MemoryKind;
import org.agrona.UnsafeApi;
import org.agrona.BufferUtil;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.concurrent.atomic.AtomicBoolean;

/**
 * A plain off-heap {@link MemoryBuffer} (64-byte aligned, any size) for the benchmark and the tests of this
 * module, which depend on the api only; engines use core's {@code HostBufferManager}.
 */
final class OffHeapBuffer implements MemoryBuffer {
    private final long raw;
    private final ByteBuffer direct;
    private final long address;
    private final long size;
    private final boolean owner;
    /** Where this buffer starts inside {@code direct} (alignment padding of an owner; 0 for views). */
    private final int pad;
    private final AtomicBoolean closed = new AtomicBoolean();

    private OffHeapBuffer(long raw, ByteBuffer direct, long address, long size, boolean owner, int pad) {
        this.pad = pad;
        this.raw = raw;
        this.direct = direct;
        this.address = address;
        this.size = size;
        this.owner = owner;
    }

    /**
     * Allocates {@code size} bytes (contents unspecified).
     *
     * @param size bytes
     * @return the owning buffer
     */
    static OffHeapBuffer allocate(long size) {
        if (size < 0) {
            throw new IllegalArgumentException("size = " + size + ": must be at least 0");
        }
        if (size <= Integer.MAX_VALUE - 4096) {
            // Below 2 GiB a direct ByteBuffer backs it, so asByteBuffer() works.
            ByteBuffer bb = ByteBuffer.allocateDirect((int) size + 4096);
            long base = BufferUtil.address(bb);
            int pad = (int) (((base + 4095) & ~4095L) - base);
            return new OffHeapBuffer(0, bb, base + pad, size, true, pad);
        }
        long raw = UnsafeApi.allocateMemory(size + 4096);
        long aligned = (raw + 4095) & ~4095L;
        return new OffHeapBuffer(raw, null, aligned, size, true, 0);
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
        if (offset < 0 || length < 0 || offset > size - length) {
            throw new IndexOutOfBoundsException("slice [" + offset + ", +" + length + ") of " + size + " B");
        }
        ByteBuffer view = null;
        if (direct != null) {
            view = direct.duplicate().clear().position(pad + (int) offset).limit(pad + (int) (offset + length)).slice();
        }
        return new OffHeapBuffer(0, view, address + offset, length, false, 0);
    }

    @Override
    public ByteBuffer asByteBuffer() {
        if (direct == null) {
            throw new UnsupportedOperationException(size + " B do not fit a ByteBuffer");
        }
        return direct.duplicate().clear().position(pad).limit(pad + (int) size).slice().order(ByteOrder.LITTLE_ENDIAN);
    }

    @Override
    public void close() {
        if (owner && closed.compareAndSet(false, true)) {
            if (direct != null) {
                BufferUtil.free(direct);
            } else {
                UnsafeApi.freeMemory(raw);
            }
        }
    }

    @Override
    public String toString() {
        return "OffHeapBuffer{" + size + " B at 0x" + Long.toHexString(address) + "}";
    }
}
