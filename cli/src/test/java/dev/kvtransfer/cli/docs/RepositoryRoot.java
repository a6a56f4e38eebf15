package dev.kvtransfer.cli.docs;

import java.nio.file.Files;
import java.nio.file.Path;

/** The repository root as the documentation tests see it: the nearest directory above holding scripts/test.sh. */
final class RepositoryRoot {
    private RepositoryRoot() {
    }

    static Path find() {
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
