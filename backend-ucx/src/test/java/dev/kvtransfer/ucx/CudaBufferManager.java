package dev.kvtransfer.ucx;

import dev.kvtransfer.api.memory.BufferManager;
import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.memory.MemoryKind;
import jcuda.Pointer;
import jcuda.runtime.JCuda;
import jcuda.runtime.cudaMemcpyKind;

import java.nio.ByteBuffer;
import java.util.Collections;
import java.util.IdentityHashMap;
import java.util.Objects;
import java.util.Set;

/**
 * DEVICE memory through the CUDA runtime (JCuda), for the DEVICE_MEMORY tests. {@link #tryCreate()} answers
 * {@code null} where there is no usable GPU (no driver, no device), so those tests skip and say why. Never run
 * on the machine this was written on (no GPU there).
 */
final class CudaBufferManager implements BufferManager {
    private final Set<CudaBuffer> open = Collections.synchronizedSet(Collections.newSetFromMap(
            new IdentityHashMap<>()));

    private CudaBufferManager() {
    }

    /** @return a manager, or {@code null} when CUDA is unusable here */
    static CudaBufferManager tryCreate() {
        try {
            JCuda.setExceptionsEnabled(true);
            int[] n = new int[1];
            JCuda.cudaGetDeviceCount(n);
            return n[0] > 0 ? new CudaBufferManager() : null;
        } catch (LinkageError | RuntimeException e) {
            return null;
        }
    }

    /** @return why {@link #tryCreate()} gives no manager here (for skip messages) */
    static String whyUnavailable() {
        try {
            JCuda.setExceptionsEnabled(true);
            int[] n = new int[1];
            JCuda.cudaGetDeviceCount(n);
            return n[0] > 0 ? "available" : "no CUDA device";
        } catch (LinkageError | RuntimeException e) {
            return "CUDA runtime unusable: " + e;
        }
    }

    @Override
    public MemoryBuffer allocate(long bytes, MemoryKind kind) {
        if (kind != MemoryKind.DEVICE) {
            throw new UnsupportedOperationException("this test manager allocates DEVICE memory only");
        }
        AddressPointer p = new AddressPointer();
        JCuda.cudaMalloc(p, Math.max(bytes, 1));
        CudaBuffer b = new CudaBuffer(this, p, 0, bytes, true);
        open.add(b);
        return b;
    }

    @Override
    public void copy(MemoryBuffer src, long srcOffset, MemoryBuffer dst, long dstOffset, long bytes) {
        Objects.checkFromIndexSize(srcOffset, bytes, src.size());
        Objects.checkFromIndexSize(dstOffset, bytes, dst.size());
        JCuda.cudaMemcpy(pointer(dst, dstOffset), pointer(src, srcOffset), bytes, cudaMemcpyKind.cudaMemcpyDefault);
    }

    private static Pointer pointer(MemoryBuffer b, long offset) {
        if (b instanceof CudaBuffer c) {
            return c.base.withByteOffset(c.offset + offset);
        }
        ByteBuffer bb = b.asByteBuffer(); // host memory
        return Pointer.to(bb).withByteOffset(offset);
    }

    @Override
    public void synchronize() {
        JCuda.cudaDeviceSynchronize();
    }

    @Override
    public void close() {
        if (!open.isEmpty()) {
            throw new IllegalStateException("device buffers still open: " + open);
        }
    }

    /** A pointer whose raw device address we can read (JCuda keeps it protected). */
    private static final class AddressPointer extends Pointer {
        long address() {
            return getNativePointer();
        }
    }

    private static final class CudaBuffer implements MemoryBuffer {
        private final CudaBufferManager owner;
        private final AddressPointer base;
        private final long offset;
        private final long size;
        private final boolean owning;
        private boolean closed;

        CudaBuffer(CudaBufferManager owner, AddressPointer base, long offset, long size, boolean owning) {
            this.owner = owner;
            this.base = base;
            this.offset = offset;
            this.size = size;
            this.owning = owning;
        }

        @Override
        public long address() {
            return base.address() + offset;
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
        public MemoryBuffer slice(long off, long length) {
            Objects.checkFromIndexSize(off, length, size);
            return new CudaBuffer(owner, base, offset + off, length, false);
        }

        @Override
        public ByteBuffer asByteBuffer() {
            throw new UnsupportedOperationException("device memory is not CPU-addressable");
        }

        @Override
        public synchronized void close() {
            if (owning && !closed) {
                closed = true;
                JCuda.cudaFree(base);
                owner.open.remove(this);
            }
        }

        @Override
        public String toString() {
            return "CudaBuffer{0x" + Long.toHexString(address()) + ", " + size + " bytes}";
        }
    }
}
