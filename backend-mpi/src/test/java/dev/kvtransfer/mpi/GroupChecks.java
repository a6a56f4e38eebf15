package dev.kvtransfer.mpi;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.KvTransferException;

import java.time.Duration;
import java.util.Arrays;
import java.util.List;

import static dev.kvtransfer.mpi.TransportChecks.check;
import static dev.kvtransfer.mpi.TransportChecks.require;

/** {@link MpiGroupComm} checks: variable-length allgather over the world and over split groups, timeouts. */
final class GroupChecks {
    private static final Duration T = Duration.ofSeconds(30);

    private GroupChecks() {
    }

    static List<MpiCheck> all() {
        return List.of(
                check("group-allgather-world", GroupChecks::world),
                check("group-allgather-split", GroupChecks::split),
                check("group-allgather-timeout-then-in-step", GroupChecks::timeoutThenInStep));
    }

    private static long[] contribution(int rank, int round) {
        long[] v = new long[rank + round % 3]; // ranks contribute different lengths, some none
        for (int i = 0; i < v.length; i++) {
            v[i] = rank * 1_000_000L + round * 1_000L + i;
        }
        return v;
    }

    private static void world(MpiCheckContext ctx) {
        MpiGroupComm w = ctx.world();
        require(w.size() == MpiRuntime.get().worldSize(), "world group size " + w.size());
        for (int round = 0; round < 20; round++) {
            List<long[]> all = w.allgather(contribution(w.rank(), round), T);
            require(all.size() == w.size(), "allgather returned " + all.size() + " arrays");
            for (int r = 0; r < all.size(); r++) {
                require(Arrays.equals(all.get(r), contribution(r, round)), "round " + round + " member " + r
                        + ": " + Arrays.toString(all.get(r)));
            }
        }
    }

    // color = rank % 2 (two groups), key = -rank: members ordered by descending world rank.
    private static void split(MpiCheckContext ctx) {
        int rank = ctx.rank();
        int size = ctx.size();
        try (MpiGroupComm g = MpiGroupComm.split(rank % 2, -rank, T)) {
            int[] members = java.util.stream.IntStream.range(0, size).filter(r -> r % 2 == rank % 2)
                    .boxed().sorted((x, y) -> Integer.compare(y, x)).mapToInt(Integer::intValue).toArray();
            require(g.size() == members.length, "group size " + g.size() + " != " + members.length);
            require(members[g.rank()] == rank, "group rank " + g.rank() + " for world rank " + rank);
            List<long[]> all = g.allgather(new long[] {rank, rank * 10L, -rank}, T);
            for (int i = 0; i < members.length; i++) {
                int r = members[i];
                require(Arrays.equals(all.get(i), new long[] {r, r * 10L, -r}), "member " + i + " (world "
                        + r + "): " + Arrays.toString(all.get(i)));
            }
        }
    }

    // Rank 0 calls first, alone, and times out; the others arrive later. Rank 0's next call first finishes
    // that round; the others' first round carries rank 0's early values and their second its new ones.
    private static void timeoutThenInStep(MpiCheckContext ctx) {
        try (MpiGroupComm g = MpiGroupComm.split(0, ctx.rank(), T)) {
            if (ctx.rank() == 0) {
                long start = System.nanoTime();
                try {
                    g.allgather(new long[] {-1}, Duration.ofMillis(200));
                    throw new AssertionError("allgather alone succeeded");
                } catch (KvTransferException e) {
                    require(e.code() == ErrorCode.TIMEOUT, "expected TIMEOUT, got " + e.code());
                }
                long ms = (System.nanoTime() - start) / 1_000_000;
                require(ms >= 190 && ms < 5_000, "200 ms allgather timed out after " + ms + " ms");
                ctx.barrier();
                List<long[]> all = g.allgather(new long[] {42}, T);
                for (int r = 1; r < all.size(); r++) {
                    require(Arrays.equals(all.get(r), new long[] {r, 2}), "round 2 from " + r);
                }
                require(Arrays.equals(all.get(0), new long[] {42}), "own round 2 value");
            } else {
                ctx.barrier();
                List<long[]> first = g.allgather(new long[] {ctx.rank(), 1}, T);
                require(Arrays.equals(first.get(0), new long[] {-1}), "round 1 carries rank 0's timed-out value: "
                        + Arrays.toString(first.get(0)));
                List<long[]> second = g.allgather(new long[] {ctx.rank(), 2}, T);
                require(Arrays.equals(second.get(0), new long[] {42}), "round 2 carries rank 0's new value");
            }
        }
    }
}
