package dev.kvtransfer.bench;

import org.junit.jupiter.api.Test;

import java.nio.file.Files;
import java.nio.file.Path;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * The root README's headline benchmark table is the generated report's, character for character: it is written by
 * {@code kvtransfer bench --report docs --readme README.md}, and a hand edit of either copy fails here.
 */
class ReadmeHeadlineTest {
    @Test
    void readmeHeadlineIsTheGeneratedReportsHeadline() throws Exception {
        Path root = root();
        String report = BenchReport.extract(Files.readString(root.resolve("docs").resolve(BenchReport.FILE)),
                BenchReport.BEGIN, BenchReport.END);
        assertThat(report).as("docs/benchmarks.md has the generated section: run kvtransfer bench --report docs "
                + "--readme README.md").isNotNull();
        String fromReport = BenchReport.extract(report, BenchReport.HEADLINE_BEGIN, BenchReport.HEADLINE_END);
        String fromReadme = BenchReport.extract(Files.readString(root.resolve("README.md")),
                BenchReport.HEADLINE_BEGIN, BenchReport.HEADLINE_END);
        assertThat(fromReport).as("the report's headline block").isNotNull().contains("| figure |");
        assertThat(fromReadme).as("README.md's headline block (regenerate: kvtransfer bench --report docs --readme "
                + "README.md)").isEqualTo(fromReport);
    }

    /** The repository root: the nearest directory above holding scripts/test.sh and pom.xml. */
    private static Path root() {
        Path p = Path.of("").toAbsolutePath();
        while (p != null) {
            if (Files.isRegularFile(p.resolve("scripts/test.sh")) && Files.isRegularFile(p.resolve("pom.xml"))) {
                return p;
            }
            p = p.getParent();
        }
        throw new IllegalStateException("no directory above " + Path.of("").toAbsolutePath()
                + " holds scripts/test.sh");
    }
}
