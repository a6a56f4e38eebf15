package dev.kvtransfer.bench;

import dev.kvtransfer.core.plugin.Plugins;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.lang.management.ManagementFactory;
import java.nio.charset.StandardCharsets;
import java.nio.file.Paths;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;

/**
 * A child JVM running {@link TransportPeer} or {@link ContextPeer}: this JVM's flags (input arguments, with the
 * plugin directories as they are now), its class path, the main class and its arguments. Its standard input stays
 * open while the bench holds it (the peer exits when it ends); lines it prints starting with {@link #PREFIX} are
 * the protocol ({@link #next}), its other output is collected for error messages. The bench talks to a
 * {@link ContextPeer} over its standard input ({@link #send}), outside the timed parts.
 */
final class PeerProcess {
    /** The start of every protocol line a peer prints. */
    static final String PREFIX = "KVBENCH-";
    private final Process process;
    /** The peer's output lines (protocol lines excepted), shared with the reader thread. */
    private final StringBuilder output;
    private final java.util.concurrent.BlockingQueue<String> lines;
    private final java.io.Writer input;
    /** The payload of the peer's first protocol line (TransportPeer: its address). */
    final String address;

    private PeerProcess(Process process, String address, StringBuilder output,
            java.util.concurrent.BlockingQueue<String> lines) {
        this.process = process;
        this.address = address;
        this.output = output;
        this.lines = lines;
        this.input = new java.io.OutputStreamWriter(process.getOutputStream(), StandardCharsets.UTF_8);
    }

    /** The command line of the transport peer JVM. */
    static List<String> command(String backend, Map<String, String> properties, Duration timeout) {
        List<String> args = new ArrayList<>();
        args.add(backend);
        args.add(Long.toString(Math.max(1, timeout.toSeconds())));
        properties.forEach((k, v) -> args.add(k + "=" + v));
        return command(TransportPeer.class.getName(), args);
    }

    /** The command line of a peer JVM running {@code mainClass} with {@code args}. */
    static List<String> command(String mainClass, List<String> args) {
        String dirsFlag = "-D" + Plugins.PLUGIN_DIRS_PROPERTY + "=";
        List<String> cmd = new ArrayList<>();
        cmd.add(Paths.get(System.getProperty("java.home"), "bin", "java").toString());
        for (String a : ManagementFactory.getRuntimeMXBean().getInputArguments()) {
            // a debugger agent's port cannot be shared, and the plugin directories are added as they are now
            if (!a.startsWith(dirsFlag) && !a.startsWith("-agentlib:jdwp")) {
                cmd.add(a);
            }
        }
        String dirs = System.getProperty(Plugins.PLUGIN_DIRS_PROPERTY);
        if (dirs != null && !dirs.isBlank()) {
            cmd.add(dirsFlag + dirs);
        }
        cmd.add("-cp");
        cmd.add(System.getProperty("java.class.path"));
        cmd.add(mainClass);
        cmd.addAll(args);
        return cmd;
    }

    /**
     * Starts the peer and waits (bounded by {@code timeout}) for its address.
     *
     * @throws IllegalStateException when it exits or prints no address in time, with its output
     */
    static PeerProcess start(String backend, Map<String, String> properties, Duration timeout) {
        return start(backend, command(backend, properties, timeout), TransportPeer.ADDRESS_PREFIX, timeout);
    }

    /**
     * Starts a peer JVM and waits (bounded by {@code timeout}) for its first protocol line, which must start with
     * {@code first} (its payload becomes {@link #address}).
     *
     * @param what    the peer in words, for errors
     * @param command the command line ({@link #command(String, List)})
     * @param first   the first protocol line's start, {@link #PREFIX} included
     * @param timeout bound on the start
     * @throws IllegalStateException when it exits or prints no such line in time, with its output
     */
    static PeerProcess start(String what, List<String> command, String first, Duration timeout) {
        String backend = what;
        ProcessBuilder pb = new ProcessBuilder(command).redirectErrorStream(true);
        Processes.withoutLauncherVariables(pb.environment());
        Process p;
        try {
            p = pb.start();
        } catch (IOException e) {
            throw new IllegalStateException("cannot start the bench peer JVM: " + e, e);
        }
        CompletableFuture<String> address = new CompletableFuture<>();
        StringBuilder out = new StringBuilder();
        java.util.concurrent.BlockingQueue<String> lines = new java.util.concurrent.LinkedBlockingQueue<>();
        Thread reader = new Thread(() -> {
            try (BufferedReader r = new BufferedReader(new InputStreamReader(p.getInputStream(),
                    StandardCharsets.UTF_8))) {
                String line;
                while ((line = r.readLine()) != null) {
                    if (line.startsWith(first) && !address.isDone()) {
                        address.complete(line.substring(first.length()).trim());
                    } else if (line.startsWith(PREFIX) && address.isDone()) {
                        lines.add(line.substring(PREFIX.length()));
                    } else {
                        synchronized (out) {
                            if (out.length() < 64 * 1024) {
                                out.append(line).append('\n');
                            }
                        }
                    }
                }
            } catch (IOException e) {
                // the process went away
            }
            address.completeExceptionally(new IllegalStateException("the peer ended without an address"));
            lines.add(ENDED);
        }, "bench-peer-output");
        reader.setDaemon(true);
        reader.start();
        try {
            String a = address.get(timeout.toNanos(), TimeUnit.NANOSECONDS);
            return new PeerProcess(p, a, out, lines);
        } catch (TimeoutException | ExecutionException e) {
            kill(p);
            String text;
            synchronized (out) {
                text = out.toString().strip();
            }
            throw new IllegalStateException("bench peer JVM for " + backend + " gave no address within "
                    + timeout.toSeconds() + " s" + (p.isAlive() ? "" : " (exit " + exitValue(p) + ")") + ": "
                    + tail(text), e);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            kill(p);
            throw new IllegalStateException("interrupted while starting the bench peer JVM", e);
        }
    }

    private static final String ENDED = "\u0000ended";

    /**
     * Sends one line to the peer's standard input.
     *
     * @throws IllegalStateException when the peer is gone, with its output
     */
    void send(String line) {
        try {
            input.write(line);
            input.write('\n');
            input.flush();
        } catch (IOException e) {
            throw new IllegalStateException("bench peer JVM gone: " + e + exitSummary(), e);
        }
    }

    /**
     * The next protocol line (without {@link #PREFIX}), waiting until {@code deadlineNanos}.
     *
     * @throws IllegalStateException when the peer ended or printed nothing in time, with its output
     */
    String next(long deadlineNanos) {
        String l;
        try {
            l = lines.poll(Math.max(1, deadlineNanos - System.nanoTime()), TimeUnit.NANOSECONDS);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IllegalStateException("interrupted while waiting for the bench peer JVM", e);
        }
        if (l == null) {
            throw new IllegalStateException("the bench peer JVM did not answer in time" + exitSummary()
                    + tailOfOutput());
        }
        if (l.equals(ENDED)) {
            lines.add(ENDED);
            throw new IllegalStateException("the bench peer JVM ended" + exitSummary());
        }
        return l;
    }

    private String tailOfOutput() {
        if (!process.isAlive()) {
            return "";
        }
        String text;
        synchronized (output) {
            text = output.toString().strip();
        }
        return text.isEmpty() ? "" : "; its output so far: " + tail(text);
    }

    /** @return "; peer exited N: output" when it ended, else "" */
    String exitSummary() {
        try {
            process.waitFor(2, TimeUnit.SECONDS);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
        if (process.isAlive()) {
            return "";
        }
        String text;
        synchronized (output) {
            text = output.toString().strip();
        }
        return "; peer exited " + process.exitValue() + ": " + tail(text);
    }

    /** Ends the peer: closes its standard input, waits up to {@code grace}, then kills it. */
    void close(Duration grace) {
        try {
            input.close();
        } catch (IOException e) {
            // already gone
        }
        try {
            if (!process.waitFor(grace.toMillis(), TimeUnit.MILLISECONDS)) {
                kill(process);
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            kill(process);
        }
    }

    private static void kill(Process p) {
        p.descendants().forEach(ProcessHandle::destroyForcibly);
        p.destroyForcibly();
        try {
            p.waitFor(5, TimeUnit.SECONDS);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    private static String exitValue(Process p) {
        try {
            return Integer.toString(p.exitValue());
        } catch (IllegalThreadStateException e) {
            return "?";
        }
    }

    private static String tail(String s) {
        return s.length() <= 2000 ? s : "..." + s.substring(s.length() - 2000);
    }
}
