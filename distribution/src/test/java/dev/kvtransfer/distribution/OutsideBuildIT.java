package dev.kvtransfer.distribution;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.time.Duration;
import java.util.Comparator;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.stream.Collectors;
import java.util.stream.Stream;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * A plugin project outside the reactor builds with nothing but kvtransfer-bom and kvtransfer-plugin-parent: a
 * copy of {@code examples/tcp-transport} (its relative parent path leads nowhere there) is built by a separate
 * {@code mvn package} whose local repository holds only this build's kvtransfer artifacts (the parents, the BOM,
 * api, transport-support, formatter-support, core, testkit, formatter-standard, laid out as {@code mvn install}
 * would), while every third-party artifact and build plugin comes from a file mirror of this build's own local
 * repository (nothing from the network). It runs one test class, so the pinned compiler, resources, surefire, jar
 * and assembly plugins all run.
 */
@Timeout(value = 6, unit = TimeUnit.MINUTES)
class OutsideBuildIT {
    private static final String VERSION = "0.1.0-SNAPSHOT";

    @Test
    void thePluginExampleBuildsAsAnOutsideProjectWithOnlyTheBomAndThePluginParent() throws Exception {
        Path root = Path.of(System.getProperty("kvtransfer.root")).toRealPath();
        Path work = Path.of(System.getProperty("work.dir")).resolve("outside-build");
        deleteTree(work);
        Path project = work.resolve("my-tcp-plugin");
        copyTree(root.resolve("examples/tcp-transport"), project);
        Path repo = work.resolve("repository");
        install(repo, "kvtransfer-parent", root.resolve("pom.xml"), null);
        install(repo, "kvtransfer-bom", root.resolve("bom/pom.xml"), null);
        install(repo, "kvtransfer-plugin-parent", root.resolve("plugin-parent/pom.xml"), null);
        for (String module : List.of("api", "transport-support", "formatter-support", "core", "testkit",
                "formatter-standard")) {
            install(repo, "kvtransfer-" + module, root.resolve(module).resolve("pom.xml"),
                    root.resolve(module).resolve("target").resolve("kvtransfer-" + module + "-" + VERSION + ".jar"));
        }
        Path outer = Path.of(System.getProperty("outer.repository")).toRealPath();
        Path settings = work.resolve("settings.xml");
        Files.writeString(settings, """
                <settings>
                  <localRepository>%s</localRepository>
                  <mirrors>
                    <mirror><id>this-build</id><mirrorOf>*</mirrorOf><url>%s</url></mirror>
                  </mirrors>
                </settings>
                """.formatted(repo, outer.toUri()));
        String mvn = Path.of(System.getProperty("maven.home")).resolve("bin").resolve("mvn").toString();
        Cmd c = Cmd.run(work, Duration.ofMinutes(5), Map.of("MAVEN_OPTS", "-Xmx512m"), mvn, "-B", "-ntp",
                "-Dstyle.color=never", "-s", settings.toString(), "-f", project.resolve("pom.xml").toString(),
                "package", "-Dtest=TcpSettingsTest", "-Dsurefire.failIfNoSpecifiedTests=false");
        assertThat(c.exit).as(c.toString()).isZero();
        assertThat(c.out).contains("Tests run: 3, Failures: 0, Errors: 0").contains("BUILD SUCCESS")
                .doesNotContain("kvtransfer-parent:" + VERSION + ":pom from the reactor");
        assertThat(project.resolve("target/kvtransfer-example-tcp-transport-" + VERSION + ".jar")).isRegularFile();
        assertThat(project.resolve("target/plugin/kvtransfer-example-tcp-transport/kvtransfer-example-tcp-transport-"
                + VERSION + ".jar")).isRegularFile();
        // The kvtransfer artifacts it used are this build's: nothing of dev.kvtransfer came through the mirror.
        try (Stream<Path> s = Files.walk(repo.resolve("dev/kvtransfer"))) {
            assertThat(s.filter(p -> p.getFileName().toString().equals("_remote.repositories"))
                    .collect(Collectors.toList())).isEmpty();
        }
    }

    /** Lays out one artifact as {@code mvn install} would. */
    private static void install(Path repo, String artifactId, Path pom, Path jar) throws IOException {
        Path dir = Files.createDirectories(repo.resolve("dev/kvtransfer").resolve(artifactId).resolve(VERSION));
        Files.copy(pom, dir.resolve(artifactId + "-" + VERSION + ".pom"), StandardCopyOption.REPLACE_EXISTING);
        if (jar != null) {
            assertThat(jar).as("built by the reactor before this test").isRegularFile();
            Files.copy(jar, dir.resolve(artifactId + "-" + VERSION + ".jar"), StandardCopyOption.REPLACE_EXISTING);
        }
    }

    private static void copyTree(Path from, Path to) throws IOException {
        try (Stream<Path> s = Files.walk(from)) {
            for (Path p : s.collect(Collectors.toList())) {
                Path rel = from.relativize(p);
                if (rel.startsWith("target")) {
                    continue;
                }
                Path t = to.resolve(rel.toString());
                if (Files.isDirectory(p)) {
                    Files.createDirectories(t);
                } else {
                    Files.copy(p, t);
                }
            }
        }
    }

    private static void deleteTree(Path root) throws IOException {
        if (!Files.exists(root)) {
            return;
        }
        try (Stream<Path> s = Files.walk(root)) {
            for (Path p : s.sorted(Comparator.reverseOrder()).collect(Collectors.toList())) {
                Files.delete(p);
            }
        }
    }
}
