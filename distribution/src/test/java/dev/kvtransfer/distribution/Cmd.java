package dev.kvtransfer.distribution;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;

/** Runs a command as a user would, with a deadline, and keeps its exit status, stdout and stderr. */
final class Cmd {
    final List<String> command;
    final int exit;
    final String out;
    final String err;

    private Cmd(List<String> command, int exit, String out, String err) {
        this.command = command;
        this.exit = exit;
        this.out = out;
        this.err = err;
    }

    static Cmd run(Path workDir, Duration limit, Map<String, String> env, String... command)
            throws IOException, InterruptedException {
        Files.createDirectories(workDir);
        Path out = Files.createTempFile(workDir, "out", ".txt");
        Path err = Files.createTempFile(workDir, "err", ".txt");
        ProcessBuilder pb = new ProcessBuilder(command).directory(workDir.toFile())
                .redirectOutput(out.toFile()).redirectError(err.toFile());
        pb.environment().putAll(env);
        Process p = pb.start();
        if (!p.waitFor(limit.toMillis(), TimeUnit.MILLISECONDS)) {
            p.descendants().forEach(ProcessHandle::destroyForcibly);
            p.destroyForcibly();
            p.waitFor(10, TimeUnit.SECONDS);
            throw new AssertionError(String.join(" ", command) + " did not finish within " + limit + "; stdout:\n"
                    + Files.readString(out) + "\nstderr:\n" + Files.readString(err));
        }
        Cmd c = new Cmd(new ArrayList<>(List.of(command)), p.exitValue(), Files.readString(out, StandardCharsets.UTF_8),
                Files.readString(err, StandardCharsets.UTF_8));
        Files.delete(out);
        Files.delete(err);
        return c;
    }

    @Override
    public String toString() {
        return String.join(" ", command) + " -> exit " + exit + "\n--- stdout\n" + out + "\n--- stderr\n" + err;
    }
}
