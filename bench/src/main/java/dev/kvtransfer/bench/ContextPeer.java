package dev.kvtransfer.bench;

import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.api.transport.TransportConfig;
import dev.kvtransfer.core.RequestState;
import dev.kvtransfer.core.TransceiverConfig;
import dev.kvtransfer.core.TransferRequest;
import dev.kvtransfer.core.local.LocalInstance;
import dev.kvtransfer.core.pattern.KvPattern;
import dev.kvtransfer.core.plugin.Plugins;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Base64;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;

/**
 * The context instance of the control and transceiver levels under {@code kvtransfer bench --peer process}: a
 * {@link LocalInstance} (ranks as threads) in a child JVM, driven by the bench over standard input, outside the
 * timed parts. Protocol lines it prints start with {@link PeerProcess#PREFIX}:
 * <ul>
 *   <li>start-up: {@code KVBENCH-CTX <pid>} once every rank listens;</li>
 *   <li>{@code WINDOW <firstId> <count> <blocks> <verify 0|1>}: allocates {@code blocks} blocks per rank for each
 *       of the {@code count} request ids from {@code firstId}, fills them with {@link KvPattern} when asked, starts
 *       its heap meter, makes every request ready ({@code respondAndSendAsync}) and prints
 *       {@code KVBENCH-PARAMS <base64 of ContextPhaseParams.toBytes()>...} (one per request, in order); when every
 *       rank's side of every request ended (bounded) it stops the meter, runs the context status agreement on
 *       every rank, frees the blocks and prints {@code KVBENCH-WDONE <heap bytes> <failed requests> <background
 *       errors> <first error or ->} (then, after a tab, the first background error, if any);</li>
 *   <li>{@code QUIT}: closes the instance (which fails on leaked buffers), prints {@code KVBENCH-CLOSED}, exits
 *       0.</li>
 * </ul>
 * Heap: every thread of this JVM from before the first {@code respondAndSendAsync} of a window to the end of its
 * last request, less what printing the params allocated on the main thread. Standard input ending (the bench went
 * away) halts the child; every wait is bounded by the timeout given.
 */
public final class ContextPeer {
    static final String READY_PREFIX = PeerProcess.PREFIX + "CTX ";

    private ContextPeer() {
    }

    /**
     * The arguments of a context peer.
     *
     * @param timeout            bound of every wait
     * @param state              the context instance's cache state
     * @param blocksPerRank      KV blocks of each rank's pool
     * @param transportProperties transport properties (every rank's)
     * @param transceiverProperties {@link TransceiverConfig#fromProperties(Map)} input, the backend included
     * @return the arguments for {@link PeerProcess#command(String, List)}
     */
    static List<String> arguments(Duration timeout, CacheState state, int blocksPerRank,
            Map<String, String> transportProperties, Map<String, String> transceiverProperties) {
        List<String> a = new ArrayList<>();
        a.add(Long.toString(Math.max(1, timeout.toSeconds())));
        a.add(Base64.getEncoder().encodeToString(state.toBytes()));
        a.add(Integer.toString(blocksPerRank));
        transportProperties.forEach((k, v) -> a.add("t:" + k + "=" + v));
        transceiverProperties.forEach((k, v) -> a.add("c:" + k + "=" + v));
        return a;
    }

    /**
     * Entry point.
     *
     * @param args see {@link #arguments}
     */
    public static void main(String[] args) {
        System.setProperty("chronicle.analytics.disable", "true");
        try {
            run(args);
            System.out.println(PeerProcess.PREFIX + "CLOSED");
            System.out.flush();
            System.exit(0);
        } catch (Throwable e) {
            e.printStackTrace();
            System.out.flush();
            System.exit(1);
        }
    }

    private static void run(String[] args) throws Exception {
        Duration timeout = Duration.ofSeconds(Long.parseLong(args[0]));
        CacheState state = CacheState.fromBytes(Base64.getDecoder().decode(args[1]));
        int blocksPerRank = Integer.parseInt(args[2]);
        Map<String, String> tprops = new LinkedHashMap<>();
        Map<String, String> cprops = new LinkedHashMap<>();
        for (int i = 3; i < args.length; i++) {
            int eq = args[i].indexOf('=');
            if (eq < 3 || !(args[i].startsWith("t:") || args[i].startsWith("c:"))) {
                throw new IllegalArgumentException("argument '" + args[i] + "': expected t:key=value or c:key=value");
            }
            (args[i].startsWith("t:") ? tprops : cprops).put(args[i].substring(2, eq), args[i].substring(eq + 1));
        }
        TransceiverConfig config = TransceiverConfig.fromProperties(cprops);
        Plugins plugins = Plugins.discover();
        AtomicLong backgroundErrors = new AtomicLong();
        String[] firstBackground = {""};
        TransportConfig tc = TransportConfig.builder().name("bench-ctx").defaultTimeout(timeout).properties(tprops)
                .build();
        ExecutorService sync = Executors.newCachedThreadPool(r -> {
            Thread t = new Thread(r, "bench-ctx-status-sync");
            t.setDaemon(true);
            return t;
        });
        try (LocalInstance ctx = LocalInstance.builder("bench-ctx", state)
                .transport(plugins.transport(config.backend()), tc)
                .plugins(plugins)
                .config(config)
                .blocksPerRank(blocksPerRank)
                .sharedBufferManager(true)
                .errorHandler(e -> {
                    if (backgroundErrors.getAndIncrement() == 0) {
                        firstBackground[0] = "bench-ctx: " + e.getMessage();
                    }
                })
                .start()) {
            System.out.println(READY_PREFIX + ProcessHandle.current().pid());
            System.out.flush();
            BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
            while (true) {
                String line = in.readLine();
                if (line == null) {
                    Runtime.getRuntime().halt(3); // the bench is gone
                }
                String[] w = line.trim().split(" ");
                if (w[0].equals("QUIT")) {
                    break;
                } else if (w[0].equals("WINDOW")) {
                    String done = window(ctx, Long.parseLong(w[1]), Integer.parseInt(w[2]), Integer.parseInt(w[3]),
                            w[4].equals("1"), timeout, sync);
                    long bg = backgroundErrors.get();
                    System.out.println(PeerProcess.PREFIX + "WDONE " + done.replace("@BG@", Long.toString(bg))
                            + (bg == 0 ? "" : "\tfirst background error: " + firstBackground[0].replace('\n', ' ')));
                    System.out.flush();
                } else {
                    throw new IllegalArgumentException("unknown command '" + line + "'");
                }
            }
        } finally {
            sync.shutdownNow();
        }
    }

    /** @return "heap failures @BG@ firstError" (the caller puts the background errors in) */
    private static String window(LocalInstance ctx, long first, int count, int blocks, boolean verify,
            Duration timeout, ExecutorService sync) {
        CacheState cs = ctx.cacheState();
        int isl = blocks * cs.tokensPerBlock();
        TransferRequest[][] reqs = new TransferRequest[count][ctx.ranks()];
        for (int i = 0; i < count; i++) {
            long id = first + i;
            for (int r = 0; r < ctx.ranks(); r++) {
                int[] b = ctx.cache(r).allocate(id, blocks);
                if (verify) {
                    KvPattern.fill(ctx.cache(r), b, ctx.cacheState(r), r, id, blocks);
                }
                reqs[i][r] = TransferRequest.context(id, isl, b);
            }
        }
        HeapMeter heap = new HeapMeter();
        heap.start();
        List<CompletableFuture<?>> done = new ArrayList<>();
        for (int i = 0; i < count; i++) {
            for (int r = 0; r < ctx.ranks(); r++) {
                ctx.transceiver(r).respondAndSendAsync(reqs[i][r]);
                done.add(reqs[i][r].completion().toCompletableFuture());
            }
        }
        long printStart = HeapMeter.currentThreadAllocated();
        StringBuilder params = new StringBuilder(PeerProcess.PREFIX).append("PARAMS");
        for (int i = 0; i < count; i++) {
            params.append(' ').append(Base64.getEncoder().encodeToString(ctx.contextPhaseParams(first + i, 0)
                    .toBytes()));
        }
        System.out.println(params);
        System.out.flush();
        long printed = HeapMeter.currentThreadAllocated() - printStart;
        long deadline = System.nanoTime() + timeout.plusSeconds(30).toNanos();
        boolean allDone = true;
        for (CompletableFuture<?> f : done) {
            try {
                f.get(Math.max(1, deadline - System.nanoTime()), TimeUnit.NANOSECONDS);
            } catch (java.util.concurrent.ExecutionException e) {
                // the request's state says why
            } catch (java.util.concurrent.TimeoutException e) {
                allDone = false;
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                throw new IllegalStateException("interrupted", e);
            }
        }
        long allocated = heap.stop();
        if (allocated >= 0 && printStart >= 0) {
            allocated = Math.max(0, allocated - printed);
        }
        if (!allDone) {
            // Freeing blocks under a transfer still running would be wrong: the bench gives up on this configuration.
            throw new IllegalStateException("context requests " + first + ".." + (first + count - 1)
                    + " did not finish within " + timeout.plusSeconds(30).toSeconds() + " s");
        }
        TransceiverBench.statusAgreement(sync, ctx, null, timeout);
        int failures = 0;
        String firstError = "-";
        for (int i = 0; i < count; i++) {
            boolean ok = true;
            for (TransferRequest q : reqs[i]) {
                if (q.state() != RequestState.CONTEXT_COMPLETE) {
                    ok = false;
                    if (firstError.equals("-")) {
                        firstError = ("request " + q.requestId() + " context side: " + q.state()
                                + q.error().map(e -> " " + e.getMessage()).orElse("")).replace('\n', ' ').replace('\t', ' ');
                    }
                }
            }
            failures += ok ? 0 : 1;
            for (int r = 0; r < ctx.ranks(); r++) {
                ctx.cache(r).free(first + i);
            }
        }
        return allocated + " " + failures + " @BG@ " + firstError;
    }
}
