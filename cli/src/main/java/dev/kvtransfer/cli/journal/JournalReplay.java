package dev.kvtransfer.cli.journal;

import dev.kvtransfer.api.layout.BlockDistribution;
import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.api.model.ContextPhaseParams;
import dev.kvtransfer.api.transport.TransportConfig;
import dev.kvtransfer.api.transport.TransportProvider;
import dev.kvtransfer.core.RequestState;
import dev.kvtransfer.core.TransceiverConfig;
import dev.kvtransfer.core.TransferRequest;
import dev.kvtransfer.core.journal.JournalEvent;
import dev.kvtransfer.core.journal.JournalReader;
import dev.kvtransfer.core.journal.RequestTimeline;
import dev.kvtransfer.core.journal.TransferJournal.Role;
import dev.kvtransfer.core.local.LocalInstance;
import dev.kvtransfer.core.plugin.Plugins;
import dev.kvtransfer.core.pattern.KvPattern;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.TreeMap;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.LockSupport;

/**
 * Re-runs the transfers a journal recorded: the two instances' layouts come from the recorded cache states
 * (OPENED records), each request keeps its prompt length, its serving ranks and their block counts (ACCEPTED
 * records) and its arrival gap to the first request (or none with {@code asFastAsPossible}). Both instances
 * run in this JVM ({@link LocalInstance}) over the chosen backend; the context blocks are filled with
 * {@link KvPattern} and every received element is verified.
 */
public final class JournalReplay {
    private JournalReplay() {
    }

    /**
     * One recorded request to replay.
     *
     * @param requestId         the recorded id (reused)
     * @param promptLength      prompt tokens
     * @param arrivalNanos      gap to the first request's arrival
     * @param ctxBlocks         blocks per serving context rank
     * @param genBlocks         blocks per serving generation rank
     * @param recordedNanos     recorded generation-side duration, -1 when it did not complete
     * @param recordedOutcome   how it ended in the recording
     */
    public record RecordedRequest(long requestId, int promptLength, long arrivalNanos, Map<Integer, Integer> ctxBlocks,
                                  Map<Integer, Integer> genBlocks, long recordedNanos,
                                  RequestTimeline.Outcome recordedOutcome) {
    }

    /**
     * What to replay.
     *
     * @param contextInstance    recorded context instance name
     * @param contextState       its cache state
     * @param generationInstance recorded generation instance name
     * @param generationState    its cache state
     * @param requests           requests in arrival order
     */
    public record Plan(String contextInstance, CacheState contextState, String generationInstance,
                       CacheState generationState, List<RecordedRequest> requests) {
    }

    /**
     * Outcome of one replayed request.
     *
     * @param request        what was recorded
     * @param ok             whether every rank completed it
     * @param submittedNanos when the replay submitted it, from the replay's start
     * @param replayedNanos  generation-side duration of the replay
     * @param checked        elements verified
     * @param mismatches     elements that differed from KvPattern
     * @param error          first error or mismatch, empty when none
     */
    public record Replayed(RecordedRequest request, boolean ok, long submittedNanos, long replayedNanos, long checked,
                           long mismatches, String error) {
        /** @return whether it completed and every element matched */
        public boolean verified() {
            return ok && mismatches == 0 && checked > 0;
        }
    }

    /**
     * Builds the plan from a run's journals.
     *
     * @param journal what {@link JournalReader#readAll} returned
     * @return the plan
     * @throws IllegalArgumentException when the journal does not hold exactly one context and one generation
     *                                  instance with their cache states, or no request
     */
    public static Plan plan(JournalReader.Result journal) {
        Objects.requireNonNull(journal, "journal");
        Map<String, Map<Integer, CacheState>> states = new TreeMap<>();
        for (JournalEvent e : journal.events()) {
            if (e instanceof JournalEvent.Opened o) {
                states.computeIfAbsent(o.instance(), k -> new TreeMap<>()).put(o.rank(), o.selfState());
            }
        }
        Map<Long, RequestTimeline> timelines = RequestTimeline.of(journal.events());
        Map<Role, java.util.Set<String>> instancesByRole = new LinkedHashMap<>();
        for (RequestTimeline t : timelines.values()) {
            for (JournalEvent.Accepted a : t.accepted().values()) {
                instancesByRole.computeIfAbsent(a.role(), k -> new java.util.TreeSet<>()).add(a.source().instance());
            }
        }
        String ctx = single(instancesByRole.get(Role.CONTEXT), "context");
        String gen = single(instancesByRole.get(Role.GENERATION), "generation");
        CacheState ctxState = instanceState(states, ctx);
        CacheState genState = instanceState(states, gen);
        List<RecordedRequest> requests = new ArrayList<>();
        long first = timelines.values().stream().mapToLong(RequestTimeline::firstAcceptedWallNanos).min()
                .orElse(0);
        List<RequestTimeline> ordered = new ArrayList<>(timelines.values());
        ordered.sort(Comparator.comparingLong(RequestTimeline::firstAcceptedWallNanos)
                .thenComparingLong(RequestTimeline::requestId));
        for (RequestTimeline t : ordered) {
            Map<Integer, Integer> c = new TreeMap<>();
            Map<Integer, Integer> g = new TreeMap<>();
            for (JournalEvent.Accepted a : t.accepted(Role.CONTEXT)) {
                c.put(a.source().rank(), a.blockCount());
            }
            for (JournalEvent.Accepted a : t.accepted(Role.GENERATION)) {
                g.put(a.source().rank(), a.blockCount());
            }
            if (c.isEmpty() || g.isEmpty()) {
                continue; // only one side recorded it: nothing to pair it with
            }
            requests.add(new RecordedRequest(t.requestId(), t.promptLength(), t.firstAcceptedWallNanos() - first, c, g,
                    t.generationDurationNanos(), t.outcome()));
        }
        if (requests.isEmpty()) {
            throw new IllegalArgumentException("the journal holds no request accepted by both a context and a "
                    + "generation rank");
        }
        return new Plan(ctx, ctxState, gen, genState, List.copyOf(requests));
    }

    private static String single(java.util.Set<String> names, String side) {
        if (names == null || names.isEmpty()) {
            throw new IllegalArgumentException("the journal holds no " + side + " instance (no ACCEPTED record with "
                    + "that role)");
        }
        if (names.size() > 1) {
            throw new IllegalArgumentException("replay needs one " + side + " instance; the journal holds " + names);
        }
        return names.iterator().next();
    }

    private static CacheState instanceState(Map<String, Map<Integer, CacheState>> states, String instance) {
        Map<Integer, CacheState> ranks = states.get(instance);
        if (ranks == null || ranks.isEmpty()) {
            throw new IllegalArgumentException("no OPENED record of instance " + instance + ": its layout is unknown");
        }
        CacheState s = ranks.values().iterator().next();
        if (ranks.size() != s.worldSize()) {
            throw new IllegalArgumentException("instance " + instance + " has " + s.worldSize() + " ranks but "
                    + ranks.size() + " rank journals were found " + ranks.keySet());
        }
        // Each rank recorded its own DP rank; the instance starts from DP rank 0 and LocalInstance sets each one.
        return s.attentionDpEnabled() ? s.withDpRank(0) : s;
    }

    /** Default host memory for the KV blocks of the requests in flight, per instance. */
    public static final long DEFAULT_MEMORY_BUDGET_BYTES = 2048L << 20;

    /**
     * Runs the plan with the default memory budget.
     *
     * @param plan             what to replay
     * @param backend          transport provider name
     * @param asFastAsPossible ignore the recorded gaps
     * @param config           transceiver settings (its backend is replaced by {@code backend})
     * @param timeout          deadline of each request
     * @return one result per request, in plan order
     */
    public static List<Replayed> run(Plan plan, String backend, boolean asFastAsPossible, TransceiverConfig config,
                                     Duration timeout) {
        return run(plan, backend, asFastAsPossible, config, timeout, DEFAULT_MEMORY_BUDGET_BYTES);
    }

    /**
     * Runs the plan. At most as many requests as fit in {@code memoryBudgetBytes} (per instance) are in flight:
     * before the next one is submitted the oldest is awaited, verified and freed, which can delay an arrival
     * past its recorded gap (never before it).
     *
     * @param plan              what to replay
     * @param backend           transport provider name
     * @param asFastAsPossible  ignore the recorded gaps
     * @param config            transceiver settings (its backend is replaced by {@code backend})
     * @param timeout           deadline of each request
     * @param memoryBudgetBytes host memory for in-flight KV blocks, per instance
     * @return one result per request, in plan order
     */
    public static List<Replayed> run(Plan plan, String backend, boolean asFastAsPossible, TransceiverConfig config,
                                     Duration timeout, long memoryBudgetBytes) {
        Objects.requireNonNull(plan, "plan");
        Objects.requireNonNull(backend, "backend");
        Plugins plugins = Plugins.discover();
        TransportProvider transport = plugins.transport(backend);
        TransceiverConfig cfg = config.toBuilder().backend(backend).kvTransferTimeout(timeout).build();
        TransportConfig base = TransportConfig.builder().name("replay").defaultTimeout(timeout)
                .properties(Map.of("loopback.fabric", "replay-" + System.nanoTime())).build();
        long perRequest = Math.max(requestBytes(plan, true), requestBytes(plan, false));
        int window = (int) Math.max(1, Math.min(plan.requests().size(),
                memoryBudgetBytes / Math.max(1, perRequest)));
        int ctxBlocks = window * maxBlocksPerRank(plan, true);
        int genBlocks = window * maxBlocksPerRank(plan, false);
        List<Replayed> results = new ArrayList<>();
        try (LocalInstance ctx = start("replay-ctx", plan.contextState(), transport, base, plugins, cfg, ctxBlocks);
             LocalInstance gen = start("replay-gen", plan.generationState(), transport, base, plugins, cfg,
                     genBlocks)) {
            java.util.ArrayDeque<InFlight> inFlight = new java.util.ArrayDeque<>();
            long t0 = System.nanoTime();
            for (RecordedRequest r : plan.requests()) {
                if (inFlight.size() >= window) {
                    results.add(inFlight.removeFirst().finish(ctx, gen, deadline(timeout), t0));
                }
                InFlight f = prepare(ctx, gen, r);
                if (!asFastAsPossible) {
                    long at = t0 + r.arrivalNanos();
                    long wait;
                    while ((wait = at - System.nanoTime()) > 0) {
                        LockSupport.parkNanos(wait);
                    }
                }
                f.submit(ctx, gen);
                inFlight.add(f);
            }
            while (!inFlight.isEmpty()) {
                results.add(inFlight.removeFirst().finish(ctx, gen, deadline(timeout), t0));
            }
        }
        return results;
    }

    private static long deadline(Duration timeout) {
        return System.nanoTime() + timeout.toNanos() + TimeUnit.SECONDS.toNanos(5);
    }

    /** Largest KV bytes one request holds on one instance (all its serving ranks). */
    private static long requestBytes(Plan plan, boolean context) {
        CacheState s = context ? plan.contextState() : plan.generationState();
        long max = 0;
        for (RecordedRequest r : plan.requests()) {
            long sum = 0;
            for (Map.Entry<Integer, Integer> e : (context ? r.ctxBlocks() : r.genBlocks()).entrySet()) {
                sum += (long) e.getValue() * dev.kvtransfer.api.layout.BlockLayout.of(s, e.getKey()).blockBytes();
            }
            max = Math.max(max, sum);
        }
        return max;
    }

    private static int maxBlocksPerRank(Plan plan, boolean context) {
        int max = 1;
        for (RecordedRequest r : plan.requests()) {
            for (int n : (context ? r.ctxBlocks() : r.genBlocks()).values()) {
                max = Math.max(max, n);
            }
        }
        return max;
    }

    private static LocalInstance start(String name, CacheState state, TransportProvider transport,
                                       TransportConfig base, Plugins plugins, TransceiverConfig cfg, int blocks) {
        return LocalInstance.builder(name, state).transport(transport, base).plugins(plugins).config(cfg)
                .blocksPerRank(Math.max(1, blocks)).sharedBufferManager(true).start();
    }

    private static InFlight prepare(LocalInstance ctx, LocalInstance gen, RecordedRequest r) {
        int totalBlocks = BlockDistribution.blocksFor(r.promptLength(), ctx.cacheState().tokensPerBlock());
        InFlight f = new InFlight(r, totalBlocks);
        r.ctxBlocks().forEach((rank, n) -> {
            int[] blocks = ctx.cache(rank).allocate(r.requestId(), n);
            KvPattern.fill(ctx.cache(rank), blocks, ctx.cacheState(rank), rank, r.requestId(), totalBlocks);
            f.ctx.put(rank, TransferRequest.context(r.requestId(), r.promptLength(), blocks));
        });
        r.genBlocks().forEach((rank, n) -> f.genBlocks.put(rank, gen.cache(rank).allocate(r.requestId(), n)));
        return f;
    }

    private static final class InFlight {
        final RecordedRequest recorded;
        final int totalBlocks;
        final Map<Integer, TransferRequest> ctx = new TreeMap<>();
        final Map<Integer, int[]> genBlocks = new TreeMap<>();
        final Map<Integer, TransferRequest> gen = new TreeMap<>();
        long submitted;
        CompletableFuture<Long> genDone;

        InFlight(RecordedRequest recorded, int totalBlocks) {
            this.recorded = recorded;
            this.totalBlocks = totalBlocks;
        }

        void submit(LocalInstance ctxInstance, LocalInstance genInstance) {
            int servingRank = ctx.keySet().iterator().next();
            ContextPhaseParams params = ctxInstance.contextPhaseParams(recorded.requestId(), servingRank);
            ctx.forEach((rank, req) -> ctxInstance.transceiver(rank).respondAndSendAsync(req));
            submitted = System.nanoTime();
            List<CompletableFuture<?>> done = new ArrayList<>();
            genBlocks.forEach((rank, blocks) -> {
                TransferRequest req = TransferRequest.generation(params, recorded.promptLength(), blocks);
                gen.put(rank, req);
                genInstance.transceiver(rank).requestAndReceiveAsync(req);
                done.add(req.completion().toCompletableFuture());
            });
            genDone = CompletableFuture.allOf(done.toArray(new CompletableFuture<?>[0]))
                    .thenApply(v -> System.nanoTime());
        }

        Replayed finish(LocalInstance ctxInstance, LocalInstance genInstance, long deadline, long t0) {
            long id = recorded.requestId();
            long end;
            String error = "";
            try {
                end = genDone.get(Math.max(1, deadline - System.nanoTime()), TimeUnit.NANOSECONDS);
            } catch (java.util.concurrent.TimeoutException e) {
                end = -1;
                error = "no outcome before the deadline";
            } catch (java.util.concurrent.ExecutionException e) {
                end = -1;
                error = String.valueOf(e.getCause());
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                throw new IllegalStateException("interrupted while replaying request " + id, e);
            }
            boolean ok = end >= 0;
            long checked = 0;
            long mismatches = 0;
            try {
                for (Map.Entry<Integer, TransferRequest> g : gen.entrySet()) {
                    TransferRequest req = g.getValue();
                    if (req.state() != RequestState.GENERATION_TRANS_COMPLETE) {
                        ok = false;
                        if (error.isEmpty()) {
                            error = "gen rank " + g.getKey() + ": " + req.state()
                                    + req.error().map(x -> " " + x.getMessage()).orElse("");
                        }
                        continue;
                    }
                    int rank = g.getKey();
                    KvPattern.Result v = KvPattern.verify(genInstance.cache(rank), genBlocks.get(rank),
                            genInstance.cacheState(rank), rank, id, totalBlocks);
                    checked += v.checkedElements();
                    mismatches += v.mismatches();
                    if (!v.ok() && error.isEmpty()) {
                        error = "gen rank " + rank + ": " + v.firstMismatch();
                    }
                }
            } finally {
                genBlocks.keySet().forEach(rank -> genInstance.cache(rank).free(id));
                ctx.keySet().forEach(rank -> ctxInstance.cache(rank).free(id));
            }
            return new Replayed(recorded, ok, submitted - t0, ok ? end - submitted : -1, checked, mismatches, error);
        }
    }
}
