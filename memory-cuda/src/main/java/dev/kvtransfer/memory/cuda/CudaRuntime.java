package dev.kvtransfer.memory.cuda;

/**
 * The CUDA runtime calls a {@link CudaBufferManager} makes, for one device and one stream, by raw address. The
 * production implementation is {@link JCudaRuntime}; tests substitute a host-memory fake so that the manager's
 * bookkeeping and checks run on machines without a GPU. Every method throws {@link CudaCallException} when the
 * call fails.
 */
interface CudaRuntime {
    /** Direction of a copy, as {@code cudaMemcpyKind} names them. */
    enum Direction {
        HOST_TO_HOST, HOST_TO_DEVICE, DEVICE_TO_HOST, DEVICE_TO_DEVICE
    }

    /** @return the device this runtime is bound to */
    int device();

    /** Makes {@link #device()} current on the calling thread (cudaSetDevice; cheap when already current). */
    void bindThread();

    /** @return the address of {@code bytes} (at least 1) of device memory */
    long malloc(long bytes);

    void free(long deviceAddress);

    /** @return the address of {@code bytes} (1 .. Integer.MAX_VALUE) of portable page-locked host memory */
    long hostAlloc(long bytes);

    void freeHost(long hostAddress);

    /** Page-locks (portable) existing host memory. */
    void hostRegister(long hostAddress, long bytes);

    void hostUnregister(long hostAddress);

    /** cudaMemcpyAsync on this runtime's stream. */
    void memcpyAsync(long dst, long src, long bytes, Direction direction);

    /** cudaMemcpy2DAsync on this runtime's stream ({@code width} bytes per row, {@code height} rows). */
    void memcpy2DAsync(long dst, long dstPitch, long src, long srcPitch, long width, long height,
                       Direction direction);

    /**
     * Records a marker after everything issued on the stream so far (cudaEventRecord of a timing-free event).
     *
     * @return the marker, to poll and then {@link Fence#release}
     */
    Fence fence();

    /** @return the largest pitch {@link #memcpy2DAsync} accepts (cudaDevAttrMaxPitch) */
    long maxPitch();

    /** @return one line about the device: name, compute capability, memory */
    String describe();

    /** Destroys the stream. */
    void destroy();

    /** A point in the stream's work. */
    interface Fence {
        /** @return whether the stream's work up to this point has completed (cudaEventQuery) */
        boolean reached();

        /** Releases the event. */
        void release();
    }
}
