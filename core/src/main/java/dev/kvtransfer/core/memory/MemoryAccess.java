package dev.kvtransfer.core.memory;

import java.lang.reflect.Field;
import java.nio.Buffer;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;

/**
 * Internal: raw off-heap access by address through {@code sun.misc.Unsafe}. Public only so that the testkit and
 * transports in other modules can move bytes between {@link dev.kvtransfer.api.memory.MemoryBuffer}s without a
 * heap copy; not part of the kvtransfer API and may change without notice.
 *
 * <p>Nothing here checks bounds: callers check ranges against their buffers first. Accessors are little-endian
 * on every platform (the wire and block formats are little-endian), converting on a big-endian host.
 */
public final class MemoryAccess {
    /**
     * Largest single {@code Unsafe.copyMemory}/{@code setMemory} call. The JDK's own bulk copies stop at 1 MiB
     * so that a long copy does not keep the thread out of a safepoint (copyMemory is an uninterruptible
     * intrinsic); we do the same.
     */
    public static final long COPY_CHUNK = 1L << 20;

    private static final sun.misc.Unsafe UNSAFE;
    private static final long BUFFER_ADDRESS_OFFSET;
    private static final long BUFFER_CAPACITY_OFFSET;
    private static final boolean BIG_ENDIAN = ByteOrder.nativeOrder() == ByteOrder.BIG_ENDIAN;
    /**
     * A zero-length direct buffer whose duplicates become views of arbitrary memory. Kept strongly reachable
     * forever so that its cleaner never runs for a duplicate (duplicates point back at it).
     */
    private static final ByteBuffer TEMPLATE = ByteBuffer.allocateDirect(0);

    static {
        try {
            Field f = sun.misc.Unsafe.class.getDeclaredField("theUnsafe");
            f.setAccessible(true);
            UNSAFE = (sun.misc.Unsafe) f.get(null);
            // getDeclaredField needs no --add-opens; Unsafe reads/writes the field by offset (as Agrona does).
            BUFFER_ADDRESS_OFFSET = UNSAFE.objectFieldOffset(Buffer.class.getDeclaredField("address"));
            BUFFER_CAPACITY_OFFSET = UNSAFE.objectFieldOffset(Buffer.class.getDeclaredField("capacity"));
        } catch (ReflectiveOperationException | RuntimeException e) {
            throw new ExceptionInInitializerError("kvtransfer needs sun.misc.Unsafe (module jdk.unsupported): " + e);
        }
    }

    private MemoryAccess() {
    }

    /**
     * Copies bytes between two off-heap ranges (overlap allowed, as memmove), in {@link #COPY_CHUNK} pieces.
     *
     * @param srcAddress first source byte
     * @param dstAddress first destination byte
     * @param bytes      byte count, at least 0
     */
    public static void copy(long srcAddress, long dstAddress, long bytes) {
        if (bytes <= 0) {
            return;
        }
        if (srcAddress < dstAddress && dstAddress < srcAddress + bytes) {
            // Overlapping with the destination above the source: copy chunks back to front.
            long remaining = bytes;
            while (remaining > 0) {
                long n = Math.min(remaining, COPY_CHUNK);
                remaining -= n;
                UNSAFE.copyMemory(srcAddress + remaining, dstAddress + remaining, n);
            }
            return;
        }
        long done = 0;
        while (done < bytes) {
            long n = Math.min(bytes - done, COPY_CHUNK);
            UNSAFE.copyMemory(srcAddress + done, dstAddress + done, n);
            done += n;
        }
    }

    /**
     * Sets bytes to one value, in {@link #COPY_CHUNK} pieces.
     *
     * @param address first byte
     * @param bytes   byte count
     * @param value   the byte value
     */
    public static void fill(long address, long bytes, byte value) {
        long done = 0;
        while (done < bytes) {
            long n = Math.min(bytes - done, COPY_CHUNK);
            UNSAFE.setMemory(address + done, n, value);
            done += n;
        }
    }

    /**
     * Makes a range resident by writing one zero byte per 4 KiB page, so that later copies into it do not take
     * page faults. Meant for memory whose contents are not yet defined (a freshly allocated pool or staging
     * buffer): the bytes written are zeros. On the 2-core Firecracker VMs this project runs on (transparent huge
     * pages {@code madvise}), a copy into untouched pages ran at 1.3 GB/s against 9 GB/s into touched ones.
     *
     * @param address first byte
     * @param bytes   byte count, at least 0
     */
    public static void preTouch(long address, long bytes) {
        if (bytes <= 0 || address == 0) {
            return;
        }
        long page = HostBufferManager.PAGE_SIZE;
        long end = address + bytes;
        UNSAFE.putByte(address, (byte) 0);
        for (long a = (address & -page) + page; a < end; a += page) {
            UNSAFE.putByte(a, (byte) 0);
        }
    }

    /**
     * Allocates raw memory ({@code malloc}); not counted against {@code -XX:MaxDirectMemorySize}.
     *
     * @param bytes byte count, at least 1
     * @return the address
     * @throws OutOfMemoryError when the OS refuses
     */
    public static long allocate(long bytes) {
        return UNSAFE.allocateMemory(bytes);
    }

    /**
     * Unmaps a mapped buffer now (its cleaner), instead of whenever the GC finds it unreachable.
     *
     * @param mapped a buffer from {@code FileChannel.map}, never used again after this
     */
    public static void unmap(ByteBuffer mapped) {
        UNSAFE.invokeCleaner(mapped);
    }

    /**
     * Frees memory from {@link #allocate}.
     *
     * @param address the address returned by {@link #allocate}
     */
    public static void free(long address) {
        UNSAFE.freeMemory(address);
    }

    /**
     * A direct little-endian {@link ByteBuffer} over existing memory, valid as long as that memory is. No JVM
     * flag is needed: a duplicate of a zero-length direct buffer gets its address and capacity rewritten.
     *
     * @param address  first byte
     * @param capacity byte count
     * @return a buffer positioned at 0 with limit = capacity
     */
    public static ByteBuffer byteBuffer(long address, int capacity) {
        if (capacity < 0) {
            throw new IllegalArgumentException("capacity " + capacity);
        }
        ByteBuffer b = TEMPLATE.duplicate();
        UNSAFE.putLong(b, BUFFER_ADDRESS_OFFSET, address);
        UNSAFE.putInt(b, BUFFER_CAPACITY_OFFSET, capacity);
        b.clear();
        return b.order(ByteOrder.LITTLE_ENDIAN);
    }

    /**
     * The address of a direct buffer's first byte (ignoring its position).
     *
     * @param direct a direct buffer
     * @return its address
     * @throws IllegalArgumentException for a heap buffer
     */
    public static long address(ByteBuffer direct) {
        if (!direct.isDirect()) {
            throw new IllegalArgumentException("not a direct buffer: " + direct);
        }
        return UNSAFE.getLong(direct, BUFFER_ADDRESS_OFFSET);
    }

    /**
     * @param address where
     * @return the byte
     */
    public static byte getByte(long address) {
        return UNSAFE.getByte(address);
    }

    /**
     * @param address where
     * @param v       the byte
     */
    public static void putByte(long address, byte v) {
        UNSAFE.putByte(address, v);
    }

    /**
     * @param address where
     * @return the little-endian short
     */
    public static short getShort(long address) {
        short v = UNSAFE.getShort(address);
        return BIG_ENDIAN ? Short.reverseBytes(v) : v;
    }

    /**
     * @param address where
     * @param v       written little-endian
     */
    public static void putShort(long address, short v) {
        UNSAFE.putShort(address, BIG_ENDIAN ? Short.reverseBytes(v) : v);
    }

    /**
     * @param address where
     * @return the little-endian int
     */
    public static int getInt(long address) {
        int v = UNSAFE.getInt(address);
        return BIG_ENDIAN ? Integer.reverseBytes(v) : v;
    }

    /**
     * @param address where
     * @param v       written little-endian
     */
    public static void putInt(long address, int v) {
        UNSAFE.putInt(address, BIG_ENDIAN ? Integer.reverseBytes(v) : v);
    }

    /**
     * @param address where
     * @return the little-endian long
     */
    public static long getLong(long address) {
        long v = UNSAFE.getLong(address);
        return BIG_ENDIAN ? Long.reverseBytes(v) : v;
    }

    /**
     * @param address where
     * @param v       written little-endian
     */
    public static void putLong(long address, long v) {
        UNSAFE.putLong(address, BIG_ENDIAN ? Long.reverseBytes(v) : v);
    }
}
