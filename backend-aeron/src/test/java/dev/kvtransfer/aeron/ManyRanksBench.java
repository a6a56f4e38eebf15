package dev.kvtransfer.aeron;

import dev.kvtransfer.api.transport.TransportConfig;

import java.time.Duration;

/**
 * 192 ranks over Aeron in one JVM (bench scope): a context instance of TP16 x PP8 (128 ranks) and a
 * generation instance of TP16 x PP4 (64 ranks), every rank its own manager, rounds of requests from the first
 * contact on, every element verified. Prints per round: requests, wall time, elements verified, failures.
 *
 * <p>Arguments: {@code [rounds=3] [requests=4] [ipc=true|false] [key=value ...]} (transport properties).
 */
public final class ManyRanksBench {
    private ManyRanksBench() {
    }

    public static void main(String[] args) {
        int rounds = args.length > 0 ? Integer.parseInt(args[0]) : 3;
        int requests = args.length > 1 ? Integer.parseInt(args[1]) : 4;
        String ipc = args.length > 2 ? args[2] : "true";
        TransportConfig.Builder b = TransportConfig.builder().defaultTimeout(Duration.ofSeconds(60))
                .property("aeron.ipc", ipc).property("aeron.termLength", String.valueOf(1 << 20));
        for (int i = 3; i < args.length; i++) {
            int eq = args[i].indexOf('=');
            b.property(args[i].substring(0, eq), args[i].substring(eq + 1));
        }
        int failed = run(b.build(), 16, 8, 16, 4, rounds, requests);
        System.exit(failed == 0 ? 0 : 1);
    }

    /** Runs rounds and prints each; returns the failed requests over all rounds. */
    static int run(TransportConfig transport, int ctxTp, int ctxPp, int genTp, int genPp, int rounds,
                          int requests) {
        int failed = 0;
        try (ManyRanks m = new ManyRanks(8, 32, 16, 16, ctxTp, ctxPp, genTp, genPp, transport, 32)) {
            System.out.printf("%d ranks (ctx TP%d PP%d, gen TP%d PP%d), aeron.ipc=%s: started in %d ms%n",
                    m.ctx.ranks() + m.gen.ranks(), ctxTp, ctxPp, genTp, genPp,
                    transport.property(AeronSettings.IPC, "true"), m.startMs);
            for (int i = 0; i < rounds; i++) {
                ManyRanks.Round r = m.round(requests, 64, Duration.ofSeconds(120));
                failed += r.failures().size();
                System.out.printf("round %d: %d requests in %d ms, %d elements verified, %d failures %s%n", i,
                        r.requests(), r.millis(), r.elements(), r.failures().size(),
                        r.failures().isEmpty() ? "" : r.failures().subList(0, Math.min(3, r.failures().size())));
            }
            System.out.println("background errors: " + m.errors.size());
            AeronRuntime.driverCounters().stream().filter(l -> l.contains("cycle time") || l.contains("mapped")
                    || l.contains("by kind")).forEach(System.out::println);
        }
        return failed;
    }
}
