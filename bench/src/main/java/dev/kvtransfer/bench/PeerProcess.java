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
 * A child JVM running {@link TransportPeer}: this JVM's flags (input arguments, with the plugin directories as they
 * are now), its class path, the backend and the transport properties. Its standard input stays open while the bench
 * holds it (the peer exits when it ends); its output is collected for error messages.
 */
final class PeerProcess {
    private final Process process;
    /** The peer's output lines (its address line excepted), shared with the reader thread. */
    private final StringBuilder output;
    final String address;

    private PeerProcess(Process process, String address, StringBuilder output) {
        this.process = process;
        this.address = address;
        this.output = output;
    }

    /** The command line of the peer JVM. */
    static List<String> command(String backend, Map<String, String> properties, Duration timeout) {
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
        cmd.add(TransportPeer.class.getName());
        cmd.add(backend);
        cmd.add(Long.toString(Math.max(1, timeout.toSeconds())));
        properties.forEach((k, v) -> cmd.add(k + "=" + v));
        return cmd;
    }

    /**
     * Starts the peer and waits (bounded by {@code timeout}) for its address.
     *
     * @throws IllegalStateException when it exits or prints no address in time, with its output
     */
    static PeerProcess start(String backend, Map<String, String> properties, Duration timeout) {
        ProcessBuilder pb = new ProcessBuilder(command(backend, properties, timeout)).redirectErrorStream(true);
        Processes.withoutLauncherVariables(pb.environment());
        Process p;
        try {
            p = pb.start();
        } catch (IOException e) {
            throw new IllegalStateException("cannot start the bench peer JVM: " + e, e);
        }
        CompletableFuture<String> address = new CompletableFuture<>();
        StringBuilder out = new StringBuilder();
        Thread reader = new Thread(() -> {
            try (BufferedReader r = new BufferedReader(new InputStreamReader(p.getInputStream(),
                    StandardCharsets.UTF_8))) {
                String line;
                while ((line = r.readLine()) != null) {
                    if (line.startsWith(TransportPeer.ADDRESS_PREFIX) && !address.isDone()) {
                        address.complete(line.substring(TransportPeer.ADDRESS_PREFIX.length()).trim());
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
        }, "bench-peer-output");
        reader.setDaemon(true);
        reader.start();
        try {
            String a = address.get(timeout.toNanos(), TimeUnit.NANOSECONDS);
            return new PeerProcess(p, a, out);
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
            process.getOutputStream().close();
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
