package dev.kvtransfer.bench;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.transport.TransportException;

import java.io.File;
import java.io.IOException;
import java.io.InputStream;
import java.io.UncheckedIOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.stream.Stream;

/**
 * A C {@code MPI_Send} / {@code MPI_Recv} loop ({@code kvbench_mpi.c}, a resource of this jar) compiled with
 * {@code mpicc -O2} into a private temp directory at first use and run as two ranks under
 * {@code mpirun --allow-run-as-root --oversubscribe -np 2}; Open MPI picks its transports as it does by default
 * ({@code OMPI_MCA_*} variables pass through). {@link #close()} deletes the directory.
 */
final class MpiBaseline implements Baseline {
    private final String mpicc;
    private final String mpirun;
    private Path dir;
    private Path binary;

    private MpiBaseline(String mpicc, String mpirun) {
        this.mpicc = mpicc;
        this.mpirun = mpirun;
    }

    /**
     * @param mpicc  compiler name or path
     * @param mpirun launcher name or path
     * @return the baseline, or null when either is not installed
     */
    static MpiBaseline find(String mpicc, String mpirun) {
        String cc = Processes.which(mpicc);
        String run = Processes.which(mpirun);
        return cc == null || run == null ? null : new MpiBaseline(cc, run);
    }

    @Override
    public String describe() {
        return "C MPI_Send/MPI_Recv loop (mpicc -O2), 2 ranks under " + mpirun + " --oversubscribe";
    }

    private synchronized Path binary(Duration timeout) {
        if (binary != null) {
            return binary;
        }
        try {
            dir = Files.createTempDirectory("kvtransfer-bench-mpi-");
            Path src = dir.resolve("kvbench_mpi.c");
            try (InputStream in = MpiBaseline.class.getResourceAsStream("kvbench_mpi.c")) {
                if (in == null) {
                    throw new IllegalStateException("kvbench_mpi.c is missing from the bench jar");
                }
                Files.copy(in, src);
            }
            Path bin = dir.resolve("kvbench_mpi");
            Processes.Outcome o = Processes.run(List.of(mpicc, "-O2", "-o", bin.toString(), src.toString()),
                    dir.toFile(), timeout);
            if (!o.ok()) {
                throw new TransportException(ErrorCode.NETWORK, "mpicc failed (exit " + o.exitCode() + "): "
                        + o.tail());
            }
            binary = bin;
            return bin;
        } catch (IOException e) {
            throw new UncheckedIOException("cannot build the MPI baseline in " + dir, e);
        }
    }

    @Override
    public Result measure(long messageBytes, long warmupMessages, long messages, int warmupSamples, int samples,
            Duration timeout) {
        if (messageBytes > Integer.MAX_VALUE) {
            throw new IllegalArgumentException("MPI baseline: " + messageBytes + " B messages exceed MPI's int count");
        }
        Path bin = binary(timeout);
        List<String> cmd = new ArrayList<>(List.of(mpirun, "--allow-run-as-root", "--oversubscribe", "-np", "2",
                bin.toString(), Long.toString(messageBytes), Long.toString(warmupMessages), Long.toString(messages),
                Integer.toString(warmupSamples), Integer.toString(samples)));
        Processes.Outcome o;
        try {
            o = Processes.run(cmd, dir.toFile(), timeout);
        } catch (IOException e) {
            throw new TransportException(ErrorCode.NETWORK, "cannot start " + mpirun + ": " + e, e);
        }
        if (!o.ok()) {
            throw new TransportException(o.exitCode() == -1 ? ErrorCode.TIMEOUT : ErrorCode.NETWORK,
                    "MPI baseline " + messageBytes + " B: mpirun exited " + o.exitCode() + ": " + o.tail());
        }
        return parse(o.output(), messageBytes, describe());
    }

    /** Parses the {@code BW} and {@code LAT} lines. */
    static Result parse(String output, long messageBytes, String source) {
        long nanos = -1;
        long messages = -1;
        long[] rtt = null;
        for (String line : output.split("\n")) {
            String[] f = line.trim().split("\\s+");
            try {
                if (f[0].equals("BW") && f.length == 4) {
                    messages = Long.parseLong(f[2]);
                    nanos = Long.parseLong(f[3]);
                } else if (f[0].equals("LAT") && f.length >= 2) {
                    int n = Integer.parseInt(f[1]);
                    if (f.length != n + 2) {
                        throw new TransportException(ErrorCode.MALFORMED, "MPI baseline: LAT line has "
                                + (f.length - 2) + " samples, announced " + n);
                    }
                    rtt = new long[n];
                    for (int i = 0; i < n; i++) {
                        rtt[i] = Long.parseLong(f[i + 2]);
                    }
                }
            } catch (NumberFormatException e) {
                throw new TransportException(ErrorCode.MALFORMED, "MPI baseline: cannot read '" + line + "'", e);
            }
        }
        if (nanos < 1 || messages < 1 || rtt == null) {
            throw new TransportException(ErrorCode.MALFORMED, "MPI baseline printed no BW and LAT lines: "
                    + (output.length() > 1000 ? output.substring(output.length() - 1000) : output));
        }
        return new Result(source, messageBytes, messages, nanos, Latencies.of(rtt), "");
    }

    @Override
    public synchronized void close() {
        if (dir == null) {
            return;
        }
        try (Stream<Path> s = Files.walk(dir)) {
            s.sorted(Comparator.reverseOrder()).map(Path::toFile).forEach(File::delete);
        } catch (IOException e) {
            // best effort: a temp directory
        }
        dir = null;
        binary = null;
    }
}
