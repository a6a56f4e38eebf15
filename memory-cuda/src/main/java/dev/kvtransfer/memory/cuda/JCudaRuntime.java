package dev.kvtransfer.memory.cuda;

import jcuda.CudaException;
import jcuda.Pointer;
import jcuda.runtime.JCuda;
import jcuda.runtime.cudaDeviceAttr;
import jcuda.runtime.cudaDeviceProp;
import jcuda.runtime.cudaError;
import jcuda.runtime.cudaEvent_t;
import jcuda.runtime.cudaMemcpyKind;
import jcuda.runtime.cudaStream_t;

/**
 * {@link CudaRuntime} over JCuda's runtime bindings (CUDA runtime 12.6, linked statically into JCuda's native
 * library, so the only thing needed at run time is the driver's {@code libcuda.so.1}).
 *
 * <p>Works whether or not another component of the process switched on {@code JCuda.setExceptionsEnabled}: every
 * result code is checked here, and a {@link CudaException} thrown by JCuda is turned into a
 * {@link CudaCallException} naming the call.
 *
 * <p>Copies use explicit {@code cudaMemcpyKind}s: JCuda's {@code cudaMemcpyAsync} binding rejects
 * {@code cudaMemcpyDefault} with {@code cudaErrorInvalidMemcpyDirection} (its native code switches over the four
 * explicit kinds only).
 */
final class JCudaRuntime implements CudaRuntime {
    private final int device;
    private final cudaStream_t stream = new cudaStream_t();
    private final long maxPitch;

    /**
     * Binds to a device and creates a non-blocking stream on it.
     *
     * @param device the device ordinal
     */
    JCudaRuntime(int device) {
        this.device = device;
        bindThread();
        try {
            check(JCuda.cudaStreamCreateWithFlags(stream, JCuda.cudaStreamNonBlocking), "cudaStreamCreateWithFlags",
                    device);
        } catch (CudaException e) {
            throw wrap(e, "cudaStreamCreateWithFlags", device);
        }
        int[] pitch = new int[1];
        long p;
        try {
            p = JCuda.cudaDeviceGetAttribute(pitch, cudaDeviceAttr.cudaDevAttrMaxPitch, device) == cudaError.cudaSuccess
                    ? Integer.toUnsignedLong(pitch[0]) : Integer.MAX_VALUE;
        } catch (CudaException e) {
            p = Integer.MAX_VALUE;
        }
        maxPitch = p;
    }

    @Override
    public int device() {
        return device;
    }

    @Override
    public void bindThread() {
        try {
            check(JCuda.cudaSetDevice(device), "cudaSetDevice", device);
        } catch (CudaException e) {
            throw wrap(e, "cudaSetDevice", device);
        }
    }

    @Override
    public long malloc(long bytes) {
        Address p = new Address();
        try {
            check(JCuda.cudaMalloc(p, bytes), "cudaMalloc", bytes);
        } catch (CudaException e) {
            throw wrap(e, "cudaMalloc", bytes);
        }
        return p.value();
    }

    @Override
    public void free(long deviceAddress) {
        try {
            check(JCuda.cudaFree(new Address(deviceAddress)), "cudaFree", deviceAddress);
        } catch (CudaException e) {
            throw wrap(e, "cudaFree", deviceAddress);
        }
    }

    @Override
    public long hostAlloc(long bytes) {
        Address p = new Address();
        try {
            check(JCuda.cudaHostAlloc(p, bytes, JCuda.cudaHostAllocPortable), "cudaHostAlloc", bytes);
        } catch (CudaException e) {
            throw wrap(e, "cudaHostAlloc", bytes);
        }
        return p.value();
    }

    @Override
    public void freeHost(long hostAddress) {
        try {
            check(JCuda.cudaFreeHost(new Address(hostAddress)), "cudaFreeHost", hostAddress);
        } catch (CudaException e) {
            throw wrap(e, "cudaFreeHost", hostAddress);
        }
    }

    @Override
    public void hostRegister(long hostAddress, long bytes) {
        try {
            check(JCuda.cudaHostRegister(new Address(hostAddress), bytes, JCuda.cudaHostRegisterPortable),
                    "cudaHostRegister", hostAddress, bytes);
        } catch (CudaException e) {
            throw wrap(e, "cudaHostRegister", hostAddress, bytes);
        }
    }

    @Override
    public void hostUnregister(long hostAddress) {
        try {
            check(JCuda.cudaHostUnregister(new Address(hostAddress)), "cudaHostUnregister", hostAddress);
        } catch (CudaException e) {
            throw wrap(e, "cudaHostUnregister", hostAddress);
        }
    }

    @Override
    public void memcpyAsync(long dst, long src, long bytes, Direction direction) {
        int rc;
        try {
            rc = JCuda.cudaMemcpyAsync(new Address(dst), new Address(src), bytes, kind(direction), stream);
        } catch (CudaException e) {
            throw wrap(e, "cudaMemcpyAsync", dst, src, bytes, direction);
        }
        if (rc != cudaError.cudaSuccess) {
            throw failure(rc, "cudaMemcpyAsync", dst, src, bytes, direction);
        }
    }

    @Override
    public void memcpy2DAsync(long dst, long dstPitch, long src, long srcPitch, long width, long height,
                              Direction direction) {
        int rc;
        try {
            rc = JCuda.cudaMemcpy2DAsync(new Address(dst), dstPitch, new Address(src), srcPitch, width, height,
                    kind(direction), stream);
        } catch (CudaException e) {
            throw wrap(e, "cudaMemcpy2DAsync", dst, dstPitch, src, srcPitch, width, height, direction);
        }
        if (rc != cudaError.cudaSuccess) {
            throw failure(rc, "cudaMemcpy2DAsync", dst, dstPitch, src, srcPitch, width, height, direction);
        }
    }

    @Override
    public Fence fence() {
        cudaEvent_t event = new cudaEvent_t();
        try {
            check(JCuda.cudaEventCreateWithFlags(event, JCuda.cudaEventDisableTiming), "cudaEventCreateWithFlags");
        } catch (CudaException e) {
            throw wrap(e, "cudaEventCreateWithFlags");
        }
        try {
            check(JCuda.cudaEventRecord(event, stream), "cudaEventRecord");
        } catch (CudaException | CudaCallException e) {
            JCuda.cudaEventDestroy(event);
            throw e instanceof CudaException ? wrap((CudaException) e, "cudaEventRecord") : (CudaCallException) e;
        }
        return new EventFence(event);
    }

    @Override
    public long maxPitch() {
        return maxPitch;
    }

    @Override
    public String describe() {
        try {
            cudaDeviceProp prop = new cudaDeviceProp();
            check(JCuda.cudaGetDeviceProperties(prop, device), "cudaGetDeviceProperties", device);
            int[] driver = new int[1];
            JCuda.cudaDriverGetVersion(driver);
            return "device " + device + ": " + prop.getName() + ", compute " + prop.major + "." + prop.minor + ", "
                    + (prop.totalGlobalMem >> 20) + " MiB, PCI bus " + prop.pciBusID + ", driver "
                    + CudaProbe.version(driver[0]) + ", runtime " + CudaProbe.runtimeVersion();
        } catch (CudaException | CudaCallException e) {
            return "device " + device + " (properties unavailable: " + e.getMessage() + ")";
        }
    }

    @Override
    public void destroy() {
        try {
            check(JCuda.cudaStreamDestroy(stream), "cudaStreamDestroy");
        } catch (CudaException e) {
            throw wrap(e, "cudaStreamDestroy");
        }
    }

    /** A recorded event. */
    private static final class EventFence implements Fence {
        private final cudaEvent_t event;

        EventFence(cudaEvent_t event) {
            this.event = event;
        }

        @Override
        public boolean reached() {
            int rc;
            try {
                rc = JCuda.cudaEventQuery(event);
            } catch (CudaException e) {
                // With exceptions enabled, JCuda throws for the "not ready" answer too.
                if (String.valueOf(e.getMessage()).contains("cudaErrorNotReady")) {
                    return false;
                }
                throw wrap(e, "cudaEventQuery");
            }
            if (rc == cudaError.cudaSuccess) {
                return true;
            }
            if (rc == cudaError.cudaErrorNotReady) {
                return false;
            }
            throw failure(rc, "cudaEventQuery");
        }

        @Override
        public void release() {
            try {
                check(JCuda.cudaEventDestroy(event), "cudaEventDestroy");
            } catch (CudaException e) {
                throw wrap(e, "cudaEventDestroy");
            }
        }
    }

    private static int kind(Direction d) {
        switch (d) {
            case HOST_TO_HOST:
                return cudaMemcpyKind.cudaMemcpyHostToHost;
            case HOST_TO_DEVICE:
                return cudaMemcpyKind.cudaMemcpyHostToDevice;
            case DEVICE_TO_HOST:
                return cudaMemcpyKind.cudaMemcpyDeviceToHost;
            default:
                return cudaMemcpyKind.cudaMemcpyDeviceToDevice;
        }
    }

    private static void check(int rc, String call, Object... args) {
        if (rc != cudaError.cudaSuccess) {
            throw failure(rc, call, args);
        }
    }

    private static CudaCallException failure(int rc, String call, Object... args) {
        return new CudaCallException(describeCall(call, args), rc, cudaError.stringFor(rc),
                JCuda.cudaGetErrorString(rc));
    }

    private static CudaCallException wrap(CudaException e, String call, Object... args) {
        CudaCallException c = new CudaCallException(describeCall(call, args), CudaCallException.UNKNOWN_CODE,
                e.getMessage(), "");
        c.initCause(e);
        return c;
    }

    private static String describeCall(String call, Object... args) {
        StringBuilder sb = new StringBuilder(call).append('(');
        for (int i = 0; i < args.length; i++) {
            if (i > 0) {
                sb.append(", ");
            }
            Object a = args[i];
            // Addresses read better in hex; sizes and ordinals are small enough to tell apart.
            sb.append(a instanceof Long && (Long) a > 0xFFFF_FFFFL ? "0x" + Long.toHexString((Long) a) : a);
        }
        return sb.append(')').toString();
    }

    /** A JCuda pointer built from, or read back as, a raw address (JCuda keeps both protected). */
    private static final class Address extends Pointer {
        Address() {
            super();
        }

        Address(long address) {
            super(address);
        }

        long value() {
            return getNativePointer() + getByteOffset();
        }
    }
}
