package dev.kvtransfer.bench;

import java.io.ByteArrayOutputStream;
import java.io.File;
import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.TimeUnit;

/** Runs the external tools of the baselines, every wait bounded, output captured (stdout and stderr merged). */
final class Processes {
    private Processes() {
    }

    /**
     * A finished (or killed) process.
     *
     * @param command  what ran
     * @param exitCode its exit code; -1 when it was killed at the deadline
     * @param output   stdout and stderr
     */
    record Outcome(List<String> command, int exitCode, String output) {
        boolean ok() {
            return exitCode == 0;
        }

        String tail() {
            String o = output.strip();
            return o.length() <= 2000 ? o : "..." + o.substring(o.length() - 2000);
        }
    }

    /**
     * Removes the per-process variables an MPI launcher or Open MPI's singleton initialization put into this
     * process's environment ({@code PMIX_*}, {@code OMPI_*}): once ours has initialized MPI in this JVM (the
     * {@code mpi} backend's endpoints), a child {@code mpirun} inheriting them exits 1 without a word. Kept: the
     * user's transport choices ({@code OMPI_MCA_btl*}, {@code pml*}, {@code osc*}, {@code *_if_include},
     * {@code *_if_exclude}) and {@code OMPI_ALLOW_RUN_AS_ROOT*}, as the mpi backend keeps them for its child JVMs.
     *
     * @param env a child's environment, changed in place
     */
    static void withoutLauncherVariables(java.util.Map<String, String> env) {
        env.keySet().removeIf(k -> {
            if (k.startsWith("PMIX_")) {
                return true;
            }
            if (!k.startsWith("OMPI_")) {
                return false;
            }
            if (k.startsWith("OMPI_ALLOW_RUN_AS_ROOT")) {
                return false;
            }
            if (k.startsWith("OMPI_MCA_")) {
                String m = k.substring("OMPI_MCA_".length());
                return !(m.startsWith("btl") || m.startsWith("pml") || m.startsWith("osc") || m.endsWith("_if_include")
                        || m.endsWith("_if_exclude"));
            }
            return true;
        });
    }

    /** A started process whose output is being collected. */
    static final class Running implements AutoCloseable {
        private final List<String> command;
        private final Process process;
        private final ByteArrayOutputStream out = new ByteArrayOutputStream();
        private final Thread reader;

        Running(List<String> command, File dir) throws IOException {
            this.command = List.copyOf(command);
            ProcessBuilder pb = new ProcessBuilder(command).redirectErrorStream(true);
            withoutLauncherVariables(pb.environment());
            if (dir != null) {
                pb.directory(dir);
            }
            this.process = pb.start();
            this.process.getOutputStream().close();
            InputStream in = process.getInputStream();
            this.reader = new Thread(() -> {
                byte[] buf = new byte[8192];
                try {
                    int n;
                    while ((n = in.read(buf)) >= 0) {
                        synchronized (out) {
                            out.write(buf, 0, n);
                        }
                    }
                } catch (IOException e) {
                    // the process went away
                }
            }, "bench-tool-output");
            reader.setDaemon(true);
            reader.start();
        }

        boolean alive() {
            return process.isAlive();
        }

        String outputSoFar() {
            synchronized (out) {
                return out.toString(StandardCharsets.UTF_8);
            }
        }

        /** Waits until it ends or the deadline passes (then kills it: exit code -1). */
        Outcome await(long deadlineNanos) {
            try {
                long wait = Math.max(1, deadlineNanos - System.nanoTime());
                if (!process.waitFor(wait, TimeUnit.NANOSECONDS)) {
                    kill();
                    reader.join(2000);
                    return new Outcome(command, -1, outputSoFar());
                }
                reader.join(5000);
                return new Outcome(command, process.exitValue(), outputSoFar());
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                kill();
                return new Outcome(command, -1, outputSoFar());
            }
        }

        void kill() {
            process.descendants().forEach(ProcessHandle::destroyForcibly);
            process.destroyForcibly();
            try {
                process.waitFor(5, TimeUnit.SECONDS);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }

        @Override
        public void close() {
            if (process.isAlive()) {
                kill();
            }
        }
    }

    /**
     * @param command the command line
     * @param dir     working directory (null: this one)
     * @param timeout bound
     * @return the outcome (exit code -1 when killed at the deadline)
     * @throws IOException when it cannot start
     */
    static Outcome run(List<String> command, File dir, Duration timeout) throws IOException {
        try (Running r = new Running(command, dir)) {
            return r.await(System.nanoTime() + timeout.toNanos());
        }
    }

    /**
     * @param tool a program name or path
     * @return its path when it exists on {@code PATH} (or is an executable path), else null
     */
    static String which(String tool) {
        if (tool.contains(File.separator)) {
            File f = new File(tool);
            return f.canExecute() ? f.getAbsolutePath() : null;
        }
        String path = System.getenv("PATH");
        if (path == null) {
            return null;
        }
        for (String d : path.split(File.pathSeparator)) {
            File f = new File(d, tool);
            if (f.isFile() && f.canExecute()) {
                return f.getAbsolutePath();
            }
        }
        return null;
    }

    /** @return a TCP port that was free a moment ago on 127.0.0.1 */
    static int freePort() {
        try (java.net.ServerSocket s = new java.net.ServerSocket(0, 1, java.net.InetAddress.getLoopbackAddress())) {
            s.setReuseAddress(true);
            return s.getLocalPort();
        } catch (IOException e) {
            throw new IllegalStateException("no free port on 127.0.0.1: " + e, e);
        }
    }
}
