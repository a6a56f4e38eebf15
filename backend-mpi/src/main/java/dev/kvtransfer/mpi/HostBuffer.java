package dev.kvtransfer.mpi;

import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.memory.MemoryKind;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.Objects;
import java.util.concurrent.atomic.AtomicBoolean;

/**
 * Page-aligned native host memory from {@code libkvmpi} ({@code posix_memalign}), for this module's tools
 * and tests, which cannot depend on core's {@code HostBufferManager}. Sizes above 2 GiB are allowed; read
 * them through {@link #slice} views of at most {@code Integer.MAX_VALUE} bytes.
 */
final class HostBuffer implements MemoryBuffer {
    private final long address;
    private final long size;
    private final boolean owner;
    private final AtomicBoolean closed;

    private HostBuffer(long address, long size, boolean owner, AtomicBoolean closed) {
        this.address = address;
        this.size = size;
        this.owner = owner;
        this.closed = closed;
    }

    static HostBuffer allocate(long size) {
        if (size < 0) {
            throw new IllegalArgumentException("size = " + size + ": must be >= 0");
        }
        Throwable failure = MpiNative.loadFailure();
        if (failure != null) {
            throw new IllegalStateException("libkvmpi not loaded", failure);
        }
        return new HostBuffer(MpiNative.allocate(size), size, true, new AtomicBoolean());
    }

    @Override
    public long address() {
        if (closed.get()) {
            throw new IllegalStateException("buffer of " + size + " bytes is closed");
        }
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
            throw new IndexOutOfBoundsException("slice [" + offset + ", +" + length + ") of " + size + " bytes");
        }
        return new HostBuffer(address + offset, length, false, closed);
    }

    @Override
    public ByteBuffer asByteBuffer() {
        if (size > Integer.MAX_VALUE) {
            throw new UnsupportedOperationException("buffer of " + size + " bytes is above Integer.MAX_VALUE");
        }
        return Objects.requireNonNull(MpiNative.wrap(address(), size), "NewDirectByteBuffer")
                .order(ByteOrder.LITTLE_ENDIAN);
    }

    @Override
    public void close() {
        if (owner && closed.compareAndSet(false, true)) {
            MpiNative.release(address);
        }
    }
}
