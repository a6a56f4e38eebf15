package dev.kvtransfer.memory.cuda;

import dev.kvtransfer.api.memory.BufferManager;
import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.memory.MemoryKind;

import java.nio.ByteBuffer;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.locks.LockSupport;

/**
 * A {@link BufferManager} over the CUDA runtime (JCuda) for one device: allocates {@link MemoryKind#DEVICE}
 * ({@code cudaMalloc}) and {@link MemoryKind#PINNED_HOST} (portable {@code cudaHostAlloc}) memory, and copies
 * between any two buffers that have an address: its own, and {@link MemoryKind#HOST} (or any other) buffers of
 * other managers. It also serves {@link MemoryKind#HOST}: page-aligned, pageable host memory (never pinned, never
 * touched by the stream after a copy returns), with the same accounting, so one manager serves a whole rank whose
 * KV pool is on the device: the pool ({@code DEVICE}), its staging ({@code PINNED_HOST}) and core's control buffers
 * ({@code HOST}). Copies between two {@code HOST} buffers run on the calling thread (a memcpy, as CUDA's own
 * host-to-host copy is synchronous anyway); every other copy goes on the stream.
 *
 * <p>Copies are {@code cudaMemcpyAsync} (and {@link #copy2d} one {@code cudaMemcpy2DAsync}) on the manager's own
 * non-blocking stream, so they run in issue order, asynchronously to the caller; {@link #synchronize()} waits,
 * with a deadline, for everything issued on that stream before it was called (by any thread, a superset of the
 * calling thread's copies). Every copy is bounds-checked before any CUDA call; overlapping source and
 * destination ranges are refused (CUDA leaves them undefined).
 *
 * <p>Ownership and leaks are as in core's host manager (and Arrow's allocator): an allocation is an owning buffer
 * that frees its memory once, on its first {@code close()}; a {@link MemoryBuffer#slice} is a non-owning view;
 * {@link #close()} refuses while buffers are outstanding and names them (with allocation stacks when
 * {@value #DEBUG_PROPERTY} is true). Closing an owning buffer first waits for the copies already issued on the
 * stream, so no copy in flight reads or writes freed memory.
 *
 * <p>Pinned allocations above {@link Integer#MAX_VALUE} bytes are page-aligned host memory page-locked with
 * {@code cudaHostRegister} instead of {@code cudaHostAlloc}: JCuda's {@code cudaHostAlloc} wraps the memory in a
 * JNI direct buffer whose capacity JDK 17 narrows to {@code int} (3 GiB throws after pinning, 4 GiB gives a
 * zero-capacity buffer). {@link MemoryBuffer#asByteBuffer()} works on pinned buffers (and views) up to
 * {@link Integer#MAX_VALUE} bytes and throws {@link UnsupportedOperationException} for device memory.
 *
 * <p>Thread-safe. Each call makes the manager's device current on the calling thread ({@code cudaSetDevice}).
 */
public final class CudaBufferManager implements BufferManager {
    /** System property that turns on allocation-site capture (the same one core's host manager reads). */
    public static final String DEBUG_PROPERTY = "kvtransfer.memory.debug";
    /** Default deadline of {@link #synchronize()}. */
    public static final Duration DEFAULT_SYNC_TIMEOUT = Duration.ofSeconds(60);
    /** Largest pinned allocation made with {@code cudaHostAlloc}; larger ones are registered host memory. */
    static final long HOST_ALLOC_LIMIT = Integer.MAX_VALUE;

    private static final int MAX_LISTED = 32;
    /** How long a wait spins before it parks (copies of a few MiB finish within it). */
    private static final long SPIN_NANOS = 50_000;
    private static final long PARK_NANOS = 10_000;
    private static final AtomicLong NEXT_ID = new AtomicLong();

    private final CudaRuntime cuda;
    private final long syncTimeoutNanos;
    private final long hostAllocLimit;
    private final boolean debug;
    private final Map<Long, Owned> outstanding = new ConcurrentHashMap<>();
    private final AtomicLong outstandingBytes = new AtomicLong();
    private final Object closeLock = new Object();
    private volatile boolean closed;

    /**
     * A manager on a device, with the default deadline and {@value #DEBUG_PROPERTY}.
     *
     * @param device the device ordinal
     * @throws IllegalStateException    with the cause when CUDA is not available here
     * @throws IllegalArgumentException for a device this machine does not have
     */
    public CudaBufferManager(int device) {
        this(device, DEFAULT_SYNC_TIMEOUT, Boolean.getBoolean(DEBUG_PROPERTY));
    }

    /**
     * A manager on a device.
     *
     * @param device      the device ordinal
     * @param syncTimeout deadline of {@link #synchronize()} and of the wait before a buffer is freed
     * @param debug       whether to record each buffer's allocation stack for leak reports
     * @throws IllegalStateException    with the cause when CUDA is not available here
     * @throws IllegalArgumentException for a device this machine does not have, or a non-positive timeout
     */
    public CudaBufferManager(int device, Duration syncTimeout, boolean debug) {
        // Arguments are checked before CUDA is asked (openRuntime validates the timeout first).
        this(openRuntime(device, syncTimeout), syncTimeout.toNanos(), HOST_ALLOC_LIMIT, debug);
    }

    /** For tests: any runtime, any pinned-allocation split. */
    CudaBufferManager(CudaRuntime cuda, long syncTimeoutNanos, long hostAllocLimit, boolean debug) {
        this.cuda = Objects.requireNonNull(cuda, "cuda");
        this.syncTimeoutNanos = syncTimeoutNanos;
        this.hostAllocLimit = hostAllocLimit;
        this.debug = debug;
    }

    private static CudaRuntime openRuntime(int device, Duration syncTimeout) {
        Objects.requireNonNull(syncTimeout, "syncTimeout");
        if (syncTimeout.isNegative() || syncTimeout.isZero()) {
            throw new IllegalArgumentException("syncTimeout = " + syncTimeout + ": must be positive");
        }
        if (device < 0) {
            throw new IllegalArgumentException("device = " + device + ": must be at least 0");
        }
        CudaProbe.requireAvailable();
        int count = CudaProbe.result().deviceCount;
        if (device >= count) {
            throw new IllegalArgumentException("device = " + device + ", but this machine has " + count
                    + " CUDA device(s)");
        }
        return new JCudaRuntime(device);
    }

    /** @return the device ordinal */
    public int device() {
        return cuda.device();
    }

    /** @return one line about the device (name, compute capability, memory, driver and runtime versions) */
    public String describeDevice() {
        checkOpen();
        cuda.bindThread();
        return cuda.describe();
    }

    /**
     * Allocates device, pinned host or (pageable, page-aligned) host memory (contents undefined).
     *
     * @throws CudaCallException when CUDA refuses (e.g. out of memory)
     * @throws OutOfMemoryError  when host memory cannot be had
     */
    @Override
    public MemoryBuffer allocate(long bytes, MemoryKind kind) {
        Objects.requireNonNull(kind, "kind");
        if (bytes < 0) {
            throw new IllegalArgumentException("bytes = " + bytes + ": must be at least 0");
        }
        checkOpen();
        long size = Math.max(bytes, 1); // a stable, non-null address even for an empty buffer
        Throwable site = debug ? new Throwable("allocated here") : null;
        Owned b;
        if (kind == MemoryKind.HOST) {
            // No CUDA call: core allocates small control buffers per request; they must stay cheap.
            long raw = HostMemory.allocateForAlignment(size);
            b = new Owned(NEXT_ID.incrementAndGet(), kind, HostMemory.align(raw), raw, bytes, Release.FREE_RAW, site);
            outstanding.put(b.id, b);
            outstandingBytes.addAndGet(bytes);
            return b;
        }
        cuda.bindThread();
        if (kind == MemoryKind.DEVICE) {
            b = new Owned(NEXT_ID.incrementAndGet(), kind, cuda.malloc(size), 0, bytes, Release.CUDA_FREE, site);
        } else if (size <= hostAllocLimit) {
            b = new Owned(NEXT_ID.incrementAndGet(), kind, cuda.hostAlloc(size), 0, bytes, Release.FREE_HOST, site);
        } else {
            long raw = HostMemory.allocateForAlignment(size);
            long aligned = HostMemory.align(raw);
            try {
                cuda.hostRegister(aligned, size);
            } catch (RuntimeException e) {
                HostMemory.free(raw);
                throw e;
            }
            b = new Owned(NEXT_ID.incrementAndGet(), kind, aligned, raw, bytes, Release.UNREGISTER, site);
        }
        outstanding.put(b.id, b);
        outstandingBytes.addAndGet(bytes);
        return b;
    }

    /**
     * Issues one {@code cudaMemcpyAsync} on the manager's stream; returns before the copy completes (see
     * {@link #synchronize()}). Either buffer may be of any kind and any manager, as long as it has an address.
     *
     * @throws IndexOutOfBoundsException if either range leaves its buffer
     * @throws IllegalArgumentException  if the ranges overlap
     */
    @Override
    public void copy(MemoryBuffer src, long srcOffset, MemoryBuffer dst, long dstOffset, long bytes) {
        Objects.requireNonNull(src, "src");
        Objects.requireNonNull(dst, "dst");
        Objects.checkFromIndexSize(srcOffset, bytes, src.size());
        Objects.checkFromIndexSize(dstOffset, bytes, dst.size());
        CudaRuntime.Direction direction = direction(src, dst);
        checkOpen();
        if (bytes == 0) {
            return;
        }
        // address() fails on a closed buffer of ours, so a use-after-close is an exception, not a fault.
        long s = src.address() + srcOffset;
        long d = dst.address() + dstOffset;
        checkDisjoint(direction, s, bytes, d, bytes);
        if (pageable(src, dst)) {
            HostMemory.copy(s, d, bytes); // the stream never holds pageable memory: no order to keep
            return;
        }
        cuda.bindThread();
        cuda.memcpyAsync(d, s, bytes, direction);
    }

    /** Whether both buffers are pageable host memory: CUDA would copy them synchronously on the CPU anyway. */
    private static boolean pageable(MemoryBuffer src, MemoryBuffer dst) {
        return src.kind() == MemoryKind.HOST && dst.kind() == MemoryKind.HOST;
    }

    /**
     * One {@code cudaMemcpy2DAsync} on the manager's stream (one {@code cudaMemcpyAsync} when {@code rows == 1};
     * one per row when a pitch exceeds the device's maximum pitch).
     *
     * @throws IndexOutOfBoundsException if any row leaves its buffer
     * @throws IllegalArgumentException  for a negative count, a pitch below {@code rowBytes}, or overlapping source
     *                                   and destination spans
     */
    @Override
    public void copy2d(MemoryBuffer src, long srcOffset, long srcPitch, MemoryBuffer dst, long dstOffset,
                       long dstPitch, long rowBytes, long rows) {
        Objects.requireNonNull(src, "src");
        Objects.requireNonNull(dst, "dst");
        if (rows < 0 || rowBytes < 0) {
            throw new IllegalArgumentException("rows = " + rows + ", rowBytes = " + rowBytes + ": must be >= 0");
        }
        if (rows > 1 && (srcPitch < rowBytes || dstPitch < rowBytes)) {
            throw new IllegalArgumentException("pitches " + srcPitch + " / " + dstPitch + " below rowBytes "
                    + rowBytes);
        }
        long srcSpan = span(rows, srcPitch, rowBytes, "source");
        long dstSpan = span(rows, dstPitch, rowBytes, "destination");
        Objects.checkFromIndexSize(srcOffset, srcSpan, src.size());
        Objects.checkFromIndexSize(dstOffset, dstSpan, dst.size());
        CudaRuntime.Direction direction = direction(src, dst);
        checkOpen();
        if (rows == 0 || rowBytes == 0) {
            return;
        }
        long s = src.address() + srcOffset;
        long d = dst.address() + dstOffset;
        checkDisjoint(direction, s, srcSpan, d, dstSpan);
        if (pageable(src, dst)) {
            for (long i = 0; i < rows; i++) {
                HostMemory.copy(s + i * srcPitch, d + i * dstPitch, rowBytes);
            }
            return;
        }
        cuda.bindThread();
        if (rows == 1) {
            cuda.memcpyAsync(d, s, rowBytes, direction);
        } else if (srcPitch > cuda.maxPitch() || dstPitch > cuda.maxPitch()) {
            for (long i = 0; i < rows; i++) {
                cuda.memcpyAsync(d + i * dstPitch, s + i * srcPitch, rowBytes, direction);
            }
        } else {
            cuda.memcpy2DAsync(d, dstPitch, s, srcPitch, rowBytes, rows, direction);
        }
    }

    /** Bytes from the first byte of row 0 to the end of the last row; overflow is out of bounds. */
    private static long span(long rows, long pitch, long rowBytes, String side) {
        if (rows == 0) {
            return 0;
        }
        if (rows > 1 && pitch < 0) {
            throw new IllegalArgumentException(side + " pitch " + pitch + ": must be >= 0");
        }
        try {
            return Math.addExact(Math.multiplyExact(rows - 1, Math.max(pitch, 0)), rowBytes);
        } catch (ArithmeticException e) {
            throw new IndexOutOfBoundsException(side + " rows span more than Long.MAX_VALUE bytes: " + rows
                    + " rows, pitch " + pitch + ", rowBytes " + rowBytes);
        }
    }

    private static CudaRuntime.Direction direction(MemoryBuffer src, MemoryBuffer dst) {
        boolean fromDevice = Objects.requireNonNull(src.kind(), "src.kind()") == MemoryKind.DEVICE;
        boolean toDevice = Objects.requireNonNull(dst.kind(), "dst.kind()") == MemoryKind.DEVICE;
        if (fromDevice) {
            return toDevice ? CudaRuntime.Direction.DEVICE_TO_DEVICE : CudaRuntime.Direction.DEVICE_TO_HOST;
        }
        return toDevice ? CudaRuntime.Direction.HOST_TO_DEVICE : CudaRuntime.Direction.HOST_TO_HOST;
    }

    private static void checkDisjoint(CudaRuntime.Direction direction, long s, long sBytes, long d, long dBytes) {
        boolean sameSide = direction == CudaRuntime.Direction.DEVICE_TO_DEVICE
                || direction == CudaRuntime.Direction.HOST_TO_HOST;
        if (sameSide && s < d + dBytes && d < s + sBytes) {
            throw new IllegalArgumentException("source [0x" + Long.toHexString(s) + ", +" + sBytes
                    + ") and destination [0x" + Long.toHexString(d) + ", +" + dBytes + ") overlap; CUDA copies"
                    + " of overlapping ranges are undefined");
        }
    }

    /**
     * Waits, up to the manager's deadline, until every copy issued on its stream before this call has completed.
     *
     * @throws IllegalStateException when the deadline passes or the thread is interrupted (the copies may still be
     *                               in flight), or when the manager is closed
     * @throws CudaCallException     when a copy failed on the device
     */
    @Override
    public void synchronize() {
        checkOpen();
        cuda.bindThread();
        awaitStream("synchronize");
    }

    private void awaitStream(String what) {
        CudaRuntime.Fence fence = cuda.fence();
        try {
            long start = System.nanoTime();
            while (!fence.reached()) {
                long waited = System.nanoTime() - start;
                if (waited >= syncTimeoutNanos) {
                    throw new IllegalStateException(what + ": copies on device " + cuda.device()
                            + "'s stream not complete after " + syncTimeoutNanos / 1_000_000 + " ms");
                }
                if (waited < SPIN_NANOS) {
                    Thread.onSpinWait();
                } else {
                    LockSupport.parkNanos(PARK_NANOS);
                    if (Thread.currentThread().isInterrupted()) {
                        throw new IllegalStateException(what + ": interrupted while copies on device "
                                + cuda.device() + "'s stream were in flight");
                    }
                }
            }
        } finally {
            fence.release();
        }
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
     * Describes the outstanding buffers (at most {@value #MAX_LISTED}, oldest first), with their allocation sites
     * in debug mode.
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
     * Closes the manager when every buffer has been closed: waits (with the deadline) for the copies issued on its
     * stream, then destroys the stream. Idempotent.
     *
     * @throws IllegalStateException listing the outstanding buffers, or when the copies do not complete in time;
     *                               the manager then stays open, so closing the buffers and calling again succeeds
     */
    @Override
    public void close() {
        synchronized (closeLock) {
            if (closed) {
                return;
            }
            if (!outstanding.isEmpty()) {
                throw new IllegalStateException("CudaBufferManager (device " + cuda.device() + ") closed with "
                        + outstanding.size() + " outstanding buffer(s), " + outstandingBytes.get() + " bytes"
                        + (debug ? "" : " (run with -D" + DEBUG_PROPERTY + "=true for allocation sites)") + ":\n"
                        + describeOutstanding());
            }
            cuda.bindThread();
            // Copies between other managers' buffers may still be in flight: let them finish first.
            awaitStream("close");
            closed = true;
            cuda.destroy();
        }
    }

    private void checkOpen() {
        if (closed) {
            throw new IllegalStateException("CudaBufferManager (device " + cuda.device() + ") is closed");
        }
    }

    @Override
    public String toString() {
        return "CudaBufferManager{device " + cuda.device() + ", outstanding=" + outstanding.size() + " buffers, "
                + outstandingBytes.get() + " bytes" + (closed ? ", closed" : "") + "}";
    }

    private static ByteBuffer byteBuffer(MemoryKind kind, long address, long size, MemoryBuffer who) {
        if (kind == MemoryKind.DEVICE) {
            throw new UnsupportedOperationException("asByteBuffer: " + who + " is DEVICE memory, which the CPU"
                    + " cannot address; copy it to a PINNED_HOST or HOST buffer first");
        }
        if (size > Integer.MAX_VALUE) {
            throw new UnsupportedOperationException("asByteBuffer: " + who + " is larger than Integer.MAX_VALUE"
                    + " bytes; slice it first");
        }
        return HostMemory.byteBuffer(address, (int) size);
    }

    /** How an owning buffer gives its memory back. */
    private enum Release {
        CUDA_FREE, FREE_HOST, UNREGISTER, FREE_RAW
    }

    /** An owning allocation. */
    private final class Owned implements MemoryBuffer {
        private final long id;
        private final MemoryKind kind;
        private final long address;
        /** The malloc'ed address behind a registered allocation (else 0). */
        private final long raw;
        private final long size;
        private final Release release;
        private final Throwable site;
        private final AtomicBoolean open = new AtomicBoolean(true);

        Owned(long id, MemoryKind kind, long address, long raw, long size, Release release, Throwable site) {
            this.id = id;
            this.kind = kind;
            this.address = address;
            this.raw = raw;
            this.size = size;
            this.release = release;
            this.site = site;
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
            return byteBuffer(kind, address, size, this);
        }

        /**
         * Waits for the copies already issued on the manager's stream, then frees the memory, once.
         *
         * @throws IllegalStateException when those copies do not complete by the deadline; the buffer then stays
         *                               open (and outstanding) rather than free memory a copy may still touch
         */
        @Override
        public void close() {
            if (!open.get()) {
                return;
            }
            synchronized (this) {
                if (!open.get()) {
                    return;
                }
                if (release != Release.FREE_RAW) {
                    // Pageable memory is never referenced by the stream once a copy call returned (CUDA copies it
                    // synchronously or through its own staging): only device and pinned memory wait.
                    cuda.bindThread();
                    awaitStream("close " + this);
                }
                open.set(false);
            }
            outstanding.remove(id);
            outstandingBytes.addAndGet(-size);
            switch (release) {
                case FREE_RAW:
                    HostMemory.free(raw);
                    break;
                case CUDA_FREE:
                    cuda.free(address);
                    break;
                case FREE_HOST:
                    cuda.freeHost(address);
                    break;
                default:
                    try {
                        cuda.hostUnregister(address);
                    } finally {
                        HostMemory.free(raw);
                    }
            }
        }

        @Override
        public String toString() {
            return "CudaBuffer#" + id + "[" + size + " B " + kind + " device " + cuda.device()
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
            return byteBuffer(root.kind, address(), size, this);
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
