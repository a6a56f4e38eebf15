package dev.kvtransfer.cli;

import com.sun.net.httpserver.HttpExchange;
import dev.kvtransfer.registry.HttpServers;
import io.micrometer.core.instrument.Meter;
import io.micrometer.core.instrument.MeterRegistry;
import io.micrometer.core.instrument.Tags;
import io.micrometer.core.instrument.binder.jvm.JvmMemoryMetrics;
import io.micrometer.core.instrument.binder.jvm.JvmThreadMetrics;
import io.micrometer.core.instrument.binder.system.ProcessorMetrics;
import io.micrometer.core.instrument.binder.system.UptimeMetrics;
import io.micrometer.core.instrument.composite.CompositeMeterRegistry;
import io.micrometer.core.instrument.config.MeterFilter;
import io.micrometer.core.instrument.distribution.DistributionStatisticConfig;
import io.micrometer.prometheusmetrics.PrometheusConfig;
import io.micrometer.prometheusmetrics.PrometheusMeterRegistry;

import java.io.IOException;
import java.io.OutputStream;
import java.io.UncheckedIOException;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.URI;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.Map;
import java.util.Objects;

/**
 * Serves a {@link PrometheusMeterRegistry} over HTTP for a Prometheus server to scrape, while a command runs:
 * {@code GET /metrics} (and {@code HEAD}) answers the registry's {@link PrometheusMeterRegistry#scrape()} in the
 * Prometheus text format 0.0.4 ({@value #CONTENT_TYPE}); any other path is {@code 404}, any other method
 * {@code 405}.
 *
 * <p>The server is the JDK's {@code com.sun.net.httpserver.HttpServer} bound to the loopback address only
 * ({@code 127.0.0.1}) unless the caller names another address ({@code serve --metrics-listen}): nothing outside the
 * host reaches it otherwise. A few daemon threads answer scrapes, and a connection that has not delivered its
 * request line and headers within {@link HttpServers#READ_DEADLINE_SECONDS} s is dropped, so one peer holding a
 * partial request never makes every scrape time out. {@link #close()} stops the server at once (open exchanges are
 * dropped) and waits a bounded time for the threads.
 *
 * <p>Meters of the same name must carry the same tag keys in Prometheus, and the ranks of two instances in one
 * JVM carry the same {@code rank} tags: give each instance {@link #instanceRegistry(String)}, which adds an
 * {@code instance} tag to every meter it registers (core's meters carry it already). Thread-safe.
 *
 * <p>Histograms: the registry of {@link #start(int)} publishes the per-request distributions as Prometheus
 * histograms with fixed buckets ({@link #histogramBuckets()}, {@link #bucketsOf(String)}), chosen as vLLM's
 * NIXL connector chooses its {@code vllm:nixl_xfer_time_seconds} buckets, so {@code histogram_quantile} over
 * {@code kvtransfer_transfer_time_seconds_bucket} reads like the same query over vLLM's series. Micrometer's own
 * percentile histogram (69 buckets per timer series, 276 per summary series) would be replaced by these few.
 */
public final class MetricsEndpoint implements AutoCloseable {
    /** The content type of the Prometheus text format served. */
    public static final String CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8";
    /** The path served. */
    public static final String PATH = "/metrics";
    /** Scrape threads: a few, so one slow scraper never holds the others (each read is bounded too). */
    private static final int WORKERS = 4;
    /**
     * Bucket upper bounds of the histograms the endpoint's registry publishes, by meter name (seconds for the
     * timers, the meter's base unit otherwise). Transfer time: vLLM's NIXL buckets (1 ms .. 5 s) plus 10, 30, 60 s
     * (the default {@code kvTransferTimeout}); bandwidth: 10 MB/s .. 200 GB/s; bytes per request: 64 KiB .. 16 GiB
     * in powers of 4; messages per request: powers of 2 up to 65536; staging waits: 100 µs .. 60 s.
     */
    private static final Map<String, double[]> HISTOGRAM_BUCKETS = Map.of(
            "kvtransfer.transfer.time", new double[] {0.001, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.2, 0.3, 0.5,
                0.75, 1, 5, 10, 30, 60},
            "kvtransfer.staging.wait", new double[] {0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10,
                30, 60},
            "kvtransfer.peer.bandwidth", new double[] {1e7, 1e8, 2.5e8, 5e8, 1e9, 2.5e9, 5e9, 1e10, 2.5e10, 5e10,
                1e11, 2e11},
            "kvtransfer.transfer.bytes", powers(1L << 16, 4, 10),
            "kvtransfer.messages", powers(1, 2, 17));
    /** 127.0.0.1, whatever the JVM prefers for {@code localhost}. */
    private static final InetAddress LOOPBACK;

    static {
        try {
            LOOPBACK = InetAddress.getByAddress("localhost", new byte[] {127, 0, 0, 1});
        } catch (java.net.UnknownHostException e) {
            throw new ExceptionInInitializerError(e);
        }
    }

    private final PrometheusMeterRegistry registry;
    private final HttpServers.Server server;
    private final InetSocketAddress address;
    private volatile boolean closed;

    private MetricsEndpoint(PrometheusMeterRegistry registry, HttpServers.Server server) {
        this.registry = registry;
        this.server = server;
        this.address = server.address();
    }

    /**
     * Starts serving a new Prometheus registry (with the JVM's memory, thread, processor and uptime meters bound
     * to it) on {@code 127.0.0.1:port}.
     *
     * @param port the TCP port, 1..65535, or 0 for any free port (see {@link #port()})
     * @return the running endpoint
     * @throws IllegalArgumentException when the port is outside 0..65535
     * @throws UncheckedIOException     naming the address when it cannot be bound (e.g. in use)
     */
    public static MetricsEndpoint start(int port) {
        return start(LOOPBACK, port);
    }

    /**
     * As {@link #start(int)}, on {@code host:port}.
     *
     * @param host the address to bind
     * @param port the TCP port, 1..65535, or 0 for any free port
     * @return the running endpoint
     */
    public static MetricsEndpoint start(InetAddress host, int port) {
        PrometheusMeterRegistry registry = new PrometheusMeterRegistry(PrometheusConfig.DEFAULT);
        registry.config().meterFilter(histogramBuckets());
        new JvmMemoryMetrics().bindTo(registry);
        new JvmThreadMetrics().bindTo(registry);
        new ProcessorMetrics().bindTo(registry);
        new UptimeMetrics().bindTo(registry);
        try {
            return start(registry, host, port);
        } catch (RuntimeException e) {
            registry.close();
            throw e;
        }
    }

    /**
     * Starts serving the caller's registry on {@code 127.0.0.1:port}; {@link #close()} closes the registry too.
     *
     * @param registry the registry to serve
     * @param port     the TCP port, 1..65535, or 0 for any free port
     * @return the running endpoint
     * @throws IllegalArgumentException when the port is outside 0..65535
     * @throws UncheckedIOException     naming the address when it cannot be bound
     */
    public static MetricsEndpoint start(PrometheusMeterRegistry registry, int port) {
        return start(registry, LOOPBACK, port);
    }

    /**
     * Starts serving the caller's registry on {@code host:port} (a long-running instance that is scraped from
     * another machine names its interface explicitly); {@link #close()} closes the registry too.
     *
     * @param registry the registry to serve
     * @param host     the address to bind
     * @param port     the TCP port, 1..65535, or 0 for any free port
     * @return the running endpoint
     * @throws IllegalArgumentException when the port is outside 0..65535
     * @throws UncheckedIOException     naming the address when it cannot be bound
     */
    public static MetricsEndpoint start(PrometheusMeterRegistry registry, InetAddress host, int port) {
        Objects.requireNonNull(registry, "registry");
        Objects.requireNonNull(host, "host");
        if (port < 0 || port > 65535) {
            throw new IllegalArgumentException("metrics port " + port + ": must be 0..65535");
        }
        InetSocketAddress bind = new InetSocketAddress(host, port);
        HttpServers.Server server;
        try {
            server = HttpServers.create(bind, WORKERS, "kvtransfer-metrics");
        } catch (UncheckedIOException e) {
            throw new UncheckedIOException("cannot serve metrics on " + host.getHostAddress() + ":" + port + ": "
                    + e.getCause().getMessage(), e.getCause());
        }
        MetricsEndpoint endpoint = new MetricsEndpoint(registry, server);
        server.http().createContext("/", endpoint::handle);
        server.http().start();
        return endpoint;
    }

    private static double[] powers(long first, int factor, int count) {
        double[] out = new double[count];
        double v = first;
        for (int i = 0; i < count; i++, v *= factor) {
            out[i] = v;
        }
        return out;
    }

    /**
     * The bucket upper bounds the endpoint's registry publishes for a meter (seconds for timers).
     *
     * @param meterName a Micrometer meter name, e.g. {@code kvtransfer.transfer.time}
     * @return a copy of its bounds, or empty when the meter keeps what it registered
     */
    public static java.util.Optional<double[]> bucketsOf(String meterName) {
        Objects.requireNonNull(meterName, "meterName");
        double[] b = HISTOGRAM_BUCKETS.get(meterName);
        return b == null ? java.util.Optional.empty() : java.util.Optional.of(b.clone());
    }

    /**
     * The filter that gives the meters named in {@link #bucketsOf(String)} exactly those buckets (and no
     * Micrometer percentile histogram); other meters are left as registered. Add it to a registry before any meter
     * is registered (the endpoint's own registry has it).
     *
     * @return the filter
     */
    public static MeterFilter histogramBuckets() {
        return new MeterFilter() {
            @Override
            public DistributionStatisticConfig configure(Meter.Id id, DistributionStatisticConfig config) {
                double[] buckets = HISTOGRAM_BUCKETS.get(id.getName());
                if (buckets == null) {
                    return config;
                }
                double[] b = id.getType() == Meter.Type.TIMER
                        ? Arrays.stream(buckets).map(sec -> sec * 1e9).toArray() // timers configure nanoseconds
                        : buckets.clone();
                return DistributionStatisticConfig.builder().percentilesHistogram(false).serviceLevelObjectives(b)
                        .build().merge(config);
            }
        };
    }

    /** @return the registry served: register meters here (or in {@link #instanceRegistry(String)}) */
    public PrometheusMeterRegistry registry() {
        return registry;
    }

    /**
     * A registry for one instance of this JVM: every meter registered in it gets the tag
     * {@code instance=<name>} and is served by this endpoint. Pass it to {@code LocalInstance.Builder.meters}.
     *
     * @param name the instance's name (e.g. {@code ctx}, {@code gen})
     * @return the registry
     */
    public MeterRegistry instanceRegistry(String name) {
        Objects.requireNonNull(name, "name");
        CompositeMeterRegistry composite = new CompositeMeterRegistry();
        composite.config().commonTags(Tags.of("instance", name));
        composite.add(registry);
        return composite;
    }

    /** @return the bound port (the chosen one when started with port 0) */
    public int port() {
        return address.getPort();
    }

    /** @return the URI to scrape, {@code http://127.0.0.1:<port>/metrics} */
    public URI uri() {
        return URI.create("http://" + address.getAddress().getHostAddress() + ":" + port() + PATH);
    }

    private void handle(HttpExchange exchange) throws IOException {
        try (exchange) {
            String method = exchange.getRequestMethod();
            String path = exchange.getRequestURI().getPath();
            if (!PATH.equals(path)) {
                reply(exchange, 404, "not found: " + path + " (metrics are at " + PATH + ")\n");
                return;
            }
            boolean head = "HEAD".equals(method);
            if (!head && !"GET".equals(method)) {
                exchange.getResponseHeaders().set("Allow", "GET, HEAD");
                reply(exchange, 405, "method " + method + " not allowed: GET or HEAD\n");
                return;
            }
            byte[] body = registry.scrape().getBytes(StandardCharsets.UTF_8);
            exchange.getResponseHeaders().set("Content-Type", CONTENT_TYPE);
            if (head) {
                exchange.sendResponseHeaders(200, -1);
            } else {
                exchange.sendResponseHeaders(200, body.length);
                try (OutputStream out = exchange.getResponseBody()) {
                    out.write(body);
                }
            }
        }
    }

    private static void reply(HttpExchange exchange, int status, String text) throws IOException {
        byte[] body = text.getBytes(StandardCharsets.UTF_8);
        exchange.getResponseHeaders().set("Content-Type", "text/plain; charset=utf-8");
        exchange.sendResponseHeaders(status, body.length);
        try (OutputStream out = exchange.getResponseBody()) {
            out.write(body);
        }
    }

    /** Stops serving (at once), waits at most 2 s for the scrape threads, closes the registry. */
    @Override
    public void close() {
        if (closed) {
            return;
        }
        closed = true;
        server.stop();
        registry.close();
    }

    @Override
    public String toString() {
        return "MetricsEndpoint{" + uri() + (closed ? " closed" : "") + "}";
    }
}
