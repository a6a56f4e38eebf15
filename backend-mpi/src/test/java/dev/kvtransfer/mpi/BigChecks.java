package dev.kvtransfer.mpi;

import dev.kvtransfer.api.transport.Connection;
import dev.kvtransfer.api.transport.Tags;

import java.time.Duration;
import java.util.List;

import static dev.kvtransfer.mpi.TransportChecks.check;
import static dev.kvtransfer.mpi.TransportChecks.verify;

/** One real message above 2^31-1 bytes (2.5 GiB) with the default 1 GiB chunk size: 1 GiB + 1 GiB + 0.5 GiB. */
final class BigChecks {
    static final long BIG = (5L << 30) / 2;

    private BigChecks() {
    }

    static List<MpiCheck> all() {
        return List.of(check("message-2.5GiB-chunked", BigChecks::big));
    }

    private static void big(MpiCheckContext ctx) {
        int partner = ctx.partner();
        if (partner < 0 || ctx.rank() > 1) {
            return; // one pair is enough, and the memory is the limit
        }
        Connection c = ctx.manager().connection(Integer.toString(partner));
        int tag = Tags.FIRST_DATA_TAG + 900;
        long seed = 2_500;
        try (HostBuffer buf = HostBuffer.allocate(BIG + 3)) {
            long start = System.nanoTime();
            if (ctx.rank() == 0) {
                Patterns.fill(buf, 3, BIG, seed);
                double fillSecs = (System.nanoTime() - start) / 1e9;
                start = System.nanoTime();
                c.send(tag, buf, 3, BIG, Duration.ofSeconds(60)); // odd offset: unaligned source
                ctx.log(String.format("2.5 GiB message: fill %.2f s, send %.2f s", fillSecs,
                        (System.nanoTime() - start) / 1e9));
            } else {
                c.recv(tag, buf, 3, BIG, Duration.ofSeconds(60));
                double secs = (System.nanoTime() - start) / 1e9;
                start = System.nanoTime();
                verify(buf, 3, BIG, seed, "2.5 GiB message");
                ctx.log(String.format("2.5 GiB message received (%.2f s, including the sender's fill) and"
                        + " verified (%.2f s)", secs, (System.nanoTime() - start) / 1e9));
            }
        }
    }
}
