package dev.kvtransfer.cli;

import dev.kvtransfer.core.plugin.Plugins;
import org.junit.jupiter.api.Test;

import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * {@code kvtransfer plugins} on the cli's class path (every plugin module is a cli dependency here; the
 * distribution's plugin-directory listing is checked by the distribution module's DistributionIT).
 */
class PluginsCommandTest {
    @Test
    void listsEveryKindWithStatusCapabilitiesAndSource() {
        ByteArrayOutputStream bytes = new ByteArrayOutputStream();
        PluginsCommand.print(new Plugins(getClass().getClassLoader()), new PrintStream(bytes, true,
                StandardCharsets.UTF_8));
        String out = bytes.toString(StandardCharsets.UTF_8);
        assertThat(out).startsWith("plugin directories: none (class path only)")
                .containsPattern("(?m)^transports \\([4-9]\\)$")
                .containsPattern("(?m)^  aeron +available +\\S*CROSS_PROCESS\\S* +from class path \\S+")
                .containsPattern("(?m)^  loopback +available +\\S+ +from class path ")
                .containsPattern("(?m)^  (ucx|mpi) +(available|unavailable: .*) .* from class path")
                .containsPattern("(?m)^formatters \\(2\\)$")
                .containsPattern("(?m)^  standard +available +handles DEFAULT +from class path")
                .containsPattern("(?m)^  host +available +HOST,PINNED_HOST +from class path")
                .contains("failed to load (0): none");
    }

    @Test
    void unavailabilityCausesGetWhatToInstall() {
        assertThat(PluginsCommand.withHint("dev.kvtransfer.ucx.UcxTransportProvider",
                "libucp could not be loaded (libucp.so.0: cannot open shared object file)"))
                .endsWith(" — apt-get install libucx0");
        assertThat(PluginsCommand.withHint("dev.kvtransfer.mpi.MpiTransportProvider", "MPI JNI library not loadable: "
                + "native library /native/linux-x86_64/libkvmpi.so is not on the class path: backend-mpi was built "
                + "without mpicc")).endsWith(" — apt-get install libopenmpi-dev openmpi-bin, then ./kvtransfer (it "
                + "rebuilds the mpi plugin)");
        assertThat(PluginsCommand.withHint("dev.kvtransfer.mpi.MpiTransportProvider",
                "MPI JNI library not loadable: libmpi.so.40: cannot open")).endsWith(" — apt-get install openmpi-bin "
                + "libopenmpi-dev");
        assertThat(PluginsCommand.withHint("x.Cuda", "no CUDA driver (libcuda.so.1 not found)"))
                .endsWith(" — needs an NVIDIA GPU and its driver (libcuda.so.1)");
        assertThat(PluginsCommand.withHint("x.Y", "already says: apt-get install foo")).isEqualTo(
                "already says: apt-get install foo");
        assertThat(PluginsCommand.withHint("x.Y", "something else")).isEqualTo("something else");
    }
}
