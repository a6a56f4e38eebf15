package dev.kvtransfer.ucx;

import dev.kvtransfer.api.memory.BufferManager;
import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.memory.MemoryKind;
import org.openucx.jucx.UcxUtils;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.Objects;

/**
 * Host memory for the small control buffers (headers, entry lists, replies) of the tag-emulated one-sided writes
 * ({@code ucx.oneSided=emulated}): direct little-endian {@link ByteBuffer}s whose address jucx reads.
 */
final class ControlMemory implements BufferManager {
    @Override
    public MemoryBuffer allocate(long bytes, MemoryKind kind) {
        if (kind == MemoryKind.DEVICE) {
            throw new UnsupportedOperationException("UCX control memory is host memory");
        }
        if (bytes < 0 || bytes > Integer.MAX_VALUE) {
            throw new IllegalArgumentException("control buffer of " + bytes + " bytes");
        }
        ByteBuffer b = ByteBuffer.allocateDirect((int) Math.max(1, bytes)).order(ByteOrder.LITTLE_ENDIAN);
        return new Buffer(b.slice(0, (int) bytes).order(ByteOrder.LITTLE_ENDIAN), kind);
    }

    @Override
    public void copy(MemoryBuffer src, long srcOffset, MemoryBuffer dst, long dstOffset, long bytes) {
        ByteBuffer s = src.slice(srcOffset, bytes).asByteBuffer();
        dst.slice(dstOffset, bytes).asByteBuffer().put(s);
    }

    @Override
    public void synchronize() {
        // Copies are synchronous.
    }

    @Override
    public void close() {
        // Buffers are freed by the GC (direct buffer cleaners).
    }

    /** A direct buffer, or a view of one. */
    private static final class Buffer implements MemoryBuffer {
        private final ByteBuffer bytes;
        private final MemoryKind kind;

        Buffer(ByteBuffer bytes, MemoryKind kind) {
            this.bytes = bytes;
            this.kind = kind;
        }

        @Override
        public long address() {
            return UcxUtils.getAddress(bytes);
        }

        @Override
        public long size() {
            return bytes.capacity();
        }

        @Override
        public MemoryKind kind() {
            return kind;
        }

        @Override
        public MemoryBuffer slice(long offset, long length) {
            Objects.checkFromIndexSize(offset, length, bytes.capacity());
            return new Buffer(bytes.slice((int) offset, (int) length).order(ByteOrder.LITTLE_ENDIAN), kind);
        }

        @Override
        public ByteBuffer asByteBuffer() {
            return bytes.duplicate().clear().order(ByteOrder.LITTLE_ENDIAN);
        }

        @Override
        public void close() {
            // Freed by the GC.
        }
    }
}
