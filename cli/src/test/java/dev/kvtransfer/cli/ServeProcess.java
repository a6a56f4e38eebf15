package dev.kvtransfer.cli;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;

/** A {@code kvtransfer} command in a child JVM of the test (this class path, small heap), output to a log file. */
final class ServeProcess implements AutoCloseable {
    final String name;
    final Process process;
    final Path log;

    private ServeProcess(String name, Process process, Path log) {
        this.name = name;
        this.process = process;
        this.log = log;
    }

    static ServeProcess start(Path dir, String name, List<String> args) throws IOException {
        return startMain(dir, name, KvTransferCli.class.getName(), args);
    }

    /** Any main class of this class path in a child JVM. */
    static ServeProcess startMain(Path dir, String name, String mainClass, List<String> args) throws IOException {
        List<String> cmd = new ArrayList<>();
        cmd.add(ChildJvms.javaBinary());
        cmd.addAll(ChildJvms.flags());
        cmd.add("-Xmx384m");
        cmd.add("-XX:TieredStopAtLevel=1"); // short-lived JVMs on a small machine: start fast
        cmd.add("-cp");
        cmd.add(System.getProperty("java.class.path"));
        cmd.add(mainClass);
        cmd.addAll(args);
        Path log = dir.resolve(name + "-" + System.nanoTime() + ".log");
        Process p = new ProcessBuilder(cmd).redirectErrorStream(true).redirectOutput(log.toFile()).start();
        return new ServeProcess(name, p, log);
    }

    String output() {
        try {
            return Files.readString(log, StandardCharsets.UTF_8);
        } catch (IOException e) {
            return "(no log: " + e + ")";
        }
    }

    /** kill -9. */
    void kill() {
        process.destroyForcibly();
    }

    /** SIGTERM. */
    void terminate() {
        process.destroy();
    }

    int waitFor(long seconds) throws InterruptedException {
        if (!process.waitFor(seconds, TimeUnit.SECONDS)) {
            throw new AssertionError(name + " did not exit within " + seconds + " s:\n" + output());
        }
        return process.exitValue();
    }

    @Override
    public void close() throws InterruptedException {
        if (process.isAlive()) {
            process.destroyForcibly();
            process.waitFor(10, TimeUnit.SECONDS);
        }
    }
}
