package dev.kvtransfer.mpi;

import dev.kvtransfer.api.transport.Connection;
import dev.kvtransfer.api.transport.Tags;

import java.time.Duration;
import java.util.List;

import static dev.kvtransfer.mpi.TransportChecks.check;
import static dev.kvtransfer.mpi.TransportChecks.verify;

/**
 * The same loop as {@code src/main/c/mpi_bw.c} through our {@link Connection}: rank 0 sends {@code iters}
 * messages of 16 MiB to rank 1 after a warm-up, rank 1 acknowledges the last one. Rank 0 prints
 * {@code JAVA_MPI_BW bytes=.. iters=.. seconds=.. GBps=..}, once per round ({@code -Dmpi.bw.rounds}, default 1). Rank 1 verifies the bytes of the first and the
 * last message (the payload pattern changes per message on those two).
 */
final class BandwidthCheck {
    private BandwidthCheck() {
    }

    static List<MpiCheck> all() {
        return List.of(check("bandwidth-16MiB", BandwidthCheck::run));
    }

    private static void run(MpiCheckContext ctx) {
        int rounds = Integer.getInteger("mpi.bw.rounds", 1);
        for (int r = 0; r < rounds; r++) {
            round(ctx);
        }
    }

    private static void round(MpiCheckContext ctx) {
        long bytes = Long.getLong("mpi.bw.bytes", 16L << 20);
        int iters = Integer.getInteger("mpi.bw.iters", 200);
        int warmup = Integer.getInteger("mpi.bw.warmup", 20);
        Duration t = Duration.ofSeconds(60);
        if (ctx.rank() > 1) {
            ctx.barrier();
            return;
        }
        Connection c = ctx.manager().connection(Integer.toString(1 - ctx.rank()));
        int tag = Tags.FIRST_DATA_TAG + 1000;
        try (HostBuffer buf = HostBuffer.allocate(bytes); HostBuffer ack = HostBuffer.allocate(1)) {
            int total = warmup + iters;
            long start = 0;
            if (ctx.rank() == 0) {
                Patterns.fill(buf, 0, bytes, 1);
                for (int i = 0; i < total; i++) {
                    if (i == warmup) {
                        ctx.barrier();
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
                        ctx.barrier();
                    }
                    c.recv(tag, buf, 0, bytes, t);
                    if (i == 0) {
                        verify(buf, 0, bytes, 1, "first bandwidth message");
                    }
                }
                verify(buf, 0, bytes, 2, "last bandwidth message");
                c.send(tag + 1, ack, 0, 1, t);
            }
        }
    }
}
