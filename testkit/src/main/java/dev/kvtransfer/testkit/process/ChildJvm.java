package dev.kvtransfer.testkit.process;

import java.io.BufferedReader;
import java.io.File;
import java.io.IOException;
import java.io.InputStreamReader;
import java.lang.management.ManagementFactory;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;

/**
 * A child JVM on this process's class path running a main class, with its stdout read line by line (so the
 * parent can wait for "READY" and the like with a deadline) and stderr inherited. It starts with this JVM's
 * flags (the {@code --add-opens}/{@code --add-exports} a transport or Chronicle needs). Closing kills it. Used by
 * the backends' cross-process tests, e.g. with {@link ContextInstanceMain}.
 */
public final class ChildJvm implements AutoCloseable {
    private final Process process;
    private final BlockingQueue<String> lines = new LinkedBlockingQueue<>();
    private final List<String> seen = new ArrayList<>();

    private ChildJvm(Process process) {
        this.process = process;
        Thread reader = new Thread(() -> {
            try (BufferedReader r = new BufferedReader(new InputStreamReader(process.getInputStream(),
                    StandardCharsets.UTF_8))) {
                String line;
                while ((line = r.readLine()) != null) {
                    lines.add(line);
                }
            } catch (IOException e) {
                lines.add("EOF " + e);
            }
            lines.add("EOF");
        }, "child-jvm-stdout-" + process.pid());
        reader.setDaemon(true);
        reader.start();
    }

    /**
     * For a child's {@code main}: halts the process (exit 3) as soon as its stdin ends, i.e. when the parent test
     * JVM that holds the other end died, so no child outlives a test run. Whatever arrives on stdin is ignored; a
     * child that reads commands from stdin watches for its end itself.
     */
    public static void haltWhenStdinEnds() {
        Thread watcher = new Thread(() -> {
            try {
                while (System.in.read() >= 0) {
                    // Parent alive.
                }
            } catch (IOException e) {
                // stdin gone: the same as its end
            }
            Runtime.getRuntime().halt(3);
        }, "parent-watchdog");
        watcher.setDaemon(true);
        watcher.start();
    }

    /**
     * Starts {@code java <flags> -cp <our class path> mainClass args...}. The child gets the module flags
     * ({@code --add-opens}/{@code --add-exports}) and Chronicle settings this JVM was started with.
     *
     * @param mainClass the main class
     * @param heap      -Xmx value, e.g. "512m"
     * @param args      its arguments
     * @return the running child
     * @throws IOException if it cannot start
     */
    public static ChildJvm start(Class<?> mainClass, String heap, List<String> args) throws IOException {
        List<String> cmd = new ArrayList<>();
        cmd.add(System.getProperty("java.home") + File.separator + "bin" + File.separator + "java");
        for (String a : ManagementFactory.getRuntimeMXBean().getInputArguments()) {
            if (a.startsWith("--add-opens") || a.startsWith("--add-exports") || a.startsWith("-Dchronicle")) {
                cmd.add(a);
            }
        }
        cmd.add("-Xmx" + heap);
        cmd.add("-XX:+UseSerialGC");
        cmd.add("-cp");
        cmd.add(System.getProperty("java.class.path"));
        cmd.add(mainClass.getName());
        cmd.addAll(args);
        Process p = new ProcessBuilder(cmd).redirectError(ProcessBuilder.Redirect.INHERIT).start();
        return new ChildJvm(p);
    }

    /**
     * Waits for the next stdout line starting with a prefix (other lines are kept in {@link #seen()}).
     *
     * @param prefix  line prefix
     * @param timeout how long to wait
     * @return the rest of the line after the prefix
     * @throws IllegalStateException when the child ends or the deadline passes first
     */
    public String awaitLine(String prefix, Duration timeout) {
        long deadline = System.nanoTime() + timeout.toNanos();
        while (true) {
            long left = deadline - System.nanoTime();
            String line;
            try {
                line = left <= 0 ? null : lines.poll(left, TimeUnit.NANOSECONDS);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                throw new IllegalStateException("interrupted waiting for '" + prefix + "'", e);
            }
            if (line == null) {
                throw new IllegalStateException("child " + process.pid() + " printed no '" + prefix + "' within "
                        + timeout + "; saw " + describeSeen());
            }
            if (line.startsWith(prefix)) {
                return line.substring(prefix.length()).trim();
            }
            seen.add(line);
            if (line.startsWith("EOF")) {
                throw new IllegalStateException("child " + process.pid() + " ended before printing '" + prefix
                        + "'; saw " + describeSeen());
            }
        }
    }

    /**
     * The lines read so far for a failure message: a native library's warnings (UCX prints one per undelivered
     * message when a worker is destroyed, thousands of them) are counted, not listed, so the child's own last words
     * are not cut off by a report's length limit.
     *
     * @return the unmatched lines, native warnings counted
     */
    public String describeSeen() {
        List<String> own = new ArrayList<>();
        int warnings = 0;
        String firstWarning = null;
        for (String l : seen) {
            if (l.contains("UCX  WARN") || l.contains("UCX  ERROR")) {
                warnings++;
                firstWarning = firstWarning == null ? l : firstWarning;
            } else if (!l.isBlank()) {
                own.add(l);
            }
        }
        return own + (warnings == 0 ? "" : " and " + warnings + " native warnings, the first: " + firstWarning);
    }

    /** @return lines read but not matched so far */
    public List<String> seen() {
        return List.copyOf(seen);
    }

    /** @return the process */
    public Process process() {
        return process;
    }

    /**
     * Waits for the child to exit.
     *
     * @param timeout how long
     * @return its exit code
     * @throws IllegalStateException if it is still running after the timeout
     */
    public int awaitExit(Duration timeout) {
        try {
            if (!process.waitFor(timeout.toMillis(), TimeUnit.MILLISECONDS)) {
                throw new IllegalStateException("child " + process.pid() + " still running after " + timeout);
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IllegalStateException("interrupted", e);
        }
        return process.exitValue();
    }

    @Override
    public void close() {
        if (process.isAlive()) {
            process.destroyForcibly();
            try {
                process.waitFor(10, TimeUnit.SECONDS);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }
    }
}
