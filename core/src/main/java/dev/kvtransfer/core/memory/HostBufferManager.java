package dev.kvtransfer.core.memory;

import dev.kvtransfer.api.memory.BufferManager;
import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.memory.MemoryKind;

import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;

/**
 * A {@link BufferManager} for host memory: {@link MemoryKind#HOST} and {@link MemoryKind#PINNED_HOST} (the same
 * thing here: there is no device to pin for), off-heap, page-aligned ({@value #PAGE_SIZE} bytes), of any
 * {@code long} size. {@link MemoryKind#DEVICE} is refused with {@link UnsupportedOperationException}.
 *
 * <p>Memory is not zeroed (the api leaves the contents unspecified): zeroing a fresh 128 MiB staging buffer
 * cost more than the transfer that used it, and large allocations are fresh pages the kernel zero-fills on
 * first touch anyway.
 *
 * <p>Memory comes from {@code Unsafe.allocateMemory} (malloc) rather than {@code ByteBuffer.allocateDirect}, so
 * a buffer may exceed 2 GiB and pools are not capped by {@code -XX:MaxDirectMemorySize} (which defaults to
 * {@code -Xmx}); {@link MemoryBuffer#asByteBuffer()} still returns a real direct buffer over the same bytes
 * without any JVM flag (see {@link MemoryAccess#byteBuffer}).
 *
 * <p>Like Arrow's allocator, {@link #close()} refuses to close while buffers are outstanding and names them;
 * with {@code -D}{@value #DEBUG_PROPERTY}{@code =true} (or {@link #HostBufferManager(boolean)}) each name
 * includes the stack that allocated it. Thread-safe.
 */
public final class HostBufferManager implements BufferManager {
    /** Alignment of every allocation. */
    public static final int PAGE_SIZE = 4096;
    /** System property that turns on allocation-site capture. */
    public static final String DEBUG_PROPERTY = "kvtransfer.memory.debug";
    /**
     * System property: whether {@link #allocatePool} places KV pools in {@code /dev/shm} files (mode {@code 0600})
     * that an authenticated peer process of this host may write with one copy; default {@code true}.
     */
    public static final String SHARED_POOLS_PROPERTY = "kvtransfer.memory.sharedPools";

    private static final int MAX_LISTED = 32;
    private static final AtomicLong NEXT_ID = new AtomicLong();

    private final boolean debug;
    private final boolean sharedPools;
    private final Map<Long, Owned> outstanding = new ConcurrentHashMap<>();
    private final AtomicLong outstandingBytes = new AtomicLong();
    private volatile boolean closed;

    /**
     * A manager that records allocation sites only when {@value #DEBUG_PROPERTY} is {@code true}, and shares pools
     * unless {@value #SHARED_POOLS_PROPERTY} is {@code false}.
     */
    public HostBufferManager() {
        this(Boolean.getBoolean(DEBUG_PROPERTY),
                !"false".equalsIgnoreCase(System.getProperty(SHARED_POOLS_PROPERTY, "true").trim()));
    }

    /**
     * A manager.
     *
     * @param debug whether to record each buffer's allocation stack for leak reports
     */
    public HostBufferManager(boolean debug) {
        this(debug, !"false".equalsIgnoreCase(System.getProperty(SHARED_POOLS_PROPERTY, "true").trim()));
    }

    /**
     * A manager.
     *
     * @param debug       whether to record each buffer's allocation stack for leak reports
     * @param sharedPools whether {@link #allocatePool} places pools in shared files
     */
    public HostBufferManager(boolean debug, boolean sharedPools) {
        this.debug = debug;
        this.sharedPools = sharedPools;
    }

    /** @return whether {@link #allocatePool} places pools in shared files where the host allows */
    public boolean sharesPools() {
        return sharedPools;
    }

    /**
     * Allocates a KV pool region: in a {@code /dev/shm} file of mode {@code 0600} when this manager shares pools
     * and the host has room (see {@code SharedPoolFile}), else as {@link #allocate}. A shared region is recorded in
     * {@link dev.kvtransfer.api.memory.SharedMappings} until it is closed.
     *
     * @param bytes size in bytes, at least 0
     * @param kind  {@code HOST} or {@code PINNED_HOST}
     * @return an owning buffer
     */
    public MemoryBuffer allocatePool(long bytes, MemoryKind kind) {
        Objects.requireNonNull(kind, "kind");
        SharedPoolFile f = sharedPools && kind != MemoryKind.DEVICE && !closed ? SharedPoolFile.create(bytes) : null;
        if (f == null) {
            return allocate(bytes, kind);
        }
        Owned b = new Owned(NEXT_ID.incrementAndGet(), 0, f.address(), bytes, kind,
                debug ? new Throwable("allocated here") : null, f);
        outstanding.put(b.id, b);
        LiveResources.count(0, 1);
        outstandingBytes.addAndGet(bytes);
        return b;
    }

    @Override
    public MemoryBuffer allocate(long bytes, MemoryKind kind) {
        Objects.requireNonNull(kind, "kind");
        if (kind == MemoryKind.DEVICE) {
            throw new UnsupportedOperationException("HostBufferManager allocates HOST and PINNED_HOST memory only;"
                    + " DEVICE memory needs a device BufferManager (e.g. the CUDA one of a GPU backend)");
        }
        if (bytes < 0) {
            throw new IllegalArgumentException("bytes = " + bytes + ": must be at least 0");
        }
        if (closed) {
            throw new IllegalStateException("HostBufferManager is closed");
        }
        // Over-allocate by a page less one byte and round up: malloc only promises 16-byte alignment.
        long raw = MemoryAccess.allocate(Math.max(bytes, 1) + PAGE_SIZE - 1);
        long aligned = (raw + PAGE_SIZE - 1) & -PAGE_SIZE;
        Owned b = new Owned(NEXT_ID.incrementAndGet(), raw, aligned, bytes, kind,
                debug ? new Throwable("allocated here") : null, null);
        outstanding.put(b.id, b);
        LiveResources.count(0, 1);
        outstandingBytes.addAndGet(bytes);
        return b;
    }

    @Override
    public void copy(MemoryBuffer src, long srcOffset, MemoryBuffer dst, long dstOffset, long bytes) {
        Objects.requireNonNull(src, "src");
        Objects.requireNonNull(dst, "dst");
        if (src.kind() == MemoryKind.DEVICE || dst.kind() == MemoryKind.DEVICE) {
            throw new UnsupportedOperationException("HostBufferManager cannot copy DEVICE memory ("
                    + src.kind() + " -> " + dst.kind() + ")");
        }
        Objects.checkFromIndexSize(srcOffset, bytes, src.size());
        Objects.checkFromIndexSize(dstOffset, bytes, dst.size());
        // address() fails on a closed buffer of ours, so a use-after-close is an exception, not a crash.
        MemoryAccess.copy(src.address() + srcOffset, dst.address() + dstOffset, bytes);
    }

    /** Host copies are synchronous: nothing to wait for. */
    @Override
    public void synchronize() {
        // Every copy() has completed when it returns.
    }

    /** @return number of owning buffers not yet closed */
    public int outstandingBuffers() {
        return outstanding.size();
    }

    /** @return bytes of the owning buffers not yet closed */
    public long outstandingBytes() {
        return outstandingBytes.get();
    }

    /**
     * Describes the outstanding buffers (at most {@value #MAX_LISTED}, oldest first), with their allocation
     * sites in debug mode.
     *
     * @return one line per buffer (plus stack lines in debug mode), or an empty string when none
     */
    public String describeOutstanding() {
        List<Owned> list = new ArrayList<>(outstanding.values());
        list.sort(Comparator.comparingLong(o -> o.id));
        StringBuilder sb = new StringBuilder();
        int n = 0;
        for (Owned o : list) {
            if (n++ == MAX_LISTED) {
                sb.append("  ... and ").append(list.size() - MAX_LISTED).append(" more\n");
                break;
            }
            sb.append("  ").append(o).append('\n');
            if (o.site != null) {
                StackTraceElement[] st = o.site.getStackTrace();
                for (int i = 0; i < Math.min(st.length, 12); i++) {
                    sb.append("      at ").append(st[i]).append('\n');
                }
            }
        }
        return sb.toString();
    }

    /**
     * Closes the manager when every buffer has been closed.
     *
     * @throws IllegalStateException listing the outstanding buffers; the manager then stays open, so closing
     *                               the buffers and calling again succeeds
     */
    @Override
    public void close() {
        if (closed) {
            return;
        }
        if (!outstanding.isEmpty()) {
            throw new IllegalStateException("HostBufferManager closed with " + outstanding.size()
                    + " outstanding buffer(s), " + outstandingBytes.get() + " bytes"
                    + (debug ? "" : " (run with -D" + DEBUG_PROPERTY + "=true for allocation sites)") + ":\n"
                    + describeOutstanding());
        }
        closed = true;
    }

    @Override
    public String toString() {
        return "HostBufferManager{outstanding=" + outstanding.size() + " buffers, " + outstandingBytes.get()
                + " bytes" + (closed ? ", closed" : "") + "}";
    }

    private static ByteBuffer byteBuffer(long address, long size, MemoryBuffer who) {
        if (size > Integer.MAX_VALUE) {
            throw new UnsupportedOperationException("asByteBuffer: " + who + " is larger than Integer.MAX_VALUE"
                    + " bytes; slice it first");
        }
        return MemoryAccess.byteBuffer(address, (int) size);
    }

    /** An owning allocation. */
    private final class Owned implements MemoryBuffer {
        private final long id;
        private final long raw;
        private final long address;
        private final long size;
        private final MemoryKind kind;
        private final Throwable site;
        /** The shared file holding the bytes, or null for malloc'd memory. */
        private final SharedPoolFile shared;
        private final AtomicBoolean open = new AtomicBoolean(true);

        Owned(long id, long raw, long address, long size, MemoryKind kind, Throwable site, SharedPoolFile shared) {
            this.id = id;
            this.raw = raw;
            this.address = address;
            this.size = size;
            this.kind = kind;
            this.site = site;
            this.shared = shared;
        }

        void checkOpen() {
            if (!open.get()) {
                throw new IllegalStateException(this + " is closed");
            }
        }

        @Override
        public long address() {
            checkOpen();
            return address;
        }

        @Override
        public long size() {
            return size;
        }

        @Override
        public MemoryKind kind() {
            return kind;
        }

        @Override
        public MemoryBuffer slice(long offset, long length) {
            Objects.checkFromIndexSize(offset, length, size);
            checkOpen();
            return new View(this, offset, length);
        }

        @Override
        public ByteBuffer asByteBuffer() {
            checkOpen();
            return byteBuffer(address, size, this);
        }

        @Override
        public void close() {
            if (open.compareAndSet(true, false)) {
                outstanding.remove(id);
                LiveResources.count(0, -1);
                outstandingBytes.addAndGet(-size);
                if (shared != null) {
                    shared.close();
                } else {
                    MemoryAccess.free(raw);
                }
            }
        }

        @Override
        public String toString() {
            return "HostBuffer#" + id + "[" + size + " B " + kind + (shared != null ? " shared" : "")
                    + (open.get() ? "" : ", closed") + "]";
        }
    }

    /** A non-owning view; valid while its root is open. */
    private static final class View implements MemoryBuffer {
        private final Owned root;
        private final long offset;
        private final long size;

        View(Owned root, long offset, long size) {
            this.root = root;
            this.offset = offset;
            this.size = size;
        }

        @Override
        public long address() {
            return root.address() + offset;
        }

        @Override
        public long size() {
            return size;
        }

        @Override
        public MemoryKind kind() {
            return root.kind;
        }

        @Override
        public MemoryBuffer slice(long off, long length) {
            Objects.checkFromIndexSize(off, length, size);
            root.checkOpen();
            return new View(root, offset + off, length);
        }

        @Override
        public ByteBuffer asByteBuffer() {
            return byteBuffer(address(), size, this);
        }

        /** Views own nothing. */
        @Override
        public void close() {
            // Nothing: the root owns the memory.
        }

        @Override
        public String toString() {
            return "View[" + offset + "+" + size + " of " + root + "]";
        }
    }
}
