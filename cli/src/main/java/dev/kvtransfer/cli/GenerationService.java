package dev.kvtransfer.cli;

import dev.kvtransfer.api.model.ContextPhaseParams;
import dev.kvtransfer.core.local.LocalInstance;

import java.time.Duration;
import java.util.Base64;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * What a generation instance of {@code kvtransfer serve} does per request: allocate the blocks, receive the KV from
 * the context instance the parameters name (pull, or have it pushed, as the instance's {@code --mode} says),
 * verify every element with {@code KvPattern}, free the blocks and answer. It drives the demo's {@link GenRunner},
 * so the path is the demo's. A status pump keeps the transceivers' finished requests moving out. Thread-safe.
 */
final class GenerationService implements AutoCloseable {
    private final String id;
    private final GenRunner runner;
    private final RankStatusPump pump;
    private final int maxIsl;
    private final Duration deadline;
    private final AtomicInteger inFlight = new AtomicInteger();

    GenerationService(String id, LocalInstance gen, DemoOptions options, int maxIsl) {
        this.id = id;
        this.runner = new GenRunner(gen, options);
        this.pump = new RankStatusPump(ServeRanks.of(gen), false, 5, (rank, status) -> { }, null);
        this.maxIsl = maxIsl;
        this.deadline = Duration.ofSeconds(options.timeoutSeconds).plusSeconds(10);
    }

    /** @return requests in flight */
    int load() {
        return inFlight.get();
    }

    ControlApi.GenerationReply receive(ControlApi.GenerationRequest q) {
        long rid = q.requestId();
        if (q.isl() < 1 || q.isl() > maxIsl) {
            throw new IllegalArgumentException("request " + rid + ": isl " + q.isl() + " outside 1.." + maxIsl
                    + " (this instance's --max-isl)");
        }
        ContextPhaseParams params;
        try {
            params = ContextPhaseParams.fromBytes(Base64.getDecoder().decode(q.params()));
        } catch (RuntimeException e) {
            throw new IllegalArgumentException("request " + rid + ": context-phase params do not decode: "
                    + e.getMessage());
        }
        if (params.requestId() != rid) {
            throw new IllegalArgumentException("request " + rid + ": the params are those of request "
                    + params.requestId());
        }
        int index = (int) Math.floorMod(rid, Integer.MAX_VALUE);
        inFlight.incrementAndGet();
        long t0 = System.nanoTime();
        try {
            String problem = runner.prepare(index, rid, q.isl());
            if (!problem.isEmpty()) {
                return failed(rid, t0, "NO_BLOCKS", problem);
            }
            GenSide.GenTransfer t;
            try {
                t = runner.submit(index, rid, q.isl(), params).get(deadline.toMillis(), TimeUnit.MILLISECONDS);
            } catch (TimeoutException e) {
                runner.check(rid);
                return failed(rid, t0, "TIMEOUT", "request " + rid + ": not received within " + deadline.toSeconds()
                        + " s");
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                runner.check(rid);
                return failed(rid, t0, "CANCELLED", "request " + rid + ": interrupted");
            } catch (java.util.concurrent.ExecutionException e) {
                runner.check(rid);
                return failed(rid, t0, "INTERNAL", "request " + rid + ": " + CliErrors.oneLine(e));
            }
            GenSide.GenCheck c = runner.check(rid);
            if (!t.ok()) {
                return new ControlApi.GenerationReply(rid, false, t.bytes(), c.checked(), c.mismatches(),
                        t.doneNanos() - t.submitNanos(), 0, ControlApi.codeOf(t.error(), "INTERNAL"),
                        "request " + rid + ": " + t.error(), id);
            }
            boolean ok = c.mismatches() == 0;
            return new ControlApi.GenerationReply(rid, ok, t.bytes(), c.checked(), c.mismatches(),
                    t.doneNanos() - t.submitNanos(), ControlApi.toEpoch(t.doneNanos()), ok ? "" : "MISMATCH",
                    ok ? "" : "request " + rid + ": " + c.mismatches() + " elements differ: " + c.firstMismatch(), id);
        } finally {
            inFlight.decrementAndGet();
        }
    }

    private ControlApi.GenerationReply failed(long rid, long t0, String code, String line) {
        return new ControlApi.GenerationReply(rid, false, 0, 0, 0, System.nanoTime() - t0, 0, code, line, id);
    }

    @Override
    public void close() {
        pump.close();
        runner.close();
    }
}
