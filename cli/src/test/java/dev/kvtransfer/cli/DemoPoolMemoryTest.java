package dev.kvtransfer.cli;

import dev.kvtransfer.api.memory.MemoryProvider;
import dev.kvtransfer.core.plugin.Plugins;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.Test;

import java.util.List;
import java.util.ServiceLoader;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/** {@code demo --pool-memory}: the cuda plugin is found through the SPI and a machine without CUDA is refused. */
class DemoPoolMemoryTest {
    private static String[] run(String... args) {
        return CliRun.run(args);
    }

    private static MemoryProvider cuda() {
        return ServiceLoader.load(MemoryProvider.class).stream().map(ServiceLoader.Provider::get)
                .filter(p -> p.name().equals("cuda")).findFirst().orElseThrow();
    }

    @Test
    void deviceWithoutCudaIsRefusedWithThePluginsCause() {
        MemoryProvider cuda = cuda();
        Assumptions.assumeFalse(cuda.isAvailable(), "CUDA is usable on this machine: nothing is refused");
        String[] r = run("demo", "--backend=loopback", "--pool-memory=device", "--requests=1", "--warmup=0",
                "--model=tiny");
        assertThat(r[0]).as(r[2]).isEqualTo("1");
        assertThat(r[2].lines()).singleElement().asString()
                .startsWith("kvtransfer: --pool-memory device: CUDA is not usable here: ")
                .contains(cuda.unavailabilityCause());
        assertThat(r[1]).doesNotContain("throughput"); // refused before anything started
    }

    @Test
    void anUnknownPoolMemoryIsRefused() {
        String[] r = run("demo", "--backend=loopback", "--pool-memory=vram", "--requests=1", "--warmup=0");
        assertThat(r[0]).isEqualTo("1");
        assertThat(r[2]).contains("--pool-memory vram: expected host or device");
    }

    @Test
    void withoutTheCudaPluginTheRefusalSaysWhatWasFound() {
        DemoOptions o = new DemoOptions();
        o.poolMemory = "device";
        Plugins none = new Plugins(List.of(), List.of(), List.of());
        assertThatThrownBy(() -> PoolMemory.resolve(o, none)).isInstanceOf(IllegalArgumentException.class)
                .hasMessageContaining("needs the 'cuda' memory plugin (memory-cuda)").hasMessageContaining("found: ");
    }

    @Test
    void hostIsTheDefaultAndNeedsNoPlugin() {
        DemoOptions o = new DemoOptions();
        PoolMemory m = PoolMemory.resolve(o, new Plugins(List.of(), List.of(), List.of()));
        assertThat(m.kind()).isEqualTo(dev.kvtransfer.api.memory.MemoryKind.HOST);
        try (var bm = m.factory().get()) {
            assertThat(bm).isInstanceOf(dev.kvtransfer.core.memory.HostBufferManager.class);
        }
        assertThat(o.toArgs()).contains("--pool-memory=host", "--cuda-device=0");
    }
}
