package dev.kvtransfer.cli;

import dev.kvtransfer.api.model.ContextPhaseParams;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.OutputStreamWriter;
import java.io.PrintWriter;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Paths;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Base64;
import java.util.List;
import java.util.Map;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;

/**
 * The generation instance in a child JVM ({@code kvtransfer demo-worker}), driven over the
 * {@link WorkerProtocol} on its stdin/stdout. The child inherits this JVM's flags and class path.
 */
final class ChildProcessGen implements GenSide {
    private final Process process;
    private final PrintWriter toChild;
    private final Map<Long, CompletableFuture<GenTransfer>> transfers = new ConcurrentHashMap<>();
    private final BlockingQueue<String> replies = new LinkedBlockingQueue<>();
    private final Thread reader;
    private final Duration timeout;

    /**
     * @param metricsPort the port the child serves its generation instance's meters on, 0 for none
     */
    ChildProcessGen(DemoOptions options, int blocksPerRank, Duration timeout, int metricsPort) {
        this.timeout = timeout;
        List<String> cmd = new ArrayList<>();
        cmd.add(Paths.get(System.getProperty("java.home"), "bin", "java").toString());
        cmd.addAll(ChildJvms.flags());
        cmd.add("-cp");
        cmd.add(System.getProperty("java.class.path"));
        cmd.add(KvTransferCli.class.getName());
        cmd.add("demo-worker");
        cmd.addAll(options.toArgs());
        cmd.add("--blocks-per-rank=" + blocksPerRank);
        if (metricsPort > 0) {
            cmd.add("--metrics-port=" + metricsPort);
        }
        ProcessBuilder pb = new ProcessBuilder(cmd).redirectError(ProcessBuilder.Redirect.INHERIT);
        // The worker's stdout carries the protocol: UCX logs (to stdout by default) go to stderr instead.
        pb.environment().putIfAbsent("UCX_LOG_FILE", "stderr");
        try {
            process = pb.start();
        } catch (IOException e) {
            throw new UncheckedIOException("cannot start the generation worker: " + cmd, e);
        }
        toChild = new PrintWriter(new OutputStreamWriter(process.getOutputStream(), StandardCharsets.UTF_8), true);
        BufferedReader in = new BufferedReader(new InputStreamReader(process.getInputStream(), StandardCharsets.UTF_8));
        reader = new Thread(() -> readLoop(in), "demo-worker-reader");
        reader.setDaemon(true);
        reader.start();
        String ready = await("READY from the generation worker", Duration.ofSeconds(120));
        if (!WorkerProtocol.READY.equals(ready)) {
            throw new IllegalStateException("generation worker did not start: " + ready);
        }
    }

    private void readLoop(BufferedReader in) {
        try {
            String line;
            while ((line = in.readLine()) != null) {
                String[] f = line.split(" ", -1);
                if (f[0].equals(WorkerProtocol.DONE) && f.length >= 11) {
                    long id = Long.parseLong(f[1]);
                    GenTransfer t = new GenTransfer(id, f[2].equals("1"), Long.parseLong(f[3]), Long.parseLong(f[4]),
                            Long.parseLong(f[5]), Long.parseLong(f[6]), Integer.parseInt(f[7]), Long.parseLong(f[8]),
                            f[9].equals("1"), WorkerProtocol.unb64(f[10]));
                    CompletableFuture<GenTransfer> fut = transfers.remove(id);
                    if (fut != null) {
                        fut.complete(t);
                    }
                } else if (WorkerProtocol.nativeLogLine(line)) {
                    System.err.println(line); // not a reply
                } else {
                    replies.add(line);
                }
            }
            replies.add("EOF: generation worker exited with " + waitExit());
        } catch (IOException e) {
            replies.add("EOF: " + e);
        }
        transfers.values().forEach(f -> f.completeExceptionally(
                new IllegalStateException("generation worker exited before the transfer completed")));
    }

    private String waitExit() {
        try {
            return process.waitFor(10, TimeUnit.SECONDS) ? "status " + process.exitValue() : "no status (still running)";
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            return "unknown status";
        }
    }

    private String await(String what, Duration limit) {
        try {
            String line = replies.poll(limit.toMillis(), TimeUnit.MILLISECONDS);
            if (line == null) {
                throw new IllegalStateException("no " + what + " within " + limit);
            }
            return line;
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IllegalStateException("interrupted waiting for " + what, e);
        }
    }

    @Override
    public String prepare(int index, long requestId, int isl) {
        toChild.println(WorkerProtocol.PREP + " " + index + " " + requestId + " " + isl);
        String line = await("PREPARED " + requestId, timeout);
        String[] f = line.split(" ", -1);
        if (!f[0].equals(WorkerProtocol.PREPARED) || f.length < 3 || Long.parseLong(f[1]) != requestId) {
            throw new IllegalStateException("unexpected reply from the generation worker: " + line);
        }
        return WorkerProtocol.unb64(f[2]);
    }

    @Override
    public CompletableFuture<GenTransfer> submit(int index, long requestId, int isl, ContextPhaseParams params) {
        CompletableFuture<GenTransfer> f = new CompletableFuture<>();
        transfers.put(requestId, f);
        toChild.println(WorkerProtocol.REQ + " " + index + " " + requestId + " " + isl + " "
                + Base64.getEncoder().encodeToString(params.toBytes()));
        return f;
    }

    @Override
    public GenCheck check(long requestId) {
        toChild.println(WorkerProtocol.CHECK + " " + requestId);
        String line = await("CHECKED " + requestId, timeout);
        String[] f = line.split(" ", -1);
        if (!f[0].equals(WorkerProtocol.CHECKED) || f.length < 5 || Long.parseLong(f[1]) != requestId) {
            throw new IllegalStateException("unexpected reply from the generation worker: " + line);
        }
        return new GenCheck(requestId, Long.parseLong(f[2]), Long.parseLong(f[3]), WorkerProtocol.unb64(f[4]));
    }

    /** Asks the worker to run the generation status check on its ranks. */
    String sync() {
        toChild.println(WorkerProtocol.SYNC);
        return await("SYNCED", timeout);
    }

    @Override
    public void close() {
        try {
            toChild.println(WorkerProtocol.QUIT);
            String bye = await("BYE", Duration.ofSeconds(60));
            if (!bye.equals(WorkerProtocol.BYE)) {
                System.err.println("kvtransfer: generation worker said " + bye);
            }
            if (!process.waitFor(30, TimeUnit.SECONDS)) {
                process.destroyForcibly();
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            process.destroyForcibly();
        } catch (RuntimeException e) {
            process.destroyForcibly();
            throw e;
        }
    }

    /** @return the worker's exit status once it has exited */
    int exitValue() {
        return process.exitValue();
    }

}
