package dev.kvtransfer.memory.cuda;

/**
 * A CUDA runtime call failed: carries the call (with its arguments), the {@code cudaError_t} code and name, and
 * the runtime's message. CUDA errors from asynchronous work can surface at a later call on the same device.
 */
public final class CudaCallException extends RuntimeException {
    private static final long serialVersionUID = 1L;

    /** The code used when the error has no {@code cudaError_t} (JCuda threw its own exception). */
    public static final int UNKNOWN_CODE = -1;

    private final String call;
    private final int errorCode;
    private final String errorName;

    /**
     * A failure.
     *
     * @param call      the call, e.g. {@code "cudaMalloc(1048576)"}
     * @param errorCode the {@code cudaError_t} value, or {@link #UNKNOWN_CODE}
     * @param errorName e.g. {@code "cudaErrorMemoryAllocation"}
     * @param message   the runtime's description of the error
     */
    public CudaCallException(String call, int errorCode, String errorName, String message) {
        super(call + " failed: " + errorName + (errorCode == UNKNOWN_CODE ? "" : " (" + errorCode + ")")
                + (message == null || message.isEmpty() ? "" : ": " + message));
        this.call = call;
        this.errorCode = errorCode;
        this.errorName = errorName;
    }

    /** @return the call that failed, with its arguments */
    public String call() {
        return call;
    }

    /** @return the {@code cudaError_t} value, or {@link #UNKNOWN_CODE} */
    public int errorCode() {
        return errorCode;
    }

    /** @return the error's name, e.g. {@code "cudaErrorInvalidValue"} */
    public String errorName() {
        return errorName;
    }
}
