package dev.kvtransfer.core.build;

import org.junit.jupiter.api.Test;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.stream.Collectors;
import java.util.stream.Stream;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * No production class of any module is longer than {@value #MAX_LINES} lines: a class that grows past it holds
 * more than one responsibility and is split by them (the control layer's rule, kept for every module).
 */
class SourceSizeTest {
    static final int MAX_LINES = 800;

    @Test
    void noProductionSourceFileIsLongerThanTheLimit() throws IOException {
        Path root = Path.of("").toAbsolutePath().getParent();
        assertThat(root.resolve("pom.xml")).as("run from a module of the kvtransfer tree").exists();
        List<Path> sources;
        try (Stream<Path> s = Files.walk(root)) {
            sources = s.filter(p -> p.toString().endsWith(".java"))
                    .filter(p -> p.toString().contains("/src/main/java/"))
                    .filter(p -> !p.toString().contains("/target/"))
                    .collect(Collectors.toList());
        }
        assertThat(sources).as("production sources found").hasSizeGreaterThan(100);
        List<String> tooLong = sources.stream().filter(p -> lines(p) > MAX_LINES)
                .map(p -> root.relativize(p) + " (" + lines(p) + " lines)").sorted().collect(Collectors.toList());
        assertThat(tooLong).as("classes over %d lines", MAX_LINES).isEmpty();
    }

    private static long lines(Path p) {
        try (Stream<String> l = Files.lines(p)) {
            return l.count();
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }
}
