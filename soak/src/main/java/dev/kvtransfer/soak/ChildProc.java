package dev.kvtransfer.soak;

import java.io.BufferedReader;
import java.io.File;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.OutputStream;
import java.lang.management.ManagementFactory;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import java.util.function.BiConsumer;

/**
 * One incarnation of a soak child JVM ({@link SoakChild}): started with this JVM's module flags and class path,
 * its stderr in a log file, its stdout lines handed to the parent one by one. (testkit's {@code ChildJvm} inherits
 * stderr and copies only the flags of a test JVM; the soak keeps each child's log apart.)
 */
final class ChildProc {
    final String slot;
    final String role;
    final int incarnation;
    final Process process;
    private final OutputStream stdin;
    /** STATS answers by label (the raw line after the label). */
    final Map<String, String> stats = new ConcurrentHashMap<>();
    volatile boolean ready;
    volatile boolean killed;
    volatile boolean ended;
    volatile String lastFailure;
    volatile int backgroundErrors;

    private ChildProc(String slot, String role, int incarnation, Process process) {
        this.slot = slot;
        this.role = role;
        this.incarnation = incarnation;
        this.process = process;
        this.stdin = process.getOutputStream();
    }

    /** @return e.g. {@code ctx-b#2} */
    String name() {
        return slot + "#" + incarnation;
    }

    boolean alive() {
        return !killed && !ended && process.isAlive();
    }

    static ChildProc start(String slot, String role, int incarnation, List<String> flags, List<String> args, Path log,
                           BiConsumer<ChildProc, String> onLine) throws IOException {
        List<String> cmd = new ArrayList<>();
        cmd.add(System.getProperty("java.home") + File.separator + "bin" + File.separator + "java");
        for (String a : ManagementFactory.getRuntimeMXBean().getInputArguments()) {
            if (a.startsWith("--add-opens") || a.startsWith("--add-exports") || a.startsWith("-Dchronicle")
                    || a.startsWith("-Dkvtransfer.log")) {
                cmd.add(a);
            }
        }
        cmd.add("-Dchronicle.analytics.disable=true");
        cmd.add("-Xmx384m");
        cmd.add("-XX:+UseSerialGC");
        cmd.addAll(flags);
        cmd.add("-cp");
        cmd.add(System.getProperty("java.class.path"));
        cmd.add(SoakChild.class.getName());
        cmd.addAll(args);
        Process p = new ProcessBuilder(cmd).redirectError(ProcessBuilder.Redirect.appendTo(log.toFile())).start();
        ChildProc c = new ChildProc(slot, role, incarnation, p);
        Thread reader = new Thread(() -> {
            try (BufferedReader r = new BufferedReader(new InputStreamReader(p.getInputStream(),
                    StandardCharsets.UTF_8))) {
                for (String line; (line = r.readLine()) != null; ) {
                    onLine.accept(c, line);
                }
            } catch (IOException e) {
                // the process is gone: same as the end of its output
            }
            c.ended = true;
            onLine.accept(c, "EOF");
        }, "soak-read-" + c.name());
        reader.setDaemon(true);
        reader.start();
        return c;
    }

    /** Sends one command line; false when the child is gone. */
    synchronized boolean send(String line) {
        if (!alive()) {
            return false;
        }
        try {
            stdin.write((line + "\n").getBytes(StandardCharsets.UTF_8));
            stdin.flush();
            return true;
        } catch (IOException e) {
            return false;
        }
    }

    /** kill -9. */
    void kill() {
        killed = true;
        process.destroyForcibly();
    }

    /** Waits for the exit (bounded); kills it when the bound passes. */
    int awaitExit(long millis) {
        try {
            if (process.waitFor(millis, TimeUnit.MILLISECONDS)) {
                return process.exitValue();
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
        process.destroyForcibly();
        return -1;
    }
}
