package dev.kvtransfer.cli;

import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.api.model.CommState;
import dev.kvtransfer.api.model.ContextPhaseParams;
import dev.kvtransfer.api.model.TransceiverState;
import dev.kvtransfer.api.sync.GroupComm;
import dev.kvtransfer.api.transport.RankLauncher;
import dev.kvtransfer.api.transport.ConnectionManager;
import dev.kvtransfer.api.transport.TransportConfig;
import dev.kvtransfer.core.CacheTransceiver;
import dev.kvtransfer.core.RankAssembly;
import dev.kvtransfer.core.RequestState;
import dev.kvtransfer.core.TransceiverConfig;
import dev.kvtransfer.core.TransferRequest;
import dev.kvtransfer.core.cache.PagedKvCache;
import dev.kvtransfer.core.memory.HostBufferManager;
import dev.kvtransfer.core.plugin.Plugins;
import dev.kvtransfer.core.pattern.KvPattern;
import dev.kvtransfer.core.pattern.WindowPattern;
import org.HdrHistogram.Histogram;
import picocli.CommandLine.Command;
import picocli.CommandLine.Mixin;
import picocli.CommandLine.Option;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.OptionalInt;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.Callable;
import java.util.concurrent.TimeUnit;

/**
 * One MPI process of {@code kvtransfer demo --backend mpi}: world ranks {@code [0, ctxRanks)} are the
 * context instance, the rest the generation instance; each process is one rank of its instance. Addresses
 * are world ranks, so both instances know each other's {@link CommState} without an exchange. World rank 0
 * gathers the results and prints the report.
 */
@Command(name = "demo-mpi-rank", hidden = true, description = "one rank of the MPI demo (started by mpirun)")
public final class MpiDemoRankCommand implements Callable<Integer> {
    @Mixin
    DemoOptions options = new DemoOptions();

    @Option(names = "--requests", required = true)
    int requests;

    @Option(names = "--isl", required = true)
    int isl;

    @Option(names = "--window", required = true)
    int window;

    /** The demo's {@code --metrics-port P}: world rank {@code r} serves its instance's meters on {@code P + r}. */
    @Option(names = "--metrics-port")
    int metricsPort;

    /** The demo's simulated prefill: a context rank hands a request over once its layers "finished". */
    @Option(names = "--prefill-ms-per-layer")
    double prefillMsPerLayer;

    @Override
    public Integer call() throws Exception {
        CacheState ctxState = options.contextState();
        CacheState genState = options.generationState();
        int ctxRanks = ctxState.worldSize();
        int genRanks = genState.worldSize();
        Duration timeout = Duration.ofSeconds(options.timeoutSeconds);
        Plugins plugins = Plugins.discover();
        TransceiverConfig config = options.transceiverConfig();
        ConnectionManager cm = plugins.transport("mpi").create(TransportConfig.builder().name("mpi-demo")
                .defaultTimeout(timeout).properties(options.transportProperties).build());
        RankLauncher ranks = DemoCommand.rankLauncher(plugins.transport("mpi"));
        int world = ranks.launchedRank();
        if (ranks.launchedSize() != ctxRanks + genRanks) {
            throw new IllegalStateException("mpirun started " + ranks.launchedSize() + " processes, the layouts need "
                    + (ctxRanks + genRanks));
        }
        boolean isCtx = world < ctxRanks;
        int rank = isCtx ? world : world - ctxRanks;
        CacheState base = isCtx ? ctxState : genState;
        CacheState mine = base.attentionDpEnabled() ? base.withDpRank(base.tpRank(rank) / base.tpPerDpGroup()) : base;
        CommState ctxComm = new CommState("mpi", addresses(0, ctxRanks), -1);
        CommState genComm = new CommState("mpi", addresses(ctxRanks, genRanks), -1);
        CommState myComm = isCtx ? ctxComm : genComm;

        // Status groups, collective over the world: context completion per PP stage (and DP group), generation
        // completion over the whole instance (or DP group across PP stages).
        int pp = base.ppRank(rank);
        int dpGroup = base.attentionDpEnabled() ? base.tpRank(rank) / base.tpPerDpGroup() : 0;
        int instance = isCtx ? 0 : 1;
        GroupComm ctxStatus = ranks.group(instance * 1_000_000 + pp * 1_000 + dpGroup, rank, timeout);
        GroupComm genStatus = ranks.group(2_000_000 + instance * 1_000_000 + dpGroup, rank, timeout);
        GroupComm all = ranks.group(0, world, timeout);
        // The context instance's ranks share one token issuing key, drawn by its rank 0; no generation rank sees it.
        GroupComm instanceRanks = ranks.group(5_000_000 + instance, rank, timeout);
        byte[] tokenKey = isCtx ? sharedIssuingKey(instanceRanks, rank, timeout) : null;

        int totalBlocks = DemoRanks.totalBlocks(ctxState, isl);
        int blocksPerRank = Math.max(1, window * totalBlocks);
        Histogram latency = new Histogram(3_600_000_000_000L, 3);
        long bytes = 0;
        long transferNanos = 0;
        long failed = 0;
        long checked = 0;
        long mismatches = 0;
        String firstProblem = "";
        try (MetricsEndpoint endpoint = metricsPort > 0 ? MetricsEndpoint.start(metricsPort + world) : null;
             SimulatedPrefill prefill = new SimulatedPrefill(prefillMsPerLayer);
             HostBufferManager mm = new HostBufferManager();
             PagedKvCache cache = PagedKvCache.of(mm, mine, rank, blocksPerRank)) {
            io.micrometer.core.instrument.MeterRegistry meters = endpoint != null
                    ? endpoint.instanceRegistry(isCtx ? "ctx" : "gen")
                    : new io.micrometer.core.instrument.simple.SimpleMeterRegistry();
            dev.kvtransfer.api.ErrorHandler errors =
                    e -> System.err.println("kvtransfer[mpi " + world + "]: " + e.getMessage());
            // The one assembly: journal queue <dir>/<ctx|gen>-rank-<r>, timing, metrics as for every entry point.
            try (CacheTransceiver t = RankAssembly.of(config).rank(isCtx ? "ctx" : "gen", mine, rank, myComm)
                    .connections(cm).memory(cache, mm).groups(ctxStatus, genStatus).plugins(plugins)
                    .observability(errors, meters).tokenIssuingKey(tokenKey).build()) {
                for (int start = 0; start < requests; start += window) {
                    int end = Math.min(requests, start + window);
                    // The context side hands out each request's token (as a router would carry it in the params).
                    List<long[]> handedOut = all.allgather(isCtx && rank == 0 ? tokens(t, start, end)
                            : new long[0], timeout);
                    long[] tokens = handedOut.get(0);
                    List<TransferRequest> mineReqs = new ArrayList<>();
                    List<Long> ids = new ArrayList<>();
                    for (int i = start; i < end; i++) {
                        long id = i + 1;
                        if (!DemoRanks.serving(mine.attentionDpEnabled() ? base : mine, i).contains(rank)) {
                            continue;
                        }
                        int[] blocks = cache.allocate(id, DemoRanks.blocksOnRank(mine, rank, totalBlocks));
                        long[] hashes = DemoRanks.blockHashes(id, totalBlocks);
                        int reused = Math.min(options.genReuseBlocks, totalBlocks);
                        if (isCtx) {
                            if (options.verify || options.dumpDir != null) {
                                KvPattern.fill(cache, blocks, mine, rank, id, totalBlocks);
                            }
                            mineReqs.add(TransferRequest.context(id, isl, blocks, hashes));
                        } else {
                            if (reused > 0) {
                                // The prefix-cache hit: the leading blocks already hold this prompt's KV.
                                KvPattern.fill(cache, blocks, mine, rank, id, totalBlocks, 0, reused);
                            }
                            if (options.verify && mine.windowGroups() != null) {
                                // Sliding windows: poisoned after the prefix, so the check shows that a local
                                // layer's blocks before its window were never written.
                                KvPattern.fill(cache, blocks, mine, rank, id + DemoRanks.WINDOW_POISON,
                                        totalBlocks, reused, totalBlocks);
                            }
                            CacheState ctxForRequest = ctxState.attentionDpEnabled()
                                    ? ctxState.withDpRank(i % ctxState.dpSize()) : ctxState;
                            int firstServing = DemoRanks.serving(ctxState, i).get(0);
                            ContextPhaseParams params = new ContextPhaseParams(id, new long[0],
                                    new TransceiverState(ctxForRequest, ctxComm.withSelfIndex(firstServing)),
                                    token(tokens, i - start));
                            mineReqs.add(TransferRequest.generation(params, isl, blocks, reused,
                                    java.util.Arrays.copyOf(hashes, reused)));
                        }
                        ids.add(id);
                    }
                    all.allgather(new long[0], timeout); // everyone filled: start the clock together
                    long t0 = System.nanoTime();
                    List<CompletableFuture<TransferRequest>> done = new ArrayList<>();
                    List<Long> submitted = new ArrayList<>();
                    for (TransferRequest r : mineReqs) {
                        submitted.add(System.nanoTime());
                        if (isCtx && prefillMsPerLayer > 0) {
                            // Handed over when the simulated prefill of the whole request ended, as in the demo.
                            prefill.start(ctxState, List.of(r), List.of(rank), x -> t, false, t0);
                        } else if (isCtx) {
                            t.respondAndSendAsync(r);
                        } else {
                            t.requestAndReceiveAsync(r);
                        }
                        done.add(r.completion().toCompletableFuture());
                    }
                    long deadline = System.nanoTime() + timeout.plusSeconds(30).toNanos();
                    long lastDone = t0;
                    for (int k = 0; k < done.size(); k++) {
                        TransferRequest r = done.get(k).get(Math.max(1, deadline - System.nanoTime()), TimeUnit.NANOSECONDS);
                        long now = System.nanoTime();
                        lastDone = Math.max(lastDone, now);
                        RequestState ok = isCtx ? RequestState.CONTEXT_COMPLETE : RequestState.GENERATION_TRANS_COMPLETE;
                        if (r.state() != ok) {
                            failed++;
                            if (firstProblem.isEmpty()) {
                                firstProblem = (isCtx ? "ctx" : "gen") + " rank " + rank + " request " + r.requestId()
                                        + ": " + r.state() + r.error().map(e -> " " + e.getMessage()).orElse("");
                            }
                        } else if (!isCtx) {
                            bytes += r.kvCacheSize();
                            latency.recordValue(Math.max(1, now - submitted.get(k)));
                        }
                    }
                    List<long[]> spans = all.allgather(new long[] {lastDone - t0}, timeout);
                    long span = 0;
                    for (long[] s : spans) {
                        span = Math.max(span, s[0]);
                    }
                    transferNanos += span;
                    if (isCtx) {
                        t.checkContextTransferStatus(OptionalInt.empty());
                    } else {
                        t.checkGenTransferStatus(OptionalInt.empty());
                    }
                    for (int k = 0; k < mineReqs.size(); k++) {
                        TransferRequest r = mineReqs.get(k);
                        if (!isCtx && r.state() == RequestState.GENERATION_TRANS_COMPLETE) {
                            if (options.verify) {
                                KvPattern.Result v = mine.windowGroups() == null
                                        ? KvPattern.verify(cache, r.blockIds(), mine, rank, r.requestId(), totalBlocks)
                                        : WindowPattern.verify(cache, r.blockIds(), mine, rank, r.requestId(),
                                        r.requestId() + DemoRanks.WINDOW_POISON, totalBlocks, r.reusedBlocks());
                                checked += v.checkedElements();
                                mismatches += v.mismatches();
                                if (!v.ok() && firstProblem.isEmpty()) {
                                    firstProblem = "gen rank " + rank + ": " + v.firstMismatch();
                                }
                            }
                            if (options.dumpDir != null) {
                                GenRunner.dump(options.dumpDir, cache, rank, r.requestId(), r.blockIds());
                            }
                        }
                        cache.free(ids.get(k));
                    }
                }
            }
        }
        // Gather to world rank 0: bytes, failed, checked, mismatches, latency percentiles of each gen rank.
        long p50 = latency.getTotalCount() > 0 ? latency.getValueAtPercentile(50) : 0;
        long p99 = latency.getTotalCount() > 0 ? latency.getValueAtPercentile(99) : 0;
        List<long[]> gathered = all.allgather(new long[] {bytes, failed, checked, mismatches, p50, p99,
                firstProblem.isEmpty() ? 0 : 1}, timeout);
        if (!firstProblem.isEmpty()) {
            System.err.println("kvtransfer[mpi " + world + "]: " + firstProblem);
        }
        long totalBytes = 0;
        long totalFailed = 0;
        long totalChecked = 0;
        long totalMismatches = 0;
        long worstP50 = 0;
        long worstP99 = 0;
        for (long[] g : gathered) {
            totalBytes += g[0];
            totalFailed += g[1];
            totalChecked += g[2];
            totalMismatches += g[3];
            worstP50 = Math.max(worstP50, g[4]);
            worstP99 = Math.max(worstP99, g[5]);
        }
        if (world == 0) {
            double s = transferNanos / 1e9;
            System.out.printf(Locale.ROOT, "%-18s %s%n", "layout", options.layoutLabel());
            System.out.printf(Locale.ROOT, "%-18s %d x %d tokens, %d in flight, %d failed rank-requests%n", "requests",
                    requests, isl, window, totalFailed);
            System.out.printf(Locale.ROOT, "%-18s %.3f GiB%n", "bytes moved", totalBytes / (double) (1L << 30));
            System.out.printf(Locale.ROOT, "%-18s %.2f GB/s (%.3f s of transfer)%n", "throughput",
                    s > 0 ? totalBytes / s / 1e9 : 0, s);
            System.out.printf(Locale.ROOT, "%-18s %.2f ms / %.2f ms (slowest generation rank)%n", "transfer p50/p99",
                    worstP50 / 1e6, worstP99 / 1e6);
            System.out.printf(Locale.ROOT, "%-18s %s%n", "verify", !options.verify ? "skipped (--no-verify)"
                    : totalMismatches == 0 && totalFailed == 0 ? "OK (" + totalChecked + " elements checked)"
                    : "FAILED: " + totalMismatches + " mismatching elements of " + totalChecked + " checked");
            System.out.flush();
        }
        ctxStatus.close();
        genStatus.close();
        all.close();
        cm.close();
        return totalFailed == 0 && totalMismatches == 0 ? 0 : 1;
    }

    private static List<String> addresses(int first, int count) {
        List<String> a = new ArrayList<>();
        for (int i = 0; i < count; i++) {
            a.add(Integer.toString(first + i));
        }
        return a;
    }

    /** Rank 0 of the context instance draws the key; every rank of the instance takes it. */
    private static byte[] sharedIssuingKey(GroupComm instanceRanks, int rank, Duration timeout) {
        long[] mine = new long[0];
        if (rank == 0) {
            java.nio.ByteBuffer k = java.nio.ByteBuffer.wrap(dev.kvtransfer.core.transfer.ControlAuth.newIssuingKey());
            mine = new long[] {k.getLong(), k.getLong(), k.getLong(), k.getLong()};
        }
        long[] key = instanceRanks.allgather(mine, timeout).get(0);
        java.nio.ByteBuffer b = java.nio.ByteBuffer.allocate(8 * key.length);
        for (long v : key) {
            b.putLong(v);
        }
        return b.array();
    }

    /** The tokens of requests {@code start+1 .. end}: per request its length in bytes, then its bytes (padded). */
    private static long[] tokens(CacheTransceiver t, int start, int end) {
        long[] out = new long[(end - start) * 3];
        for (int i = start; i < end; i++) {
            byte[] token = t.contextPhaseParams(i + 1, new long[0]).requestToken();
            java.nio.ByteBuffer b = java.nio.ByteBuffer.wrap(java.util.Arrays.copyOf(token, 16));
            int at = (i - start) * 3;
            out[at] = token.length;
            out[at + 1] = b.getLong();
            out[at + 2] = b.getLong();
        }
        return out;
    }

    private static byte[] token(long[] tokens, int k) {
        java.nio.ByteBuffer b = java.nio.ByteBuffer.allocate(16).putLong(tokens[k * 3 + 1]).putLong(tokens[k * 3 + 2]);
        return java.util.Arrays.copyOf(b.array(), (int) tokens[k * 3]);
    }
}
