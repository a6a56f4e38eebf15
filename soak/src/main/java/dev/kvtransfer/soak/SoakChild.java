package dev.kvtransfer.soak;

import dev.kvtransfer.api.KvTransferException;
import dev.kvtransfer.api.layout.BlockDistribution;
import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.api.model.ContextPhaseParams;
import dev.kvtransfer.api.transport.TransportConfig;
import dev.kvtransfer.core.RequestState;
import dev.kvtransfer.core.TransceiverConfig;
import dev.kvtransfer.core.TransferRequest;
import dev.kvtransfer.core.local.LocalInstance;
import dev.kvtransfer.core.plugin.Plugins;
import dev.kvtransfer.testkit.KvPattern;
import dev.kvtransfer.testkit.fault.Fault;
import dev.kvtransfer.testkit.fault.Faults;
import dev.kvtransfer.testkit.fault.FaultyTransportProvider;

import java.io.BufferedReader;
import java.io.File;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.lang.management.ManagementFactory;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Base64;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ConcurrentSkipListMap;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.function.Predicate;

/**
 * One soak process: a core {@link LocalInstance} over the named transport wrapped in the testkit's
 * {@link FaultyTransportProvider}, driven by the parent ({@link Soak}) line by line over stdin; it answers on
 * stdout. Stdin reaching its end (the parent died) halts the process at once, so no child outlives a soak.
 *
 * <p>Arguments: {@code <ctx|gen> <name> <backend> <state spec> <blocksPerRank> [key=value...]}; every
 * {@code key=value} goes to the transport config and to {@link TransceiverConfig#fromProperties(Map)}.
 *
 * <p>Commands, both roles: {@code FAULT <DROP|DELAY|STALL> <data|info> <times> <millis>} (arms a fault, answers
 * {@code FAULTED}), {@code CLEAR}, {@code COUNTS <label>} (answers {@code COUNTS <label> injected=<kind:hits,..>}),
 * {@code STATS <label>} (answers {@code STATS <label> heap=.. fds=.. threads=..
 * injected=..} after a {@code System.gc()}), {@code EXIT} (closes, answers {@code CLOSED}). Context role:
 * {@code CTX <id> <prompt>} answers {@code PARAMS <id> <base64>}, then {@code CTXDONE <id> <OK|FAIL> <code> <errId>
 * <message>} when every rank's side ended (or {@code CTXREFUSED <id> <why>} when no blocks are free). Generation
 * role: {@code GEN <id> <prompt> <base64 params>} answers {@code GENDONE <id> OK <bytes verified>}, {@code GENDONE
 * <id> FAIL <code> <errId> <message>} or {@code GENDONE <id> BADDATA <mismatches> <first mismatch>};
 * {@code CANCEL <id>} (both roles) cancels the request on every rank and answers {@code CANCELLED <id> <whether any
 * rank accepted>}.
 */
public final class SoakChild {
    private static final PrintStream OUT = System.out;

    private final LocalInstance instance;
    private final Faults faults;
    private final Map<Long, List<TransferRequest>> live = new ConcurrentHashMap<>();
    /** Messages hit per fault kind and target ({@code DROP/data}), since this process started. */
    private final Map<String, AtomicInteger> hits = new ConcurrentSkipListMap<>();
    /** Verification runs here, off the transceiver's completion threads. */
    private final ExecutorService verifier = Executors.newSingleThreadExecutor(r -> {
        Thread t = new Thread(r, "soak-verify");
        t.setDaemon(true);
        return t;
    });

    /** Each rank's status check, as an engine's loop calls it: the transceiver forgets what it reported. */
    private final java.util.concurrent.ScheduledExecutorService status;
    private final AtomicInteger statusFailures = new AtomicInteger();

    private SoakChild(LocalInstance instance, Faults faults) {
        this.instance = instance;
        this.faults = faults;
        this.status = Executors.newScheduledThreadPool(instance.ranks(), r -> {
            Thread t = new Thread(r, "soak-status");
            t.setDaemon(true);
            return t;
        });
        boolean context = instance.name().startsWith("ctx");
        for (int r = 0; r < instance.ranks(); r++) {
            int rank = r;
            // Every rank of the group checks with the same atLeast (0: one collective round, no wait), each on its
            // own thread, as each rank's engine loop would.
            status.scheduleWithFixedDelay(() -> {
                try {
                    if (context) {
                        instance.transceiver(rank).checkContextTransferStatus(java.util.OptionalInt.of(0));
                    } else {
                        instance.transceiver(rank).checkGenTransferStatus(java.util.OptionalInt.of(0));
                    }
                } catch (RuntimeException e) {
                    statusFailures.incrementAndGet(); // a group that did not gather in time: the next round reports
                }
            }, 100, 100, java.util.concurrent.TimeUnit.MILLISECONDS);
        }
    }

    /**
     * Builds a cache state from a compact spec.
     *
     * @param spec {@code tp,pp,layers,heads,sizePerHead,tokensPerBlock,dataType}
     * @return the state
     */
    static CacheState state(String spec) {
        // The testkit's child processes read the same spec.
        return dev.kvtransfer.testkit.process.ContextInstanceMain.state(spec);
    }

    /**
     * Entry point.
     *
     * @param args see the class comment
     */
    public static void main(String[] args) {
        try {
            run(args);
            say("CLOSED");
            System.exit(0);
        } catch (Throwable e) {
            e.printStackTrace();
            say("FAILED " + oneLine(String.valueOf(e)));
            System.exit(1);
        }
    }

    private static void run(String[] args) throws Exception {
        String name = args[1];
        String backend = args[2];
        CacheState state = state(args[3]);
        int blocksPerRank = Integer.parseInt(args[4]);
        Map<String, String> props = new LinkedHashMap<>();
        for (int i = 5; i < args.length; i++) {
            int eq = args[i].indexOf('=');
            props.put(args[i].substring(0, eq), args[i].substring(eq + 1));
        }
        Plugins plugins = Plugins.discover();
        Faults faults = new Faults();
        FaultyTransportProvider transport = new FaultyTransportProvider(plugins.transport(backend), faults);
        TransportConfig tc = TransportConfig.builder().properties(props).build();
        TransceiverConfig config = TransceiverConfig.fromProperties(props).toBuilder().backend(backend).build();
        try (LocalInstance inst = LocalInstance.builder(name, state).transport(transport, tc)
                .formatter(plugins.formatterFor(state.attentionType())).config(config).blocksPerRank(blocksPerRank)
                .errorHandler(e -> {
                    // Background errors are expected under faults (a killed peer); count them, keep serving.
                    say("BGERROR " + oneLine(e.getClass().getSimpleName() + ": " + e.getMessage()));
                }).start()) {
            say("READY");
            new SoakChild(inst, faults).loop();
        }
    }

    private void loop() throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        for (String line; ; ) {
            line = in.readLine();
            if (line == null) {
                Runtime.getRuntime().halt(3); // the parent is gone
            }
            String[] w = line.trim().split(" ");
            switch (w[0]) {
                case "EXIT" -> {
                    status.shutdownNow();
                    verifier.shutdown();
                    return;
                }
                case "CTX" -> serve(Long.parseLong(w[1]), Integer.parseInt(w[2]));
                case "GEN" -> receive(Long.parseLong(w[1]), Integer.parseInt(w[2]), w[3]);
                case "CANCEL" -> cancel(Long.parseLong(w[1]));
                case "FAULT" -> {
                    faults.inject(fault(w));
                    say("FAULTED " + w[1] + " " + w[2]);
                }
                case "CLEAR" -> faults.clear();
                case "COUNTS" -> say("COUNTS " + w[1] + " injected=" + injected());
                case "STATS" -> say("STATS " + w[1] + " " + stats() + " injected=" + injected() + " live="
                        + live.size());
                default -> throw new IllegalArgumentException("unknown command '" + line + "'");
            }
        }
    }

    private Fault fault(String[] w) {
        Fault.Kind kind = Fault.Kind.valueOf(w[1]);
        Predicate<Fault.Message> base = switch (w[2]) {
            case "data" -> Fault.dataOfAtLeast(1);
            case "info" -> Fault.requestInfos();
            default -> throw new IllegalArgumentException("fault target " + w[2]);
        };
        // Faults tests the predicate of an armed fault only while it has hits left, and applies the fault when it
        // is true: counting the trues counts the messages hit, per kind and target.
        AtomicInteger n = hits.computeIfAbsent(kind + "/" + w[2], k -> new AtomicInteger());
        Predicate<Fault.Message> where = m -> {
            boolean t = base.test(m);
            if (t) {
                n.incrementAndGet();
            }
            return t;
        };
        int times = Integer.parseInt(w[3]);
        return new Fault(kind, where, times, Duration.ofMillis(Long.parseLong(w[4])));
    }

    private String injected() {
        StringBuilder b = new StringBuilder();
        hits.forEach((k, n) -> b.append(b.length() == 0 ? "" : ",").append(k).append(':').append(n.get()));
        return b.length() == 0 ? "-" : b.toString();
    }

    /**
     * Heap used after a GC, open descriptors and live threads of this process.
     *
     * @return {@code heap=<bytes> fds=<n> threads=<n>}
     */
    static String stats() {
        System.gc();
        Runtime rt = Runtime.getRuntime();
        long heap = rt.totalMemory() - rt.freeMemory();
        String[] fds = new File("/proc/self/fd").list();
        int threads = ManagementFactory.getThreadMXBean().getThreadCount();
        return "heap=" + heap + " fds=" + (fds == null ? -1 : fds.length) + " threads=" + threads;
    }

    private void serve(long id, int prompt) {
        CacheState s = instance.cacheState();
        int totalBlocks = BlockDistribution.blocksFor(prompt, s.tokensPerBlock());
        List<TransferRequest> reqs = new ArrayList<>();
        try {
            for (int r = 0; r < instance.ranks(); r++) {
                int n = BlockDistribution.count(totalBlocks, s.contextParallelism(), s.cpRank(r));
                int[] ids = instance.cache(r).allocate(id, n);
                KvPattern.fill(instance.cache(r), ids, instance.cacheState(r), r, id, totalBlocks);
                reqs.add(TransferRequest.context(id, prompt, ids));
            }
        } catch (RuntimeException e) {
            for (int r = 0; r < instance.ranks(); r++) {
                instance.cache(r).free(id);
            }
            say("CTXREFUSED " + id + " " + oneLine(String.valueOf(e)));
            return;
        }
        live.put(id, reqs);
        for (int r = 0; r < instance.ranks(); r++) {
            instance.transceiver(r).respondAndSendAsync(reqs.get(r));
        }
        CompletableFuture.allOf(reqs.stream().map(q -> q.completion().toCompletableFuture())
                .toArray(CompletableFuture[]::new)).handle((v, e) -> {
                    for (int r = 0; r < instance.ranks(); r++) {
                        instance.cache(r).free(id);
                    }
                    live.remove(id);
                    say("CTXDONE " + id + " " + outcome(reqs));
                    return null;
                });
        byte[] params = instance.contextPhaseParams(id, 0).toBytes();
        say("PARAMS " + id + " " + Base64.getEncoder().encodeToString(params));
    }

    private void receive(long id, int prompt, String params64) {
        ContextPhaseParams params = ContextPhaseParams.fromBytes(Base64.getDecoder().decode(params64));
        CacheState s = instance.cacheState();
        int total = BlockDistribution.blocksFor(prompt, s.tokensPerBlock());
        List<TransferRequest> reqs = new ArrayList<>();
        try {
            for (int r = 0; r < instance.ranks(); r++) {
                int[] ids = instance.cache(r).allocate(id, BlockDistribution.count(total, s.contextParallelism(),
                        s.cpRank(r)));
                reqs.add(TransferRequest.generation(params, prompt, ids));
            }
        } catch (RuntimeException e) {
            for (int r = 0; r < instance.ranks(); r++) {
                instance.cache(r).free(id);
            }
            say("GENDONE " + id + " FAIL REFUSED " + id + " " + oneLine(String.valueOf(e)));
            return;
        }
        live.put(id, reqs);
        for (int r = 0; r < instance.ranks(); r++) {
            instance.transceiver(r).requestAndReceiveAsync(reqs.get(r));
        }
        CompletableFuture.allOf(reqs.stream().map(q -> q.completion().toCompletableFuture())
                .toArray(CompletableFuture[]::new)).handle((v, e) -> {
                    verifier.execute(() -> finishGeneration(id, total, reqs));
                    return null;
                });
    }

    private void finishGeneration(long id, int totalBlocks, List<TransferRequest> reqs) {
        String line;
        try {
            String failed = outcome(reqs);
            if (!failed.startsWith("OK")) {
                line = failed;
            } else {
                KvPattern.Result all = KvPattern.Result.empty();
                long bytes = 0;
                for (int r = 0; r < reqs.size(); r++) {
                    TransferRequest q = reqs.get(r);
                    KvPattern.Result v = KvPattern.verify(instance.cache(r), q.blockIds(), instance.cacheState(r), r,
                            id, totalBlocks);
                    all = all.merge(v);
                    bytes += v.checkedElements() * instance.cacheState(r).dataType().bytes();
                }
                line = all.ok() ? "OK " + bytes : "BADDATA " + all.mismatches() + " " + oneLine(all.firstMismatch());
            }
        } catch (RuntimeException e) {
            line = "BADDATA -1 " + oneLine(String.valueOf(e));
        } finally {
            for (int r = 0; r < instance.ranks(); r++) {
                instance.cache(r).free(id);
            }
            live.remove(id);
        }
        say("GENDONE " + id + " " + line);
    }

    /** {@code OK} when every rank completed, else {@code FAIL <code> <error's request id> <message>}. */
    private String outcome(List<TransferRequest> reqs) {
        for (TransferRequest q : reqs) {
            RequestState st = q.state();
            if (st == RequestState.CONTEXT_COMPLETE || st == RequestState.GENERATION_TRANS_COMPLETE) {
                continue;
            }
            KvTransferException e = q.error().orElse(null);
            if (e == null) {
                return "FAIL NONE -1 state " + st + " without an error";
            }
            return "FAIL " + (e.code() == null ? "NONE" : e.code().name()) + " " + e.requestId() + " "
                    + oneLine(e.getMessage());
        }
        return "OK";
    }

    private void cancel(long id) {
        List<TransferRequest> reqs = live.get(id);
        boolean accepted = false;
        if (reqs != null) {
            for (int r = 0; r < reqs.size(); r++) {
                accepted |= instance.transceiver(r).cancelRequest(reqs.get(r));
            }
        }
        say("CANCELLED " + id + " " + accepted);
    }

    private static String oneLine(String s) {
        return s == null ? "-" : s.replace('\n', ' ').replace('\r', ' ');
    }

    private static void say(String line) {
        synchronized (OUT) {
            OUT.println(line);
            OUT.flush();
        }
    }
}
