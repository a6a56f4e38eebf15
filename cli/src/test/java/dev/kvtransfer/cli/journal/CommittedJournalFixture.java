package dev.kvtransfer.cli.journal;

import java.io.IOException;
import java.io.OutputStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.stream.Stream;
import java.util.zip.ZipEntry;
import java.util.zip.ZipInputStream;
import java.util.zip.ZipOutputStream;

/**
 * Writes the journal of a tiny run (ctx TP2 -> gen PP2, prompts {@link #PROMPTS}, checksums on) and zips it:
 * how {@code src/test/resources/journal/format-v1-tiny-run.zip} was made. Run it again only when the format
 * version changes, and keep the old zip (a new one gets a new name):
 * <pre>
 * java $FLAGS -cp cli/target/test-classes:$(cat cp.txt) dev.kvtransfer.cli.journal.CommittedJournalFixture OUT.zip
 * </pre>
 * The journals are zipped because Chronicle files are mapped in blocks and mostly zeros.
 */
public final class CommittedJournalFixture {
    /** Prompt lengths of requests 1, 2, 3. */
    static final int[] PROMPTS = {40, 16, 3};

    private CommittedJournalFixture() {
    }

    /**
     * @param args output zip
     * @throws Exception on failure
     */
    public static void main(String[] args) throws Exception {
        Path tmp = Files.createTempDirectory("kvt-journal-fixture");
        JournalRun.run(tmp, true, PROMPTS);
        try (OutputStream os = Files.newOutputStream(Path.of(args[0]));
             ZipOutputStream zip = new ZipOutputStream(os);
             Stream<Path> files = Files.walk(tmp)) {
            for (Path f : files.filter(Files::isRegularFile).sorted().toList()) {
                zip.putNextEntry(new ZipEntry(tmp.relativize(f).toString().replace('\\', '/')));
                Files.copy(f, zip);
                zip.closeEntry();
            }
        }
        System.out.println("wrote " + args[0] + " from " + tmp);
    }

    /**
     * Unzips a journal into a directory.
     *
     * @param zip    zip stream
     * @param target directory
     * @return the files written
     * @throws IOException on failure
     */
    static List<Path> unzip(java.io.InputStream zip, Path target) throws IOException {
        java.util.ArrayList<Path> out = new java.util.ArrayList<>();
        try (ZipInputStream in = new ZipInputStream(zip)) {
            ZipEntry e;
            while ((e = in.getNextEntry()) != null) {
                Path p = target.resolve(e.getName()).normalize();
                if (!p.startsWith(target)) {
                    throw new IOException("zip entry outside the target: " + e.getName());
                }
                Files.createDirectories(p.getParent());
                Files.copy(in, p);
                out.add(p);
            }
        }
        return out;
    }
}
