package dev.kvtransfer.aeron;

import dev.kvtransfer.api.memory.BufferManager;
import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.memory.MemoryKind;
import org.agrona.UnsafeApi;

/**
 * The host memory {@link dev.kvtransfer.transport.support.EmulatedOneSided} needs for its small control
 * messages (batch headers, entry lists, replies): plain off-heap buffers, HOST only.
 */
final class ControlBuffers implements BufferManager {
    @Override
    public MemoryBuffer allocate(long bytes, MemoryKind kind) {
        if (kind == MemoryKind.DEVICE) {
            throw new UnsupportedOperationException("the aeron transport's control buffers are host memory");
        }
        return OffHeapBuffer.allocate(bytes);
    }

    @Override
    public void copy(MemoryBuffer src, long srcOffset, MemoryBuffer dst, long dstOffset, long bytes) {
        if (srcOffset < 0 || dstOffset < 0 || bytes < 0 || srcOffset > src.size() - bytes
                || dstOffset > dst.size() - bytes) {
            throw new IndexOutOfBoundsException("copy of " + bytes + " B leaves a buffer");
        }
        UnsafeApi.copyMemory(null, src.address() + srcOffset, null, dst.address() + dstOffset, bytes);
    }

    @Override
    public void synchronize() {
        // host memory: nothing pending
    }

    @Override
    public void close() {
        // buffers are closed by their users
    }
}
