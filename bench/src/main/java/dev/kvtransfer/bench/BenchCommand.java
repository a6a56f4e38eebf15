package dev.kvtransfer.bench;

import dev.kvtransfer.api.KvTransferException;
import dev.kvtransfer.api.model.AttentionType;
import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.api.model.DataType;
import dev.kvtransfer.api.transport.TransportConfig;
import dev.kvtransfer.api.transport.TransportProvider;
import dev.kvtransfer.core.TransceiverConfig;
import dev.kvtransfer.core.plugin.Plugins;
import picocli.CommandLine;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;

import java.io.IOException;
import java.io.PrintStream;
import java.io.UncheckedIOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.Callable;

/**
 * {@code kvtransfer bench}: what nixlbench / kvbench give their users, for kvtransfer. For each backend (found
 * through {@link Plugins#discover()}, reached only through the {@link TransportProvider} SPI) and each repeat, in
 * this order so that ours and its baselines share the machine's state:
 * <ol>
 *   <li><b>transport</b>: {@code Connection} messages of each {@code --sizes} size between two endpoints of this
 *       JVM (throughput, round-trip latency, heap per message), then the raw library on the same channel, then a
 *       single-thread memcpy of the same bytes;</li>
 *   <li><b>control</b>: one-block requests of the {@code --control-model} shape through a {@code CacheTransceiver}
 *       pair, {@code --control-inflight} in flight (control-plane latency and requests/s); with
 *       {@code --peer process} the context instance runs in a child JVM ({@link ContextPeer}) and, for a backend
 *       with host support (Aeron's shared driver), both processes use it;</li>
 *   <li><b>transceiver</b>: requests of {@code --blocks} blocks of the {@code --model} shape, {@code --inflight} in
 *       flight (GB/s), each in every {@code --mode} and, with {@code --crc-compare}, with part checksums on and
 *       off; then the raw library and memcpy moving the same bytes.</li>
 * </ol>
 * Results: a table on stdout, {@code runs.csv}, {@code summary.csv}, {@code bench.json} and {@code bench.svg} in
 * {@code --out}; progress on stderr. Exit code 0 when every request completed and every checked element matched.
 */
@Command(name = "bench", mixinStandardHelpOptions = true,
        description = "Benchmark transports and CacheTransceiver pairs beside each library's raw baseline and memcpy.")
public final class BenchCommand implements Callable<Integer> {
    static final List<String> LEVELS = List.of("transport", "control", "transceiver");

    @Option(names = "--backend", split = ",", description = "transports to run, comma separated (default aeron)")
    List<String> backends = new ArrayList<>(List.of("aeron"));

    @Option(names = "--level", split = ",",
            description = "levels to run: transport, control, transceiver (default all three)")
    List<String> levels = new ArrayList<>(LEVELS);

    @Option(names = "--sizes", split = ",",
            description = "transport message sizes (default 4k,16k,64k,256k,1m,4m,16m,64m)")
    List<String> sizes = new ArrayList<>(List.of("4k", "16k", "64k", "256k", "1m", "4m", "16m", "64m"));

    @Option(names = "--total", description = "bytes to time per transport size and per transceiver configuration "
            + "(default 256m)")
    String total = "256m";

    @Option(names = "--max-messages", description = "at most this many timed messages per transport size (default 20000)")
    long maxMessages = 20_000;

    @Option(names = "--latency-samples", description = "round trips per transport size, at most (default 1000)")
    int latencySamples = 1000;

    @Option(names = "--model", description = "shape of the transceiver level: tiny, llama3-8b (default), llama3-70b, "
            + "qwen2.5-7b, deepseek-v3")
    String model = "llama3-8b";

    @Option(names = "--layers", description = "attention layers (default: the preset's)")
    Integer layers;

    @Option(names = "--kv-heads", description = "KV heads per layer (default: the preset's)")
    Integer kvHeads;

    @Option(names = "--size-per-head", description = "elements per head (default: the preset's)")
    Integer sizePerHead;

    @Option(names = "--tokens-per-block", description = "tokens per block (default: the preset's)")
    Integer tokensPerBlock;

    @Option(names = "--dtype", description = "fp32, fp16, bf16, fp8, int8 (default: the preset's)")
    String dtype;

    @Option(names = "--blocks", split = ",", description = "blocks per request of the transceiver level (default 32)")
    List<Integer> blocks = new ArrayList<>(List.of(32));

    @Option(names = "--inflight", split = ",", description = "requests in flight, transceiver level (default 1)")
    List<Integer> inflight = new ArrayList<>(List.of(1));

    @Option(names = "--requests", description = "timed requests per transceiver configuration (default: --total worth, "
            + "at least 4)")
    Integer requests;

    @Option(names = "--control-model", description = "shape of the one-block control-plane requests (default tiny: "
            + "16 tokens, 16 KiB)")
    String controlModel = "tiny";

    @Option(names = "--control-inflight", split = ",", description = "requests in flight, control level (default 1,64)")
    List<Integer> controlInflight = new ArrayList<>(List.of(1, 64));

    @Option(names = "--control-requests", description = "timed one-block requests per control configuration "
            + "(default 2000)")
    int controlRequests = 2000;

    @Option(names = "--control-warmup", description = "untimed one-block requests before each control configuration's "
            + "timed ones, verified too (default min(20000, 10 x --control-requests): the request path must be "
            + "JIT-compiled before it is timed)")
    Integer controlWarmup;

    @Option(names = "--ctx-tp", description = "context TP (default 1)")
    int ctxTp = 1;
    @Option(names = "--ctx-pp", description = "context PP (default 1)")
    int ctxPp = 1;
    @Option(names = "--gen-tp", description = "generation TP (default 1)")
    int genTp = 1;
    @Option(names = "--gen-pp", description = "generation PP (default 1)")
    int genPp = 1;

    @Option(names = "--mode", split = ",", description = "pull, push or both, comma separated (default: "
            + "kvtransfer.transferMode from --set, else pull)")
    List<String> modes;

    @Option(names = "--verify", description = "fill with KvPattern and check every element delivered: transceiver "
            + "levels every element of every request (untimed); transport every message of the throughput part "
            + "(checked inside the timed loop) and of the round trips")
    boolean verify;

    @Option(names = "--set", description = "transceiver property, e.g. --set kvtransfer.partChecksums=false")
    Map<String, String> properties = new LinkedHashMap<>();

    @Option(names = "--transport-set", description = "transport property, e.g. --transport-set aeron.ipc=false")
    Map<String, String> transportProperties = new LinkedHashMap<>();

    @Option(names = "--peer", description = "where the far end runs: thread (this JVM, default) or process (a child "
            + "JVM with this JVM's flags; backends with CROSS_PROCESS and no launcher): the transport level's second "
            + "endpoint, the control and transceiver levels' context instance")
    String peer = "thread";

    @Option(names = "--host-support", negatable = true, defaultValue = "true", fallbackValue = "true",
            description = "with --peer process, start the backend's host support (Aeron: one shared media driver, "
                    + "so the processes talk aeron:ipc) unless the transport properties name one (default on)")
    boolean hostSupport = true;

    @Option(names = "--crc-compare", description = "run every transceiver-level configuration with part checksums on "
            + "and off (same run, interleaved) and report the cost")
    boolean crcCompare;

    @Option(names = "--repeat", description = "repeats of everything (default 3): min / median / max")
    int repeat = 3;

    @Option(names = "--raw", negatable = true, defaultValue = "true", fallbackValue = "true",
            description = "run each backend's raw library baseline (default on)")
    boolean raw = true;

    @Option(names = "--memcpy", negatable = true, defaultValue = "true", fallbackValue = "true",
            description = "run the single-thread memcpy baseline (default on)")
    boolean memcpy = true;

    @Option(names = "--ucx-perftest", description = "ucx_perftest to run for the ucx baseline (default ucx_perftest)")
    String ucxPerftest = "ucx_perftest";

    @Option(names = "--mpicc", description = "MPI C compiler for the mpi baseline (default mpicc)")
    String mpicc = "mpicc";

    @Option(names = "--mpirun", description = "MPI launcher for the mpi baseline (default mpirun)")
    String mpirun = "mpirun";

    @Option(names = "--out", description = "directory for runs.csv, summary.csv, bench.json, bench.svg "
            + "(default kvtransfer-bench)")
    Path out = Path.of("kvtransfer-bench");

    @Option(names = "--timeout-s", description = "bound on each measurement's waits, seconds (default 120)")
    int timeoutSeconds = 120;

    @Option(names = "--report", paramLabel = "DIR", description = "run the fixed report suite instead (loopback and "
            + "Aeron: transport, transceiver pull and push, re-shard TP2 -> TP1, control-plane p50, each beside its "
            + "baseline of the same run) and write the generated section of DIR/benchmarks.md and DIR/benchmarks/*.svg;"
            + " takes only --out, --timeout-s, --readme and --report-quick besides")
    Path report;

    @Option(names = "--report-quick", description = "with --report: a suite of tiny sizes, seconds long, that checks "
            + "the report itself (its figures mean nothing)")
    boolean reportQuick;

    @Option(names = "--readme", paramLabel = "FILE", description = "with --report: also copy the headline table "
            + "between the headline markers of FILE (the repository's README.md)")
    Path readme;


    private final PrintStream stdout;
    private final PrintStream progress;
    private final List<String> problems = new ArrayList<>();
    private final Map<String, String> baselineDescriptions = new LinkedHashMap<>();
    /** Per backend, with --peer process: its host support (null: none), started once, closed at the end. */
    private final Map<String, dev.kvtransfer.api.transport.HostSupport> hosts = new LinkedHashMap<>();
    @CommandLine.Spec
    CommandLine.Model.CommandSpec spec;

    /** A command printing to {@code System.out} (results) and {@code System.err} (progress). */
    public BenchCommand() {
        this(System.out, System.err);
    }

    /**
     * @param stdout   where the table goes
     * @param progress where progress and problems go
     */
    public BenchCommand(PrintStream stdout, PrintStream progress) {
        this.stdout = stdout;
        this.progress = progress;
    }

    /** One transceiver-level configuration: which level, shape, blocks and in flight. */
    private record Config(String level, CacheState ctx, CacheState gen, int blocks, int inflight, int requests) {
    }

    @Override
    public Integer call() throws IOException {
        if (report != null) {
            return BenchReport.fromCommand(this, stdout, progress).run();
        }
        if (reportQuick || readme != null) {
            throw new IllegalArgumentException("--report-quick and --readme go with --report DIR");
        }
        validate();
        Plugins plugins = Plugins.discover();
        Duration timeout = Duration.ofSeconds(timeoutSeconds);
        long totalBytes = Sizes.parse(total);
        List<Long> sizeBytes = sizes.stream().map(Sizes::parse).toList();
        List<Config> configs = transceiverConfigs(totalBytes);
        List<String> modeList = modes != null ? modes
                : List.of(properties.getOrDefault(TransceiverConfig.P_TRANSFER_MODE, "pull"));
        List<Boolean> crcVariants = crcCompare ? List.of(true, false) : List.of(Boolean.valueOf(
                properties.getOrDefault(TransceiverConfig.P_PART_CHECKSUMS,
                        Boolean.toString(TransceiverConfig.DEFAULT_PART_CHECKSUMS))));
        Instant started = Instant.now();
        List<Measurement> runs = new ArrayList<>();
        Map<String, Baseline> baselines = new LinkedHashMap<>();
        try {
            for (int r = 1; r <= repeat; r++) {
                Set<String> copiedThisRepeat = new HashSet<>();
                for (String backend : backends) {
                    runBackend(backend, r, plugins, timeout, totalBytes, sizeBytes, configs, modeList, crcVariants,
                            baselines, copiedThisRepeat, runs);
                }
            }
        } finally {
            baselines.values().forEach(b -> {
                if (b != null) {
                    b.close();
                }
            });
            hosts.values().forEach(h -> {
                if (h != null) {
                    h.close();
                }
            });
        }
        List<Summary> summaries = Summary.of(runs);
        lastSummaries = summaries;
        Reports.table(stdout, summaries);
        crcReport(summaries);
        Files.createDirectories(out);
        Reports.runsCsv(out.resolve("runs.csv"), runs);
        Reports.summaryCsv(out.resolve("summary.csv"), summaries);
        Map<String, Object> info = runInfo(started, totalBytes);
        Reports.json(out.resolve("bench.json"), info, runs, summaries);
        SvgPlot.write(out.resolve("bench.svg"), summaries, "kvtransfer bench: " + String.join(", ", backends)
                + " - median of " + repeat + " (whiskers min-max), raw baseline dashed, memcpy dotted");
        progress.println("kvtransfer bench: wrote " + out.resolve("runs.csv") + ", summary.csv, bench.json, bench.svg");
        long mismatches = runs.stream().mapToLong(Measurement::mismatches).sum();
        long failures = runs.stream().mapToLong(Measurement::failures).sum();
        if (!problems.isEmpty()) {
            progress.println("kvtransfer bench: " + problems.size() + " problem(s):");
            problems.forEach(p -> progress.println("  " + p));
        }
        return mismatches == 0 && failures == 0 && runs.stream().anyMatch(m -> m.impl().equals("ours"))
                && problems.stream().noneMatch(p -> p.startsWith("FAILED")) ? 0 : 1;
    }

    /** The summaries of the last {@link #call()} (empty before). */
    List<Summary> lastSummaries() {
        return lastSummaries;
    }

    /** The problems of the last {@link #call()}. */
    List<String> problems() {
        return List.copyOf(problems);
    }

    private List<Summary> lastSummaries = List.of();

    private void validate() {
        if (repeat < 1) {
            throw new IllegalArgumentException("--repeat must be at least 1, was " + repeat);
        }
        for (String l : levels) {
            if (!LEVELS.contains(l)) {
                throw new IllegalArgumentException("--level " + l + ": expected one of " + LEVELS);
            }
        }
        if (!peer.equals("thread") && !peer.equals("process")) {
            throw new IllegalArgumentException("--peer " + peer + ": expected thread or process");
        }
        if (modes != null) {
            for (String m : modes) {
                if (!m.equals("pull") && !m.equals("push")) {
                    throw new IllegalArgumentException("--mode " + m + ": expected pull or push");
                }
            }
        }
        for (List<Integer> l : List.of(blocks, inflight, controlInflight)) {
            for (int v : l) {
                if (v < 1) {
                    throw new IllegalArgumentException("--blocks, --inflight and --control-inflight take positive "
                            + "numbers, got " + v);
                }
            }
        }
        if (maxMessages < 1 || latencySamples < 1 || controlRequests < 1 || timeoutSeconds < 1
                || (requests != null && requests < 1)) {
            throw new IllegalArgumentException("--max-messages, --latency-samples, --control-requests, --requests and "
                    + "--timeout-s must be positive");
        }
        if (controlWarmup != null && controlWarmup < 1) {
            throw new IllegalArgumentException("--control-warmup must be positive (it is rounded up to whole windows "
                    + "of --control-inflight requests), got " + controlWarmup);
        }
        if (crcCompare && properties.containsKey(TransceiverConfig.P_PART_CHECKSUMS)) {
            throw new IllegalArgumentException("--crc-compare sets " + TransceiverConfig.P_PART_CHECKSUMS
                    + " itself: do not --set it too");
        }
    }

    private List<Config> transceiverConfigs(long totalBytes) {
        List<Config> out = new ArrayList<>();
        if (levels.contains("control")) {
            CacheState[] s = states(BenchModel.byId(controlModel), true);
            for (int n : controlInflight) {
                out.add(new Config("control", s[0], s[1], 1, n, roundUp(controlRequests, n)));
            }
        }
        if (levels.contains("transceiver")) {
            CacheState[] s = states(BenchModel.byId(model), false);
            long perBlock = (long) s[0].tokensPerBlock() * TransceiverBench.kvBytesPerToken(s[0]);
            for (int b : blocks) {
                long reqBytes = perBlock * b;
                for (int n : inflight) {
                    int req = requests != null ? requests
                            : (int) Math.max(4, Math.min(1000, (totalBytes + reqBytes - 1) / reqBytes));
                    out.add(new Config("transceiver", s[0], s[1], b, n, roundUp(req, n)));
                }
            }
        }
        return out;
    }

    /**
     * Untimed requests before a control configuration's timed ones: {@code --control-warmup}, else
     * min(20000, 10 x the timed ones), whole windows. The timed path must run compiled: at 200 warm-up requests
     * the first repeats measured the interpreter and C1 (one JVM, Aeron, quiet machine: p50 150-280 us in the
     * first repeat, 57 us once compiled).
     */
    private int controlWarmup(Config c) {
        long want = controlWarmup != null ? controlWarmup : Math.min(20_000L, 10L * c.requests());
        return Math.max(c.inflight(), roundUp((int) Math.min(Integer.MAX_VALUE - c.inflight(), want), c.inflight()));
    }

    private static int roundUp(int v, int unit) {
        return (v + unit - 1) / unit * unit;
    }

    /** The context and generation shapes: the preset with this command's overrides (not for the control probe). */
    private CacheState[] states(BenchModel preset, boolean control) {
        int l = control || layers == null ? preset.layers : layers;
        int h = preset.attention == AttentionType.MLA ? 1 : control || kvHeads == null ? preset.kvHeads : kvHeads;
        int d = control || sizePerHead == null ? preset.sizePerHead : sizePerHead;
        int t = control || tokensPerBlock == null ? preset.tokensPerBlock : tokensPerBlock;
        DataType dt = control || dtype == null ? preset.dataType : dataType(dtype);
        CacheState.Builder base = CacheState.builder().uniformKvHeads(l, h).sizePerHead(d).tokensPerBlock(t)
                .dataType(dt).attentionType(preset.attention);
        CacheState ctx = base.tensorParallelism(ctxTp).pipelineParallelism(ctxPp).build();
        CacheState gen = CacheState.builder().uniformKvHeads(l, h).sizePerHead(d).tokensPerBlock(t).dataType(dt)
                .attentionType(preset.attention).tensorParallelism(genTp).pipelineParallelism(genPp).build();
        return new CacheState[] {ctx, gen};
    }

    private static DataType dataType(String d) {
        return switch (d.toLowerCase(Locale.ROOT)) {
            case "fp32", "float32" -> DataType.FLOAT32;
            case "fp16", "float16" -> DataType.FLOAT16;
            case "bf16", "bfloat16" -> DataType.BFLOAT16;
            case "fp8" -> DataType.FP8;
            case "int8" -> DataType.INT8;
            default -> throw new IllegalArgumentException("--dtype " + d + ": expected fp32, fp16, bf16, fp8 or int8");
        };
    }

    private void runBackend(String backend, int r, Plugins plugins, Duration timeout, long totalBytes,
            List<Long> sizeBytes, List<Config> configs, List<String> modeList, List<Boolean> crcVariants,
            Map<String, Baseline> baselines, Set<String> copied, List<Measurement> runs) {
        TransportProvider provider = null;
        String oursSkipped = null;
        try {
            provider = plugins.transport(backend);
            if (provider.launcher().isPresent()) {
                // Ours runs its endpoints inside this process (for MPI: a singleton MPI process, endpoints talking
                // over Open MPI's self transport), while the raw baseline runs ranks under the launcher.
                noteOnce(backend + " ours", backend + ": ours runs its endpoints inside this process (not started "
                        + "by the " + backend + " launcher); the raw baseline runs two ranks under it");
            }
        } catch (KvTransferException e) {
            oursSkipped = "ours not run: " + e.getMessage();
        }
        if (oursSkipped != null) {
            noteOnce(backend + " ours", backend + ": " + oursSkipped);
        }
        Map<String, String> tprops = new LinkedHashMap<>(transportProperties);
        String processRefused = peer.equals("process") && oursSkipped == null ? processRefusal(provider) : null;
        if (peer.equals("process") && oursSkipped == null && processRefused == null && hostSupport) {
            dev.kvtransfer.api.transport.HostSupport h = hostSupportFor(provider);
            if (h != null) {
                tprops.putAll(h.properties());
            }
        }
        TransportConfig base = TransportConfig.builder().defaultTimeout(timeout).properties(tprops).build();
        Baseline rawBaseline = raw ? baselines.computeIfAbsent(backend, b -> baselineFor(b, plugins, base)) : null;
        String tag = "[bench " + r + "/" + repeat + "] " + backend;
        if (levels.contains("transport")) {
            TransportBench tb = null;
            if (processRefused != null) {
                noteOnce(backend + " peer", backend + ": transport level ours not run: " + processRefused);
            }
            if (oursSkipped == null && processRefused == null) {
                try {
                    tb = peer.equals("process") ? new TransportBench(provider, base, tprops, timeout)
                            : new TransportBench(provider, base, timeout);
                } catch (RuntimeException e) {
                    problem("FAILED " + backend + " transport: cannot start " + (peer.equals("process")
                            ? "an endpoint here and the peer JVM: " : "two endpoints: ") + e);
                }
            }
            try {
                for (long size : sizeBytes) {
                    long msgs = Math.max(16, Math.min(maxMessages, totalBytes / size));
                    long warm = Math.max(2, msgs / 10);
                    int samples = (int) Math.max(8, Math.min(latencySamples, totalBytes / (4 * size)));
                    int warmSamples = Math.max(2, samples / 10);
                    if (tb != null) {
                        try {
                            Measurement m = tb.run(size, warm, msgs, warmSamples, samples, verify, r, timeout);
                            runs.add(m);
                            progress.println(String.format(Locale.ROOT, "%s transport %s: ours %.3f GB/s, %.0f msg/s,"
                                    + " rtt p50 %.1f us p99 %.1f us, heap %.0f B/msg%s", tag, Sizes.label(size),
                                    m.gbps(), m.opsPerSecond(), m.p50Us(), m.p99Us(), m.heapBytesPerOp(),
                                    verify ? ", " + m.verifiedElements() + " words verified, " + m.mismatches()
                                            + " mismatches" : ""));
                            if (m.mismatches() > 0) {
                                problem("FAILED " + backend + " transport " + Sizes.label(size) + " (repeat " + r
                                        + "): " + m.mismatches() + " mismatching words: " + m.note());
                            }
                        } catch (RuntimeException e) {
                            problem("FAILED " + backend + " transport " + Sizes.label(size) + " (repeat " + r + "): "
                                    + e);
                        }
                    }
                    rawRun(rawBaseline, "transport", backend, size, size, warm, msgs, warmSamples, samples, r,
                            timeout, tag, runs);
                    copyRun("transport", size, size, msgs, r, copied, tag, runs);
                }
            } finally {
                if (tb != null) {
                    tb.close();
                }
            }
        }
        Set<String> rawDone = new HashSet<>();
        for (Config c : configs) {
            long requestBytes = (long) c.blocks() * c.ctx().tokensPerBlock() * TransceiverBench.kvBytesPerToken(c.ctx());
            if (oursSkipped == null && processRefused != null) {
                noteOnce(backend + " peer " + c.level(), backend + ": " + c.level() + " level ours not run: "
                        + processRefused);
            } else if (oursSkipped == null) {
                for (String mode : modeList) {
                    for (boolean crc : crcVariants) {
                        runTransceiver(provider, plugins, base, tprops, c, mode, crc, r, timeout, tag, runs);
                    }
                }
            }
            if (rawDone.add(c.level() + "/" + requestBytes)) {
                long msgSize = Math.min(requestBytes, 64L << 20);
                long bytes = Math.max(requestBytes * c.requests(), msgSize);
                long msgs = Math.max(16, Math.min(maxMessages, (bytes + msgSize - 1) / msgSize));
                long warm = Math.max(2, msgs / 10);
                int samples = (int) Math.max(8, Math.min(latencySamples, bytes / (4 * msgSize)));
                rawRun(rawBaseline, c.level(), backend, requestBytes, msgSize, warm, msgs, Math.max(2, samples / 10),
                        samples, r, timeout, tag, runs);
                copyRun(c.level(), requestBytes, requestBytes, Math.max(4, Math.min(maxMessages,
                        bytes / Math.min(requestBytes, CopyBaseline.MAX_CHUNK))), r, copied, tag, runs);
            }
        }
    }

    /** @return why {@code --peer process} cannot run this backend, or null when it can */
    private static String processRefusal(TransportProvider provider) {
        if (provider.launcher().isPresent()) {
            return "--peer process: " + provider.name() + " ranks are started by its launcher, not as child JVMs";
        }
        if (!provider.capabilities().contains(dev.kvtransfer.api.transport.TransportCapability.CROSS_PROCESS)) {
            return "--peer process: " + provider.name() + " does not declare CROSS_PROCESS";
        }
        return null;
    }

    private Path runSecret;

    /**
     * The secret of this run's processes (with --peer process and authentication on, unless the user gave one): a
     * private temp file, deleted when this JVM exits.
     */
    private Path runSecretFile() {
        if (runSecret == null) {
            try {
                Path f = Files.createTempFile("kvtransfer-bench-secret-", ".bin",
                        java.nio.file.attribute.PosixFilePermissions.asFileAttribute(
                                java.nio.file.attribute.PosixFilePermissions.fromString("rw-------")));
                f.toFile().deleteOnExit();
                byte[] secret = new byte[32];
                new java.security.SecureRandom().nextBytes(secret);
                Files.write(f, secret);
                runSecret = f;
                baselineDescriptions.put("auth", "HMAC-SHA256, secret generated for this run's processes (" + f + ")");
            } catch (IOException e) {
                throw new UncheckedIOException("cannot write the run's secret file", e);
            }
        }
        return runSecret;
    }

    /** The backend's host support, started on first use (with --peer process), or null when it has none. */
    private dev.kvtransfer.api.transport.HostSupport hostSupportFor(TransportProvider provider) {
        if (hosts.containsKey(provider.name())) {
            return hosts.get(provider.name());
        }
        dev.kvtransfer.api.transport.HostSupport h = null;
        try {
            h = provider.startHostSupport(TransportConfig.builder().name("bench-host")
                    .properties(transportProperties).build());
            if (h != null) {
                baselineDescriptions.put("host_support:" + provider.name(), h.describe());
                progress.println("kvtransfer bench: " + provider.name() + " host support: " + h.describe());
            }
        } catch (RuntimeException e) {
            problem(provider.name() + ": host support did not start (the processes use their own): " + e);
        }
        hosts.put(provider.name(), h);
        return h;
    }

    private void runTransceiver(TransportProvider provider, Plugins plugins, TransportConfig base,
            Map<String, String> tprops, Config c, String mode, boolean crc, int r, Duration timeout, String tag,
            List<Measurement> runs) {
        Map<String, String> props = new LinkedHashMap<>();
        props.put(TransceiverConfig.P_BACKEND, provider.name());
        props.put(TransceiverConfig.P_KV_TRANSFER_TIMEOUT_MS, Long.toString(timeout.toMillis()));
        long perRank = (long) c.blocks() * c.ctx().tokensPerBlock() * TransceiverBench.kvBytesPerToken(c.ctx())
                / Math.max(1, Math.min(c.ctx().worldSize(), c.gen().worldSize()));
        // As the demo: one staging slot holds a rank's whole part, receive from peers in parallel.
        props.put(TransceiverConfig.P_TRANSFER_BUFFER_BYTES,
                Long.toString(Math.max(1L << 20, Math.min(1L << 30, perRank))));
        props.put(TransceiverConfig.P_PARALLEL_RECEIVE, "true");
        props.putAll(properties);
        if (peer.equals("process") && !properties.containsKey(TransceiverConfig.P_AUTH_SECRET_FILE)
                && !"off".equals(properties.get(TransceiverConfig.P_AUTH))) {
            // Both processes must derive request tokens and MACs from one secret (the per-JVM default differs).
            props.put(TransceiverConfig.P_AUTH_SECRET_FILE, runSecretFile().toString());
        }
        props.put(TransceiverConfig.P_TRANSFER_MODE, mode);
        props.put(TransceiverConfig.P_PART_CHECKSUMS, Boolean.toString(crc));
        String what = String.format(Locale.ROOT, "%s %s %s x%d %s crc %s", tag, c.level(),
                Sizes.label((long) c.blocks() * c.ctx().tokensPerBlock() * TransceiverBench.kvBytesPerToken(c.ctx())),
                c.inflight(), mode, crc ? "on" : "off");
        boolean child = peer.equals("process");
        try (TransceiverBench tb = new TransceiverBench(c.level(), provider, plugins, base,
                TransceiverConfig.fromProperties(props), c.ctx(), c.gen(), c.blocks(), c.inflight(), timeout,
                child ? tprops : null, child ? props : null)) {
            int warm = c.level().equals("control") ? controlWarmup(c)
                    : Math.max(c.inflight(), roundUp(c.requests() / 10, c.inflight()));
            Measurement m = tb.run(c.requests(), warm, verify, r);
            runs.add(m);
            progress.println(String.format(Locale.ROOT, "%s: ours %.3f GB/s, %.0f req/s, p50 %.1f us p99 %.1f us, heap "
                    + "%.0f B/req%s%s", what, m.gbps(), m.opsPerSecond(), m.p50Us(), m.p99Us(), m.heapBytesPerOp(),
                    verify ? ", " + m.verifiedElements() + " elements verified, " + m.mismatches() + " mismatches" : "",
                    m.failures() > 0 ? ", " + m.failures() + " FAILED: " + m.note()
                            : m.note().contains("push asked") ? ", " + m.note() : ""));
            if (m.failures() > 0 || m.mismatches() > 0) {
                problem("FAILED " + what + ": " + m.failures() + " failed requests, " + m.mismatches()
                        + " mismatching elements: " + m.note());
            }
        } catch (RuntimeException e) {
            problem("FAILED " + what + ": " + e);
        }
    }

    private void rawRun(Baseline b, String level, String backend, long rowSize, long msgSize, long warm, long msgs,
            int warmSamples, int samples, int r, Duration timeout, String tag, List<Measurement> runs) {
        if (b == null) {
            return;
        }
        try {
            Baseline.Result res = b.measure(msgSize, warm, msgs, warmSamples, samples, timeout);
            Latencies.Percentiles p = res.latency();
            String note = (msgSize != rowSize ? "messages of " + Sizes.label(msgSize) + "; " : "") + res.note();
            Measurement m = new Measurement(level, backend, "raw", res.source(), "-", "-", rowSize, 0, 0, r,
                    res.messages(), res.messages() * msgSize, res.nanos(), p.p50Us(), p.p99Us(), p.p999Us(), p.maxUs(),
                    Double.NaN, 0, 0, 0, note);
            runs.add(m);
            progress.println(String.format(Locale.ROOT, "%s %s %s: raw %.3f GB/s, %.0f msg/s, rtt p50 %.1f us", tag,
                    level, Sizes.label(rowSize), m.gbps(), m.opsPerSecond(), m.p50Us()));
        } catch (RuntimeException e) {
            problem(backend + " raw baseline " + level + " " + Sizes.label(msgSize) + " (repeat " + r + "): " + e);
        }
    }

    private void copyRun(String level, long rowSize, long chunk, long copies, int r, Set<String> copied, String tag,
            List<Measurement> runs) {
        if (!memcpy || !copied.add(level + "/" + rowSize)) {
            return;
        }
        try {
            CopyBaseline.Result c = CopyBaseline.measure(chunk, copies);
            Latencies.Percentiles p = Latencies.of(c.copyNanos());
            runs.add(new Measurement(level, "host", "memcpy", CopyBaseline.describe(), "-", "-", rowSize, 0, 0, r,
                    c.copies(), c.bytes(), c.nanos(), p.p50Us(), p.p99Us(), p.p999Us(), p.maxUs(), Double.NaN, 0, 0, 0,
                    chunk != c.chunkBytes() ? "copies of " + Sizes.label(c.chunkBytes()) : ""));
            progress.println(String.format(Locale.ROOT, "%s %s %s: memcpy %.3f GB/s", tag.substring(0,
                    tag.lastIndexOf(' ')), level, Sizes.label(rowSize), c.bytesPerSecond() / 1e9));
        } catch (RuntimeException | OutOfMemoryError e) {
            problem("memcpy " + level + " " + Sizes.label(rowSize) + ": " + e);
        }
    }

    /** The backend's raw baseline: its own through the SPI, else the tool the bench knows for it, else none. */
    private Baseline baselineFor(String backend, Plugins plugins, TransportConfig base) {
        Baselines.Found f = Baselines.find(backend, plugins, base, ucxPerftest, mpicc, mpirun);
        if (f.baseline().isEmpty()) {
            noteOnce(backend + " raw", backend + ": no raw baseline: " + f.missing());
            return null;
        }
        Baseline b = f.baseline().get();
        baselineDescriptions.put(backend, b.describe());
        progress.println("kvtransfer bench: " + backend + " raw baseline: " + b.describe());
        return b;
    }

    private void noteOnce(String key, String text) {
        if (!baselineDescriptions.containsKey("note:" + key)) {
            baselineDescriptions.put("note:" + key, text);
            progress.println("kvtransfer bench: " + text);
        }
    }

    private void problem(String p) {
        problems.add(p);
        progress.println("kvtransfer bench: " + p);
    }

    /** Piece and total of the CRC32C speed measured with {@code --crc-compare}: 1 MiB (L2-resident), 1 GiB. */
    static final long CRC_PIECE = 1L << 20;
    static final long CRC_TOTAL = 1L << 30;
    /** CRC32C GB/s of this run ({@code --crc-compare}), or NaN. */
    private double crc32cGbps = Double.NaN;

    /** With {@code --crc-compare}: per configuration, GB/s and p50 with checksums on and off, and the cost. */
    private void crcReport(List<Summary> summaries) {
        crc32cGbps = Double.NaN;
        if (!crcCompare) {
            return;
        }
        stdout.println();
        stdout.println("part checksums (CRC32C) on vs off, same run (medians; cost = 1 - on/off GB/s):");
        try {
            crc32cGbps = CopyBaseline.crc32cGigabytesPerSecond(CRC_PIECE, CRC_TOTAL);
        } catch (RuntimeException | OutOfMemoryError e) {
            problem("crc32c baseline: " + e);
        }
        for (Summary on : summaries) {
            Measurement f = on.first();
            if (!f.impl().equals("ours") || !f.checksums().equals("on")) {
                continue;
            }
            for (Summary off : summaries) {
                Measurement g = off.first();
                if (g.impl().equals("ours") && g.checksums().equals("off") && g.level().equals(f.level())
                        && g.backend().equals(f.backend()) && g.mode().equals(f.mode())
                        && g.sizeBytes() == f.sizeBytes() && g.inflight() == f.inflight()) {
                    stdout.println(String.format(Locale.ROOT, "  %-11s %-8s %-4s %9s x%-3d on %.3f GB/s p50 %.1f us | "
                            + "off %.3f GB/s p50 %.1f us | cost %.1f %% GB/s, %+.1f us p50", f.level(), f.backend(),
                            f.mode(), Sizes.label(f.sizeBytes()), f.inflight(), on.gbps().median(), on.p50Us().median(),
                            off.gbps().median(), off.p50Us().median(),
                            (1 - on.gbps().median() / off.gbps().median()) * 100,
                            on.p50Us().median() - off.p50Us().median()));
                    if (!Double.isNaN(crc32cGbps)) {
                        double bound = CopyBaseline.withTwoChecksumPasses(off.gbps().median(), crc32cGbps);
                        stdout.println(String.format(Locale.ROOT, "  %-11s two CRC32C passes at %.2f GB/s added to the"
                                + " critical path would give %.3f GB/s (%.2f of off); measured %.2f of that (above 1:"
                                + " the passes partly overlap)",
                                "", crc32cGbps, bound, bound / off.gbps().median(), on.gbps().median() / bound));
                    }
                }
            }
        }
    }

    private Map<String, Object> runInfo(Instant started, long totalBytes) {
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("started", started.toString());
        m.put("finished", Instant.now().toString());
        m.put("arguments", spec != null && spec.commandLine().getParseResult() != null
                ? List.copyOf(spec.commandLine().getParseResult().originalArgs()) : List.of());
        m.put("backends", List.copyOf(backends));
        m.put("levels", List.copyOf(levels));
        m.put("repeat", repeat);
        m.put("total_bytes", totalBytes);
        m.put("model", model);
        m.put("control_model", controlModel);
        m.put("verify", verify);
        m.put("crc_compare", crcCompare);
        if (!Double.isNaN(crc32cGbps)) {
            m.put("crc32c_gbps", crc32cGbps);
            m.put("crc32c_piece_bytes", CRC_PIECE);
        }
        m.put("peer", peer);
        m.put("host_support", hostSupport);
        m.put("properties", new LinkedHashMap<>(properties));
        m.put("transport_properties", new LinkedHashMap<>(transportProperties));
        m.put("java", System.getProperty("java.vm.name") + " " + System.getProperty("java.version"));
        m.put("cores", Runtime.getRuntime().availableProcessors());
        m.put("load_average", BenchReport.Machine.loadAverage());
        Map<String, Object> b = new LinkedHashMap<>(baselineDescriptions);
        m.put("baselines", b);
        m.put("problems", List.copyOf(problems));
        return m;
    }

    /**
     * Runs the bench as a program (the cli registers it as {@code kvtransfer bench}).
     *
     * @param args arguments
     */
    public static void main(String[] args) {
        System.setProperty("chronicle.analytics.disable", "true");
        System.exit(new CommandLine(new BenchCommand()).execute(args));
    }
}
