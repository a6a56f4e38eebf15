package dev.kvtransfer.crosshost;

import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.TimeUnit;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.catchThrowable;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

/**
 * The namespace pair itself: addressed, isolated, and gone afterwards in every way a test can end (closed, failed
 * with a hung child, the JVM exiting without closing, the JVM killed before it could), and the reason the tests
 * give where they cannot run.
 */
@Timeout(value = 60, threadMode = Timeout.ThreadMode.SEPARATE_THREAD)
class NetnsPairTest {
    private static final Path LOGS = Path.of("target", "netns-logs");

    @BeforeAll
    static void namespaces() {
        String cause = NetnsPair.unavailabilityCause();
        assumeTrue(cause == null, () -> "namespace tests skipped: " + cause);
    }

    @Test
    void required_01_aProcessInASideSeesOnlyLoAndItsVethAndTheNamespacesGoWhenATestFailsWithAHungChild()
            throws IOException {
        NetnsPair net = NetnsPair.create();
        NetnsJvm child = NetnsJvm.start(net.a(), "hang", InNamespaceMain.class, List.of(), List.of("hang"), LOGS);
        Throwable failed = catchThrowable(() -> {
            try (net; child) {
                assertThat(NetnsPair.existing()).contains(net.a().namespace(), net.b().namespace());
                // Inside its namespace a process sees lo and the veth end, nothing of the host's network.
                assertThat(child.awaitLine("STARTED ", Duration.ofSeconds(30))).isEqualTo("kvt-a,lo");
                assertThat(net.deviceBytes(net.a())).hasSize(4);
                child.awaitLine("NEVER", Duration.ofMillis(300)); // the hung peer: this throws, as a test would
            }
        });
        assertThat(failed).isInstanceOf(IllegalStateException.class).hasMessageContaining("printed no 'NEVER'");
        assertThat(NetnsPair.existing()).doesNotContain(net.a().namespace(), net.b().namespace());
    }

    @Test
    void required_02_aJvmThatExitsWithoutClosingRemovesItsNamespacesInItsShutdownHook() throws Exception {
        List<String> cmd = List.of(System.getProperty("java.home") + "/bin/java", "-cp",
                System.getProperty("java.class.path"), InNamespaceMain.class.getName(), "exit-without-close");
        Process p = new ProcessBuilder(cmd).redirectErrorStream(true).start();
        String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        assertThat(p.waitFor(30, TimeUnit.SECONDS)).as("helper exited; printed %s", out).isTrue();
        assertThat(p.exitValue()).as("helper exit code; printed %s", out).isZero();
        String[] names = out.lines().filter(l -> l.startsWith("CREATED ")).findFirst().orElseThrow(
                () -> new AssertionError("no CREATED line in " + out)).substring("CREATED ".length()).split(" ");
        assertThat(names).hasSize(2);
        assertThat(NetnsPair.existing()).doesNotContain(names);
    }

    @Test
    void required_04_withoutRootTheProbeSaysWhyTheTestsSkip() throws Exception {
        assumeTrue(Files.isExecutable(Path.of("/usr/bin/setpriv")),
                "needs util-linux's setpriv to run the probe as an unprivileged user");
        // The probe the cross-host classes' assumptions use, in a JVM that runs as nobody (uid 65534). It needs
        // only this module's classes (JDK otherwise), copied to a directory uid 65534 can read: the checkout, like the local
        // Maven repository, may sit below a directory only root may enter (a fresh clone in `mktemp -d`).
        Path built = Path.of(InNamespaceMain.class.getProtectionDomain().getCodeSource().getLocation().toURI());
        Path readable = Files.createTempDirectory("kvt-probe");
        readable.toFile().deleteOnExit();
        Path pkg = Files.createDirectories(readable.resolve("dev/kvtransfer/crosshost"));
        try (var classFiles = Files.list(built.resolve("dev/kvtransfer/crosshost"))) {
            for (Path f : (Iterable<Path>) classFiles.filter(f -> f.getFileName().toString()
                    .endsWith(".class"))::iterator) {
                Files.copy(f, pkg.resolve(f.getFileName()));
            }
        }
        try (var all = Files.walk(readable)) {
            for (Path f : (Iterable<Path>) all::iterator) {
                Files.setPosixFilePermissions(f, java.nio.file.attribute.PosixFilePermissions.fromString(
                        Files.isDirectory(f) ? "rwxr-xr-x" : "rw-r--r--"));
            }
        }
        String classes = readable.toString();
        List<String> cmd = List.of("/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                System.getProperty("java.home") + "/bin/java", "-cp", classes, InNamespaceMain.class.getName(),
                "probe");
        Process p = new ProcessBuilder(cmd).redirectErrorStream(true).start();
        String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        assertThat(p.waitFor(30, TimeUnit.SECONDS)).as("probe exited; printed %s", out).isTrue();
        assertThat(out).as("exit %d", p.exitValue())
                .contains("UNAVAILABLE network namespaces need root (effective uid 0); this process runs as uid 65534");
    }

    @Test
    void required_03_namespacesOfAKilledJvmAreSweptAtTheNextStart() throws Exception {
        // A JVM that creates a pair and is then killed with SIGKILL (no shutdown hook runs): its namespaces stay.
        List<String> cmd = List.of(System.getProperty("java.home") + "/bin/java", "-cp",
                System.getProperty("java.class.path"), InNamespaceMain.class.getName(), "create-and-hang");
        Process p = new ProcessBuilder(cmd).redirectErrorStream(true).start();
        String[] names;
        try (BufferedReader out = new BufferedReader(new InputStreamReader(p.getInputStream(),
                StandardCharsets.UTF_8))) {
            String line = out.readLine();
            assertThat(line).as("first line of the helper").startsWith("CREATED ");
            names = line.substring("CREATED ".length()).split(" ");
            assertThat(names).hasSize(2);
            assertThat(NetnsPair.existing()).contains(names);
            p.destroyForcibly();
            assertThat(p.waitFor(30, TimeUnit.SECONDS)).as("helper killed").isTrue();
        } finally {
            p.destroyForcibly();
        }
        assertThat(NetnsPair.existing()).as("left by the killed JVM").contains(names);
        try (NetnsPair fresh = NetnsPair.create()) { // sweeps first
            assertThat(NetnsPair.existing()).doesNotContain(names).contains(fresh.a().namespace());
        }
    }

    @Test
    void required_05_aKilledJvmsStarAndTheProcessesLeftInsideAreSweptAtTheNextStart() throws Exception {
        List<String> cmd = List.of(System.getProperty("java.home") + "/bin/java", "-cp",
                System.getProperty("java.class.path"), InNamespaceMain.class.getName(), "star-and-hang");
        Process p = new ProcessBuilder(cmd).redirectErrorStream(true).start();
        String[] created;
        try (BufferedReader out = new BufferedReader(new InputStreamReader(p.getInputStream(),
                StandardCharsets.UTF_8))) {
            String line = out.readLine();
            assertThat(line).as("first line of the helper").startsWith("CREATED ");
            created = line.substring("CREATED ".length()).split(" ");
            assertThat(created).hasSize(3);
            p.destroyForcibly();
            assertThat(p.waitFor(30, TimeUnit.SECONDS)).as("helper killed").isTrue();
        } finally {
            p.destroyForcibly();
        }
        long sleeper = Long.parseLong(created[2]);
        assertThat(NetnsPair.existing()).as("left by the killed JVM").contains(created[0], created[1]);
        assertThat(ProcessHandle.of(sleeper).map(ProcessHandle::isAlive)).as("its process inside").contains(true);
        try (NetnsStar fresh = NetnsStar.create(1)) { // sweeps first
            assertThat(NetnsPair.existing()).doesNotContain(created[0], created[1])
                    .contains(fresh.hub().namespace());
            assertThat(ProcessHandle.of(sleeper).map(ProcessHandle::isAlive).orElse(false))
                    .as("the process left inside was killed").isFalse();
        }
    }
}
