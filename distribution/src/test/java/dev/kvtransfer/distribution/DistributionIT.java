package dev.kvtransfer.distribution;

import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.jar.JarEntry;
import java.util.jar.JarOutputStream;
import java.util.stream.Collectors;
import java.util.stream.Stream;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * The assembled distribution, run as a user runs it ({@code bin/kvtransfer}): its layout, {@code kvtransfer
 * plugins} over the shipped plugin directories plus a third-party one (the tcp example, not on the cli's class
 * path) and a broken one, the demo over that third-party transport across two processes, and one-line errors.
 */
@Timeout(value = 5, unit = TimeUnit.MINUTES)
class DistributionIT {
    static Path dist;
    static Path work;
    static Path extra;

    @BeforeAll
    static void layout() throws IOException {
        dist = Path.of(System.getProperty("distribution.dir"));
        work = Files.createDirectories(Path.of(System.getProperty("work.dir")).resolve("distribution"));
        // A user's plugin directory: the third-party tcp jar dropped in, and a plugin whose provider is missing.
        extra = work.resolve("my-plugins");
        if (Files.exists(extra)) {
            try (Stream<Path> s = Files.walk(extra)) {
                for (Path p : s.sorted(java.util.Comparator.reverseOrder()).collect(Collectors.toList())) {
                    Files.delete(p);
                }
            }
        }
        Files.createDirectories(extra.resolve("broken"));
        Files.copy(Path.of(System.getProperty("tcp.plugin.jar")), extra.resolve("tcp-transport.jar"));
        try (JarOutputStream j = new JarOutputStream(Files.newOutputStream(extra.resolve("broken").resolve("b.jar")))) {
            j.putNextEntry(new JarEntry("META-INF/services/dev.kvtransfer.api.transport.TransportProvider"));
            j.write("com.example.NoSuchProvider\n".getBytes(StandardCharsets.UTF_8));
            j.closeEntry();
        }
    }

    private static List<String> names(Path dir) throws IOException {
        try (Stream<Path> s = Files.list(dir)) {
            return s.map(p -> p.getFileName().toString()).sorted().collect(Collectors.toList());
        }
    }

    private static Cmd kvtransfer(String... args) throws Exception {
        String[] cmd = new String[args.length + 1];
        cmd[0] = dist.resolve("bin").resolve("kvtransfer").toString();
        System.arraycopy(args, 0, cmd, 1, args.length);
        return Cmd.run(work, Duration.ofMinutes(3), Map.of(), cmd);
    }

    @Test
    void libHoldsTheHostAndEachPluginDirectoryItsPluginAndItsOwnDependencies() throws IOException {
        List<String> lib = names(dist.resolve("lib"));
        assertThat(lib).contains("kvtransfer-api-0.1.0-SNAPSHOT.jar", "kvtransfer-core-0.1.0-SNAPSHOT.jar",
                "kvtransfer-cli-0.1.0-SNAPSHOT.jar", "picocli-4.7.7.jar");
        assertThat(lib).noneMatch(n -> n.startsWith("kvtransfer-backend-") || n.startsWith("kvtransfer-formatter-")
                || n.startsWith("kvtransfer-memory-") || n.startsWith("aeron-") || n.startsWith("jucx")
                || n.startsWith("jcuda") || n.startsWith("kvtransfer-example"));
        // The host carries production code only: the testkit and its JUnit / AssertJ live in their own plugin.
        assertThat(lib).noneMatch(n -> n.startsWith("kvtransfer-testkit") || n.startsWith("junit-")
                || n.startsWith("assertj-") || n.startsWith("awaitility-"));
        // core needs agrona, so does the aeron plugin: a shared library is in both places.
        assertThat(lib).contains("agrona-2.4.1.jar");
        assertThat(names(dist.resolve("plugins"))).containsExactly("backend-aeron", "backend-mpi", "backend-ucx",
                "formatter-mla", "formatter-standard", "memory-cuda", "testkit");
        assertThat(names(dist.resolve("plugins/testkit"))).contains("kvtransfer-testkit-0.1.0-SNAPSHOT.jar",
                "kvtransfer-core-0.1.0-SNAPSHOT.jar").noneMatch(n -> n.startsWith("kvtransfer-api"));
        assertThat(names(dist.resolve("plugins/backend-aeron"))).contains("kvtransfer-backend-aeron-0.1.0-SNAPSHOT.jar",
                "aeron-client-1.51.0.jar", "aeron-driver-1.51.0.jar", "agrona-2.4.1.jar")
                .noneMatch(n -> n.startsWith("kvtransfer-api") || n.startsWith("kvtransfer-core"));
        // The UCX plugin's progress and bootstrap agents run under Agrona's AgentRunner: its own agrona copy.
        assertThat(names(dist.resolve("plugins/backend-ucx")))
                .containsExactly("agrona-2.4.1.jar", "jucx-1.12.1.jar", "kvtransfer-backend-ucx-0.1.0-SNAPSHOT.jar",
                        "kvtransfer-transport-support-0.1.0-SNAPSHOT.jar");
        assertThat(names(dist.resolve("plugins/memory-cuda"))).contains("kvtransfer-memory-cuda-0.1.0-SNAPSHOT.jar",
                "jcuda-12.6.0.jar");
        assertThat(names(dist.resolve("plugins/formatter-standard")))
                .containsExactly("kvtransfer-formatter-standard-0.1.0-SNAPSHOT.jar",
                        "kvtransfer-formatter-support-0.1.0-SNAPSHOT.jar");
        assertThat(Files.isExecutable(dist.resolve("bin/kvtransfer"))).isTrue();
        assertThat(Files.readString(dist.resolve("build-natives"))).containsPattern("(?m)^mpicc=(present|absent)$")
                .containsPattern("(?m)^libkvmpi=(present|absent)$").containsPattern("(?m)^libucp=(present|absent)$");
    }

    @Test
    void pluginsListsEveryPluginWhereFromWhetherAvailableAndTheOnesThatFailed() throws Exception {
        Cmd c = kvtransfer("--plugin-dir", extra.toString(), "plugins");
        assertThat(c.exit).as(c.toString()).isZero();
        assertThat(c.out).contains("plugin directories: " + dist.resolve("plugins") + ", " + extra)
                .containsPattern("(?m)^  aeron +available +\\S*CROSS_PROCESS\\S* +from plugins/backend-aeron \\(aeron-")
                .containsPattern("(?m)^  ucx +(available|unavailable: .*) .* from plugins/backend-ucx \\(")
                .containsPattern("(?m)^  mpi +(available|unavailable: .*) .* from plugins/backend-mpi \\(")
                .containsPattern("(?m)^  tcp +available +AUTHENTICATED,CROSS_PROCESS,ONE_SIDED_WRITE,PEER_FAILURE_DETECTION +from "
                        + java.util.regex.Pattern.quote(extra.resolve("tcp-transport.jar").toString()) + "$")
                .containsPattern("(?m)^  loopback +available .* from plugins/testkit")
                .containsPattern("(?m)^  standard +available +handles DEFAULT +from plugins/formatter-standard")
                .containsPattern("(?m)^  mla +available +handles MLA +from plugins/formatter-mla")
                .containsPattern("(?m)^  cuda +(available|unavailable: .*) +DEVICE,HOST,PINNED_HOST +from plugins/memory-cuda")
                .containsPattern("(?m)^  host +available +HOST,PINNED_HOST +from class path lib/kvtransfer-core")
                .contains("failed to load (1)")
                .containsPattern("(?m)^  " + java.util.regex.Pattern.quote(extra.resolve("broken").toString())
                        + ": TransportProvider: .*com.example.NoSuchProvider not found");
        assertThat(c.err).isEmpty();
    }

    @Test
    void theDemoRunsOverAThirdPartyTransportFromAPluginDirectoryInTwoProcesses() throws Exception {
        Cmd c = kvtransfer("demo", "--plugin-dir", extra.toString(), "--backend", "tcp", "--requests", "6",
                "--isl", "300", "--ctx-tp", "2", "--gen-pp", "2", "--warmup", "2");
        assertThat(c.exit).as(c.toString()).isZero();
        assertThat(c.out).contains("backend tcp (generation instance in a child JVM)").contains("6 x 300 tokens")
                .contains("0 failed").containsPattern("verify +OK \\([1-9][0-9]* elements checked\\)");
    }

    @Test
    void errorsAreOneLineWithoutAStackTraceUnlessVerbose() throws Exception {
        Cmd c = kvtransfer("demo", "--backend", "nosuch", "--warmup", "0");
        assertThat(c.exit).as(c.toString()).isEqualTo(1);
        assertThat(c.err.lines().collect(Collectors.toList())).as(c.toString()).singleElement().asString()
                .startsWith("kvtransfer: no transport named 'nosuch'; found: ").contains("aeron (available)")
                .endsWith("(--verbose for the stack trace)");
        Cmd v = kvtransfer("--verbose", "demo", "--backend", "nosuch", "--warmup", "0");
        assertThat(v.exit).isEqualTo(1);
        assertThat(v.err).startsWith("kvtransfer: no transport named 'nosuch'").contains("\tat dev.kvtransfer.");
        Cmd bad = kvtransfer("demo", "--requests", "many");
        assertThat(bad.exit).isEqualTo(2);
        assertThat(bad.err.lines().collect(Collectors.toList())).as(bad.toString()).singleElement().asString()
                .contains("'many'").endsWith("(see 'kvtransfer demo --help')");
    }

}
