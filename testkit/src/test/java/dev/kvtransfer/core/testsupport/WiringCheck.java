package dev.kvtransfer.core.testsupport;

import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.api.model.ContextPhaseParams;
import dev.kvtransfer.api.layout.BlockDistribution;
import dev.kvtransfer.core.CacheTransceiver;
import dev.kvtransfer.core.RequestState;
import dev.kvtransfer.core.TransferRequest;
import dev.kvtransfer.core.cache.PagedKvCache;
import dev.kvtransfer.core.journal.JournalEvent;
import dev.kvtransfer.core.journal.JournalReader;
import dev.kvtransfer.testkit.KvPattern;
import io.micrometer.core.instrument.MeterRegistry;

import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.List;
import java.util.OptionalInt;
import java.util.concurrent.TimeUnit;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * Proves that an entry point wired a transceiver pair from every config key that has an observable effect: one
 * verified transfer, then the journal queues hold its events, the timing directory its CSV rows and the
 * registry its counters.
 */
public final class WiringCheck {
    private WiringCheck() {
    }

    /**
     * Moves one request from {@code ctx} to {@code gen} (one rank each), verified with {@link KvPattern}, and
     * checks the journal, timing and metrics output.
     *
     * @param ctx        context transceiver (rank 0 of a one-rank instance)
     * @param ctxCache   its pool
     * @param gen        generation transceiver (rank 0 of a one-rank instance)
     * @param genCache   its pool
     * @param journalDir the configured journal directory
     * @param timingDir  the configured timing directory
     * @param ctxMeters  the context transceiver's registry
     * @param genMeters  the generation transceiver's registry
     * @throws Exception on failure
     */
    public static void transferAndCheck(CacheTransceiver ctx, PagedKvCache ctxCache, CacheTransceiver gen,
                                        PagedKvCache genCache, Path journalDir, Path timingDir,
                                        MeterRegistry ctxMeters, MeterRegistry genMeters) throws Exception {
        CacheState cs = ctx.state().cacheState();
        long id = 4242;
        int prompt = 3 * cs.tokensPerBlock() + 1;
        int blocks = BlockDistribution.blocksFor(prompt, cs.tokensPerBlock());
        int[] ctxIds = ctxCache.allocate(id, blocks);
        int[] genIds = genCache.allocate(id, blocks);
        KvPattern.fill(ctxCache, ctxIds, cs, 0, id, blocks);
        TransferRequest c = TransferRequest.context(id, prompt, ctxIds);
        TransferRequest g = TransferRequest.generation(ctx.contextPhaseParams(id, new long[0]), prompt,
                genIds);
        ctx.respondAndSendAsync(c);
        gen.requestAndReceiveAsync(g);
        g.completion().toCompletableFuture().get(60, TimeUnit.SECONDS);
        c.completion().toCompletableFuture().get(60, TimeUnit.SECONDS);
        assertThat(g.state()).as("%s", g.error()).isEqualTo(RequestState.GENERATION_TRANS_COMPLETE);
        assertThat(c.state()).as("%s", c.error()).isEqualTo(RequestState.CONTEXT_COMPLETE);
        KvPattern.verify(genCache, genIds, gen.state().cacheState(), 0, id, blocks).assertOk();
        assertThat(ctx.checkContextTransferStatus(OptionalInt.empty()).completed()).containsExactly(id);
        assertThat(gen.checkGenTransferStatus(OptionalInt.empty()).completed()).containsExactly(id);
        // Metrics: one transfer each way, its bytes.
        assertThat(ctxMeters.get("kvtransfer.transfers").tag("role", "context").tag("outcome", "complete").counters()
                .stream().mapToDouble(x -> x.count()).sum()).isEqualTo(1.0);
        assertThat(genMeters.get("kvtransfer.transfers").tag("role", "generation").tag("outcome", "complete").counters()
                .stream().mapToDouble(x -> x.count()).sum()).isEqualTo(1.0);
        assertThat(genMeters.get("kvtransfer.bytes").tag("role", "generation").counters().stream()
                .mapToDouble(x -> x.count()).sum())
                .isEqualTo((double) blocks * genCache.layout().blockBytes());
        // Message counts: recorded on the request and as one sample per side.
        assertThat(g.messageCount()).isPositive();
        assertThat(c.messageCount()).isPositive();
        assertThat(genMeters.get("kvtransfer.messages").tag("role", "generation").summaries().stream()
                .mapToLong(x -> x.count()).sum()).isEqualTo(1);
        assertThat(genMeters.get("kvtransfer.messages").tag("role", "generation").summaries().stream()
                .mapToDouble(x -> x.totalAmount()).sum())
                .isEqualTo(g.messageCount());
        assertThat(ctxMeters.get("kvtransfer.messages").tag("role", "context").summaries().stream()
                .mapToDouble(x -> x.totalAmount()).sum())
                .isEqualTo(c.messageCount());
        // Transfer time and per-peer bandwidth histograms, staging and in-flight gauges.
        assertThat(genMeters.get("kvtransfer.transfer.time").tag("role", "generation").timers().stream()
                .mapToLong(x -> x.count()).sum()).isEqualTo(1);
        assertThat(ctxMeters.get("kvtransfer.transfer.time").tag("role", "context").timers().stream()
                .mapToLong(x -> x.count()).sum()).isEqualTo(1);
        assertThat(genMeters.get("kvtransfer.peer.bandwidth").tag("role", "generation").tag("peer", "0").summaries()
                .stream().mapToDouble(x -> x.max()).max().orElse(0)).isPositive();
        assertThat(genMeters.get("kvtransfer.requests.inflight").tag("role", "generation").gauges().stream()
                .mapToDouble(x -> x.value()).sum()).isZero();
        assertThat(genMeters.get("kvtransfer.staging.slots").tag("direction", "recv").gauges().stream()
                .mapToDouble(x -> x.value()).sum()).isPositive();
        assertThat(genMeters.get("kvtransfer.staging.slots.busy").tag("direction", "recv").gauges().stream()
                .mapToDouble(x -> x.value()).sum()).isZero();
        // Timing and journal are written off the hot path and flushed on close.
        ctx.close();
        gen.close();
        Path send = timingDir.resolve("rank_0_send.csv");
        Path recv = timingDir.resolve("rank_0_recv.csv");
        assertThat(send).exists();
        assertThat(recv).exists();
        assertThat(Files.readAllLines(send)).hasSize(2).last().asString().startsWith(id + ",");
        assertThat(Files.readAllLines(recv)).hasSize(2).last().asString().startsWith(id + ",");
        JournalReader.Result journal = JournalReader.readAll(journalDir);
        assertThat(journal.queues()).hasSize(2);
        List<JournalEvent> events = journal.events();
        assertThat(events).isNotEmpty();
        assertThat(events.stream().filter(e -> e.toString().contains(Long.toString(id))).count())
                .as("events of request %d in %s", id, events).isGreaterThanOrEqualTo(4);
        ctxCache.free(id);
        genCache.free(id);
    }

    /** @return a bound for waits in these checks */
    public static Duration bound() {
        return Duration.ofSeconds(60);
    }
}
