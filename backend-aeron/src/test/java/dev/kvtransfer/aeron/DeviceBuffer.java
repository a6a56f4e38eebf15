package dev.kvtransfer.aeron;

import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.memory.MemoryKind;

import java.nio.ByteBuffer;

/** Describes accelerator memory the CPU cannot address; the transport must refuse it, never touch it. */
final class DeviceBuffer implements MemoryBuffer {
    private final long size;

    DeviceBuffer(long size) {
        this.size = size;
    }

    @Override
    public long address() {
        return 0x7f00_0000_0000L; // a device pointer: never dereferenced by a correct transport
    }

    @Override
    public long size() {
        return size;
    }

    @Override
    public MemoryKind kind() {
        return MemoryKind.DEVICE;
    }

    @Override
    public MemoryBuffer slice(long offset, long length) {
        return new DeviceBuffer(length);
    }

    @Override
    public ByteBuffer asByteBuffer() {
        throw new UnsupportedOperationException("device memory");
    }

    @Override
    public void close() {
    }
}
