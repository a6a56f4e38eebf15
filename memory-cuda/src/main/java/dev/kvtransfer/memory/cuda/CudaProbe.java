package dev.kvtransfer.memory.cuda;

import jcuda.CudaException;
import jcuda.runtime.JCuda;
import jcuda.runtime.cudaError;

import java.util.Locale;

/**
 * Finds out, once per process and without throwing, whether CUDA can be used here: JCuda's native library loads,
 * a driver answers, the driver is new enough for JCuda's runtime, and at least one device is visible.
 *
 * <p>What JCuda 12.6.0 does on a machine without a driver (checked on this project's build machines: CUDA 13
 * toolkit installed, no driver, no GPU): its runtime library loads (the CUDA runtime is linked statically into
 * it), {@code cudaDriverGetVersion} answers 0 and {@code cudaGetDeviceCount} answers
 * {@code cudaErrorInsufficientDriver}. Its driver-API library ({@code JCudaDriver}) does not load at all
 * ({@code UnsatisfiedLinkError: libcuda.so.1: cannot open shared object file}), which is why this module uses
 * the runtime API only.
 */
final class CudaProbe {
    private static final System.Logger LOG = System.getLogger(CudaProbe.class.getName());

    /** What the probe found. */
    static final class Result {
        final String cause;
        final int deviceCount;
        final int driverVersion;
        final int runtimeVersion;

        Result(String cause, int deviceCount, int driverVersion, int runtimeVersion) {
            this.cause = cause;
            this.deviceCount = deviceCount;
            this.driverVersion = driverVersion;
            this.runtimeVersion = runtimeVersion;
        }

        boolean available() {
            return cause == null;
        }
    }

    private static final class Holder {
        static final Result RESULT = probe();
    }

    private CudaProbe() {
    }

    /** @return the result, probing on first use */
    static Result result() {
        return Holder.RESULT;
    }

    /**
     * @throws IllegalStateException with the cause when CUDA is unusable here
     */
    static void requireAvailable() {
        Result r = result();
        if (!r.available()) {
            throw new IllegalStateException("CUDA memory is not available: " + r.cause);
        }
    }

    /** @return the CUDA runtime version JCuda reports, e.g. "12.0", or "unknown" */
    static String runtimeVersion() {
        return version(result().runtimeVersion);
    }

    private static Result probe() {
        int runtime = 0;
        int driver = 0;
        Result r;
        try {
            int[] v = new int[1];
            call(() -> JCuda.cudaRuntimeGetVersion(v));
            runtime = v[0];
            v[0] = 0;
            call(() -> JCuda.cudaDriverGetVersion(v));
            driver = v[0];
            int[] n = new int[1];
            int rc = call(() -> JCuda.cudaGetDeviceCount(n));
            r = new Result(classify(null, runtime, driver, rc, n[0]), rc == cudaError.cudaSuccess ? n[0] : 0, driver,
                    runtime);
        } catch (LinkageError | RuntimeException e) {
            r = new Result(classify(e, runtime, driver, cudaError.cudaSuccess, 0), 0, driver, runtime);
        }
        if (r.available()) {
            LOG.log(System.Logger.Level.DEBUG, "CUDA available: {0} device(s), driver {1}, runtime {2}",
                    r.deviceCount, version(driver), version(runtime));
        } else {
            LOG.log(System.Logger.Level.DEBUG, "CUDA memory unavailable: {0}", r.cause);
        }
        return r;
    }

    /** A JCuda call that returns a {@code cudaError_t}, whether or not JCuda throws instead. */
    private interface Call {
        int run();
    }

    private static int call(Call c) {
        try {
            return c.run();
        } catch (CudaException e) {
            return codeOf(e.getMessage());
        }
    }

    /** @return the code of a {@code cudaError} constant name (JCuda's exception message), or -1 */
    static int codeOf(String name) {
        if (name == null || !name.startsWith("cudaError")) {
            return -1;
        }
        try {
            return cudaError.class.getField(name.trim()).getInt(null);
        } catch (ReflectiveOperationException | RuntimeException e) {
            return -1;
        }
    }

    /**
     * The plain-words cause, from what the probe saw.
     *
     * @param loadFailure    what loading or calling JCuda threw, or {@code null}
     * @param runtimeVersion {@code cudaRuntimeGetVersion}
     * @param driverVersion  {@code cudaDriverGetVersion} (0: no driver)
     * @param countResult    the {@code cudaError_t} of {@code cudaGetDeviceCount}
     * @param count          the device count
     * @return the cause, or {@code null} when CUDA is usable
     */
    static String classify(Throwable loadFailure, int runtimeVersion, int driverVersion, int countResult,
                           int count) {
        if (loadFailure != null) {
            return loadFailureCause(loadFailure);
        }
        if (driverVersion == 0) {
            return "no CUDA driver (libcuda.so.1 not found: cudaDriverGetVersion = 0)";
        }
        if (countResult == cudaError.cudaErrorInsufficientDriver) {
            return "CUDA driver " + version(driverVersion) + " is older than the CUDA runtime "
                    + version(runtimeVersion) + " that JCuda is built with (cudaGetDeviceCount: "
                    + "cudaErrorInsufficientDriver)";
        }
        if (countResult == cudaError.cudaErrorNoDevice) {
            String visible = System.getenv("CUDA_VISIBLE_DEVICES");
            return "no CUDA device (cudaGetDeviceCount: cudaErrorNoDevice"
                    + (visible == null ? "" : ", CUDA_VISIBLE_DEVICES=" + visible) + ")";
        }
        if (countResult != cudaError.cudaSuccess) {
            return "cudaGetDeviceCount failed: " + errorName(countResult) + " (" + countResult + ")";
        }
        if (count <= 0) {
            return "no CUDA device (cudaGetDeviceCount = " + count + ")";
        }
        return null;
    }

    private static String loadFailureCause(Throwable t) {
        String text = String.valueOf(t.getMessage());
        if (t instanceof NoClassDefFoundError && text.startsWith("jcuda/")) {
            return "JCuda is not on the class path (" + t + ")";
        }
        if (t instanceof NoClassDefFoundError && text.contains("jcuda.runtime.JCuda")) {
            // The static initializer failed earlier in this process (its first error said why).
            return "JCuda's runtime failed to initialize earlier in this process (" + t.getMessage() + ")";
        }
        if (text.contains("libcuda.so")) {
            return "no CUDA driver (libcuda.so.1 not found)";
        }
        if (t instanceof UnsatisfiedLinkError) {
            return "JCuda's native library could not be loaded: " + firstLines(text);
        }
        return "CUDA probe failed: " + t.getClass().getSimpleName() + ": " + firstLines(text);
    }

    /** JCuda's link errors carry both load attempts' stack traces: keep the lines that say what failed. */
    private static String firstLines(String text) {
        StringBuilder sb = new StringBuilder();
        for (String line : text.split("\n")) {
            String l = line.trim();
            boolean useful = sb.length() == 0 || l.startsWith("java.lang.UnsatisfiedLinkError")
                    || l.startsWith("Operating system name") || l.startsWith("Architecture ");
            if (useful && !l.isEmpty()) {
                if (sb.length() > 0) {
                    sb.append("; ");
                }
                sb.append(l);
            }
        }
        return sb.toString();
    }

    static String errorName(int code) {
        try {
            return cudaError.stringFor(code);
        } catch (LinkageError | RuntimeException e) {
            return "cudaError " + code;
        }
    }

    /** @return a CUDA version number (e.g. 12060) as "12.6", or "none" for 0 */
    static String version(int v) {
        if (v <= 0) {
            return "none";
        }
        return String.format(Locale.ROOT, "%d.%d", v / 1000, (v % 1000) / 10);
    }
}
