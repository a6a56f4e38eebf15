package dev.kvtransfer.mpi;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.concurrent.TimeUnit;

/** Runs one mpirun job with a time bound, its output in a file under {@code target/mpi-reports}. */
record MpiJob(List<String> command, int exitCode, String output, Path log) {
    static Path reportDir() throws IOException {
        Path dir = Path.of(System.getProperty("mpi.report.dir", "target/mpi-reports"));
        Files.createDirectories(dir);
        return dir;
    }

    static MpiJob run(String name, List<String> command, long timeoutSeconds) throws IOException,
            InterruptedException {
        Path log = reportDir().resolve(name + ".log");
        Process p = new ProcessBuilder(command).redirectErrorStream(true).redirectOutput(log.toFile()).start();
        if (!p.waitFor(timeoutSeconds, TimeUnit.SECONDS)) {
            // mpirun forwards the TERM to every rank; the whole tree goes.
            p.descendants().forEach(ProcessHandle::destroyForcibly);
            p.destroyForcibly();
            p.waitFor(10, TimeUnit.SECONDS);
            throw new AssertionError("mpirun job " + name + " did not finish in " + timeoutSeconds + " s: "
                    + String.join(" ", command) + "\n--- output ---\n" + Files.readString(log,
                    StandardCharsets.UTF_8));
        }
        return new MpiJob(command, p.exitValue(), Files.readString(log, StandardCharsets.UTF_8), log);
    }

    /** @return the class path of this test JVM, as the ranks need it */
    static String testClasspath() {
        String cp = System.getProperty("surefire.test.class.path");
        return cp != null && !cp.isBlank() ? cp : System.getProperty("java.class.path");
    }

    static MpiLauncher javaRanks(int np) {
        return MpiLauncher.builder().np(np).classpath(testClasspath())
                .jvmFlags(List.of("-Xmx256m", "-XX:+UseSerialGC", "-Xshare:auto"))
                .mainClass(MpiCheckMain.class.getName());
    }
}
