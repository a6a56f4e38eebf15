package dev.kvtransfer.cli;

import dev.kvtransfer.registry.ControlHttp;
import dev.kvtransfer.registry.InstanceRecord;
import dev.kvtransfer.registry.Registry;
import dev.kvtransfer.registry.RegistryAuth;
import dev.kvtransfer.registry.RegistryException;

import java.net.URI;
import java.time.Duration;
import java.util.Comparator;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * The routing of {@code kvtransfer route}: per request, the least-loaded live context instance (the router's own
 * count of requests it has in flight there, then the load the instance last reported, then the one picked least
 * recently), its context-phase parameters, then the least-loaded generation instance of the asked mode, which
 * receives and verifies the KV.
 * An instance that cannot be reached is set aside (its requests fail {@code PEER_LOST}) until it registers again
 * with a new incarnation or its lease is renewed past the set-aside time; a (context, generation) pair the
 * formatter refuses is never paired again. Thread-safe.
 */
final class Router {
    private final Registry registry;
    private final RegistryAuth auth;
    private final String mode;
    private final boolean layerwise;
    private final Duration requestTimeout;
    private final long asideNanos;
    private final Map<String, ControlHttp.Client> clients = new ConcurrentHashMap<>();
    private final Map<String, AtomicInteger> inFlight = new ConcurrentHashMap<>();
    /** Instance key to the sequence number of its latest pick (ties between equally idle instances take turns). */
    private final Map<String, Long> lastPicked = new ConcurrentHashMap<>();
    private final java.util.concurrent.atomic.AtomicLong picks = new java.util.concurrent.atomic.AtomicLong();
    /** Instance key (id@incarnation) set aside until the nanoTime given. */
    private final Map<String, Long> aside = new ConcurrentHashMap<>();
    private final Set<String> unsupportedPairs = ConcurrentHashMap.newKeySet();
    private final Map<String, String> unsupportedWhy = new ConcurrentHashMap<>();
    /** The last listing the registry answered: used while it cannot be reached (etcd stopped). */
    private volatile List<InstanceRecord> lastLive = List.of();
    private volatile boolean registryDown;
    /** While the registry is down: when (nanoTime) the next request may ask it again; the others use the last list. */
    private final java.util.concurrent.atomic.AtomicLong nextProbe = new java.util.concurrent.atomic.AtomicLong();
    /** While the registry is down, it is asked again at most this often (a call to a stopped etcd takes seconds). */
    static final Duration DOWN_PROBE = Duration.ofMillis(500);
    private final long downProbeNanos;

    /**
     * The outcome of one request.
     *
     * @param requestId       the id
     * @param isl             prompt length
     * @param ok              completed and verified
     * @param code            failure cause, empty when ok
     * @param error           one line, empty when ok
     * @param context         the context instance (empty when none was found)
     * @param generation      the generation instance (empty when none was found)
     * @param bytes           bytes received
     * @param checked         elements verified
     * @param mismatches      elements that differed
     * @param transferNanos   the generation side's transfer time
     * @param prefillToReady  end of prefill to KV ready on the generation side, or -1 when unknown
     * @param totalNanos      the request's time through the router
     */
    record Outcome(long requestId, int isl, boolean ok, String code, String error, String context, String generation,
                   long bytes, long checked, long mismatches, long transferNanos, long prefillToReady,
                   long totalNanos) {
    }

    Router(Registry registry, RegistryAuth auth, String mode, boolean layerwise, Duration requestTimeout,
           Duration aside) {
        this(registry, auth, mode, layerwise, requestTimeout, aside, DOWN_PROBE);
    }

    Router(Registry registry, RegistryAuth auth, String mode, boolean layerwise, Duration requestTimeout,
           Duration aside, Duration downProbe) {
        this.downProbeNanos = downProbe.toNanos();
        this.registry = registry;
        this.auth = auth;
        this.mode = mode;
        this.layerwise = layerwise;
        this.requestTimeout = requestTimeout;
        this.asideNanos = aside.toNanos();
    }

    private static String key(InstanceRecord r) {
        return r.id() + "@" + r.incarnation();
    }

    private ControlHttp.Client client(InstanceRecord r) {
        return clients.computeIfAbsent(key(r), k -> new ControlHttp.Client(URI.create(r.controlUrl()), auth,
                Duration.ofSeconds(2), r.role() + " instance " + r.id()));
    }

    private boolean usable(InstanceRecord r) {
        Long until = aside.get(key(r));
        return until == null || System.nanoTime() - until > 0;
    }

    /**
     * The instance of a role to send the next request to: the fewest requests in flight from this router, then the
     * lowest load it reported, then the one picked least recently (so equally idle instances take turns, and one
     * that joined or came back is used at once, not only when the others are busy), then the id.
     *
     * @param live    the live instances
     * @param context which role
     * @param ctx     for a generation instance: the context instance it must be served from
     * @return the pick (recorded as picked now), or empty when none can be used
     */
    Optional<InstanceRecord> pick(List<InstanceRecord> live, boolean context, InstanceRecord ctx) {
        Optional<InstanceRecord> p = live.stream()
                .filter(r -> r.isContext() == context && usable(r))
                .filter(r -> context || mode.equals(r.mode()))
                .filter(r -> ctx == null || !unsupportedPairs.contains(ctx.id() + ">" + r.id()))
                .min(Comparator.<InstanceRecord>comparingInt(r -> count(r).get()).thenComparingInt(InstanceRecord::load)
                        .thenComparingLong(r -> lastPicked.getOrDefault(key(r), 0L))
                        .thenComparing(InstanceRecord::id));
        p.ifPresent(r -> lastPicked.put(key(r), picks.incrementAndGet()));
        return p;
    }

    /** @return requests in flight from this router per instance id (every incarnation summed) */
    Map<String, Integer> inFlightById() {
        Map<String, Integer> out = new java.util.TreeMap<>();
        inFlight.forEach((k, v) -> out.merge(k.substring(0, k.lastIndexOf('@')), v.get(), Integer::sum));
        return out;
    }

    private AtomicInteger count(InstanceRecord r) {
        return inFlight.computeIfAbsent(key(r), k -> new AtomicInteger());
    }

    /** @return why no generation instance can be used, when that is so (every one refused by the formatter) */
    Optional<String> noGenerationLeft() {
        List<InstanceRecord> live = live();
        List<InstanceRecord> gens = live.stream().filter(r -> !r.isContext() && mode.equals(r.mode())).toList();
        List<InstanceRecord> ctxs = live.stream().filter(InstanceRecord::isContext).toList();
        if (gens.isEmpty() || ctxs.isEmpty()) {
            return Optional.empty();
        }
        for (InstanceRecord g : gens) {
            for (InstanceRecord c : ctxs) {
                if (!unsupportedPairs.contains(c.id() + ">" + g.id())) {
                    return Optional.empty();
                }
            }
        }
        return Optional.of(unsupportedWhy.values().iterator().next());
    }

    /**
     * The live instances: the registry's answer, or, while it cannot be reached, the last one it gave (instances
     * already known keep being served; new ones are seen when it is back). While it is down, one request at most
     * every {@link #DOWN_PROBE} asks it again; the others route from the last list at once instead of each
     * waiting out a call to a registry that is gone.
     */
    List<InstanceRecord> live() {
        if (registryDown) {
            long next = nextProbe.get();
            if (System.nanoTime() - next < 0 || !nextProbe.compareAndSet(next, System.nanoTime() + downProbeNanos)) {
                return lastLive; // another request asks it, or it was asked a moment ago
            }
        }
        try {
            List<InstanceRecord> l = registry.list();
            if (registryDown) {
                registryDown = false;
                System.err.println("kvtransfer route: registry reachable again");
            }
            lastLive = l;
            return l;
        } catch (RegistryException e) {
            if (e.kind() != RegistryException.Kind.UNAVAILABLE) {
                throw e;
            }
            nextProbe.set(System.nanoTime() + downProbeNanos);
            if (!registryDown) {
                registryDown = true;
                System.err.println("kvtransfer route: " + e.getMessage() + "; routing to the " + lastLive.size()
                        + " instances known until it is back");
            }
            return lastLive;
        }
    }

    Outcome run(long rid, int isl) {
        long t0 = System.nanoTime();
        List<InstanceRecord> live = live();
        Optional<InstanceRecord> c = pick(live, true, null);
        if (c.isEmpty()) {
            return fail(rid, isl, t0, "NO_INSTANCE", "request " + rid + ": no live context instance", "", "");
        }
        InstanceRecord ctx = c.get();
        Optional<InstanceRecord> g = pick(live, false, ctx);
        if (g.isEmpty()) {
            return fail(rid, isl, t0, "NO_INSTANCE", "request " + rid + ": no live generation instance in " + mode
                    + " mode that context instance " + ctx.id() + " can serve", ctx.id(), "");
        }
        InstanceRecord gen = g.get();
        count(ctx).incrementAndGet();
        count(gen).incrementAndGet();
        try {
            ControlApi.ContextReply cr;
            try {
                cr = client(ctx).call("POST", "/v1/context", new ControlApi.ContextRequest(rid, isl, layerwise),
                        ControlApi.ContextReply.class, requestTimeout);
            } catch (RegistryException e) {
                return callFailed(rid, isl, t0, ctx, e, ctx.id(), gen.id());
            }
            ControlApi.GenerationReply gr;
            try {
                gr = client(gen).call("POST", "/v1/generation", new ControlApi.GenerationRequest(rid, isl, cr.params()),
                        ControlApi.GenerationReply.class, requestTimeout);
            } catch (RegistryException e) {
                return callFailed(rid, isl, t0, gen, e, ctx.id(), gen.id());
            }
            if (!gr.ok()) {
                if ("UNSUPPORTED_LAYOUT".equals(gr.code())) {
                    unsupportedPairs.add(ctx.id() + ">" + gen.id());
                    unsupportedWhy.putIfAbsent(gen.id(), "generation instance " + gen.id() + " (" + gen.parallelism()
                            + ") cannot be served from context instance " + ctx.id() + " (" + ctx.parallelism()
                            + "): " + gr.error());
                }
                return new Outcome(rid, isl, false, gr.code(), gr.error(), ctx.id(), gen.id(), gr.bytes(),
                        gr.checked(), gr.mismatches(), gr.transferNanos(), -1, System.nanoTime() - t0);
            }
            long prefillEnd = 0;
            try {
                for (int i = 0; i < 3 && prefillEnd == 0; i++) {
                    prefillEnd = client(ctx).call("GET", "/v1/context/" + rid, null, ControlApi.ContextOutcome.class,
                            requestTimeout).prefillEndEpochNanos();
                }
            } catch (RegistryException e) {
                prefillEnd = 0; // the KV arrived and was verified; only the figure is missing
            }
            long toReady = prefillEnd > 0 ? Math.max(0, gr.readyEpochNanos() - prefillEnd) : -1;
            return new Outcome(rid, isl, true, "", "", ctx.id(), gen.id(), gr.bytes(), gr.checked(), gr.mismatches(),
                    gr.transferNanos(), toReady, System.nanoTime() - t0);
        } finally {
            count(ctx).decrementAndGet();
            count(gen).decrementAndGet();
        }
    }

    private Outcome callFailed(long rid, int isl, long t0, InstanceRecord who, RegistryException e, String ctx,
                               String gen) {
        String code;
        if (e.kind() == RegistryException.Kind.UNAVAILABLE) {
            aside.put(key(who), System.nanoTime() + asideNanos);
            code = "PEER_LOST";
        } else if (e instanceof ControlHttp.ServerError se) {
            code = se.kindWord();
        } else {
            code = e.kind().name();
        }
        return fail(rid, isl, t0, code, "request " + rid + ": " + e.getMessage(), ctx, gen);
    }

    private static Outcome fail(long rid, int isl, long t0, String code, String line, String ctx, String gen) {
        return new Outcome(rid, isl, false, code, line, ctx, gen, 0, 0, 0, 0, -1, System.nanoTime() - t0);
    }
}
