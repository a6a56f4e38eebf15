package dev.kvtransfer.mpi;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;

/**
 * The program every rank runs under {@code mpirun} in {@link MpiRunIT}:
 * {@code MpiCheckMain [--suite transport,group,big,bw] [--check-class fqcn]...}. Between checks all ranks meet
 * in an allgather of their outcome, so a failure on one rank is reported by all and the job exits 1.
 * Output per check: {@code CHECK <name> OK} / {@code CHECK <name> FAILED: ...} from each rank, and at the
 * end {@code MPI-CHECKS rank=<r> size=<n> passed=<p> failed=<f>}.
 */
public final class MpiCheckMain {
    private MpiCheckMain() {
    }

    /**
     * Runs the selected checks.
     *
     * @param args see the class comment
     */
    public static void main(String[] args) {
        List<MpiCheck> checks = new ArrayList<>();
        for (int i = 0; i < args.length; i++) {
            switch (args[i]) {
                case "--suite" -> {
                    for (String s : args[++i].split(",")) {
                        checks.addAll(suite(s.trim()));
                    }
                }
                case "--check-class" -> checks.add(instantiate(args[++i]));
                default -> throw new IllegalArgumentException("unknown argument " + args[i]);
            }
        }
        int failed = 0;
        int passed = 0;
        MpiCheckContext ctx = null;
        try {
            MpiGroupComm world = MpiGroupComm.world(Duration.ofSeconds(60));
            ctx = new MpiCheckContext(world);
            ctx.log("started: " + MpiRuntime.get().libraryVersion() + ", MPI_TAG_UB " + MpiRuntime.get()
                    .tagUpperBound() + ", " + world.size() + " ranks");
            for (MpiCheck check : checks) {
                if (world.size() < check.minRanks()) {
                    ctx.log("CHECK " + check.name() + " NOT APPLICABLE: needs " + check.minRanks() + " ranks");
                    continue;
                }
                ctx.barrier();
                long start = System.nanoTime();
                String error = null;
                try {
                    check.run(ctx);
                } catch (Throwable t) {
                    error = t.toString();
                    t.printStackTrace(System.out);
                }
                List<long[]> outcomes = ctx.allgather(error == null ? 0 : 1);
                // a rank out of step (after a failure) may deliver an empty array: that counts as a failure too
                long failedRanks = outcomes.stream().filter(o -> o.length != 1 || o[0] != 0).count();
                long ms = (System.nanoTime() - start) / 1_000_000;
                if (error == null && failedRanks == 0) {
                    passed++;
                    ctx.log("CHECK " + check.name() + " OK (" + ms + " ms)");
                } else {
                    failed++;
                    ctx.log("CHECK " + check.name() + " FAILED" + (error != null ? ": " + error
                            : " on " + failedRanks + " other rank(s)"));
                }
            }
            ctx.log("MPI-CHECKS rank=" + ctx.rank() + " size=" + ctx.size() + " passed=" + passed + " failed="
                    + failed);
            ctx.closeAll();
            world.close();
        } catch (Throwable t) {
            System.out.println("MPI-CHECKS ABORTED on world rank: " + t);
            t.printStackTrace(System.out);
            failed++;
        }
        System.out.flush();
        MpiRuntime.shutdown();
        System.exit(failed == 0 ? 0 : 1);
    }

    static List<MpiCheck> suite(String name) {
        return switch (name) {
            case "transport" -> TransportChecks.all();
            case "group" -> GroupChecks.all();
            case "big" -> BigChecks.all();
            case "bw" -> BandwidthCheck.all();
            default -> throw new IllegalArgumentException("unknown suite " + name
                    + " (transport, group, big, bw)");
        };
    }

    private static MpiCheck instantiate(String className) {
        try {
            return (MpiCheck) Class.forName(className).getDeclaredConstructor().newInstance();
        } catch (ReflectiveOperationException e) {
            throw new IllegalArgumentException("cannot create check " + className + ": " + e, e);
        }
    }
}
