package dev.kvtransfer.crosshost;

import java.io.BufferedReader;
import java.io.File;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.OutputStream;
import java.lang.management.ManagementFactory;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.concurrent.TimeUnit;

/**
 * A child JVM started inside a network namespace: {@code ip netns exec <ns> <this JVM's java> <module flags>
 * [-Dextra...] -cp <our class path> <main> args} ({@code ip netns exec} execs the program in place, so the
 * process is the JVM itself). Like the testkit's {@code ChildJvm} (which cannot take a command prefix), its stdout
 * is read line by line so the test waits for a line with a deadline; lines not yet asked for stay pending, so a
 * line that arrives early (a {@code CTXDONE} while the test waits for something else) is found later. Its stderr
 * goes to a log file whose tail every failure message carries. Closing kills it.
 */
final class NetnsJvm implements AutoCloseable {
    private final String name;
    private final Process process;
    private final Path log;
    private final List<String> pending = new ArrayList<>();
    private final List<String> all = new ArrayList<>();
    private boolean eof;

    private NetnsJvm(String name, Process process, Path log) {
        this.name = name;
        this.process = process;
        this.log = log;
        Thread reader = new Thread(this::readStdout, "netns-jvm-stdout-" + name);
        reader.setDaemon(true);
        reader.start();
    }

    /**
     * Starts a main class in a namespace.
     *
     * @param side      where (its namespace)
     * @param name      for logs, e.g. {@code "aeron-ctx"}
     * @param mainClass the main class
     * @param jvmProps  extra {@code -D} settings (without the {@code -D})
     * @param args      program arguments
     * @param logDir    where its stderr goes ({@code <name>.log})
     * @return the running child
     * @throws IOException if it cannot start
     */
    static NetnsJvm start(NetnsPair.Side side, String name, Class<?> mainClass, List<String> jvmProps,
                          List<String> args, Path logDir) throws IOException {
        Objects.requireNonNull(side, "side");
        List<String> cmd = new ArrayList<>(NetnsPair.exec(side));
        cmd.add(System.getProperty("java.home") + File.separator + "bin" + File.separator + "java");
        for (String a : ManagementFactory.getRuntimeMXBean().getInputArguments()) {
            if (a.startsWith("--add-opens") || a.startsWith("--add-exports") || a.startsWith("-Dchronicle")) {
                cmd.add(a);
            }
        }
        cmd.add("-Xmx256m");
        cmd.add("-XX:+UseSerialGC");
        for (String p : jvmProps) {
            cmd.add("-D" + p);
        }
        cmd.add("-cp");
        cmd.add(System.getProperty("java.class.path"));
        cmd.add(mainClass.getName());
        cmd.addAll(args);
        Files.createDirectories(logDir);
        Path log = logDir.resolve(name + ".log");
        Files.writeString(log, String.join(" ", cmd) + System.lineSeparator(), StandardCharsets.UTF_8);
        Process p = new ProcessBuilder(cmd).redirectError(ProcessBuilder.Redirect.appendTo(log.toFile())).start();
        System.out.println("netns: started " + name + " as pid " + p.pid() + " in " + side.namespace());
        return new NetnsJvm(name, p, log);
    }

    private void readStdout() {
        try (BufferedReader r = new BufferedReader(new InputStreamReader(process.getInputStream(),
                StandardCharsets.UTF_8))) {
            for (String line; (line = r.readLine()) != null; ) {
                synchronized (this) {
                    pending.add(line);
                    all.add(line);
                    notifyAll();
                }
            }
        } catch (IOException e) {
            synchronized (this) {
                all.add("(stdout: " + e + ")");
            }
        }
        synchronized (this) {
            eof = true;
            notifyAll();
        }
    }

    /**
     * Waits for a stdout line starting with a prefix that has not been returned before (earlier lines included).
     *
     * @param prefix  line prefix
     * @param timeout how long to wait
     * @return the rest of the line after the prefix, trimmed
     * @throws IllegalStateException when the child ends, prints {@code FAILED} or the deadline passes first; the
     *                               message has what it printed and the tail of its stderr
     */
    synchronized String awaitLine(String prefix, Duration timeout) {
        long deadline = System.nanoTime() + timeout.toNanos();
        while (true) {
            for (Iterator<String> it = pending.iterator(); it.hasNext(); ) {
                String line = it.next();
                if (line.startsWith(prefix)) {
                    it.remove();
                    return line.substring(prefix.length()).trim();
                }
                if (line.startsWith("FAILED")) {
                    throw failure("failed while the test waited for '" + prefix + "'");
                }
            }
            long left = deadline - System.nanoTime();
            if (eof) {
                throw failure("ended before printing '" + prefix + "'");
            }
            if (left <= 0) {
                throw failure("printed no '" + prefix + "' within " + timeout);
            }
            try {
                TimeUnit.NANOSECONDS.timedWait(this, left);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                throw failure("interrupted waiting for '" + prefix + "'");
            }
        }
    }

    /**
     * Sends one command line to its stdin.
     *
     * @param line the command
     * @throws IOException if the child's stdin is closed
     */
    void tell(String line) throws IOException {
        OutputStream out = process.getOutputStream();
        out.write((line + "\n").getBytes(StandardCharsets.UTF_8));
        out.flush();
    }

    /**
     * Asks for the child's counters ({@code COUNTERS}) and collects the {@code COUNTER} and {@code LOSS} lines.
     *
     * @param timeout how long to wait for {@code COUNTERS END}
     * @return label to value, in the order printed ({@code LOSS observations} / {@code LOSS bytes} included)
     * @throws IOException if the child's stdin is closed
     */
    Map<String, Long> counters(Duration timeout) throws IOException {
        tell("COUNTERS");
        awaitLine("COUNTERS END", timeout);
        Map<String, Long> out = new LinkedHashMap<>();
        synchronized (this) {
            for (Iterator<String> it = pending.iterator(); it.hasNext(); ) {
                String line = it.next();
                if (line.startsWith("COUNTER ")) {
                    int eq = line.lastIndexOf('=');
                    if (eq > 0) {
                        out.merge(line.substring("COUNTER ".length(), eq).trim(),
                                parseOr(line.substring(eq + 1)), Long::sum);
                    }
                    it.remove();
                } else if (line.startsWith("LOSS ")) {
                    for (String kv : line.substring("LOSS ".length()).split(" ")) {
                        String[] w = kv.split("=");
                        out.merge("LOSS " + w[0], parseOr(w[1]), Long::sum);
                    }
                    it.remove();
                }
            }
        }
        return out;
    }

    private static long parseOr(String s) {
        try {
            return Long.parseLong(s.trim());
        } catch (NumberFormatException e) {
            return 0;
        }
    }

    /**
     * Takes the pending stdout lines that start with a prefix (e.g. {@code BACKGROUND }).
     *
     * @param prefix line prefix
     * @return those lines, in order, removed from the pending ones
     */
    synchronized List<String> drainLines(String prefix) {
        List<String> out = new ArrayList<>();
        for (Iterator<String> it = pending.iterator(); it.hasNext(); ) {
            String line = it.next();
            if (line.startsWith(prefix)) {
                out.add(line);
                it.remove();
            }
        }
        return out;
    }

    /**
     * Asks the child to close its instance and exit.
     *
     * @param timeout how long it may take
     * @return its exit code (0: closed without leaks)
     * @throws IOException if the child's stdin is closed
     */
    int exit(Duration timeout) throws IOException {
        tell("EXIT");
        return awaitExit(timeout);
    }

    /**
     * Waits for the child to print {@code CLOSED} and exit (after an {@code EXIT} sent with {@link #tell}).
     *
     * @param timeout how long it may take
     * @return its exit code
     */
    int awaitExit(Duration timeout) {
        awaitLine("CLOSED", timeout);
        try {
            if (!process.waitFor(timeout.toMillis(), TimeUnit.MILLISECONDS)) {
                throw failure("still running " + timeout + " after CLOSED");
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw failure("interrupted waiting for the exit");
        }
        return process.exitValue();
    }

    /** @return its name */
    String name() {
        return name;
    }

    private IllegalStateException failure(String what) {
        List<String> printed;
        synchronized (this) {
            printed = List.copyOf(all);
        }
        return new IllegalStateException("child " + name + " (pid " + process.pid() + ") " + what + "; printed "
                + printed.subList(Math.max(0, printed.size() - 20), printed.size()) + "; stderr " + log + ":\n"
                + stderrTail());
    }

    private String stderrTail() {
        try {
            List<String> lines = Files.readAllLines(log, StandardCharsets.UTF_8);
            return String.join("\n", lines.subList(Math.max(0, lines.size() - 40), lines.size()));
        } catch (IOException e) {
            return "(unreadable: " + e + ")";
        }
    }

    /** Kills the child if it still runs (the stdin it loses would halt it anyway). */
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
