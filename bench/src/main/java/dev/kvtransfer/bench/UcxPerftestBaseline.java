package dev.kvtransfer.bench;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.transport.TransportException;

import java.io.IOException;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Objects;
import java.util.concurrent.locks.LockSupport;

/**
 * UCX's own benchmark, {@code ucx_perftest} (Debian's {@code ucx-utils}): a server and a client process on this host
 * (the client connects to 127.0.0.1), {@code -t tag_bw} for throughput and {@code -t tag_lat} for latency, UCX
 * choosing its transports as it does by default (shared memory between local processes); {@code UCX_*} variables
 * pass through. Parsed from the client's {@code Final:} line: bandwidth "overall" (MB/s there are MiB/s) and the
 * median latency, which perftest reports one way (half a round trip) and which is doubled here; perftest reports
 * no p99 / p99.9 / max. Note the server's bootstrap socket listens on every interface (perftest has no bind
 * option); only the loopback address is used.
 */
final class UcxPerftestBaseline implements Baseline {
    private static final long MIB = 1L << 20;
    private final String tool;

    private UcxPerftestBaseline(String tool) {
        this.tool = tool;
    }

    /**
     * @param tool the program name or path
     * @return the baseline, or null when the tool is not installed
     */
    static UcxPerftestBaseline find(String tool) {
        String path = Processes.which(Objects.requireNonNull(tool, "tool"));
        return path == null ? null : new UcxPerftestBaseline(path);
    }

    @Override
    public String describe() {
        return "ucx_perftest -t tag_bw / tag_lat, server and client processes on this host (" + tool + ")";
    }

    @Override
    public Result measure(long messageBytes, long warmupMessages, long messages, int warmupSamples, int samples,
            Duration timeout) {
        double[] bw = run("tag_bw", messageBytes, warmupMessages, messages, timeout);
        double[] lat = run("tag_lat", messageBytes, warmupSamples, samples, timeout);
        double bytesPerSecond = bw[5] * MIB;
        if (!(bytesPerSecond > 0) || Double.isInfinite(bytesPerSecond)) {
            throw new TransportException(ErrorCode.MALFORMED, "ucx_perftest tag_bw " + messageBytes + " B reported an "
                    + "overall bandwidth of " + bw[5] + " MiB/s: no usable figure (rerun with more messages)");
        }
        long nanos = Math.max(1, (long) (messages * (double) messageBytes / bytesPerSecond * 1e9));
        double p50 = Double.isFinite(lat[1]) && lat[1] > 0 ? 2 * lat[1] : Double.NaN;
        Latencies.Percentiles p = new Latencies.Percentiles(p50, Double.NaN, Double.NaN, Double.NaN);
        return new Result("ucx_perftest tag_bw/tag_lat (UCX default transports)", messageBytes, messages, nanos, p,
                "perftest: p50 is twice its one-way median; no p99/p99.9/max");
    }

    /** Runs one test; returns the numbers of the client's Final line. */
    private double[] run(String test, long size, long warmup, long iterations, Duration timeout) {
        long deadline = System.nanoTime() + timeout.toNanos();
        int port = Processes.freePort();
        List<String> common = List.of("-t", test, "-s", Long.toString(size), "-n", Long.toString(iterations),
                "-w", Long.toString(Math.max(0, warmup)), "-p", Integer.toString(port));
        List<String> server = new ArrayList<>(List.of(tool));
        server.addAll(common);
        List<String> client = new ArrayList<>(List.of(tool, "127.0.0.1"));
        client.addAll(common);
        try (Processes.Running s = new Processes.Running(server, null)) {
            while (true) {
                Processes.Outcome c;
                try (Processes.Running r = new Processes.Running(client, null)) {
                    c = r.await(deadline);
                }
                if (c.ok()) {
                    double[] v = parseFinal(c.output());
                    s.await(Math.min(deadline, System.nanoTime() + Duration.ofSeconds(10).toNanos()));
                    return v;
                }
                boolean early = s.alive() && c.exitCode() != -1 && System.nanoTime() - deadline < 0
                        && c.output().toLowerCase(java.util.Locale.ROOT).contains("connect");
                if (!early) {
                    throw new TransportException(c.exitCode() == -1 ? ErrorCode.TIMEOUT : ErrorCode.NETWORK,
                            "ucx_perftest " + test + " " + size + " B: client exited " + c.exitCode() + ": " + c.tail()
                                    + (s.alive() ? "" : "; server: " + s.outputSoFar().strip()));
                }
                LockSupport.parkNanos(Duration.ofMillis(100).toNanos()); // the server is not listening yet
            }
        } catch (IOException e) {
            throw new TransportException(ErrorCode.NETWORK, "cannot start " + tool + ": " + e, e);
        }
    }

    /** perftest prints C's {@code inf} / {@code nan} when an interval took no measurable time. */
    private static double number(String f) {
        switch (f.toLowerCase(java.util.Locale.ROOT)) {
            case "inf", "+inf" -> {
                return Double.POSITIVE_INFINITY;
            }
            case "-inf" -> {
                return Double.NEGATIVE_INFINITY;
            }
            case "nan", "-nan" -> {
                return Double.NaN;
            }
            default -> {
                try {
                    return Double.parseDouble(f);
                } catch (NumberFormatException e) {
                    throw new TransportException(ErrorCode.MALFORMED, "ucx_perftest Final: line: '" + f
                            + "' is not a number", e);
                }
            }
        }
    }

    /**
     * @param output the client's output
     * @return the 8 numbers after {@code Final:} (iterations, p50, average and overall latency µs, average and
     *         overall MiB/s, average and overall messages/s)
     */
    static double[] parseFinal(String output) {
        for (String line : output.split("\n")) {
            String t = line.trim();
            if (t.startsWith("Final:")) {
                String[] f = t.substring("Final:".length()).trim().split("\\s+");
                if (f.length < 8) {
                    break;
                }
                double[] v = new double[8];
                for (int i = 0; i < 8; i++) {
                    v[i] = number(f[i]);
                }
                return v;
            }
        }
        throw new TransportException(ErrorCode.MALFORMED, "ucx_perftest printed no Final: line with 8 numbers: "
                + (output.length() > 1000 ? output.substring(output.length() - 1000) : output));
    }
}
