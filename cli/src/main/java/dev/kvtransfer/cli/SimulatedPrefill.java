package dev.kvtransfer.cli;

import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.core.CacheTransceiver;
import dev.kvtransfer.core.TransferRequest;

import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ScheduledThreadPoolExecutor;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.IntFunction;

/**
 * The context side's prefill as the demo simulates it: global layer {@code g} of a request finishes
 * {@code (g + 1) * msPerLayer} after the prefill started (a PP stage computes its layers after the stages before
 * it). Layer-wise, each rank marks its local layer ready the moment it "finishes"
 * ({@link TransferRequest#layerReady}); otherwise every rank hands the whole request over once the last layer of the
 * model finished ({@link CacheTransceiver#respondAndSendAsync}), as an engine does when the context phase ends.
 */
final class SimulatedPrefill implements AutoCloseable {
    private final ScheduledExecutorService timer;
    private final long nanosPerLayer;

    /** @param msPerLayer simulated compute time of one layer, in milliseconds (0: every layer at once) */
    SimulatedPrefill(double msPerLayer) {
        if (!(msPerLayer >= 0) || Double.isInfinite(msPerLayer)) {
            throw new IllegalArgumentException("--prefill-ms-per-layer must be 0 or more, was " + msPerLayer);
        }
        this.nanosPerLayer = Math.round(msPerLayer * 1e6);
        ScheduledThreadPoolExecutor t = new ScheduledThreadPoolExecutor(1, r -> {
            Thread th = new Thread(r, "demo-prefill");
            th.setDaemon(true);
            return th;
        });
        t.setRemoveOnCancelPolicy(true);
        this.timer = Executors.unconfigurableScheduledExecutorService(t);
    }

    /** @return the simulated prefill of a whole request: layers x ms per layer, in nanoseconds */
    long prefillNanos(CacheState ctx) {
        return ctx.numLayers() * nanosPerLayer;
    }

    /**
     * Starts one request's prefill at {@code startNanos}.
     *
     * @param ctx         the context instance's cache state
     * @param requests    the request on each serving rank
     * @param ranks       the serving ranks, in the order of {@code requests}
     * @param transceiver a rank's transceiver
     * @param layerWise   mark layers one by one (the request was handed over with respondAndSendLayerWise)
     * @param startNanos  {@code System.nanoTime()} when the prefill starts
     * @return completes with the {@code System.nanoTime()} at which the last layer of the request was marked or the
     *         request handed over (the prefill's end as the transfer saw it)
     */
    CompletableFuture<Long> start(CacheState ctx, List<TransferRequest> requests, List<Integer> ranks,
                                  IntFunction<CacheTransceiver> transceiver, boolean layerWise, long startNanos) {
        CompletableFuture<Long> end = new CompletableFuture<>();
        AtomicLong last = new AtomicLong();
        if (!layerWise) {
            schedule(startNanos + prefillNanos(ctx), () -> {
                for (int k = 0; k < requests.size(); k++) {
                    transceiver.apply(ranks.get(k)).respondAndSendAsync(requests.get(k));
                }
                end.complete(System.nanoTime());
            }, end);
            return end;
        }
        int marks = 0;
        for (int k = 0; k < requests.size(); k++) {
            marks += ctx.layerCount(ctx.ppRank(ranks.get(k)));
        }
        if (marks == 0) {
            end.complete(System.nanoTime());
            return end;
        }
        AtomicInteger left = new AtomicInteger(marks);
        for (int k = 0; k < requests.size(); k++) {
            TransferRequest req = requests.get(k);
            int pp = ctx.ppRank(ranks.get(k));
            int first = ctx.firstLayer(pp);
            for (int l = 0; l < ctx.layerCount(pp); l++) {
                int local = l;
                schedule(startNanos + (first + l + 1) * nanosPerLayer, () -> {
                    req.layerReady(local);
                    last.accumulateAndGet(System.nanoTime(), Math::max);
                    if (left.decrementAndGet() == 0) {
                        end.complete(last.get());
                    }
                }, end);
            }
        }
        return end;
    }

    private void schedule(long atNanos, Runnable r, CompletableFuture<Long> failure) {
        Runnable guarded = () -> {
            try {
                r.run();
            } catch (RuntimeException e) {
                failure.completeExceptionally(e);
            }
        };
        timer.schedule(guarded, Math.max(0, atNanos - System.nanoTime()), TimeUnit.NANOSECONDS);
    }

    @Override
    public void close() {
        timer.shutdownNow();
    }
}
