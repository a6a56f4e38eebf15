package dev.kvtransfer.aeron;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.transport.HostSupport;
import dev.kvtransfer.api.transport.TransportException;

import java.io.BufferedReader;
import java.io.File;
import java.io.IOException;
import java.io.InputStreamReader;
import java.lang.management.ManagementFactory;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;

/**
 * A media driver shared by the processes of one host: {@link SharedDriverMain} in a child JVM (this JVM's class
 * path and module flags), started by {@link AeronTransportProvider#startHostSupport}. {@link #properties()} gives
 * every process {@code aeron.dir=<its directory>}: their managers use it instead of embedding a driver, their
 * addresses carry its identity, and peers on it talk {@code aeron:ipc} (shared memory, no socket, no driver thread
 * in the data path) while peers elsewhere still use UDP. {@link #close()} ends the driver (its standard input
 * closes; it is killed after 10 s) and deletes its directory.
 */
public final class AeronHostSupport implements HostSupport {
    private static final long START_TIMEOUT_MS = 60_000;

    private final Process process;
    private final String directory;
    private volatile boolean closed;

    private AeronHostSupport(Process process, String directory) {
        this.process = process;
        this.directory = directory;
    }

    /**
     * The driver JVM's class path: this plugin's own jars when it was loaded from a plugin directory (its class
     * loader's URLs: the cli's class path then lacks Aeron), then this JVM's class path (the api).
     */
    static String classPath() {
        List<String> parts = new ArrayList<>();
        ClassLoader l = AeronHostSupport.class.getClassLoader();
        if (l instanceof java.net.URLClassLoader u && l != ClassLoader.getSystemClassLoader()) {
            for (java.net.URL url : u.getURLs()) {
                try {
                    parts.add(new File(url.toURI()).getPath());
                } catch (java.net.URISyntaxException | IllegalArgumentException e) {
                    // not a file URL: nothing a child JVM could use
                }
            }
        }
        parts.add(System.getProperty("java.class.path"));
        return String.join(File.pathSeparator, parts);
    }

    /** Starts the driver with these driver properties ({@code aeron.*}, no {@code aeron.dir}). */
    static AeronHostSupport start(Map<String, String> properties) {
        List<String> cmd = new ArrayList<>();
        // The driver creates its files (cnc.dat, every log buffer, later too) with its process's umask, which Java
        // cannot set: start it under one that keeps them owner-only (or group read-write for aeron.dirGroup).
        boolean group = !properties.getOrDefault(AeronSettings.DIR_GROUP, "").trim().isEmpty();
        if (new File("/bin/sh").canExecute()) {
            cmd.add("/bin/sh");
            cmd.add("-c");
            cmd.add("umask " + (group ? "007" : "077") + " && exec \"$0\" \"$@\"");
        }
        cmd.add(System.getProperty("java.home") + File.separator + "bin" + File.separator + "java");
        for (String a : ManagementFactory.getRuntimeMXBean().getInputArguments()) {
            if (a.startsWith("--add-opens") || a.startsWith("--add-exports")) {
                cmd.add(a);
            }
        }
        if (cmd.stream().noneMatch(a -> a.equals(AeronTransportProvider.REQUIRED_JVM_FLAG))) {
            cmd.add(AeronTransportProvider.REQUIRED_JVM_FLAG);
        }
        cmd.add("-Xmx128m");
        cmd.add("-XX:+UseSerialGC");
        cmd.add("-cp");
        cmd.add(classPath());
        cmd.add(SharedDriverMain.class.getName());
        properties.forEach((k, v) -> {
            if (k.startsWith(AeronSettings.PREFIX) && !k.equals(AeronSettings.DIR)) {
                cmd.add(k + "=" + v);
            }
        });
        Process p;
        try {
            p = new ProcessBuilder(cmd).redirectError(ProcessBuilder.Redirect.INHERIT).start();
        } catch (IOException e) {
            throw new TransportException(ErrorCode.NETWORK, "aeron: cannot start the shared media driver: " + e, e);
        }
        BufferedReader out = new BufferedReader(new InputStreamReader(p.getInputStream(), StandardCharsets.UTF_8));
        CompletableFuture<String> ready = CompletableFuture.supplyAsync(() -> {
            try {
                String line;
                while ((line = out.readLine()) != null) {
                    if (line.startsWith("READY ")) {
                        return line.substring("READY ".length()).trim();
                    }
                }
                return null;
            } catch (IOException e) {
                return null;
            }
        });
        String dir;
        try {
            dir = ready.get(START_TIMEOUT_MS, TimeUnit.MILLISECONDS);
        } catch (Exception e) {
            dir = null;
        }
        if (dir == null) {
            p.destroyForcibly();
            throw new TransportException(ErrorCode.NETWORK, "aeron: the shared media driver (pid " + p.pid()
                    + ") did not report READY within " + START_TIMEOUT_MS + " ms"
                    + (p.isAlive() ? "" : " (it exited with " + exitValue(p) + ")"));
        }
        return new AeronHostSupport(p, dir);
    }

    private static String exitValue(Process p) {
        try {
            return String.valueOf(p.exitValue());
        } catch (IllegalThreadStateException e) {
            return "?";
        }
    }

    /** @return the shared driver's directory */
    public String directory() {
        return directory;
    }

    /** @return the driver's process */
    public Process process() {
        return process;
    }

    @Override
    public Map<String, String> properties() {
        return Map.of(AeronSettings.DIR, directory);
    }

    @Override
    public String describe() {
        return "aeron media driver (pid " + process.pid() + ") in " + directory + ", shared by this host's processes:"
                + " peers on it talk aeron:ipc";
    }

    @Override
    public void close() {
        if (closed) {
            return;
        }
        closed = true;
        try {
            process.getOutputStream().close();
            if (!process.waitFor(10, TimeUnit.SECONDS)) {
                process.destroyForcibly();
                process.waitFor(10, TimeUnit.SECONDS);
            }
        } catch (IOException e) {
            process.destroyForcibly();
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            process.destroyForcibly();
        }
        EmbeddedDriver.deleteDirectory(new File(directory));
    }

    @Override
    public String toString() {
        return describe();
    }
}
