package dev.kvtransfer.memory.cuda;

import java.lang.reflect.Field;
import java.nio.Buffer;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;

/**
 * Raw host memory by address through {@code sun.misc.Unsafe} (module {@code jdk.unsupported}, no JVM flag needed):
 * page-aligned allocations for {@code cudaHostRegister}, and direct {@link ByteBuffer}s over pinned memory.
 *
 * <p>Why not JCuda's own buffers: JCuda wraps {@code cudaHostAlloc} memory in a JNI {@code NewDirectByteBuffer},
 * whose capacity HotSpot 17 narrows to {@code int}: above 2 GiB that throws after the memory was pinned (3 GiB:
 * "capacity &lt; 0") or silently yields a wrong capacity (4 GiB: 0). Checked on this project's JDK 17.
 */
final class HostMemory {
    /** Alignment of the allocations made here. */
    static final long PAGE = 4096;

    private static final sun.misc.Unsafe UNSAFE;
    private static final long BUFFER_ADDRESS_OFFSET;
    private static final long BUFFER_CAPACITY_OFFSET;
    /** Duplicates of this zero-length direct buffer become views of arbitrary memory; kept reachable forever. */
    private static final ByteBuffer TEMPLATE = ByteBuffer.allocateDirect(0);

    static {
        try {
            Field f = sun.misc.Unsafe.class.getDeclaredField("theUnsafe");
            f.setAccessible(true);
            UNSAFE = (sun.misc.Unsafe) f.get(null);
            BUFFER_ADDRESS_OFFSET = UNSAFE.objectFieldOffset(Buffer.class.getDeclaredField("address"));
            BUFFER_CAPACITY_OFFSET = UNSAFE.objectFieldOffset(Buffer.class.getDeclaredField("capacity"));
        } catch (ReflectiveOperationException | RuntimeException e) {
            throw new ExceptionInInitializerError("memory-cuda needs sun.misc.Unsafe (module jdk.unsupported): " + e);
        }
    }

    private HostMemory() {
    }

    /**
     * Allocates {@code bytes} (at least 1) plus a page, for alignment.
     *
     * @return the raw address to {@link #free}; align it with {@link #align}
     */
    static long allocateForAlignment(long bytes) {
        return UNSAFE.allocateMemory(Math.max(bytes, 1) + PAGE - 1);
    }

    static long align(long raw) {
        return (raw + PAGE - 1) & -PAGE;
    }

    static void free(long raw) {
        UNSAFE.freeMemory(raw);
    }

    /** Copies between two host addresses on this thread (ranges checked and disjoint). */
    static void copy(long src, long dst, long bytes) {
        UNSAFE.copyMemory(src, dst, bytes);
    }

    /**
     * A direct little-endian buffer over existing memory, valid as long as that memory is.
     *
     * @param address  first byte
     * @param capacity byte count, at least 0
     * @return a buffer positioned at 0 with limit = capacity
     */
    static ByteBuffer byteBuffer(long address, int capacity) {
        if (capacity < 0) {
            throw new IllegalArgumentException("capacity " + capacity);
        }
        ByteBuffer b = TEMPLATE.duplicate();
        UNSAFE.putLong(b, BUFFER_ADDRESS_OFFSET, address);
        UNSAFE.putInt(b, BUFFER_CAPACITY_OFFSET, capacity);
        b.clear();
        return b.order(ByteOrder.LITTLE_ENDIAN);
    }
}
