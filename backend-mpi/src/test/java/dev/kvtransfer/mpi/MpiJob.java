package dev.kvtransfer.mpi;

import java.io.IOException;
import java.lang.management.ManagementFactory;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
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
        Files.writeString(log, String.join(" ", command) + "\n", StandardCharsets.UTF_8);
        Process p = new ProcessBuilder(command).redirectErrorStream(true)
                .redirectOutput(ProcessBuilder.Redirect.appendTo(log.toFile())).start();
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

    /** @return this JVM's module flags and Chronicle switch, which the ranks need too */
    static List<String> inheritedJvmFlags() {
        List<String> out = new ArrayList<>();
        for (String a : ManagementFactory.getRuntimeMXBean().getInputArguments()) {
            if (a.startsWith("--add-opens") || a.startsWith("--add-exports") || a.startsWith("-Dchronicle")) {
                out.add(a);
            }
        }
        return out;
    }

    static MpiLauncher javaRanks(int np, Class<?> main) {
        return MpiLauncher.builder().np(np).classpath(testClasspath()).jvmFlags(inheritedJvmFlags())
                .jvmFlags(List.of("-Xmx512m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xshare:auto"))
                .mainClass(main.getName());
    }
}
