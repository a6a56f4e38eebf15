package dev.kvtransfer.cli;

import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.api.model.ContextPhaseParams;
import dev.kvtransfer.api.model.RecurrentStateShape;
import dev.kvtransfer.bench.CopyBaseline;
import dev.kvtransfer.core.RequestState;
import dev.kvtransfer.core.TransceiverConfig;
import dev.kvtransfer.core.TransferRequest;
import dev.kvtransfer.core.local.LocalInstance;
import dev.kvtransfer.core.pattern.KvPattern;
import org.HdrHistogram.Histogram;
import picocli.CommandLine.Command;
import picocli.CommandLine.Mixin;
import picocli.CommandLine.Option;

import java.io.PrintStream;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;

/**
 * {@code kvtransfer demo}: a context instance and a generation instance move the KV cache of
 * {@code --requests} prompts of {@code --isl} tokens between two layouts, and every received element is
 * checked against {@link KvPattern}. With a network backend the generation instance runs in a child JVM;
 * with {@code loopback} both run in this JVM.
 */
@Command(name = "demo", mixinStandardHelpOptions = true,
        description = "Move KV caches from a context instance to a generation instance and verify every byte.")
public final class DemoCommand implements java.util.concurrent.Callable<Integer> {
    @Mixin
    DemoOptions options = new DemoOptions();

    @Mixin
    MetricsOptions metrics = new MetricsOptions();

    @Option(names = "--requests", description = "number of measured requests (default 64)")
    int requests = 64;

    @Option(names = "--isl", description = "prompt length in tokens (default 1024)")
    int isl = 1024;

    @Option(names = "--max-inflight", description = "requests in flight at once (default: " + DEFAULT_MAX_INFLIGHT
            + ", fewer when they do not fit in --memory-budget-mib)")
    Integer maxInflight;

    @Option(names = "--memory-budget-mib", description = "KV memory per instance for in-flight requests (default 2048)")
    long memoryBudgetMib = 2048;

    @Option(names = "--copy-baseline", negatable = true, defaultValue = "true", fallbackValue = "true",
            description = "also time a plain bulk copy (Unsafe.copyMemory) of the same bytes in this JVM and print the ratio (default on)")
    boolean copyBaseline = true;

    @Option(names = "--raw-baseline",
            description = "also time the backend's raw library in this run (plain Aeron on the same channel through the transport SPI, ucx_perftest, or the C MPI loop) at this run's message size and total bytes, and print our ratio to it")
    boolean rawBaseline;

    @Option(names = "--host-driver", negatable = true, defaultValue = "true", fallbackValue = "true",
            description = "with a child JVM: start what the transport's processes of one host share (Aeron: one "
                    + "standalone media driver, so the two processes talk aeron:ipc through shared memory) and give "
                    + "it to both; --no-host-driver keeps a driver embedded in each process (UDP between them)")
    boolean hostDriver;

    @Option(names = "--in-process", description = "run the generation instance in this JVM even with a network backend")
    boolean inProcess;

    @Option(names = "--warmup", description = "untimed requests before the measured ones, so that first contact and "
            + "JIT compilation are not in the numbers; verified, not dumped (default: as many as --warmup-ms allows, "
            + "at least " + AUTO_WARMUP_MIN + " and at most " + AUTO_WARMUP_MAX + "; 0 for none; not with mpi)")
    Integer warmup;

    @Option(names = "--warmup-ms", description = "without --warmup: warm up for this long (default 2000)")
    long warmupMs = 2000;

    /**
     * Default window: a request's latency then reads as a transfer among a few concurrent ones, not as its place in a
     * queue of every measured request.
     */
    static final int DEFAULT_MAX_INFLIGHT = 8;

    /** Bounds of the default (time-bounded) warm-up, in requests. */
    static final int AUTO_WARMUP_MIN = 4;
    static final int AUTO_WARMUP_MAX = 4096;

    @Option(names = "--layerwise", description = "context ranks hand each layer over as soon as its (simulated) "
            + "prefill finished (respondAndSendLayerWise); with --compare also runs the same requests handed over "
            + "whole after prefill")
    boolean layerwise;

    @Option(names = "--prefill-ms-per-layer", description = "simulate prefill on the context side: each layer takes X ms "
            + "(default 0: no prefill)")
    double prefillMsPerLayer;

    @Option(names = "--compare", negatable = true, defaultValue = "true", fallbackValue = "true",
            description = "with --layerwise: also run the same requests without it and print both (default on)")
    boolean compare = true;

    /** Request ids of the comparison run (without --layerwise) start here; never dumped. */
    static final long COMPARE_ID_BASE = 2L << 40;

    /** Request ids of warm-up requests start here (measured requests are 1..requests); never dumped. */
    static final long WARMUP_ID_BASE = 1L << 40;

    private final PrintStream out = System.out;

    @Override
    public Integer call() {
        CacheState ctxState = options.contextState();
        CacheState genState = options.generationState();
        // Before anything starts: a device pool without a usable CUDA is refused (one line, exit 1, as a transport
        // that is missing or cannot run), with the plugin's own cause.
        PoolMemory.resolve(options, dev.kvtransfer.core.plugin.Plugins.discover());
        if (requests < 1 || isl < 1) {
            throw new IllegalArgumentException("--requests and --isl must be positive");
        }
        if (warmup != null && warmup < 0 || warmupMs < 0) {
            throw new IllegalArgumentException("--warmup and --warmup-ms must be 0 or more, were " + warmup + " and "
                    + warmupMs);
        }
        int ctxBlocks = DemoRanks.totalBlocks(ctxState, isl);
        long ctxRequestBytes = 0;
        for (int r = 0; r < ctxState.worldSize(); r++) {
            ctxRequestBytes = Math.max(ctxRequestBytes, perRankBytes(ctxState, r, ctxBlocks));
        }
        long genRequestBytes = 0;
        for (int r = 0; r < genState.worldSize(); r++) {
            genRequestBytes = Math.max(genRequestBytes, perRankBytes(genState, r, ctxBlocks));
        }
        long perRequestInstanceBytes = Math.max(ctxRequestBytes * ctxState.worldSize(),
                genRequestBytes * genState.worldSize());
        int window = maxInflight != null ? maxInflight
                : (int) Math.max(1, Math.min(Math.min(requests, DEFAULT_MAX_INFLIGHT),
                        (memoryBudgetMib << 20) / Math.max(1, perRequestInstanceBytes)));
        window = Math.max(1, Math.min(window, requests));
        int blocksPerRank = window * ctxBlocks;
        // Staging: one slot holds a whole request's part of a rank (as TensorRT-LLM's maxTokensInBuffer = isl),
        // so re-sharding never falls back to per-part dynamic buffers; receive from peers in parallel.
        options.properties.putIfAbsent(dev.kvtransfer.core.TransceiverConfig.P_TRANSFER_BUFFER_BYTES,
                Long.toString(Math.max(1L << 20, Math.min(1L << 30, Math.max(ctxRequestBytes, genRequestBytes)))));
        options.properties.putIfAbsent(dev.kvtransfer.core.TransceiverConfig.P_PARALLEL_RECEIVE, "true");
        Duration timeout = Duration.ofSeconds(options.timeoutSeconds);
        boolean child = !inProcess && !options.backend.equals("loopback");
        // A generation instance in a child JVM serves its own meters on the next port.
        int genMetricsPort = child && metrics.enabled() && !options.backend.equals("mpi") ? metrics.port() + 1 : 0;
        if (genMetricsPort > 65535) {
            throw new IllegalArgumentException("--metrics-port 65535: the generation worker's JVM serves its meters "
                    + "on the next port; give a port below 65535");
        }
        out.printf(Locale.ROOT, "%-18s %s%n", "auth", authLine(child || options.backend.equals("mpi")));
        if (options.backend.equals("mpi")) {
            if (layerwise) {
                throw new IllegalArgumentException("--layerwise is not supported with --backend=mpi: its ranks hand "
                        + "each request over whole, after the simulated prefill (--prefill-ms-per-layer)");
            }
            return runMpi(ctxState, genState, window, timeout);
        }

        out.printf(Locale.ROOT, "kvtransfer demo: backend %s%s, %s%n", options.backend,
                child ? " (generation instance in a child JVM)" : " (both instances in this JVM)",
                describe(ctxState));
        dev.kvtransfer.api.transport.HostSupport host = child && hostDriver ? startHostSupport() : null;
        long started = System.nanoTime();
        try (HostScope hostScope = new HostScope(host);
             MetricsOptions.Scope meters = metrics.start(out);
             LocalInstance ctx = Instances.start("ctx", ctxState, options, blocksPerRank, meters.registry("ctx"));
             GenSide gen = child ? new ChildProcessGen(options, blocksPerRank, timeout, genMetricsPort)
                     : new GenRunner(Instances.start("gen", genState, options, blocksPerRank, meters.registry("gen")),
                             options);
             SimulatedPrefill prefill = new SimulatedPrefill(prefillMsPerLayer)) {
            if (genMetricsPort > 0) {
                out.printf(Locale.ROOT, "%-18s http://127.0.0.1:%d%s (the generation worker's JVM)%n", "metrics (gen)",
                        genMetricsPort, MetricsEndpoint.PATH);
            }
            Result result = run(ctx, gen, window, timeout, prefill);
            Result plain = null;
            if (layerwise && compare) {
                // The same requests again, each handed over whole once its prefill ended.
                plain = new Result();
                for (int start = 0; start < requests; start += window) {
                    runWindow(ctx, gen, start, Math.min(requests, start + window), COMPARE_ID_BASE, plain, timeout,
                            null, prefill, false);
                }
            }
            if (gen instanceof GenRunner) {
                ((GenRunner) gen).closeInstance();
            }
            report(result, ctxState, window, System.nanoTime() - started);
            reportPrefill(result, plain, ctxState, prefill);
            if (result.warmup.requests > 0) {
                Result w = result.warmup;
                out.printf(Locale.ROOT, "%-18s %d requests before the measured ones (untimed, %.1f s): %d failed, %s%n",
                        "warm-up", w.requests, w.wallNanos / 1e9, w.failed, !options.verify ? "not verified"
                                : w.mismatches == 0 ? w.checked + " elements verified"
                                : w.mismatches + " mismatching elements");
                if (!w.firstError.isEmpty() || !w.firstMismatch.isEmpty()) {
                    out.printf(Locale.ROOT, "%-18s %s%n", "warm-up error",
                            w.firstError.isEmpty() ? w.firstMismatch : w.firstError);
                }
            }
            if (copyBaseline && result.bytes > 0) {
                double copy = CopyBaseline.gigabytesPerSecond(result.bytes, perRequestInstanceBytes);
                double ours = result.bytes / (result.transferNanos / 1e9) / 1e9;
                out.printf(Locale.ROOT, "%-18s %.2f GB/s (single-thread Unsafe.copyMemory of the same %s); ratio %.2f%n",
                        "bulk copy", copy, bytes(result.bytes), ours / copy);
            }
            if (rawBaseline && result.bytes > 0) {
                printRawBaseline(result, ctxState);
            }
            boolean ok = result.failed == 0 && result.mismatches == 0 && result.warmup.failed == 0
                    && result.warmup.mismatches == 0 && (plain == null || plain.failed == 0 && plain.mismatches == 0);
            return ok ? 0 : 1;
        }
    }

    /**
     * Authentication is on unless configured off. Processes of one run share a secret: the user's
     * {@code kvtransfer.authSecretFile}, or one generated here for this run (a private temp file every process
     * is pointed at); instances inside one JVM share the per-JVM secret.
     */
    private String authLine(boolean crossProcess) {
        try {
            return authLineOrThrow(crossProcess);
        } catch (java.io.IOException e) {
            throw new java.io.UncheckedIOException("cannot write the run's secret file", e);
        }
    }

    private String authLineOrThrow(boolean crossProcess) throws java.io.IOException {
        TransceiverConfig c = options.transceiverConfig();
        if (!c.authRequired()) {
            return "OFF (kvtransfer.auth=off): control messages are not authenticated";
        }
        if (c.authSecretFile().isPresent()) {
            return "HMAC-SHA256, secret from " + c.authSecretFile().get();
        }
        if (!crossProcess) {
            return "HMAC-SHA256, per-JVM secret (both instances in this JVM)";
        }
        java.nio.file.Path f = java.nio.file.Files.createTempFile("kvtransfer-demo-secret-", ".bin",
                java.nio.file.attribute.PosixFilePermissions.asFileAttribute(
                        java.nio.file.attribute.PosixFilePermissions.fromString("rw-------")));
        f.toFile().deleteOnExit();
        byte[] secret = new byte[32];
        new java.security.SecureRandom().nextBytes(secret);
        java.nio.file.Files.write(f, secret);
        options.properties.put(TransceiverConfig.P_AUTH_SECRET_FILE, f.toString());
        return "HMAC-SHA256, secret generated for this run's processes (" + f + ")";
    }

    /**
     * MPI: every rank of both instances is one process of one {@code mpirun} job (context ranks first); world
     * rank 0 prints the report.
     */
    /** Closes the host support after everything that used it (the instances) closed. */
    private record HostScope(dev.kvtransfer.api.transport.HostSupport host) implements AutoCloseable {
        @Override
        public void close() {
            if (host != null) {
                host.close();
            }
        }
    }

    /**
     * Starts the transport's host support, if it has one, and adds its properties to the transport properties
     * both processes get; prints what was started.
     */
    private dev.kvtransfer.api.transport.HostSupport startHostSupport() {
        dev.kvtransfer.api.transport.TransportProvider p = dev.kvtransfer.core.plugin.Plugins.discover()
                .transport(options.backend);
        dev.kvtransfer.api.transport.HostSupport h = p.startHostSupport(dev.kvtransfer.api.transport.TransportConfig
                .builder().name("demo-host").properties(options.transportProperties).build());
        if (h == null) {
            return null;
        }
        options.transportProperties.putAll(h.properties());
        out.printf(Locale.ROOT, "%-18s %s%n", "host support", h.describe());
        return h;
    }

    /**
     * The launcher of a transport whose ranks its own launcher starts (the api's
     * {@link dev.kvtransfer.api.transport.TransportProvider#launcher()}: MPI's is {@code mpirun}); reached through
     * the api only, so it works the same from the class path and from a plugin directory.
     */
    static dev.kvtransfer.api.transport.RankLauncher rankLauncher(
            dev.kvtransfer.api.transport.TransportProvider provider) {
        return provider.launcher().orElseThrow(() -> new IllegalArgumentException("transport '" + provider.name()
                + "' has no rank launcher: its ranks are started any way (threads, child JVMs)"));
    }

    private int runMpi(CacheState ctxState, CacheState genState, int window, Duration timeout) {
        out.printf(Locale.ROOT, "kvtransfer demo: backend mpi (%d context + %d generation ranks under mpirun), %s%n",
                ctxState.worldSize(), genState.worldSize(), describe(ctxState));
        out.flush();
        List<String> args = new ArrayList<>();
        args.add("demo-mpi-rank");
        args.addAll(options.toArgs());
        args.add("--requests=" + requests);
        args.add("--isl=" + isl);
        args.add("--window=" + window);
        int worldSize = ctxState.worldSize() + genState.worldSize();
        if (metrics.enabled()) {
            if (metrics.port() + worldSize - 1 > 65535) {
                throw new IllegalArgumentException("--metrics-port " + metrics.port() + ": the " + worldSize
                        + " MPI ranks serve their meters on ports " + metrics.port() + ".." + (metrics.port()
                        + worldSize - 1) + "; give a port of at most " + (65536 - worldSize));
            }
            args.add("--metrics-port=" + metrics.port());
            out.printf(Locale.ROOT, "%-18s http://127.0.0.1:%d%s .. port %d (world rank r serves its instance's "
                    + "meters on %d + r; context ranks first)%n", "metrics (mpi)", metrics.port(), MetricsEndpoint.PATH,
                    metrics.port() + worldSize - 1, metrics.port());
            out.flush();
        }
        if (prefillMsPerLayer > 0) {
            args.add("--prefill-ms-per-layer=" + prefillMsPerLayer);
        }
        List<String> cmd = rankLauncher(dev.kvtransfer.core.plugin.Plugins.discover().transport("mpi"))
                .command(worldSize,
                        ChildJvms.javaCommand(KvTransferCli.class.getName(), args));
        try {
            Process p = new ProcessBuilder(cmd).inheritIO().start();
            long limit = timeout.plusSeconds(120).toSeconds() * Math.max(1, (requests + window - 1) / window);
            if (!p.waitFor(limit, TimeUnit.SECONDS)) {
                p.destroyForcibly();
                System.err.println("kvtransfer: mpirun did not finish within " + limit + " s");
                return 2;
            }
            return p.exitValue();
        } catch (java.io.IOException e) {
            throw new java.io.UncheckedIOException("cannot start mpirun: " + cmd, e);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            return 2;
        }
    }

    /**
     * Plain Aeron between this process and a child JVM, same total bytes, message size = the largest message the
     * transfer used (one block, capped by the chunk size).
     */
    /**
     * The backend's raw library in the same run (kvtransfer bench's baselines: plain Aeron on the same channel
     * through the transport SPI, {@code ucx_perftest}, the C MPI loop), at this run's average message size and
     * the same total bytes (bounded), and our ratio to it.
     */
    private void printRawBaseline(Result result, CacheState ctxState) {
        dev.kvtransfer.api.transport.TransportConfig cfg = dev.kvtransfer.api.transport.TransportConfig.builder()
                .name("demo-raw").defaultTimeout(Duration.ofSeconds(options.timeoutSeconds))
                .properties(options.transportProperties).build();
        dev.kvtransfer.bench.Baselines.Found found = dev.kvtransfer.bench.Baselines.find(options.backend,
                dev.kvtransfer.core.plugin.Plugins.discover(), cfg);
        if (found.baseline().isEmpty()) {
            out.printf(Locale.ROOT, "%-18s none for %s: %s%n", "raw baseline", options.backend, found.missing());
            return;
        }
        long msg = Math.max(1, Math.min(64L << 20, result.messages > 0 ? result.bytes / result.messages
                : result.bytes));
        long n = Math.max(16, Math.min(20_000, (result.bytes + msg - 1) / msg));
        try (dev.kvtransfer.bench.Baseline b = found.baseline().get()) {
            dev.kvtransfer.bench.Baseline.Result r = b.measure(msg, Math.max(2, n / 10), n, 2, 16,
                    Duration.ofSeconds(options.timeoutSeconds));
            double raw = r.messages() * (double) msg / r.nanos();
            double ours = result.bytes / (double) Math.max(1, result.transferNanos);
            out.printf(Locale.ROOT, "%-18s %.2f GB/s (%s, %d messages of %d B); ratio %.2f%n", "raw baseline", raw,
                    r.source(), r.messages(), msg, ours / raw);
        } catch (Exception e) {
            out.printf(Locale.ROOT, "%-18s failed: %s%n", "raw baseline", e.getMessage());
        }
    }

    private static long perRankBytes(CacheState s, int rank, int totalBlocks) {
        return DemoRanks.perRankBytes(s, rank, totalBlocks);
    }

    private String describe(CacheState s) {
        return String.format(Locale.ROOT, "%s%d layers x %d KV heads x %d, %s, %d tokens/block, %s",
                options.model != null ? options.model + ": " : "", s.numLayers(), s.kvHeadsPerLayer().get(0),
                s.sizePerHead(), s.dataType(), s.tokensPerBlock(), s.attentionType())
                + (s.recurrentState() == null ? "" : ", " + s.recurrentState())
                + (s.windowGroups() == null ? "" : ", " + s.windowGroups());
    }

    private static final class Result {
        int requests;
        Result warmup;
        /** Of a warm-up: how long it took. */
        long wallNanos;
        long bytes;
        long transferNanos;
        int failed;
        long checked;
        long mismatches;
        String firstError = "";
        String firstMismatch = "";
        final Histogram latency = new Histogram(3_600_000_000_000L, 3);
        /** Payload messages or write entries of all generation ranks, summed over completed requests. */
        long messages;
        int completed;
        int reusedBlocks;
        int totalBlocks;
        long skippedBytes;
        /** Completed requests the context ranks pushed (wrote one-sided); the others were sent. */
        int pushed;
        /** With a simulated prefill: per request, transfer time left after the prefill ended. */
        long exposedNanos;
        int exposedCount;
    }

    private Result run(LocalInstance ctx, GenSide gen, int window, Duration timeout, SimulatedPrefill prefill) {
        Result warm = new Result();
        try (SimulatedPrefill instant = new SimulatedPrefill(0)) {
            // Warm-up takes the same paths without the simulated compute time: a fixed count, or by default whole
            // windows until --warmup-ms passed (the JIT compiles the hot paths of all four sides by then).
            long warmupStart = System.nanoTime();
            long warmupEnd = warmupStart + TimeUnit.MILLISECONDS.toNanos(warmupMs);
            int limit = warmup != null ? warmup : AUTO_WARMUP_MAX;
            int start = 0;
            while (start < limit && (warmup != null || start < AUTO_WARMUP_MIN || System.nanoTime() < warmupEnd)) {
                int end = Math.min(limit, start + window);
                runWindow(ctx, gen, start, end, WARMUP_ID_BASE, warm, timeout, null, instant, layerwise);
                start = end;
            }
            warm.wallNanos = System.nanoTime() - warmupStart;
        }
        Result result = new Result();
        result.warmup = warm;
        Progress progress = Progress.start("requests", requests);
        for (int start = 0; start < requests; start += window) {
            runWindow(ctx, gen, start, Math.min(requests, start + window), 0, result, timeout, progress, prefill,
                    layerwise);
        }
        progress.done();
        return result;
    }

    /**
     * Requests {@code start..end-1} (ids {@code idBase + index + 1}) as one window: fill and prepare (untimed),
     * transfer (timed; with a simulated prefill the window's requests prefill together), check (untimed).
     */
    private void runWindow(LocalInstance ctx, GenSide gen, int start, int end, long idBase, Result result,
            Duration timeout, Progress progress, SimulatedPrefill prefill, boolean layerWise) {
        CacheState ctxState = ctx.cacheState();
        int totalBlocks = DemoRanks.totalBlocks(ctxState, isl);
        boolean simulated = layerWise || prefillMsPerLayer > 0;
        result.requests += end - start;
        // Untimed: allocate and fill the context ranks' blocks; allocate the generation ranks' (and their reused
        // prefix).
        List<List<TransferRequest>> ctxRequests = new ArrayList<>();
        List<Boolean> prepared = new ArrayList<>();
        for (int i = start; i < end; i++) {
            long id = idBase + i + 1;
            String problem = gen.prepare(i, id, isl);
            prepared.add(problem.isEmpty());
            if (!problem.isEmpty()) {
                result.failed++;
                if (result.firstError.isEmpty()) {
                    result.firstError = problem;
                }
                ctxRequests.add(List.of());
                continue;
            }
            long[] hashes = DemoRanks.blockHashes(id, totalBlocks);
            List<TransferRequest> reqs = new ArrayList<>();
            for (int r : DemoRanks.serving(ctxState, i)) {
                int[] blocks = ctx.cache(r).allocate(id, DemoRanks.blocksOnRank(ctxState, r, totalBlocks));
                if (options.verify || options.dumpDir != null) {
                    KvPattern.fill(ctx.cache(r), ctx.bufferManager(r), blocks, ctx.cacheState(r), r, id,
                            totalBlocks);
                    if (RecurrentStateShape.holdsState(ctx.cacheState(r), r)) {
                        KvPattern.fillRecurrent(ctx.cache(r).recurrentState(), ctx.bufferManager(r), ctx.cacheState(r), r,
                                id);
                    }
                }
                reqs.add(TransferRequest.context(id, isl, blocks, hashes));
            }
            ctxRequests.add(reqs);
        }
        // Timed: the transfers of this window.
        long t0 = System.nanoTime();
        List<CompletableFuture<GenSide.GenTransfer>> genFutures = new ArrayList<>();
        List<CompletableFuture<Long>> prefillEnds = new ArrayList<>();
        List<CompletableFuture<?>> ctxFutures = new ArrayList<>();
        for (int i = start; i < end; i++) {
            if (!prepared.get(i - start)) {
                genFutures.add(null);
                prefillEnds.add(null);
                continue;
            }
            long id = idBase + i + 1;
            List<TransferRequest> reqs = ctxRequests.get(i - start);
            List<Integer> serving = DemoRanks.serving(ctxState, i);
            for (int k = 0; k < reqs.size(); k++) {
                if (layerWise) {
                    ctx.transceiver(serving.get(k)).respondAndSendLayerWise(reqs.get(k));
                } else if (!simulated) {
                    ctx.transceiver(serving.get(k)).respondAndSendAsync(reqs.get(k));
                }
                ctxFutures.add(reqs.get(k).completion().toCompletableFuture());
            }
            ContextPhaseParams params = ctx.contextPhaseParams(id, serving.get(0));
            genFutures.add(gen.submit(i, id, isl, params));
            prefillEnds.add(simulated ? prefill.start(ctxState, reqs, serving, ctx::transceiver, layerWise, t0) : null);
        }
        long lastDone = t0;
        long deadline = System.nanoTime() + timeout.plusSeconds(30).toNanos()
                + (simulated ? prefill.prefillNanos(ctxState) : 0);
        for (int k = 0; k < genFutures.size(); k++) {
            CompletableFuture<GenSide.GenTransfer> f = genFutures.get(k);
            if (f == null) {
                continue;
            }
            GenSide.GenTransfer t = await(f, deadline, "generation transfer");
            if (t == null) {
                result.failed++;
                continue;
            }
            lastDone = Math.max(lastDone, t.doneNanos());
            if (t.ok()) {
                result.bytes += t.bytes();
                result.latency.recordValue(Math.max(1, t.doneNanos() - t.submitNanos()));
                result.completed++;
                result.messages += t.messages();
                result.reusedBlocks = t.reusedBlocks();
                result.totalBlocks = totalBlocks;
                result.skippedBytes += t.skippedBytes();
                result.pushed += t.pushed() ? 1 : 0;
                if (prefillEnds.get(k) != null) {
                    Long prefillEnd = await(prefillEnds.get(k), deadline, "simulated prefill");
                    if (prefillEnd != null) {
                        // CLOCK_MONOTONIC in both processes: comparable.
                        result.exposedNanos += Math.max(0, t.doneNanos() - prefillEnd);
                        result.exposedCount++;
                    }
                }
            } else {
                result.failed++;
                if (result.firstError.isEmpty()) {
                    result.firstError = "request " + t.requestId() + ": " + t.error();
                }
            }
        }
        for (CompletableFuture<?> f : ctxFutures) {
            await(f, deadline, "context transfer");
        }
        result.transferNanos += Math.max(1, lastDone - t0);
        // Untimed: status agreement, verification, dump, release.
        for (int i = start; i < end; i++) {
            long id = idBase + i + 1;
            for (TransferRequest req : ctxRequests.get(i - start)) {
                if (req.state() != RequestState.CONTEXT_COMPLETE && result.firstError.isEmpty()) {
                    result.firstError = "context request " + id + ": " + req.state()
                            + req.error().map(e -> " " + e.getMessage()).orElse("");
                }
            }
        }
        StatusSync.context(ctx, options.timeoutSeconds);
        if (gen instanceof ChildProcessGen) {
            ((ChildProcessGen) gen).sync();
        } else {
            ((GenRunner) gen).sync(options.timeoutSeconds);
        }
        for (int i = start; i < end; i++) {
            long id = idBase + i + 1;
            if (prepared.get(i - start)) {
                GenSide.GenCheck c = gen.check(id);
                result.checked += c.checked();
                result.mismatches += c.mismatches();
                if (result.firstMismatch.isEmpty() && !c.firstMismatch().isEmpty()) {
                    result.firstMismatch = "request " + id + ": " + c.firstMismatch();
                }
                for (int r : DemoRanks.serving(ctxState, i)) {
                    ctx.cache(r).free(id);
                }
            }
            if (progress != null) {
                progress.step();
            }
        }
    }

    private static <T> T await(CompletableFuture<T> f, long deadlineNanos, String what) {
        try {
            return f.get(Math.max(1, deadlineNanos - System.nanoTime()), TimeUnit.NANOSECONDS);
        } catch (java.util.concurrent.TimeoutException e) {
            System.err.println("kvtransfer: " + what + " did not finish before its deadline");
            return null;
        } catch (java.util.concurrent.ExecutionException e) {
            System.err.println("kvtransfer: " + what + " failed: " + e.getCause());
            return null;
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IllegalStateException("interrupted", e);
        }
    }

    private void report(Result r, CacheState ctxState, int window, long wallNanos) {
        double seconds = r.transferNanos / 1e9;
        double gbps = seconds > 0 ? r.bytes / seconds / 1e9 : 0;
        out.printf(Locale.ROOT, "%-18s %s%n", "layout", options.layoutLabel());
        out.printf(Locale.ROOT, "%-18s %d x %d tokens, %d in flight, %d failed%n", "requests", requests, isl, window,
                r.failed);
        out.printf(Locale.ROOT, "%-18s %s%n", "bytes moved", bytes(r.bytes));
        out.printf(Locale.ROOT, "%-18s %.3f GB/s (%.3f s of transfer%s, %.1f s wall)%n", "throughput", gbps, seconds,
                layerwise || prefillMsPerLayer > 0 ? " including the simulated prefill" : "", wallNanos / 1e9);
        if (r.latency.getTotalCount() > 0) {
            out.printf(Locale.ROOT, "%-18s %.2f ms / %.2f ms%n", "transfer p50/p99",
                    r.latency.getValueAtPercentile(50) / 1e6, r.latency.getValueAtPercentile(99) / 1e6);
        }
        if (r.completed > 0) {
            String how = r.pushed == r.completed ? "write entries (pushed)"
                    : r.pushed == 0 ? "payload messages received" + (options.push() ? " (push asked; a side cannot push)" : "")
                    : "write entries or payload messages (" + r.pushed + " of " + r.completed + " pushed)";
            out.printf(Locale.ROOT, "%-18s %.1f per request (%s, all generation ranks serving it)%n", "messages",
                    r.messages / (double) r.completed, how);
        }
        if (options.genReuseBlocks > 0 && r.completed > 0) {
            out.printf(Locale.ROOT, "%-18s %d of %d blocks per request already held on the generation side: %s "
                    + "skipped (not moved)%n", "reuse", r.reusedBlocks, r.totalBlocks, bytes(r.skippedBytes));
        }
        if (!options.verify) {
            out.printf(Locale.ROOT, "%-18s skipped (--no-verify)%n", "verify");
        } else if (r.mismatches == 0 && r.failed == 0) {
            out.printf(Locale.ROOT, "%-18s OK (%d elements checked)%n", "verify", r.checked);
        } else {
            out.printf(Locale.ROOT, "%-18s FAILED: %d mismatching elements of %d checked%n", "verify", r.mismatches,
                    r.checked);
        }
        if (!r.firstError.isEmpty()) {
            out.printf(Locale.ROOT, "%-18s %s%n", "first error", r.firstError);
        }
        if (!r.firstMismatch.isEmpty()) {
            out.printf(Locale.ROOT, "%-18s %s%n", "first mismatch", r.firstMismatch);
        }
        if (options.dumpDir != null) {
            out.printf(Locale.ROOT, "%-18s %s%n", "dump", options.dumpDir.toAbsolutePath());
        }
    }

    /**
     * With a simulated prefill: the transfer time still exposed after the last layer's prefill ended (mean per
     * request) and, with the comparison run, the share of the transfer time hidden behind prefill:
     * {@code 1 - exposed(layer-wise) / exposed(whole request after prefill)}, the second being the transfer alone.
     */
    private void reportPrefill(Result r, Result plain, CacheState ctxState, SimulatedPrefill prefill) {
        if (!layerwise && prefillMsPerLayer <= 0) {
            return;
        }
        out.printf(Locale.ROOT, "%-18s %d layers x %.2f ms = %.1f ms per request (simulated on the context side)%n",
                "prefill", ctxState.numLayers(), prefillMsPerLayer, prefill.prefillNanos(ctxState) / 1e6);
        if (r.exposedCount == 0) {
            return;
        }
        double exposed = r.exposedNanos / (double) r.exposedCount;
        if (!layerwise) {
            out.printf(Locale.ROOT, "%-18s %.2f ms per request after prefill ended (whole request handed over then)%n",
                    "exposed", exposed / 1e6);
            out.printf(Locale.ROOT, "%-18s %.1f %% of transfer time hidden behind prefill (not layer-wise)%n",
                    "overlap", 0.0);
            return;
        }
        if (plain == null || plain.exposedCount == 0) {
            out.printf(Locale.ROOT, "%-18s %.2f ms per request after the last layer's prefill ended (layer-wise)%n",
                    "exposed", exposed / 1e6);
            return;
        }
        double alone = plain.exposedNanos / (double) plain.exposedCount;
        out.printf(Locale.ROOT, "%-18s %.2f ms per request after the last layer's prefill ended (layer-wise); "
                + "%.2f ms handing the whole request over after prefill%n", "exposed", exposed / 1e6, alone / 1e6);
        double hidden = alone > 0 ? Math.max(0, Math.min(1, 1 - exposed / alone)) * 100 : 0;
        out.printf(Locale.ROOT, "%-18s %.1f %% of transfer time hidden behind prefill%n", "overlap", hidden);
        if (plain.failed > 0 || plain.mismatches > 0) {
            out.printf(Locale.ROOT, "%-18s %d failed, %d mismatching elements%s%n", "comparison run", plain.failed,
                    plain.mismatches, plain.firstError.isEmpty() ? "" : ": " + plain.firstError);
        } else if (options.verify) {
            out.printf(Locale.ROOT, "%-18s %d requests without --layerwise, %d elements verified%n", "comparison run",
                    plain.requests, plain.checked);
        }
    }

    static String bytes(long b) {
        if (b >= 1L << 30) {
            return String.format(Locale.ROOT, "%.3f GiB", b / (double) (1L << 30));
        }
        if (b >= 1L << 20) {
            return String.format(Locale.ROOT, "%.3f MiB", b / (double) (1L << 20));
        }
        return b + " B";
    }
}
