package dev.kvtransfer.mpi;

import dev.kvtransfer.api.transport.Connection;
import dev.kvtransfer.api.transport.ConnectionManager;
import dev.kvtransfer.api.transport.Tags;
import dev.kvtransfer.api.transport.TransportConfig;

import java.time.Duration;

/**
 * The same loop as {@code src/main/c/mpi_bw.c} through our {@link Connection}, run by 2 ranks under {@code mpirun}
 * ({@link MpiBandwidthIT}): rank 0 sends {@code -Dmpi.bw.iters} messages of {@code -Dmpi.bw.bytes} (16 MiB) to rank
 * 1 after a warm-up, rank 1 acknowledges the last one; rank 0 prints
 * {@code JAVA_MPI_BW bytes=.. iters=.. seconds=.. GBps=..} once per round ({@code -Dmpi.bw.rounds}). Rank 1 verifies
 * the first and the last message of each round (the pattern changes on those two). Exits 1 on any failure.
 */
public final class BandwidthMain {
    private BandwidthMain() {
    }

    /**
     * Runs the rounds.
     *
     * @param args unused
     */
    public static void main(String[] args) {
        int status = 0;
        try {
            MpiRuntime rt = MpiRuntime.get();
            if (rt.worldSize() != 2) {
                throw new IllegalStateException("run with mpirun -np 2, not " + rt.worldSize());
            }
            try (MpiGroupComm world = MpiGroupComm.world(Duration.ofSeconds(60));
                 ConnectionManager m = new MpiTransportProvider().create(TransportConfig.builder().name("bw")
                         .defaultTimeout(Duration.ofSeconds(60)).build())) {
                int rounds = Integer.getInteger("mpi.bw.rounds", 1);
                for (int r = 0; r < rounds; r++) {
                    round(rt.worldRank(), world, m.connection(Integer.toString(1 - rt.worldRank())));
                }
            }
        } catch (Throwable t) {
            t.printStackTrace(System.out);
            status = 1;
        }
        System.out.println("BANDWIDTH-MAIN rank=" + (MpiRuntime.isInitialized() ? MpiRuntime.get().worldRank() : -1)
                + " status=" + status);
        System.out.flush();
        MpiRuntime.shutdown();
        System.exit(status);
    }

    private static void round(int rank, MpiGroupComm world, Connection c) {
        long bytes = Long.getLong("mpi.bw.bytes", 16L << 20);
        int iters = Integer.getInteger("mpi.bw.iters", 200);
        int warmup = Integer.getInteger("mpi.bw.warmup", 20);
        Duration t = Duration.ofSeconds(60);
        int tag = Tags.FIRST_DATA_TAG + 1000;
        try (HostBuffer buf = HostBuffer.allocate(bytes); HostBuffer ack = HostBuffer.allocate(1)) {
            int total = warmup + iters;
            long start = 0;
            if (rank == 0) {
                Patterns.fill(buf, 0, bytes, 1);
                for (int i = 0; i < total; i++) {
                    if (i == warmup) {
                        world.allgather(new long[0], t);
                        start = System.nanoTime();
                    }
                    if (i == total - 1) {
                        Patterns.fill(buf, 0, bytes, 2);
                    }
                    c.send(tag, buf, 0, bytes, t);
                }
                c.recv(tag + 1, ack, 0, 1, t);
                double secs = (System.nanoTime() - start) / 1e9;
                System.out.printf("JAVA_MPI_BW bytes=%d iters=%d seconds=%.6f GBps=%.3f%n", bytes, iters, secs,
                        bytes * (double) iters / secs / 1e9);
                System.out.flush();
            } else {
                for (int i = 0; i < total; i++) {
                    if (i == warmup) {
                        world.allgather(new long[0], t);
                    }
                    c.recv(tag, buf, 0, bytes, t);
                    if (i == 0 && Patterns.firstMismatch(buf, 0, bytes, 1) >= 0) {
                        throw new AssertionError("first bandwidth message differs at byte "
                                + Patterns.firstMismatch(buf, 0, bytes, 1));
                    }
                }
                if (Patterns.firstMismatch(buf, 0, bytes, 2) >= 0) {
                    throw new AssertionError("last bandwidth message differs at byte "
                            + Patterns.firstMismatch(buf, 0, bytes, 2));
                }
                c.send(tag + 1, ack, 0, 1, t);
            }
        }
    }
}
