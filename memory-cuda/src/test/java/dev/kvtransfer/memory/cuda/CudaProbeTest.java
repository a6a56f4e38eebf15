package dev.kvtransfer.memory.cuda;

import org.junit.jupiter.api.Test;

import static org.assertj.core.api.Assertions.assertThat;

/** The plain-words causes, from every situation the probe tells apart (pure logic: runs everywhere). */
class CudaProbeTest {
    private static final int SUCCESS = 0;
    private static final int INSUFFICIENT_DRIVER = 35;
    private static final int NO_DEVICE = 100;

    @Test
    void noDriverIsSaidPlainly() {
        // What JCuda 12.6.0 answers on a machine with the toolkit but no driver.
        assertThat(CudaProbe.classify(null, 12000, 0, INSUFFICIENT_DRIVER, 0))
                .isEqualTo("no CUDA driver (libcuda.so.1 not found: cudaDriverGetVersion = 0)");
    }

    @Test
    void anOldDriverNamesBothVersions() {
        assertThat(CudaProbe.classify(null, 12060, 11040, INSUFFICIENT_DRIVER, 0))
                .isEqualTo("CUDA driver 11.4 is older than the CUDA runtime 12.6 that JCuda is built with"
                        + " (cudaGetDeviceCount: cudaErrorInsufficientDriver)");
    }

    @Test
    void noDeviceIsSaidPlainly() {
        assertThat(CudaProbe.classify(null, 12060, 13000, SUCCESS, 0))
                .isEqualTo("no CUDA device (cudaGetDeviceCount = 0)");
        assertThat(CudaProbe.classify(null, 12060, 13000, NO_DEVICE, 0))
                .startsWith("no CUDA device (cudaGetDeviceCount: cudaErrorNoDevice");
    }

    @Test
    void otherErrorsAreNamed() {
        assertThat(CudaProbe.classify(null, 12060, 13000, 999, 0))
                .isEqualTo("cudaGetDeviceCount failed: cudaErrorUnknown (999)");
    }

    @Test
    void aWorkingDeviceHasNoCause() {
        assertThat(CudaProbe.classify(null, 12060, 13000, SUCCESS, 8)).isNull();
    }

    @Test
    void linkErrorsAreReducedToWhatFailed() {
        UnsatisfiedLinkError driverMissing = new UnsatisfiedLinkError("Error while loading native library"
                + " \"JCudaDriver-12.6.0-linux-x86_64\"\nOperating system name: Linux\n---(start of nested stack"
                + " traces)---\njava.lang.UnsatisfiedLinkError: /tmp/libJCudaDriver-12.6.0-linux-x86_64.so:"
                + " libcuda.so.1: cannot open shared object file: No such file or directory\n\tat x.y(Z.java:1)");
        assertThat(CudaProbe.classify(driverMissing, 0, 0, SUCCESS, 0))
                .isEqualTo("no CUDA driver (libcuda.so.1 not found)");

        UnsatisfiedLinkError platform = new UnsatisfiedLinkError("Error while loading native library"
                + " \"JCudaRuntime-12.6.0-linux-ppc64\"\nOperating system name: Linux\nArchitecture         : ppc64"
                + "\n\tat jcuda.LibUtils.loadLibrary(LibUtils.java:218)");
        assertThat(CudaProbe.classify(platform, 0, 0, SUCCESS, 0))
                .isEqualTo("JCuda's native library could not be loaded: Error while loading native library"
                        + " \"JCudaRuntime-12.6.0-linux-ppc64\"; Operating system name: Linux;"
                        + " Architecture         : ppc64");

        assertThat(CudaProbe.classify(new NoClassDefFoundError("jcuda/runtime/JCuda"), 0, 0, SUCCESS, 0))
                .startsWith("JCuda is not on the class path");
        assertThat(CudaProbe.classify(new NoClassDefFoundError("Could not initialize class jcuda.runtime.JCuda"),
                0, 0, SUCCESS, 0)).startsWith("JCuda's runtime failed to initialize earlier");
        assertThat(CudaProbe.classify(new IllegalStateException("boom"), 0, 0, SUCCESS, 0))
                .isEqualTo("CUDA probe failed: IllegalStateException: boom");
    }

    @Test
    void jcudaExceptionMessagesMapBackToCodes() {
        assertThat(CudaProbe.codeOf("cudaErrorInsufficientDriver")).isEqualTo(INSUFFICIENT_DRIVER);
        assertThat(CudaProbe.codeOf("cudaErrorNoDevice")).isEqualTo(NO_DEVICE);
        assertThat(CudaProbe.codeOf("something else")).isEqualTo(-1);
        assertThat(CudaProbe.codeOf(null)).isEqualTo(-1);
    }

    @Test
    void versionsReadAsCudaWritesThem() {
        assertThat(CudaProbe.version(12060)).isEqualTo("12.6");
        assertThat(CudaProbe.version(13000)).isEqualTo("13.0");
        assertThat(CudaProbe.version(0)).isEqualTo("none");
    }
}
