package dev.kvtransfer.mpi;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.concurrent.TimeUnit;

/**
 * Open MPI's publish/lookup server ({@code ompi-server}, from {@code openmpi-bin}) for one job, loopback only: with
 * {@code mpirun --ompi-server file:URI} a process outside the job (rule 23's echo child) can form a link to a rank
 * by {@code MPI_Comm_connect} / {@code MPI_Comm_accept} ({@link MpiLinks}). Closing stops it.
 */
final class OmpiServer implements AutoCloseable {
    private final Process process;
    private final Path uri;

    private OmpiServer(Process process, Path uri) {
        this.process = process;
        this.uri = uri;
    }

    static OmpiServer start(Path dir, String name) throws IOException, InterruptedException {
        Path uri = dir.resolve(name + ".ompi-server-uri");
        Files.deleteIfExists(uri);
        ProcessBuilder pb = new ProcessBuilder("ompi-server", "--no-daemonize", "--report-uri", uri.toString(),
                "--mca", "oob_tcp_if_include", "lo").redirectErrorStream(true)
                .redirectOutput(dir.resolve(name + ".ompi-server.log").toFile());
        if ("root".equals(System.getProperty("user.name"))) {
            pb.environment().put("OMPI_ALLOW_RUN_AS_ROOT", "1");
            pb.environment().put("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
        }
        Process p = pb.start();
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(20);
        while (!(Files.exists(uri) && Files.size(uri) > 0 && Files.readString(uri).endsWith("\n"))) {
            if (!p.isAlive() || System.nanoTime() - deadline > 0) {
                p.destroyForcibly();
                throw new IllegalStateException("ompi-server did not report its URI within 20 s (exit "
                        + (p.isAlive() ? "-" : p.exitValue()) + "), see " + dir.resolve(name + ".ompi-server.log"));
            }
            p.waitFor(50, TimeUnit.MILLISECONDS);
        }
        return new OmpiServer(p, uri);
    }

    /** @return the mpirun flags that point the job at this server */
    List<String> mpirunFlags() {
        return List.of("--ompi-server", "file:" + uri);
    }

    @Override
    public void close() throws InterruptedException {
        process.destroy();
        if (!process.waitFor(10, TimeUnit.SECONDS)) {
            process.destroyForcibly();
            process.waitFor(10, TimeUnit.SECONDS);
        }
    }
}
