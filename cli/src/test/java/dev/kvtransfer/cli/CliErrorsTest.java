package dev.kvtransfer.cli;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.KvTransferException;
import dev.kvtransfer.core.plugin.Plugins;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.util.concurrent.CompletionException;
import java.util.concurrent.ExecutionException;

import static org.assertj.core.api.Assertions.assertThat;

/** Every cli error is one line; the stack trace only with --verbose; global options do not leak between runs. */
class CliErrorsTest {
    @AfterEach
    void reset() {
        KvTransferCli.usePluginDirs(java.util.List.of());
        CliErrors.verbose(false);
    }

    @Test
    void oneLineSkipsWrappersAndKeepsWhatEachCauseAdds() {
        KvTransferException k = new KvTransferException(ErrorCode.INTERNAL,
                "transport 'ucx' is not available: libucp.so.0:\n  cannot open shared object file");
        assertThat(CliErrors.oneLine(new ExecutionException(new CompletionException(k))))
                .isEqualTo("transport 'ucx' is not available: libucp.so.0: cannot open shared object file (INTERNAL)");
        assertThat(CliErrors.oneLine(new UncheckedIOException("cannot write the run's secret file",
                new NoSuchFileException("/tmp/x")))).isEqualTo("cannot write the run's secret file: "
                + "NoSuchFileException: /tmp/x");
        assertThat(CliErrors.oneLine(new IllegalStateException("outer", new IllegalArgumentException("outer"))))
                .isEqualTo("outer");
        assertThat(CliErrors.oneLine(new NullPointerException())).isEqualTo("NullPointerException");
        assertThat(CliErrors.oneLine(new NoClassDefFoundError("dev/kvtransfer/mpi/MpiRuntime")))
                .isEqualTo("NoClassDefFoundError: dev/kvtransfer/mpi/MpiRuntime");
    }

    private static String[] run(String... args) {
        return CliRun.run(args);
    }

    @Test
    void aFailingCommandPrintsOneLineAndExitsOne() {
        String[] r = run("demo", "--backend", "nosuch", "--warmup", "0");
        assertThat(r[0]).isEqualTo("1");
        assertThat(r[2].lines()).singleElement().asString()
                .startsWith("kvtransfer: no transport named 'nosuch'; found: ").contains("loopback (available)")
                .endsWith("(INTERNAL)  (--verbose for the stack trace)");
    }

    @Test
    void anMpiDemoRefusesLayerwiseAndAMetricsPortItsRanksCannotAllUse() {
        String[] r = run("demo", "--backend=mpi", "--layerwise", "--prefill-ms-per-layer=1");
        assertThat(r[0]).isEqualTo("1");
        assertThat(r[2].lines()).singleElement().asString()
                .startsWith("kvtransfer: --layerwise is not supported with --backend=mpi");
        r = run("demo", "--backend=mpi", "--ctx-tp=2", "--metrics-port=65534");
        assertThat(r[0]).isEqualTo("1");
        assertThat(r[2].lines()).singleElement().asString()
                .contains("the 3 MPI ranks serve their meters on ports 65534..65536; give a port of at most 65533");
    }

    @Test
    void verbosePrintsTheStackTraceToo() {
        String[] r = run("--verbose", "demo", "--backend=nosuch", "--warmup=0");
        assertThat(r[0]).isEqualTo("1");
        assertThat(r[2]).startsWith("kvtransfer: no transport named 'nosuch'")
                .contains("KvTransferException").contains("\tat dev.kvtransfer.core.plugin.Plugins.transport");
        assertThat(CliErrors.verbose()).isTrue();
        assertThat(ChildJvms.flags()).contains("-D" + CliErrors.VERBOSE_PROPERTY + "=true");
    }

    @Test
    void badArgumentsPrintOneLineWithTheCommandsHelpAndExitTwo() {
        String[] r = run("demo", "--isl", "lots");
        assertThat(r[0]).isEqualTo("2");
        assertThat(r[2].lines()).singleElement().asString().startsWith("kvtransfer: ").contains("'lots'")
                .endsWith("(see 'kvtransfer demo --help')");
        r = run("nosuchcommand");
        assertThat(r[0]).isEqualTo("2");
        assertThat(r[2].lines()).singleElement().asString().contains("nosuchcommand");
    }

    @Test
    void pluginDirGoesToThisJvmAndToTheJvmsItStartsAndIsResetForTheNextRun() throws IOException {
        Path dir = Path.of("target", "no-such-plugins").toAbsolutePath();
        String[] r = run("plugins", "--plugin-dir", dir.toString());
        assertThat(r[0]).isEqualTo("0");
        assertThat(System.getProperty(Plugins.PLUGIN_DIRS_PROPERTY)).isEqualTo(dir.toString());
        assertThat(ChildJvms.flags()).contains("-D" + Plugins.PLUGIN_DIRS_PROPERTY + "=" + dir);
        assertThat(r[1]).contains("failed to load (1)").contains(dir + ": plugin directory " + dir + " does not exist");
        assertThat(KvTransferCli.run("plugins", "--help")).isZero();
        assertThat(System.getProperty(Plugins.PLUGIN_DIRS_PROPERTY)).isNull();
        assertThat(ChildJvms.flags()).noneMatch(f -> f.startsWith("-D" + Plugins.PLUGIN_DIRS_PROPERTY));
    }
}
