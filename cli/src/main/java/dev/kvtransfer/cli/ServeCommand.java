package dev.kvtransfer.cli;

import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.core.local.LocalInstance;
import dev.kvtransfer.registry.InstanceRecord;
import dev.kvtransfer.registry.RegistryAuth;
import dev.kvtransfer.registry.RemoteRegistry;
import picocli.CommandLine.Command;
import picocli.CommandLine.Mixin;
import picocli.CommandLine.Option;

import java.io.PrintStream;
import java.nio.file.Path;
import java.time.Duration;
import java.util.Base64;
import java.util.List;
import java.util.Locale;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

/**
 * {@code kvtransfer serve --role context|generation}: one long-running instance with all of its ranks, a control
 * endpoint (HTTP/JSON, {@link ControlApi}) on {@code --listen}, and, with {@code --registry}, an entry in the
 * router's registry kept alive by heartbeats. Context instances simulate prefill into {@code KvPattern}-filled
 * blocks; generation instances receive and verify every element. SIGTERM (or SIGINT) drains: readiness goes down,
 * new requests are refused, the ones in flight get {@code --drain-s} to finish, the entry is removed, exit 0.
 */
@Command(name = "serve", mixinStandardHelpOptions = true,
        description = "Run one long-running context or generation instance (all of its ranks) with a control "
                + "endpoint, registered with a router's registry.")
public final class ServeCommand implements java.util.concurrent.Callable<Integer> {
    @Mixin
    DemoOptions options = new DemoOptions();

    @Mixin
    MetricsOptions metrics = new MetricsOptions();

    @Option(names = "--role", required = true, description = "context (prefill, sends KV) or generation (decode, "
            + "receives KV)")
    String role;

    @Option(names = "--id", description = "instance id, unique in the deployment (default: ROLE-PID)")
    String id;

    @Option(names = "--listen", paramLabel = "HOST[:PORT]", description = "address of the control endpoint (PORT) "
            + "and of the transports (rank r on PORT+1+r; PORT 0: any free ports); default 127.0.0.1:0, loopback "
            + "only: name an interface address to serve other machines")
    String listen = Listen.DEFAULT;

    @Option(names = "--advertise", paramLabel = "HOST", description = "host the router reaches the control endpoint "
            + "at (default: the --listen host; required when that is a wildcard address)")
    String advertise;

    @Option(names = "--registry", paramLabel = "URL", description = "the router's registry, http://HOST:PORT "
            + "(default: none, the instance only serves its control endpoint)")
    String registry;

    @Option(names = "--secret-file", paramLabel = "FILE", description = "the deployment secret (mode 600, at least "
            + "16 bytes; the same file on every machine)")
    Path secretFile;

    @Option(names = "--heartbeat-ms", description = "heartbeat period to the registry (default 500; the registry's "
            + "lease is set by the router)")
    long heartbeatMs = 500;

    @Option(names = "--max-inflight", description = "requests held at once (sizes the KV pool; default 16)")
    int maxInflight = 16;

    @Option(names = "--max-isl", description = "longest prompt accepted, in tokens (sizes the KV pool; default 8192)")
    int maxIsl = 8192;

    @Option(names = "--prefill-ms-per-layer", description = "context: simulated prefill time per layer (default 0)")
    double prefillMsPerLayer;

    @Option(names = "--drain-s", description = "on SIGTERM: seconds the requests in flight get to finish (default 10)")
    int drainSeconds = 10;

    @Option(names = "--tp", description = "this instance's TP (the --ctx-tp or --gen-tp of its role)")
    Integer tp;
    @Option(names = "--pp", description = "this instance's PP")
    Integer pp;
    @Option(names = "--cp", description = "this instance's CP")
    Integer cp;
    @Option(names = "--layers-per-pp", split = ",", description = "this instance's layers per PP rank")
    List<Integer> layersPerPp;
    @Option(names = "--attention-dp", description = "attention data parallelism on this instance (DP size = TP)")
    boolean attentionDp;
    @Option(names = "--pool-layout", description = "this instance's KV pool layout: block, layer-nhd, layer-hnd")
    String poolLayout;

    @Option(names = "--rank", paramLabel = "R", description = "run only rank R of the instance in this process (the "
            + "others run in their own serve processes, on this host or others): rank 0 serves the control endpoint "
            + "and registers; ranks 1.. join it with --leader (context instances)")
    Integer rank;

    @Option(names = "--leader", paramLabel = "ADDRESS", description = "with --rank 1 or more: rank 0's transport "
            + "address, as rank 0 prints it on its 'leader' line")
    String leader;

    @Option(names = "--join-timeout-s", description = "with --rank: how long rank 0 waits for every rank to join, and "
            + "a rank for rank 0's answer (default 60)")
    int joinTimeoutSeconds = 60;

    private final PrintStream out = System.out;
    /** With --rank: why the instance stopped when another of its ranks went away. */
    private final java.util.concurrent.atomic.AtomicReference<RuntimeException> rankLost =
            new java.util.concurrent.atomic.AtomicReference<>();
    /** With --rank 0: set once rank 0 has told the other ranks to stop (their leaving is expected then). */
    private volatile boolean stopSent;

    @Override
    public Integer call() throws Exception {
        boolean context = parseRole();
        applyRoleOptions(context);
        if (maxInflight < 1 || maxIsl < 1 || drainSeconds < 0 || heartbeatMs < 50) {
            throw new IllegalArgumentException("--max-inflight and --max-isl must be positive, --drain-s 0 or more, "
                    + "--heartbeat-ms at least 50");
        }
        String instanceId = InstanceRecord.checkId(id != null ? id : role + "-" + ProcessHandle.current().pid());
        Listen bind = Listen.parse("--listen", listen);
        if (bind.wildcard() && advertise == null) {
            throw new IllegalArgumentException("--listen " + listen + " is a wildcard address: name the address "
                    + "peers reach this machine at with --advertise HOST (or listen on that address)");
        }
        if ("mpi".equals(options.backend) || "loopback".equals(options.backend)) {
            throw new IllegalArgumentException("--backend " + options.backend + ": serve needs a transport that "
                    + "crosses processes by itself (aeron, ucx)");
        }
        RegistryAuth auth = DeploymentSecret.resolve("serve", secretFile, options.properties);
        // The URL is checked before anything starts; the registry is reached once the instance runs.
        dev.kvtransfer.registry.Registry reg = registry == null ? null : RemoteRegistry.open(registry, auth);
        CacheState state = context ? options.contextState() : options.generationState();
        checkRankOptions(context, state);
        PoolMemory.resolve(options, dev.kvtransfer.core.plugin.Plugins.discover());
        int blocksPerRank = maxInflight * DemoRanks.totalBlocks(state, maxIsl);
        // One staging slot holds a rank's whole part of the longest request, as the demo sizes it.
        long perRank = DemoRanks.maxPerRankBytes(state, DemoRanks.totalBlocks(state, maxIsl));
        options.properties.putIfAbsent(dev.kvtransfer.core.TransceiverConfig.P_TRANSFER_BUFFER_BYTES,
                Long.toString(Math.max(1L << 20, Math.min(1L << 30, perRank))));
        options.properties.putIfAbsent(dev.kvtransfer.core.TransceiverConfig.P_PARALLEL_RECEIVE, "true");

        CountDownLatch stop = new CountDownLatch(1);
        Signals.onTermination(stop::countDown);
        int transportPort = bind.port() == 0 ? 0 : bind.port() + 1 + (rank != null ? rank : 0);
        if (rank != null && rank > 0) {
            return follow(instanceId, state, blocksPerRank, bind, transportPort, stop);
        }
        try (MetricsOptions.Scope meters = metrics.start(out);
             Ranks ranks = startRanks(instanceId, state, blocksPerRank, meters, bind, transportPort);
             RankCommands commands = rank == null ? null : RankCommands.leader(ranks.one.connections(),
                     ranks.served.addresses(), Duration.ofSeconds(options.timeoutSeconds))) {
            ContextService ctx = context ? new ContextService(instanceId, ranks.served, prefillMsPerLayer, maxIsl,
                    commands == null ? null : commands::start, commands == null ? null : e -> {
                        if (stopSent) {
                            return; // the other ranks leave because rank 0 told them to
                        }
                        rankLost.compareAndSet(null, e);
                        System.err.println("kvtransfer: instance " + instanceId + ": a rank is gone, draining: "
                                + CliErrors.oneLine(e));
                        stop.countDown();
                    }) : null;
            GenerationService gen = context ? null : new GenerationService(instanceId, ranks.all, options, maxIsl);
            try (AutoCloseable services = () -> {
                     if (ctx != null) {
                         ctx.close();
                     }
                     if (gen != null) {
                         gen.close();
                     }
                 };
                 InstanceControl control = new InstanceControl(instanceId, role, auth, bind,
                         Math.min(64, maxInflight + 4), ctx, gen)) {
                String host = advertise != null ? advertise : bind.host();
                String controlUrl = "http://" + (host.contains(":") ? "[" + host + "]" : host) + ":" + control.port();
                InstanceRecord record = new InstanceRecord(instanceId, role, incarnation(), options.backend,
                        options.mode.toLowerCase(Locale.ROOT), parallelism(state),
                        Base64.getEncoder().encodeToString(state.toBytes()), ranks.served.addresses(),
                        controlUrl, 0);
                out.printf(Locale.ROOT, "%-18s %s %s, %s, %s%n", "serving", role, instanceId, parallelism(state),
                        options.backend + (context ? "" : " " + options.mode));
                out.printf(Locale.ROOT, "%-18s %s%n", "control", controlUrl + "/" + ControlApi.VERSION);
                out.printf(Locale.ROOT, "%-18s %s%n", "transports", String.join(" ", record.transportAddresses()));
                out.printf(Locale.ROOT, "%-18s %s%n", "auth", auth.enabled() ? "HMAC-SHA256 (deployment secret)"
                        : "OFF: control calls and registrations are not authenticated");
                try (RegistryLink link = reg == null ? null
                        : RegistryLink.start(reg, record, heartbeatMs, control::load, out)) {
                    control.ready(true);
                    out.printf(Locale.ROOT, "%-18s %s%n", "ready", registry == null ? "(no registry)"
                            : "registered with " + registry);
                    out.flush();
                    stop.await();
                    out.printf(Locale.ROOT, "%-18s %d in flight, up to %d s%n", "draining", control.load(),
                            drainSeconds);
                    out.flush();
                    control.ready(false);
                    control.drain();
                    long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(drainSeconds);
                    while (control.load() > 0 && System.nanoTime() < deadline) {
                        Thread.sleep(20); // bounded drain wait for requests to finish
                    }
                    int left = control.load();
                    out.printf(Locale.ROOT, "%-18s %s%n", "drained", left == 0 ? "every request finished"
                            : left + " requests still in flight after " + drainSeconds + " s: they fail as the "
                            + "instance closes");
                    if (link != null) {
                        link.deregister();
                    }
                    if (commands != null && rankLost.get() == null) {
                        stopSent = true;
                        commands.stop();
                    }
                }
            }
        }
        out.printf(Locale.ROOT, "%-18s %s%n", "stopped", instanceId);
        out.flush();
        return rankLost.get() == null ? 0 : 1;
    }

    /** What serves this process's ranks: every rank ({@code all}), or with {@code --rank 0} rank 0 ({@code one}). */
    private record Ranks(LocalInstance all, OneRank one, ServeRanks served) implements AutoCloseable {
        @Override
        public void close() {
            if (all != null) {
                all.close();
            } else {
                one.close();
            }
        }
    }

    private Ranks startRanks(String instanceId, CacheState state, int blocksPerRank, MetricsOptions.Scope meters,
                             Listen bind, int transportPort) {
        if (rank == null) {
            LocalInstance all = Instances.start(instanceId, state, options, blocksPerRank, meters.registry(instanceId),
                    bind.host(), transportPort);
            return new Ranks(all, null, ServeRanks.of(all));
        }
        OneRank one = OneRank.start(instanceId, state, 0, options, blocksPerRank, meters.registry(instanceId),
                bind.host(), transportPort, null, Duration.ofSeconds(joinTimeoutSeconds), address -> {
                    out.printf(Locale.ROOT, "%-18s %s (start ranks 1..%d with --leader %s)%n", "leader", address,
                            state.worldSize() - 1, address);
                    out.flush();
                });
        out.printf(Locale.ROOT, "%-18s %d of %d joined%n", "ranks", state.worldSize(), state.worldSize());
        return new Ranks(null, one, one);
    }

    /** {@code --rank R} with R > 0: this rank only, led by rank 0; no control endpoint and no registry entry. */
    private int follow(String instanceId, CacheState state, int blocksPerRank, Listen bind, int transportPort,
                       CountDownLatch stop) throws Exception {
        boolean told;
        try (MetricsOptions.Scope meters = metrics.start(out);
             OneRank one = OneRank.start(instanceId, state, rank, options, blocksPerRank, meters.registry(instanceId),
                     bind.host(), transportPort, leader, Duration.ofSeconds(joinTimeoutSeconds),
                     address -> out.printf(Locale.ROOT, "%-18s %s%n", "transport", address));
             ContextService ctx = new ContextService(instanceId, one, prefillMsPerLayer, maxIsl, null, e -> {
                 rankLost.compareAndSet(null, e);
                 stop.countDown();
             })) {
            out.printf(Locale.ROOT, "%-18s %s %s rank %d of %d (%s), led by rank 0 at %s%n", "serving", role,
                    instanceId, rank, state.worldSize(), parallelism(state), leader);
            out.printf(Locale.ROOT, "%-18s %s%n", "ready", "taking rank 0's requests");
            out.flush();
            told = RankCommands.follow(one.connections(), leader, ctx::start, () -> stop.getCount() == 0);
            out.printf(Locale.ROOT, "%-18s %s%n", "draining", told ? "rank 0 stopped the instance" : "terminated");
            out.flush();
        }
        if (!told && rankLost.get() != null) {
            throw new IllegalStateException("instance " + instanceId + " rank " + rank + ": another rank is gone: "
                    + CliErrors.oneLine(rankLost.get()));
        }
        out.printf(Locale.ROOT, "%-18s %s rank %d%n", "stopped", instanceId, rank);
        out.flush();
        return 0;
    }

    private void checkRankOptions(boolean context, CacheState state) {
        if (rank == null) {
            if (leader != null) {
                throw new IllegalArgumentException("--leader " + leader + " needs --rank R (R > 0)");
            }
            return;
        }
        if (!context) {
            throw new IllegalArgumentException("--rank " + rank + ": only a context instance runs one rank per process "
                    + "so far; run a generation instance's ranks in one serve process");
        }
        if (state.attentionDpEnabled()) {
            throw new IllegalArgumentException("--rank " + rank + " with --attention-dp: not supported yet (rank 0 "
                    + "answers for every request, and with attention DP another rank may serve it)");
        }
        if (rank < 0 || rank >= state.worldSize()) {
            throw new IllegalArgumentException("--rank " + rank + ": this instance has ranks 0.." + (state.worldSize()
                    - 1));
        }
        if (rank == 0 && leader != null) {
            throw new IllegalArgumentException("--rank 0 is the leader: it takes no --leader");
        }
        if (rank > 0 && leader == null) {
            throw new IllegalArgumentException("--rank " + rank + " needs --leader ADDRESS (rank 0's 'leader' line)");
        }
        if (joinTimeoutSeconds < 1) {
            throw new IllegalArgumentException("--join-timeout-s " + joinTimeoutSeconds + ": must be at least 1");
        }
    }

    private boolean parseRole() {
        switch (role.toLowerCase(Locale.ROOT)) {
            case InstanceRecord.CONTEXT, "ctx", "prefill" -> {
                role = InstanceRecord.CONTEXT;
                return true;
            }
            case InstanceRecord.GENERATION, "gen", "decode" -> {
                role = InstanceRecord.GENERATION;
                return false;
            }
            default -> throw new IllegalArgumentException("--role " + role + ": expected context or generation");
        }
    }

    /** {@code --tp} and friends set the demo option of this instance's role. */
    private void applyRoleOptions(boolean context) {
        if (context) {
            options.ctxTp = tp != null ? tp : options.ctxTp;
            options.ctxPp = pp != null ? pp : options.ctxPp;
            options.ctxCp = cp != null ? cp : options.ctxCp;
            options.ctxLayersPerPp = layersPerPp != null ? layersPerPp : options.ctxLayersPerPp;
            options.ctxAttentionDp |= attentionDp;
            options.ctxPoolLayout = poolLayout != null ? poolLayout : options.ctxPoolLayout;
        } else {
            options.genTp = tp != null ? tp : options.genTp;
            options.genPp = pp != null ? pp : options.genPp;
            options.genCp = cp != null ? cp : options.genCp;
            options.genLayersPerPp = layersPerPp != null ? layersPerPp : options.genLayersPerPp;
            options.genAttentionDp |= attentionDp;
            options.genPoolLayout = poolLayout != null ? poolLayout : options.genPoolLayout;
        }
    }

    static String parallelism(CacheState s) {
        return "TP" + s.tensorParallelism() + " PP" + s.pipelineParallelism() + " CP" + s.contextParallelism()
                + (s.attentionDpEnabled() ? " DP" + s.dpSize() : "") + " " + s.attentionType() + " "
                + s.numLayers() + "x" + s.kvHeadsPerLayer().get(0) + "x" + s.sizePerHead() + " " + s.dataType();
    }

    private static long incarnation() {
        return ProcessHandle.current().pid() << 32 ^ System.currentTimeMillis() ^ new java.security.SecureRandom()
                .nextInt();
    }
}
