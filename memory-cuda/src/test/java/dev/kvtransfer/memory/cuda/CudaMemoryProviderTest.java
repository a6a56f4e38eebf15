package dev.kvtransfer.memory.cuda;

import dev.kvtransfer.api.memory.MemoryKind;
import dev.kvtransfer.api.memory.MemoryProvider;
import org.junit.jupiter.api.Test;

import java.io.File;
import java.net.URL;
import java.net.URLClassLoader;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.ServiceLoader;
import java.util.Set;
import java.util.stream.Collectors;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/** Discovery, the unavailable path and property validation: everything that needs no GPU. */
class CudaMemoryProviderTest {

    @Test
    void serviceLoaderFindsTheCudaProvider() {
        List<MemoryProvider> found = ServiceLoader.load(MemoryProvider.class).stream()
                .map(ServiceLoader.Provider::get).collect(Collectors.toList());
        assertThat(found).filteredOn(p -> p.name().equals("cuda")).singleElement()
                .isInstanceOf(CudaMemoryProvider.class)
                .satisfies(p -> assertThat(p.kinds()).containsExactlyInAnyOrder(MemoryKind.DEVICE, MemoryKind.HOST,
                        MemoryKind.PINNED_HOST));
    }

    @Test
    void constructingTheProviderLoadsNoJCudaClass() throws Exception {
        List<URL> urls = new ArrayList<>();
        for (Class<?> c : new Class<?>[] {CudaMemoryProvider.class, MemoryProvider.class, jcuda.Pointer.class}) {
            urls.add(c.getProtectionDomain().getCodeSource().getLocation());
        }
        try (RecordingLoader loader = new RecordingLoader(urls.toArray(new URL[0]))) {
            Class<?> type = loader.loadClass(CudaMemoryProvider.class.getName());
            Object provider = type.getConstructor().newInstance();
            assertThat(type.getMethod("name").invoke(provider)).isEqualTo("cuda");
            type.getMethod("kinds").invoke(provider);
            assertThat(loader.loaded()).contains(CudaMemoryProvider.class.getName())
                    .noneMatch(n -> n.startsWith("jcuda."));
        }
    }

    @Test
    void availabilityQuestionsNeverThrowAndAgree() {
        CudaMemoryProvider p = new CudaMemoryProvider();
        boolean available = p.isAvailable();
        String cause = p.unavailabilityCause();
        System.out.println("cuda provider: available=" + available + ", cause=" + cause);
        assertThat(p.isAvailable()).isEqualTo(available);
        assertThat(p.unavailabilityCause()).isEqualTo(cause);
        if (available) {
            assertThat(cause).isNull();
            assertThat(p.deviceCount()).isPositive();
        } else {
            assertThat(cause).isNotBlank().doesNotContain("\n");
            assertThat(p.deviceCount()).isZero();
        }
    }

    @Test
    @RequiresNoCuda
    void withoutCudaTheCauseIsPlainAndCreateFailsWithIt() {
        CudaMemoryProvider p = new CudaMemoryProvider();
        String cause = p.unavailabilityCause();
        if (libcudaPresent()) {
            assertThat(cause).matches("no CUDA device \\(.*\\)|CUDA driver .* is older than .*|cudaGetDeviceCount .*");
        } else {
            // This project's build machines: CUDA toolkit installed, no driver.
            assertThat(cause).isEqualTo("no CUDA driver (libcuda.so.1 not found: cudaDriverGetVersion = 0)");
        }
        assertThatThrownBy(() -> p.create(Map.of())).isInstanceOf(IllegalStateException.class)
                .hasMessage("CUDA memory is not available: " + cause);
        assertThatThrownBy(() -> new CudaBufferManager(0)).isInstanceOf(IllegalStateException.class)
                .hasMessageContaining(cause);
    }

    @Test
    void unknownCudaPropertiesAreRefusedNamingTheKeyAndTheKnownOnes() {
        CudaMemoryProvider p = new CudaMemoryProvider();
        assertThatThrownBy(() -> p.create(Map.of("cuda.devcie", "0"))).isInstanceOf(IllegalArgumentException.class)
                .hasMessage("unknown property cuda.devcie for memory provider cuda; known: cuda.device,"
                        + " cuda.syncTimeoutMs, cuda.debug");
    }

    @Test
    void badValuesAreRefusedNamingKeyAndValue() {
        CudaMemoryProvider p = new CudaMemoryProvider();
        assertThatThrownBy(() -> p.create(Map.of("cuda.device", "first")))
                .isInstanceOf(IllegalArgumentException.class).hasMessage("cuda.device = 'first': not an integer");
        assertThatThrownBy(() -> p.create(Map.of("cuda.device", "-1")))
                .isInstanceOf(IllegalArgumentException.class).hasMessageStartingWith("cuda.device = -1: must be in");
        assertThatThrownBy(() -> p.create(Map.of("cuda.syncTimeoutMs", "0")))
                .isInstanceOf(IllegalArgumentException.class).hasMessageStartingWith("cuda.syncTimeoutMs = 0");
        assertThatThrownBy(() -> p.create(Map.of("cuda.debug", "yes")))
                .isInstanceOf(IllegalArgumentException.class).hasMessage("cuda.debug = 'yes': must be true or false");
        assertThatThrownBy(() -> p.create(null)).isInstanceOf(NullPointerException.class);
    }

    @Test
    void validPropertiesAndOtherPrefixesParse() {
        CudaMemoryProvider.Settings s = CudaMemoryProvider.Settings.parse(Map.of("cuda.device", " 3 ",
                "cuda.syncTimeoutMs", "2500", "cuda.debug", "TRUE", "aeron.dir", "/dev/shm/x", "cudaish", "1"));
        assertThat(s.device).isEqualTo(3);
        assertThat(s.syncTimeout.toMillis()).isEqualTo(2500);
        assertThat(s.debug).isTrue();
        CudaMemoryProvider.Settings d = CudaMemoryProvider.Settings.parse(Map.of());
        assertThat(d.device).isZero();
        assertThat(d.syncTimeout).isEqualTo(CudaBufferManager.DEFAULT_SYNC_TIMEOUT);
    }

    @Test
    void managerArgumentsAreCheckedBeforeCudaIsAsked() {
        assertThatThrownBy(() -> new CudaBufferManager(-1)).isInstanceOf(IllegalArgumentException.class)
                .hasMessage("device = -1: must be at least 0");
        assertThatThrownBy(() -> new CudaBufferManager(0, null, false)).isInstanceOf(NullPointerException.class);
        assertThatThrownBy(() -> new CudaBufferManager(0, java.time.Duration.ZERO, false))
                .isInstanceOf(IllegalArgumentException.class).hasMessageContaining("must be positive");
    }

    /** Whether the driver library is installed where the dynamic linker looks. */
    private static boolean libcudaPresent() {
        List<String> dirs = new ArrayList<>(List.of("/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib",
                "/lib/x86_64-linux-gnu", "/lib64", "/usr/lib/wsl/lib", "/usr/local/nvidia/lib64"));
        String ld = System.getenv("LD_LIBRARY_PATH");
        if (ld != null) {
            Collections.addAll(dirs, ld.split(File.pathSeparator));
        }
        return dirs.stream().anyMatch(d -> !d.isEmpty() && Files.exists(Path.of(d, "libcuda.so.1")));
    }

    /** Loads this module's, the api's and JCuda's classes itself, and remembers which. */
    private static final class RecordingLoader extends URLClassLoader {
        private final Set<String> loaded = Collections.synchronizedSet(new java.util.TreeSet<>());

        RecordingLoader(URL[] urls) {
            super(urls, ClassLoader.getPlatformClassLoader());
        }

        @Override
        protected Class<?> loadClass(String name, boolean resolve) throws ClassNotFoundException {
            loaded.add(name);
            return super.loadClass(name, resolve);
        }

        Set<String> loaded() {
            return new java.util.TreeSet<>(loaded);
        }
    }
}
