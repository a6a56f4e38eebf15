package dev.kvtransfer.cli;

import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.core.TransceiverConfig;
import dev.kvtransfer.registry.ControlHttp;
import dev.kvtransfer.registry.InstanceRecord;
import dev.kvtransfer.registry.RegistryAuth;
import dev.kvtransfer.registry.RegistryException;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;

import java.io.PrintStream;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Base64;
import java.util.HashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.SplittableRandom;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.Semaphore;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * {@code kvtransfer route}: the router and load driver of a standalone deployment. It holds the embedded registry
 * (instances started with {@code serve --registry http://THIS} register with it), waits for the instances it is
 * told to expect, then drives {@code --requests} requests through them ({@link Router}) at a concurrency or a rate,
 * and reports requests/s, transfer p50/p99, prefill-end to KV-ready, failures by cause and bytes moved.
 */
@Command(name = "route", mixinStandardHelpOptions = true,
        description = "Hold the instance registry, route requests context -> generation and report the figures.")
public final class RouteCommand implements java.util.concurrent.Callable<Integer> {
    @Option(names = "--listen", paramLabel = "HOST[:PORT]", description = "address of the registry and router "
            + "endpoint (default 127.0.0.1:7000; loopback only unless another address is named)")
    String listen = "127.0.0.1:7000";

    @Option(names = "--secret-file", paramLabel = "FILE", description = "the deployment secret (mode 600)")
    Path secretFile;

    @Option(names = "--set", description = "kvtransfer.auth=off turns authentication off (trusted networks only)")
    Map<String, String> properties = new HashMap<>();

    @Option(names = "--registry", paramLabel = "URL", description = "use this registry instead of holding one: "
            + "etcd://HOST:PORT[,HOST:PORT...] (instances then register there too; --listen serves only the "
            + "router's stats)")
    String registryUrl;

    @Option(names = "--lease-ms", description = "registry lease: an instance without a heartbeat for this long is "
            + "dropped (default 1500)")
    long leaseMs = 1500;

    @Option(names = "--contexts", description = "context instances to wait for before starting (default 1)")
    int contexts = 1;

    @Option(names = "--generations", description = "generation instances to wait for before starting (default 1)")
    int generations = 1;

    @Option(names = "--wait-s", description = "how long to wait for them (default 120)")
    int waitSeconds = 120;

    @Option(names = "--requests", description = "requests to drive (default 100)")
    int requests = 100;

    @Option(names = "--isl", description = "prompt lengths: N, A,B,C (mixed) or uniform:MIN:MAX (default 1024)")
    String isl = "1024";

    @Option(names = "--seed", description = "seed of the ISL draw (default 1)")
    long seed = 1;

    @Option(names = "--concurrency", description = "requests in flight at once (default 8)")
    int concurrency = 8;

    @Option(names = "--rate", description = "requests started per second (default 0: as fast as --concurrency allows)")
    double rate;

    @Option(names = "--mode", description = "pull (default) or push: route to generation instances serving that mode")
    String mode = "pull";

    @Option(names = "--layerwise", description = "context instances hand each layer over as its prefill ends")
    boolean layerwise;

    @Option(names = "--request-timeout-s", description = "deadline of one call to an instance (default 60)")
    int requestTimeoutSeconds = 60;

    @Option(names = "--format", description = "table (default), csv or json")
    String format = "table";

    @Option(names = "--out", description = "write the report here instead of stdout")
    Path outFile;

    @Option(names = "--keep-serving", description = "after the run, keep the registry up until SIGTERM")
    boolean keepServing;

    private final PrintStream err = System.err;
    private final AtomicInteger done = new AtomicInteger();
    private final AtomicInteger failed = new AtomicInteger();
    private final Map<String, AtomicInteger> servedBy = new java.util.concurrent.ConcurrentHashMap<>();
    /** The latest failed requests (at most {@link #RECENT_FAILURES}), for the stats route. */
    private final java.util.Deque<Map<String, Object>> recentFailures =
            new java.util.concurrent.ConcurrentLinkedDeque<>();
    private final java.util.concurrent.atomic.AtomicReference<Router> routerRef =
            new java.util.concurrent.atomic.AtomicReference<>();
    /** How many failed requests {@code /v1/router/stats} lists. */
    static final int RECENT_FAILURES = 256;

    @Override
    public Integer call() throws Exception {
        if (requests < 0 || concurrency < 1 || rate < 0 || contexts < 0 || generations < 0 || waitSeconds < 1) {
            throw new IllegalArgumentException("--requests, --contexts, --generations and --rate must be 0 or more, "
                    + "--concurrency and --wait-s positive");
        }
        String m = mode.toLowerCase(Locale.ROOT);
        if (!m.equals("pull") && !m.equals("push")) {
            throw new IllegalArgumentException("--mode " + mode + ": expected pull or push");
        }
        RouteReport.Format fmt = RouteReport.Format.parse(format);
        IslSpec islSpec = IslSpec.parse(isl);
        Listen bind = Listen.parse("--listen", listen);
        RegistryAuth auth = DeploymentSecret.resolve("route", secretFile, properties);
        properties.remove(TransceiverConfig.P_AUTH_SECRET_FILE);
        if (registryUrl != null && !registryUrl.startsWith("etcd://")) {
            throw new IllegalArgumentException("--registry " + registryUrl + ": route holds the http registry itself "
                    + "(drop --registry), or give etcd://HOST:PORT");
        }
        try (RouterEndpoint endpoint = RouterEndpoint.start(registryUrl, auth, bind, Duration.ofMillis(leaseMs),
                RouteCommand::validate)) {
            dev.kvtransfer.registry.Registry registry = endpoint.registry();
            endpoint.route("/v1/router/stats", (mm, p, b) -> ControlHttp.Reply.ok(Map.of(
                    "done", done.get(), "failed", failed.get(), "servedBy", Map.copyOf(servedBy),
                    "inFlight", routerRef.get() == null ? Map.of() : routerRef.get().inFlightById(),
                    "failures", List.copyOf(recentFailures))));
            AutoCloseable watch = registry.watch(e -> err.printf(Locale.ROOT, "kvtransfer route: %s %s %s (%s)%s%n",
                    e.type().name().toLowerCase(Locale.ROOT), e.instance().role(), e.instance().id(),
                    e.instance().parallelism(), e.type() == dev.kvtransfer.registry.Registry.Event.Type.JOINED
                            ? " at " + e.instance().controlUrl() : ": " + e.reason()));
            err.printf(Locale.ROOT, "kvtransfer route: registry %s (lease %d ms, %s); waiting for %d context and %d "
                            + "generation instances%n", endpoint.describe(), leaseMs,
                    auth.enabled() ? "signed with the deployment secret" : "NOT authenticated", contexts, generations);
            err.flush();
            awaitInstances(registry);
            Router router = new Router(registry, auth, m, layerwise, Duration.ofSeconds(requestTimeoutSeconds),
                    Duration.ofMillis(leaseMs * 2));
            routerRef.set(router);
            long t0 = System.nanoTime();
            List<Router.Outcome> outcomes = drive(router, islSpec);
            long wall = System.nanoTime() - t0;
            RouteReport report = RouteReport.of(outcomes, wall, router.live(), endpoint.evictions(),
                    auth.refused(), describe());
            try (PrintStream out = outFile == null ? null : new PrintStream(outFile.toFile(), "UTF-8")) {
                report.print(out != null ? out : System.out, fmt);
            }
            if (keepServing) {
                java.util.concurrent.CountDownLatch stop = new java.util.concurrent.CountDownLatch(1);
                Signals.onTermination(stop::countDown);
                stop.await();
            }
            watch.close();
            return report.failed() == 0 ? 0 : 1;
        }
    }

    /**
     * Keeps a failed request for the stats route: when it ended (wall clock, milliseconds since the epoch), how long
     * after it started, its cause, the instances and its one line; the oldest goes beyond {@link #RECENT_FAILURES}.
     */
    private void noteFailure(Router.Outcome o) {
        Map<String, Object> f = new java.util.LinkedHashMap<>();
        f.put("requestId", o.requestId());
        f.put("code", o.code());
        f.put("context", o.context());
        f.put("generation", o.generation());
        f.put("endEpochMs", System.currentTimeMillis());
        f.put("afterMs", o.totalNanos() / 1_000_000.0);
        f.put("error", o.error());
        recentFailures.addLast(f);
        while (recentFailures.size() > RECENT_FAILURES) {
            recentFailures.pollFirst();
        }
    }

    private String describe() {
        return requests + " requests, isl " + isl + ", " + (rate > 0 ? rate + " req/s" : "concurrency " + concurrency)
                + ", " + mode + (layerwise ? " layer-wise" : "");
    }

    /** A registration is refused when its cache state does not decode (a foreign or corrupt instance). */
    private static void validate(InstanceRecord r) {
        try {
            CacheState.fromBytes(Base64.getDecoder().decode(r.cacheState()));
        } catch (RuntimeException e) {
            throw new RegistryException(RegistryException.Kind.BAD_REQUEST, "instance " + r.id()
                    + ": its cache state does not decode (" + e.getMessage() + ")");
        }
    }

    private void awaitInstances(dev.kvtransfer.registry.Registry registry) throws InterruptedException {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(waitSeconds);
        while (true) {
            List<InstanceRecord> live = registry.list();
            long c = live.stream().filter(InstanceRecord::isContext).count();
            long g = live.stream().filter(r -> !r.isContext()).count();
            if (c >= contexts && g >= generations) {
                return;
            }
            if (System.nanoTime() > deadline) {
                throw new IllegalStateException("route: " + c + " of " + contexts + " context and " + g + " of "
                        + generations + " generation instances registered within " + waitSeconds + " s");
            }
            Thread.sleep(50); // bounded wait for registrations
        }
    }

    private List<Router.Outcome> drive(Router router, IslSpec islSpec) throws Exception {
        SplittableRandom random = new SplittableRandom(seed);
        // Unique per run, so two runs against the same instances never reuse an id that may still be in flight.
        long base = (System.currentTimeMillis() & 0xFFFFFFFL) << 20;
        ExecutorService pool = Executors.newFixedThreadPool(concurrency, r -> {
            Thread t = new Thread(r, "kvtransfer-route");
            t.setDaemon(true);
            return t;
        });
        Semaphore slots = new Semaphore(concurrency);
        List<Future<Router.Outcome>> futures = new ArrayList<>();
        Progress progress = Progress.start("requests", requests);
        try {
            long start = System.nanoTime();
            for (int i = 0; i < requests; i++) {
                if (rate > 0) {
                    long at = start + (long) (i * 1e9 / rate);
                    long wait = at - System.nanoTime();
                    if (wait > 0) {
                        TimeUnit.NANOSECONDS.sleep(wait); // the offered rate's schedule
                    }
                }
                slots.acquire();
                long rid = base + i + 1;
                int len = islSpec.draw(random);
                futures.add(pool.submit(() -> {
                    try {
                        Router.Outcome o = router.run(rid, len);
                        (o.ok() ? done : failed).incrementAndGet();
                        if (!o.ok()) {
                            noteFailure(o);
                        } else {
                            servedBy.computeIfAbsent(o.generation(), k -> new AtomicInteger()).incrementAndGet();
                            servedBy.computeIfAbsent(o.context(), k -> new AtomicInteger()).incrementAndGet();
                        }
                        progress.step();
                        return o;
                    } finally {
                        slots.release();
                    }
                }));
                if (i % 16 == 15 && router.noGenerationLeft().isPresent()) {
                    throw new IllegalStateException("route: " + router.noGenerationLeft().get());
                }
            }
            List<Router.Outcome> out = new ArrayList<>();
            for (Future<Router.Outcome> f : futures) {
                out.add(f.get(requestTimeoutSeconds * 3L + 30, TimeUnit.SECONDS));
            }
            progress.done();
            return out;
        } finally {
            pool.shutdownNow();
        }
    }
}
