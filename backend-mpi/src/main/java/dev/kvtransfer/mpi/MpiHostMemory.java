package dev.kvtransfer.mpi;

import dev.kvtransfer.api.memory.BufferManager;
import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.memory.MemoryKind;

import java.util.Objects;

/**
 * The host memory the emulated one-sided path ({@code mpi.oneSided=emulated}, {@code EmulatedOneSided}) allocates
 * its small control buffers from: page-aligned native blocks of {@link HostBuffer}. Host kinds only.
 */
final class MpiHostMemory implements BufferManager {
    @Override
    public MemoryBuffer allocate(long bytes, MemoryKind kind) {
        Objects.requireNonNull(kind, "kind");
        if (kind == MemoryKind.DEVICE) {
            throw new UnsupportedOperationException("the mpi transport has host memory only");
        }
        return HostBuffer.allocate(bytes);
    }

    @Override
    public void copy(MemoryBuffer src, long srcOffset, MemoryBuffer dst, long dstOffset, long bytes) {
        Objects.checkFromIndexSize(srcOffset, bytes, src.size());
        Objects.checkFromIndexSize(dstOffset, bytes, dst.size());
        MpiNative.copy(src.address() + srcOffset, dst.address() + dstOffset, bytes);
    }

    @Override
    public void synchronize() {
        // host copies are synchronous
    }

    @Override
    public void close() {
        // buffers are owned (and closed) by whoever allocated them
    }
}
