package dev.kvtransfer.mpi;

import dev.kvtransfer.api.transport.TransportCapability;
import dev.kvtransfer.api.transport.TransportProvider;
import org.junit.jupiter.api.Test;

import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.List;
import java.util.ServiceLoader;
import java.util.concurrent.TimeUnit;

import static org.assertj.core.api.Assertions.assertThat;

/** Discovery and availability, without initializing MPI (no mpirun here). */
class MpiTransportProviderTest {
    @Test
    void isDiscoveredByServiceLoaderUnderItsName() {
        List<TransportProvider> found = ServiceLoader.load(TransportProvider.class).stream()
                .map(ServiceLoader.Provider::get).filter(p -> p.name().equals("mpi")).toList();
        assertThat(found).hasSize(1).first().isInstanceOf(MpiTransportProvider.class);
    }

    @Test
    void declaresCrossProcessAndNativeOneSidedWrites() {
        // Open MPI aborts the job when a rank dies, so no PEER_FAILURE_DETECTION; host memory only.
        assertThat(new MpiTransportProvider().capabilities()).containsExactlyInAnyOrder(
                TransportCapability.CROSS_PROCESS, TransportCapability.ONE_SIDED_WRITE,
                TransportCapability.NATIVE_ONE_SIDED_WRITE);
    }

    @Test
    void isAvailableExactlyWhenTheNativeLibraryWasBuilt() {
        MpiTransportProvider p = new MpiTransportProvider();
        if (MpiNative.class.getResource(MpiNative.LIBRARY_RESOURCE) == null) {
            // Built without mpicc (profile mpi-native inactive): discovered, but says why it cannot run.
            assertThat(p.isAvailable()).isFalse();
            assertThat(p.unavailabilityCause()).contains("built without mpicc");
        } else {
            assertThat(p.unavailabilityCause()).isNull();
            assertThat(p.isAvailable()).isTrue();
        }
        assertThat(MpiRuntime.isInitialized()).as("isAvailable must not initialize MPI").isFalse();
    }

    @Test
    void reportsTheCauseWhenTheLibraryCannotLoad() throws Exception {
        // A fresh JVM, pointed at a library that does not exist: the provider must say so, not throw.
        String java = Path.of(System.getProperty("java.home"), "bin", "java").toString();
        Process p = new ProcessBuilder(java, "-Xmx64m", "-Dkvtransfer.mpi.library=/nonexistent/libkvmpi.so", "-cp",
                MpiJob.testClasspath(), ProviderStatusMain.class.getName()).redirectErrorStream(true).start();
        assertThat(p.waitFor(60, TimeUnit.SECONDS)).as("child JVM finished").isTrue();
        String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        assertThat(p.exitValue()).as(out).isZero();
        assertThat(out).contains("available=false").contains("/nonexistent/libkvmpi.so");
    }
}
