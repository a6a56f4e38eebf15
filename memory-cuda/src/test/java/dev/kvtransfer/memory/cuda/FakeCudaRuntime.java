package dev.kvtransfer.memory.cuda;

import java.nio.ByteBuffer;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Deque;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

/**
 * A {@link CudaRuntime} over host memory, so that {@link CudaBufferManager}'s own logic (bounds, directions,
 * ownership, leak reports, stream ordering, deadlines) is tested on machines without a GPU. "Device" memory is
 * malloc'ed host memory the fake keeps apart from host memory; it checks what the real runtime would reject:
 * a copy whose direction does not match where its addresses live, a copy out of an allocation, a free of
 * something not allocated, and (unlike CUDA, which would corrupt memory) a free while a copy touching that memory
 * is still queued. Copies queue and run in order when a fence is polled, as on a stream.
 */
final class FakeCudaRuntime implements CudaRuntime {
    private final int device;
    private final Map<Long, long[]> deviceAllocations = new TreeMap<>(); // address -> {raw, size}
    private final Map<Long, long[]> pinnedAllocations = new TreeMap<>();
    private final Map<Long, Long> registered = new TreeMap<>();
    private final Deque<Runnable> queue = new ArrayDeque<>();
    private final Deque<long[]> queuedRanges = new ArrayDeque<>(); // {address, bytes} touched by queued copies
    private final List<String> calls = new ArrayList<>();
    private long maxPitch = Integer.MAX_VALUE;
    private boolean stalled;
    private boolean refuseCalls;
    private boolean destroyed;
    private int fencesOpen;
    private int pollsBeforeDone;

    FakeCudaRuntime(int device) {
        this.device = device;
    }

    // ---- knobs and observations for tests ----

    /** The stream never completes: waits must hit their deadline. */
    synchronized FakeCudaRuntime stall(boolean stall) {
        this.stalled = stall;
        return this;
    }

    /** Any runtime call fails the test: for checks that must fail before CUDA is asked. */
    synchronized FakeCudaRuntime refuseCalls(boolean refuse) {
        this.refuseCalls = refuse;
        return this;
    }

    /** A fence reports "not yet" this many times before the queue runs (exercises the wait loop). */
    synchronized FakeCudaRuntime pollsBeforeDone(int polls) {
        this.pollsBeforeDone = polls;
        return this;
    }

    synchronized FakeCudaRuntime maxPitch(long pitch) {
        this.maxPitch = pitch;
        return this;
    }

    /** @return the calls made, e.g. "memcpyAsync HOST_TO_DEVICE 4096" */
    synchronized List<String> calls() {
        return new ArrayList<>(calls);
    }

    synchronized long callCount(String prefix) {
        return calls.stream().filter(c -> c.startsWith(prefix)).count();
    }

    synchronized int queuedCopies() {
        return queue.size();
    }

    synchronized int liveAllocations() {
        return deviceAllocations.size() + pinnedAllocations.size() + registered.size();
    }

    synchronized int openFences() {
        return fencesOpen;
    }

    synchronized boolean destroyed() {
        return destroyed;
    }

    // ---- CudaRuntime ----

    @Override
    public int device() {
        return device;
    }

    @Override
    public synchronized void bindThread() {
        enter("bindThread");
    }

    @Override
    public synchronized long malloc(long bytes) {
        enter("malloc " + bytes);
        long raw = HostMemory.allocateForAlignment(bytes + 256);
        long address = (raw + 255) & -256L; // cudaMalloc aligns to 256 bytes
        deviceAllocations.put(address, new long[] {raw, bytes});
        return address;
    }

    @Override
    public synchronized void free(long address) {
        enter("free");
        long[] a = deviceAllocations.remove(address);
        if (a == null) {
            throw new CudaCallException("cudaFree(0x" + Long.toHexString(address) + ")", 1, "cudaErrorInvalidValue",
                    "not a device allocation");
        }
        checkNotQueued(address, a[1]);
        HostMemory.free(a[0]);
    }

    @Override
    public synchronized long hostAlloc(long bytes) {
        enter("hostAlloc " + bytes);
        if (bytes > Integer.MAX_VALUE) {
            throw new AssertionError("hostAlloc of " + bytes + " bytes: above the JCuda/JDK 17 limit");
        }
        long raw = HostMemory.allocateForAlignment(bytes);
        long address = HostMemory.align(raw);
        pinnedAllocations.put(address, new long[] {raw, bytes});
        return address;
    }

    @Override
    public synchronized void freeHost(long address) {
        enter("freeHost");
        long[] a = pinnedAllocations.remove(address);
        if (a == null) {
            throw new CudaCallException("cudaFreeHost", 1, "cudaErrorInvalidValue", "not a pinned allocation");
        }
        checkNotQueued(address, a[1]);
        HostMemory.free(a[0]);
    }

    @Override
    public synchronized void hostRegister(long address, long bytes) {
        enter("hostRegister " + bytes);
        registered.put(address, bytes);
    }

    @Override
    public synchronized void hostUnregister(long address) {
        enter("hostUnregister");
        Long bytes = registered.remove(address);
        if (bytes == null) {
            throw new CudaCallException("cudaHostUnregister", 713, "cudaErrorHostMemoryNotRegistered", "");
        }
        checkNotQueued(address, bytes);
    }

    @Override
    public synchronized void memcpyAsync(long dst, long src, long bytes, Direction direction) {
        enter("memcpyAsync " + direction + " " + bytes);
        checkSide(src, bytes, direction == Direction.DEVICE_TO_HOST || direction == Direction.DEVICE_TO_DEVICE,
                "source");
        checkSide(dst, bytes, direction == Direction.HOST_TO_DEVICE || direction == Direction.DEVICE_TO_DEVICE,
                "destination");
        queue.add(() -> copyBytes(src, dst, bytes));
        queuedRanges.add(new long[] {src, bytes, dst, bytes});
    }

    @Override
    public synchronized void memcpy2DAsync(long dst, long dstPitch, long src, long srcPitch, long width, long height,
                                           Direction direction) {
        enter("memcpy2DAsync " + direction + " " + width + "x" + height + " pitch " + srcPitch + "/" + dstPitch);
        if (width > srcPitch || width > dstPitch || srcPitch > maxPitch || dstPitch > maxPitch) {
            throw new CudaCallException("cudaMemcpy2DAsync", 12, "cudaErrorInvalidPitchValue", "");
        }
        long srcSpan = (height - 1) * srcPitch + width;
        long dstSpan = (height - 1) * dstPitch + width;
        checkSide(src, srcSpan, direction == Direction.DEVICE_TO_HOST || direction == Direction.DEVICE_TO_DEVICE,
                "source");
        checkSide(dst, dstSpan, direction == Direction.HOST_TO_DEVICE || direction == Direction.DEVICE_TO_DEVICE,
                "destination");
        queue.add(() -> {
            for (long r = 0; r < height; r++) {
                copyBytes(src + r * srcPitch, dst + r * dstPitch, width);
            }
        });
        queuedRanges.add(new long[] {src, srcSpan, dst, dstSpan});
    }

    @Override
    public synchronized Fence fence() {
        enter("fence");
        int position = queue.size();
        fencesOpen++;
        return new Fence() {
            private int polls;
            private boolean released;

            @Override
            public boolean reached() {
                synchronized (FakeCudaRuntime.this) {
                    if (released) {
                        throw new AssertionError("fence polled after release");
                    }
                    if (stalled || polls++ < pollsBeforeDone) {
                        return false;
                    }
                    // Run the copies issued before this fence (later ones may already have run: that is fine).
                    for (int i = 0; i < position && !queue.isEmpty(); i++) {
                        queue.poll().run();
                        queuedRanges.poll();
                    }
                    return true;
                }
            }

            @Override
            public void release() {
                synchronized (FakeCudaRuntime.this) {
                    if (released) {
                        throw new AssertionError("fence released twice");
                    }
                    released = true;
                    fencesOpen--;
                }
            }
        };
    }

    @Override
    public long maxPitch() {
        return maxPitch;
    }

    @Override
    public String describe() {
        return "fake device " + device + " (host memory)";
    }

    @Override
    public synchronized void destroy() {
        enter("destroy");
        destroyed = true;
    }

    // ---- internals ----

    private void enter(String call) {
        if (destroyed) {
            throw new AssertionError(call + " after the stream was destroyed");
        }
        if (refuseCalls) {
            throw new AssertionError("CUDA call made although the operation should have failed first: " + call);
        }
        calls.add(call);
    }

    private void checkSide(long address, long bytes, boolean device, String what) {
        boolean inDevice = within(deviceAllocations, address, bytes);
        if (device != inDevice) {
            throw new CudaCallException("cudaMemcpy", 1, "cudaErrorInvalidValue", what + " 0x"
                    + Long.toHexString(address) + " is " + (inDevice ? "device" : "not device")
                    + " memory, but the copy kind says " + (device ? "device" : "host"));
        }
        // Host addresses may be pinned allocations, registered memory or another manager's pageable memory:
        // CUDA copies all of them.
    }

    private static boolean within(Map<Long, long[]> allocations, long address, long bytes) {
        for (Map.Entry<Long, long[]> e : allocations.entrySet()) {
            long start = e.getKey();
            if (address >= start && address + bytes <= start + e.getValue()[1]) {
                return true;
            }
        }
        return false;
    }

    private void checkNotQueued(long address, long bytes) {
        for (long[] r : queuedRanges) {
            if (overlaps(r[0], r[1], address, bytes) || overlaps(r[2], r[3], address, bytes)) {
                throw new AssertionError("memory at 0x" + Long.toHexString(address) + " freed while a queued copy"
                        + " still touches it");
            }
        }
    }

    private static boolean overlaps(long a, long aBytes, long b, long bBytes) {
        return a < b + bBytes && b < a + aBytes;
    }

    private static void copyBytes(long src, long dst, long bytes) {
        for (long done = 0; done < bytes; ) {
            int n = (int) Math.min(bytes - done, 1 << 30);
            ByteBuffer from = HostMemory.byteBuffer(src + done, n);
            HostMemory.byteBuffer(dst + done, n).put(from);
            done += n;
        }
    }
}
