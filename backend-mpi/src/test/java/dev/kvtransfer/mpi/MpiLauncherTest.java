package dev.kvtransfer.mpi;

import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.Test;

import java.util.List;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

class MpiLauncherTest {
    @Test
    void buildsMpirunThenJavaThenMainAndArgs() {
        List<String> cmd = MpiLauncher.builder().mpirun("/usr/bin/mpirun").np(4).allowRunAsRoot(true)
                .oversubscribe(true).loopbackOnly(false).mca("btl", "self,vader").javaBinary("/jdk/bin/java").classpath("a.jar:b.jar")
                .jvmFlag("-Xmx1g").jvmFlags(List.of("-Dx=y")).mainClass("dev.kvtransfer.cli.Main")
                .args(List.of("demo", "--backend", "mpi")).build();
        assertThat(cmd).containsExactly("/usr/bin/mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "4",
                "--mca", "btl", "self,vader", "/jdk/bin/java", "-Xmx1g", "-Dx=y", "-cp", "a.jar:b.jar",
                "dev.kvtransfer.cli.Main", "demo", "--backend", "mpi");
    }

    @Test
    void flagsCanBeTurnedOffAndPrefixLaunchesNativePrograms() {
        List<String> prefix = MpiLauncher.builder().mpirun("mpirun").np(2).allowRunAsRoot(false)
                .oversubscribe(false).mpiFlag("--tag-output").mpirunPrefix();
        List<String> expected = new java.util.ArrayList<>(LoopbackBind.envPrefix());
        expected.addAll(List.of("mpirun", "-np", "2", "--mca", "oob_tcp_if_include", "lo", "--mca",
                "btl_tcp_if_include", "lo"));
        expected.addAll(LoopbackBind.exportFlags());
        expected.add("--tag-output");
        assertThat(prefix).containsExactlyElementsOf(expected);
        assertThat(MpiLauncher.builder().mpirun("mpirun").np(2).sharedMemoryOnly(true).mpirunPrefix())
                .containsSubsequence("--mca", "btl", "self,vader");
        // A caller naming the BTLs keeps them (Open MPI refuses a parameter listed twice).
        assertThat(MpiLauncher.builder().mpirun("mpirun").np(2).sharedMemoryOnly(true).mca("btl", "self,tcp")
                .mpirunPrefix()).containsSubsequence("--mca", "btl", "self,tcp").doesNotContain("self,vader");
    }

    @Test
    void aLoopbackLaunchPreloadsTheBindShimIntoMpirunAndExportsItToTheRanks() {
        // Built wherever the MPI native part is (the mpi-native profile: mpicc present).
        Assumptions.assumeTrue(java.nio.file.Files.exists(java.nio.file.Path.of("/usr/bin/mpicc")),
                "skipped: no /usr/bin/mpicc, so backend-mpi was built without its native part (install libopenmpi-dev)");
        assertThat(LoopbackBind.unavailabilityCause()).isNull();
        java.nio.file.Path shim = LoopbackBind.shim();
        assertThat(shim).isRegularFile();
        assertThat(shim.getParent().toFile().canRead()).isTrue();
        List<String> prefix = MpiLauncher.builder().mpirun("mpirun").np(2).mpirunPrefix();
        assertThat(prefix.subList(0, 4)).containsExactly("env", prefix.get(1), "KVTRANSFER_BIND_IPV4=127.0.0.1",
                "KVTRANSFER_BIND_IPV6=::1");
        assertThat(prefix.get(1)).startsWith("LD_PRELOAD=" + shim);
        assertThat(prefix).containsSubsequence("mpirun", "-x", "LD_PRELOAD", "-x", "KVTRANSFER_BIND_IPV4", "-x",
                "KVTRANSFER_BIND_IPV6");
        // A launch that may leave the host binds what Open MPI binds.
        assertThat(MpiLauncher.builder().mpirun("mpirun").loopbackOnly(false).mpirunPrefix().get(0))
                .isEqualTo("mpirun");
    }

    @Test
    void defaultsUseThisJvm() {
        List<String> cmd = MpiLauncher.builder().mainClass("M").build();
        assertThat(cmd).contains("-np", "2", "M", System.getProperty("java.class.path"));
        assertThat(cmd.get(cmd.indexOf("-cp") - 1)).endsWith("/bin/java");
    }

    @Test
    void rejectsMissingMainAndBadRankCount() {
        assertThatThrownBy(() -> MpiLauncher.builder().build()).isInstanceOf(IllegalStateException.class)
                .hasMessageContaining("mainClass");
        assertThatThrownBy(() -> MpiLauncher.builder().np(0)).isInstanceOf(IllegalArgumentException.class)
                .hasMessageContaining("np = 0");
    }

    @Test
    void theProvidersRankLauncherBuildsTheMpirunLineAndSaysThisProcessWasNotLaunched() {
        dev.kvtransfer.api.transport.RankLauncher l = new MpiTransportProvider().launcher().orElseThrow();
        List<String> cmd = l.command(3, List.of("java", "-cp", "x.jar", "Main", "demo-mpi-rank"));
        assertThat(cmd.subList(cmd.size() - 5, cmd.size())).containsExactly("java", "-cp", "x.jar", "Main",
                "demo-mpi-rank");
        assertThat(String.join(" ", cmd)).contains("--oversubscribe -np 3 --mca oob_tcp_if_include lo --mca "
                + "btl_tcp_if_include lo " + String.join(" ", LoopbackBind.exportFlags()).concat(" ").stripLeading()
                + "--mca btl self,vader java");
        assertThat(cmd.get(LoopbackBind.envPrefix().size())).isEqualTo(MpiLauncher.defaultMpirun());
        // surefire's JVM was not started by mpirun, and asking does not initialize MPI
        assertThat(l.launchedRank()).isEqualTo(-1);
        assertThat(l.launchedSize()).isZero();
        assertThat(MpiRuntime.isInitialized()).isFalse();
        assertThatThrownBy(() -> l.command(0, List.of("x"))).isInstanceOf(IllegalArgumentException.class);
        assertThatThrownBy(() -> l.command(1, List.of())).isInstanceOf(IllegalArgumentException.class);
    }
}
