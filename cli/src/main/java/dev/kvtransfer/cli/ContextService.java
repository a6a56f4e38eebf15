package dev.kvtransfer.cli;

import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.api.model.RecurrentStateShape;
import dev.kvtransfer.core.RequestState;
import dev.kvtransfer.core.TransferRequest;
import dev.kvtransfer.core.TransferStatus;
import dev.kvtransfer.core.pattern.KvPattern;

import java.util.ArrayList;
import java.util.Base64;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;

/**
 * What a context instance of {@code kvtransfer serve} does per request: allocate its blocks on the serving ranks,
 * fill them with {@link KvPattern} (the simulated prefill's output, so the generation side can check every element),
 * hand the request to the transceivers after the simulated prefill ({@link SimulatedPrefill}, layer by layer when
 * asked), and free its blocks once the status checks report it finished on each rank. Thread-safe.
 */
final class ContextService implements AutoCloseable {
    /** Outcomes of finished requests kept for {@code GET /v1/context/{id}}. */
    private static final int KEEP_OUTCOMES = 8192;

    private final String id;
    private final ServeRanks ctx;
    private final java.util.function.Consumer<ControlApi.ContextRequest> forward;
    private final SimulatedPrefill prefill;
    private final int maxIsl;
    private final Map<Long, InFlight> inFlight = new ConcurrentHashMap<>();
    private final Map<Long, ControlApi.ContextOutcome> outcomes = new LinkedHashMap<>() {
        @Override
        protected boolean removeEldestEntry(Map.Entry<Long, ControlApi.ContextOutcome> eldest) {
            return size() > KEEP_OUTCOMES;
        }
    };
    private final RankStatusPump pump;

    private static final class InFlight {
        final List<Integer> ranks;
        final List<TransferRequest> requests;
        final java.util.Set<Integer> open;
        volatile long prefillEndEpochNanos;

        InFlight(List<Integer> ranks, List<TransferRequest> requests) {
            this.ranks = ranks;
            this.requests = requests;
            this.open = ConcurrentHashMap.newKeySet();
            open.addAll(ranks);
        }
    }

    ContextService(String id, ServeRanks ctx, double prefillMsPerLayer, int maxIsl) {
        this(id, ctx, prefillMsPerLayer, maxIsl, null);
    }

    /**
     * @param forward with {@code serve --rank 0}: hands each request to the instance's other ranks (they run this
     *                service for their own rank); null when every rank is in this process
     */
    ContextService(String id, ServeRanks ctx, double prefillMsPerLayer, int maxIsl,
                   java.util.function.Consumer<ControlApi.ContextRequest> forward) {
        this(id, ctx, prefillMsPerLayer, maxIsl, forward, null);
    }

    /**
     * @param onGroupLost with {@code serve --rank}: called once when another rank of the instance is gone (its status
     *                    group reports {@code PEER_LOST}); null to only log it
     */
    ContextService(String id, ServeRanks ctx, double prefillMsPerLayer, int maxIsl,
                   java.util.function.Consumer<ControlApi.ContextRequest> forward,
                   java.util.function.Consumer<RuntimeException> onGroupLost) {
        this.id = id;
        this.ctx = ctx;
        this.forward = forward;
        this.prefill = new SimulatedPrefill(prefillMsPerLayer);
        this.maxIsl = maxIsl;
        this.pump = new RankStatusPump(ctx, true, 5, this::finished, onGroupLost);
    }

    /** @return requests in flight (allocated, not yet released) */
    int load() {
        return inFlight.size();
    }

    ControlApi.ContextReply start(ControlApi.ContextRequest q) {
        long rid = q.requestId();
        if (q.isl() < 1 || q.isl() > maxIsl) {
            throw new IllegalArgumentException("request " + rid + ": isl " + q.isl() + " outside 1.." + maxIsl
                    + " (this instance's --max-isl)");
        }
        CacheState s = ctx.cacheState();
        int total = DemoRanks.totalBlocks(s, q.isl());
        List<Integer> all = DemoRanks.serving(s, (int) Math.floorMod(rid, Integer.MAX_VALUE));
        // This process's share: every serving rank, or with serve --rank its own.
        List<Integer> serving = all.stream().filter(ctx.local()::contains).toList();
        long[] hashes = DemoRanks.blockHashes(rid, total);
        List<TransferRequest> reqs = new ArrayList<>();
        List<Integer> allocated = new ArrayList<>();
        if (inFlight.putIfAbsent(rid, new InFlight(serving, reqs)) != null) {
            throw new IllegalArgumentException("request " + rid + " is already in flight on context instance " + id);
        }
        try {
            for (int r : serving) {
                int[] blocks = ctx.cache(r).allocate(rid, DemoRanks.blocksOnRank(s, r, total));
                allocated.add(r);
                KvPattern.fill(ctx.cache(r), ctx.bufferManager(r), blocks, ctx.cacheState(r), r, rid, total);
                if (RecurrentStateShape.holdsState(ctx.cacheState(r), r)) {
                    KvPattern.fillRecurrent(ctx.cache(r).recurrentState(), ctx.bufferManager(r), ctx.cacheState(r), r,
                            rid);
                }
                reqs.add(TransferRequest.context(rid, q.isl(), blocks, hashes));
            }
        } catch (RuntimeException e) {
            for (int r : allocated) {
                ctx.cache(r).free(rid);
            }
            inFlight.remove(rid);
            throw new IllegalStateException("request " + rid + ": context instance " + id + " cannot hold it now ("
                    + e.getMessage() + ")", e);
        }
        InFlight f = inFlight.get(rid);
        if (forward != null) {
            forward.accept(q); // the other ranks allocate, fill and hand over their parts meanwhile
        }
        if (q.layerwise()) {
            for (int k = 0; k < reqs.size(); k++) {
                ctx.transceiver(serving.get(k)).respondAndSendLayerWise(reqs.get(k));
            }
        }
        prefill.start(s, reqs, serving, ctx::transceiver, q.layerwise(), System.nanoTime())
                .whenComplete((end, e) -> f.prefillEndEpochNanos = end == null ? ControlApi.epochNanos()
                        : ControlApi.toEpoch(end));
        String params = serving.isEmpty() || serving.get(0) != (int) all.get(0) ? ""
                : Base64.getEncoder().encodeToString(ctx.contextPhaseParams(rid, serving.get(0)).toBytes());
        return new ControlApi.ContextReply(rid, params, prefill.prefillNanos(s), id);
    }

    ControlApi.ContextOutcome outcome(long rid) {
        InFlight f = inFlight.get(rid);
        if (f != null) {
            return new ControlApi.ContextOutcome(rid, worst(f).toString(), f.prefillEndEpochNanos, "", "");
        }
        synchronized (outcomes) {
            ControlApi.ContextOutcome o = outcomes.get(rid);
            return o != null ? o : new ControlApi.ContextOutcome(rid, "UNKNOWN", 0, "", "");
        }
    }

    private static RequestState worst(InFlight f) {
        RequestState w = RequestState.CONTEXT_COMPLETE;
        for (TransferRequest r : f.requests) {
            if (r.state() != RequestState.CONTEXT_COMPLETE) {
                w = r.state();
            }
        }
        return w;
    }

    /** A rank's status check reported requests finished: free their blocks on that rank. */
    private void finished(int rank, TransferStatus status) {
        List<Long> ids = new ArrayList<>(status.completed());
        ids.addAll(status.failed());
        for (long rid : ids) {
            InFlight f = inFlight.get(rid);
            if (f == null || !f.open.remove(rank)) {
                continue;
            }
            ctx.cache(rank).free(rid);
            if (f.open.isEmpty()) {
                inFlight.remove(rid);
                String code = "";
                String error = "";
                for (TransferRequest r : f.requests) {
                    if (r.error().isPresent() && error.isEmpty()) {
                        error = r.error().get().getMessage();
                        code = r.error().get().code().name();
                    }
                }
                synchronized (outcomes) {
                    outcomes.put(rid, new ControlApi.ContextOutcome(rid, worst(f).toString(), f.prefillEndEpochNanos,
                            code, error));
                }
            }
        }
    }

    @Override
    public void close() {
        pump.close();
        prefill.close();
        for (Map.Entry<Long, InFlight> e : inFlight.entrySet()) {
            for (int r : e.getValue().open) {
                ctx.cache(r).free(e.getKey());
            }
        }
        inFlight.clear();
    }
}
