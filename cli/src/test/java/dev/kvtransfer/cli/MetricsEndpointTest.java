package dev.kvtransfer.cli;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.layout.BlockDistribution;
import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.api.model.ContextPhaseParams;
import dev.kvtransfer.api.transport.TransportConfig;
import dev.kvtransfer.core.RequestState;
import dev.kvtransfer.core.TransceiverConfig;
import dev.kvtransfer.core.TransferRequest;
import dev.kvtransfer.core.local.LocalInstance;
import dev.kvtransfer.formatter.standard.StandardFormatterProvider;
import dev.kvtransfer.testkit.KvPattern;
import dev.kvtransfer.testkit.loopback.LoopbackTransportProvider;
import org.junit.jupiter.api.Test;
import picocli.CommandLine;
import picocli.CommandLine.Command;
import picocli.CommandLine.Mixin;

import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.net.ConnectException;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;
import static org.assertj.core.api.Assertions.within;
import static org.assertj.core.api.Assertions.withinPercentage;
import static org.awaitility.Awaitility.await;

/**
 * The Prometheus endpoint, scraped over loopback HTTP while a context and a generation instance move verified
 * requests and one forged request is refused.
 */
class MetricsEndpointTest {
    private static final Duration BOUND = Duration.ofSeconds(30);
    private static final CacheState CTX = CacheState.builder().uniformKvHeads(2, 4).sizePerHead(8).tokensPerBlock(8)
            .tensorParallelism(2).build();
    private static final CacheState GEN = CacheState.builder().uniformKvHeads(2, 4).sizePerHead(8).tokensPerBlock(8)
            .build();
    private final HttpClient http = HttpClient.newBuilder().connectTimeout(Duration.ofSeconds(5)).build();

    private HttpResponse<String> get(URI uri) throws Exception {
        return http.send(HttpRequest.newBuilder(uri).timeout(Duration.ofSeconds(10)).GET().build(),
                HttpResponse.BodyHandlers.ofString());
    }

    /** Every sample of a scrape, keyed by {@code name{labels sorted as served}}. */
    private static Map<String, Double> samples(String text) {
        Map<String, Double> out = new LinkedHashMap<>();
        Pattern line = Pattern.compile("^([a-zA-Z_:][a-zA-Z0-9_:]*(?:\\{[^}]*\\})?) (\\S+)$");
        for (String l : text.split("\n")) {
            if (l.startsWith("#") || l.isBlank()) {
                continue;
            }
            Matcher m = line.matcher(l);
            assertThat(m.matches()).as("sample line '%s'", l).isTrue();
            out.put(m.group(1), Double.parseDouble(m.group(2)));
        }
        return out;
    }

    private static double sample(Map<String, Double> all, String name, String... labels) {
        for (Map.Entry<String, Double> e : all.entrySet()) {
            String k = e.getKey();
            if (!k.startsWith(name + "{")) {
                continue;
            }
            boolean ok = true;
            for (String l : labels) {
                ok &= k.contains(l);
            }
            if (ok) {
                return e.getValue();
            }
        }
        throw new AssertionError("no sample " + name + " with " + List.of(labels) + " in " + all.keySet());
    }

    /** The cumulative buckets of one histogram series, by upper bound ({@code +Inf} last). */
    private static java.util.TreeMap<Double, Double> buckets(Map<String, Double> all, String name, String... labels) {
        java.util.TreeMap<Double, Double> out = new java.util.TreeMap<>();
        Pattern le = Pattern.compile("[{,]le=\"([^\"]+)\"");
        for (Map.Entry<String, Double> e : all.entrySet()) {
            String k = e.getKey();
            if (!k.startsWith(name + "_bucket{")) {
                continue;
            }
            boolean ok = true;
            for (String l : labels) {
                ok &= k.contains(l);
            }
            if (ok) {
                Matcher m = le.matcher(k);
                assertThat(m.find()).as("le label in %s", k).isTrue();
                String v = m.group(1);
                out.put(v.equals("+Inf") ? Double.POSITIVE_INFINITY : Double.parseDouble(v), e.getValue());
            }
        }
        assertThat(out).as("buckets of %s with %s", name, List.of(labels)).isNotEmpty();
        return out;
    }

    /**
     * Checks one histogram series: its buckets are exactly the endpoint's ({@code +Inf} added), cumulative, and hold
     * every recorded value ({@code count} of them; -1: as many as {@code _count} says); returns its sum.
     */
    private static double histogram(Map<String, Double> all, String name, String meter, double scale, long count,
                                    String... labels) {
        java.util.TreeMap<Double, Double> b = buckets(all, name, labels);
        double[] expected = MetricsEndpoint.bucketsOf(meter).orElseThrow();
        List<Double> bounds = new ArrayList<>();
        for (double e : expected) {
            bounds.add(e * scale);
        }
        bounds.add(Double.POSITIVE_INFINITY);
        assertThat(new ArrayList<>(b.keySet())).as("%s %s bounds", name, List.of(labels))
                .usingElementComparator((x, y) -> x.equals(y) || Math.abs(x - y) <= 1e-9 * Math.abs(x) ? 0
                        : Double.compare(x, y))
                .containsExactlyElementsOf(bounds);
        double previous = 0;
        for (double v : b.values()) {
            assertThat(v).as("%s %s cumulative", name, List.of(labels)).isGreaterThanOrEqualTo(previous);
            previous = v;
        }
        double n = count >= 0 ? count : sample(all, name + "_count", labels);
        assertThat(b.lastEntry().getValue()).as("%s %s +Inf", name, List.of(labels)).isEqualTo(n);
        assertThat(sample(all, name + "_count", labels)).as("%s %s count", name, List.of(labels)).isEqualTo(n);
        return sample(all, name + "_sum", labels);
    }

    @Test
    void scrapeShowsTransfersBytesMessagesAndErrorsByCodeWithTheirValues() throws Exception {
        TransceiverConfig config = TransceiverConfig.builder().transferBufferBytes(1 << 20).auth(true)
                .kvTransferTimeout(Duration.ofSeconds(20)).build();
        TransportConfig loop = TransportConfig.builder().property(LoopbackTransportProvider.FABRIC_PROPERTY, "metrics")
                .build();
        try (MetricsEndpoint endpoint = MetricsEndpoint.start(0);
             LocalInstance ctx = LocalInstance.builder("ctx", CTX).transport(new LoopbackTransportProvider(), loop)
                     .formatter(new StandardFormatterProvider()).config(config).blocksPerRank(16)
                     .meters(endpoint.instanceRegistry("ctx")).start();
             LocalInstance gen = LocalInstance.builder("gen", GEN).transport(new LoopbackTransportProvider(), loop)
                     .formatter(new StandardFormatterProvider()).config(config).blocksPerRank(16)
                     .meters(endpoint.instanceRegistry("gen")).start()) {
            assertThat(endpoint.uri().getHost()).isEqualTo("127.0.0.1");
            assertThat(InetAddress.getByName(endpoint.uri().getHost()).isLoopbackAddress()).isTrue();

            // Three requests moved and verified (TP2 -> TP1: every context rank sends its heads).
            int[] prompts = {20, 8, 33};
            long[] ctxBytes = new long[2];
            long genBytes = 0;
            long[] ctxMessages = new long[2];
            long genMessages = 0;
            // What the histograms must hold: per-request transfer times (s) and per-peer bandwidths (B/s).
            double[] ctxSeconds = new double[2];
            double genSeconds = 0;
            double[] ctxBandwidth = new double[2];
            double[] genBandwidth = new double[2];
            for (int i = 0; i < prompts.length; i++) {
                long id = 10 + i;
                int blocks = BlockDistribution.blocksFor(prompts[i], 8);
                List<TransferRequest> c = new ArrayList<>();
                for (int r = 0; r < 2; r++) {
                    int[] b = ctx.cache(r).allocate(id, blocks);
                    KvPattern.fill(ctx.cache(r), b, CTX, r, id, blocks);
                    c.add(TransferRequest.context(id, prompts[i], b));
                    ctx.transceiver(r).respondAndSendAsync(c.get(r));
                }
                int[] g = gen.cache(0).allocate(id, blocks);
                TransferRequest q = TransferRequest.generation(ctx.contextPhaseParams(id, 0), prompts[i], g);
                gen.transceiver(0).requestAndReceiveAsync(q);
                await().atMost(BOUND).until(() -> q.isDone() && c.get(0).isDone() && c.get(1).isDone());
                assertThat(q.state()).as("%s", q).isEqualTo(RequestState.GENERATION_TRANS_COMPLETE);
                KvPattern.verify(gen.cache(0), g, GEN, 0, id, blocks).assertOk();
                long genNanos = Math.max(1, q.transferDuration().orElseThrow().toNanos());
                for (int r = 0; r < 2; r++) {
                    assertThat(c.get(r).state()).isEqualTo(RequestState.CONTEXT_COMPLETE);
                    ctxBytes[r] += c.get(r).kvCacheSize();
                    ctxMessages[r] += c.get(r).messageCount();
                    long nanos = Math.max(1, c.get(r).transferDuration().orElseThrow().toNanos());
                    ctxSeconds[r] += nanos / 1e9;
                    ctxBandwidth[r] += c.get(r).kvCacheSize() * 1e9 / nanos;
                    // TP2 -> TP1: the generation rank received from context rank r exactly what r sent.
                    genBandwidth[r] += c.get(r).kvCacheSize() * 1e9 / genNanos;
                    ctx.cache(r).free(id);
                }
                genSeconds += genNanos / 1e9;
                genBytes += q.kvCacheSize();
                genMessages += q.messageCount();
                gen.cache(0).free(id);
            }
            assertThat(genBytes).isEqualTo(ctxBytes[0] + ctxBytes[1]).isPositive();

            // One forged request (a token that the deployment secret did not make) is refused by both context ranks.
            ContextPhaseParams real = ctx.contextPhaseParams(99, 0);
            ContextPhaseParams forged = new ContextPhaseParams(99, new long[0], real.contextState(),
                    new byte[ContextPhaseParams.TOKEN_BYTES]);
            int[] g = gen.cache(0).allocate(99, 1);
            TransferRequest bad = TransferRequest.generation(forged, 5, g);
            gen.transceiver(0).requestAndReceiveAsync(bad);
            await().atMost(BOUND).until(bad::isDone);
            assertThat(bad.error().orElseThrow().code()).isEqualTo(ErrorCode.UNAUTHORIZED);
            gen.cache(0).free(99);

            // Both context ranks counted the refusal (asynchronously, on their responder threads).
            await().atMost(BOUND).untilAsserted(() -> {
                Map<String, Double> s = samples(get(endpoint.uri()).body());
                for (int r = 0; r < 2; r++) {
                    assertThat(sample(s, "kvtransfer_errors_total", "instance=\"ctx\"", "rank=\"rank-" + r + "\"",
                            "code=\"UNAUTHORIZED\"")).isEqualTo(1.0);
                }
            });

            HttpResponse<String> response = get(endpoint.uri());
            assertThat(response.statusCode()).isEqualTo(200);
            assertThat(response.headers().firstValue("Content-Type")).hasValue(MetricsEndpoint.CONTENT_TYPE);
            String body = response.body();
            assertThat(body).contains("# TYPE kvtransfer_transfers_total counter")
                    .contains("# TYPE kvtransfer_bytes_total counter")
                    .contains("# TYPE kvtransfer_errors_total counter")
                    .contains("# TYPE kvtransfer_messages histogram")
                    .contains("# TYPE kvtransfer_transfer_time_seconds histogram")
                    .contains("# TYPE kvtransfer_peer_bandwidth_bytes_per_second histogram")
                    .contains("# TYPE kvtransfer_staging_wait_seconds histogram")
                    .contains("# TYPE kvtransfer_requests_inflight gauge")
                    .contains("# TYPE kvtransfer_staging_slots gauge")
                    .contains("# TYPE jvm_memory_used_bytes gauge");
            Map<String, Double> s = samples(body);
            for (int r = 0; r < 2; r++) {
                String rank = "rank=\"rank-" + r + "\"";
                assertThat(sample(s, "kvtransfer_transfers_total", "instance=\"ctx\"", rank, "role=\"context\"",
                        "outcome=\"complete\"")).isEqualTo(3.0);
                assertThat(sample(s, "kvtransfer_transfers_total", "instance=\"ctx\"", rank, "role=\"context\"",
                        "outcome=\"failed\"")).isEqualTo(0.0);
                assertThat(sample(s, "kvtransfer_bytes_total", "instance=\"ctx\"", rank, "role=\"context\""))
                        .isEqualTo((double) ctxBytes[r]);
                assertThat(sample(s, "kvtransfer_messages_count", "instance=\"ctx\"", rank, "role=\"context\""))
                        .isEqualTo(3.0);
                assertThat(sample(s, "kvtransfer_messages_sum", "instance=\"ctx\"", rank, "role=\"context\""))
                        .isEqualTo((double) ctxMessages[r]);
                for (ErrorCode code : ErrorCode.values()) {
                    if (code != ErrorCode.UNAUTHORIZED) {
                        assertThat(sample(s, "kvtransfer_errors_total", "instance=\"ctx\"", rank,
                                "code=\"" + code + "\"")).as("%s on ctx %s", code, rank).isEqualTo(0.0);
                    }
                }
            }
            // The histograms, with the values of the requests above (the same epoch-nanosecond stamps the requests
            // report), in the endpoint's buckets.
            for (int r = 0; r < 2; r++) {
                String[] l = {"instance=\"ctx\"", "rank=\"rank-" + r + "\"", "role=\"context\""};
                assertThat(histogram(s, "kvtransfer_transfer_time_seconds", "kvtransfer.transfer.time", 1, 3, l))
                        .as("ctx rank %d transfer time", r).isCloseTo(ctxSeconds[r], within(1e-6));
                String[] p = {"instance=\"ctx\"", "rank=\"rank-" + r + "\"", "role=\"context\"", "peer=\"0\""};
                assertThat(histogram(s, "kvtransfer_peer_bandwidth_bytes_per_second", "kvtransfer.peer.bandwidth", 1,
                        3, p)).as("ctx rank %d bandwidth to gen rank 0", r)
                        .isCloseTo(ctxBandwidth[r], withinPercentage(0.01));
                assertThat(histogram(s, "kvtransfer_messages", "kvtransfer.messages", 1, 3, l))
                        .isEqualTo((double) ctxMessages[r]);
                assertThat(histogram(s, "kvtransfer_transfer_bytes", "kvtransfer.transfer.bytes", 1, 3, l))
                        .as("ctx rank %d bytes per request", r).isEqualTo((double) ctxBytes[r]);
                // Waits for a staging slot (how many depends on the sender threads' timing): a consistent series.
                assertThat(histogram(s, "kvtransfer_staging_wait_seconds", "kvtransfer.staging.wait", 1, -1,
                        "instance=\"ctx\"", "rank=\"rank-" + r + "\"", "direction=\"send\"")).isNotNegative();
                assertThat(sample(s, "kvtransfer_staging_slots", "instance=\"ctx\"", "rank=\"rank-" + r + "\"",
                        "direction=\"send\"")).isEqualTo((double) config.sendConcurrency());
                assertThat(sample(s, "kvtransfer_staging_slots_busy", "instance=\"ctx\"", "rank=\"rank-" + r + "\"",
                        "direction=\"send\"")).isZero();
                // Accepted and not yet reported by a status check (this test runs none): what the transceiver says.
                assertThat(sample(s, "kvtransfer_requests_inflight", l))
                        .isEqualTo((double) ctx.transceiver(r).pendingContextRequests()).isPositive();
            }
            String[] gl = {"instance=\"gen\"", "rank=\"rank-0\"", "role=\"generation\""};
            assertThat(histogram(s, "kvtransfer_transfer_time_seconds", "kvtransfer.transfer.time", 1, 3, gl))
                    .as("gen transfer time").isCloseTo(genSeconds, within(1e-6));
            assertThat(histogram(s, "kvtransfer_messages", "kvtransfer.messages", 1, 3, gl))
                    .isEqualTo((double) genMessages);
            assertThat(histogram(s, "kvtransfer_transfer_bytes", "kvtransfer.transfer.bytes", 1, 3, gl))
                    .as("gen bytes per request").isEqualTo((double) genBytes);
            for (int r = 0; r < 2; r++) {
                String[] p = {"instance=\"gen\"", "rank=\"rank-0\"", "role=\"generation\"",
                    "peer=\"" + r + "\""};
                assertThat(histogram(s, "kvtransfer_peer_bandwidth_bytes_per_second", "kvtransfer.peer.bandwidth", 1,
                        3, p)).as("gen bandwidth from ctx rank %d", r).isCloseTo(genBandwidth[r],
                        withinPercentage(0.01));
            }
            assertThat(sample(s, "kvtransfer_requests_inflight", gl))
                    .isEqualTo((double) gen.transceiver(0).pendingGenerationRequests()).isPositive();

            String g0 = "rank=\"rank-0\"";
            assertThat(sample(s, "kvtransfer_transfers_total", "instance=\"gen\"", g0, "role=\"generation\"",
                    "outcome=\"complete\"")).isEqualTo(3.0);
            assertThat(sample(s, "kvtransfer_transfers_total", "instance=\"gen\"", g0, "role=\"generation\"",
                    "outcome=\"failed\"")).isEqualTo(1.0);
            assertThat(sample(s, "kvtransfer_bytes_total", "instance=\"gen\"", g0, "role=\"generation\""))
                    .isEqualTo((double) genBytes);
            assertThat(sample(s, "kvtransfer_messages_count", "instance=\"gen\"", g0, "role=\"generation\""))
                    .isEqualTo(3.0);
            assertThat(sample(s, "kvtransfer_messages_sum", "instance=\"gen\"", g0, "role=\"generation\""))
                    .isEqualTo((double) genMessages);
            for (ErrorCode code : ErrorCode.values()) {
                assertThat(sample(s, "kvtransfer_errors_total", "instance=\"gen\"", g0, "code=\"" + code + "\""))
                        .as("%s on gen", code).isEqualTo(0.0);
            }

            // Only /metrics, only GET / HEAD.
            URI other = endpoint.uri().resolve("/other");
            assertThat(get(other).statusCode()).isEqualTo(404);
            HttpResponse<String> post = http.send(HttpRequest.newBuilder(endpoint.uri())
                    .POST(HttpRequest.BodyPublishers.ofString("x")).build(), HttpResponse.BodyHandlers.ofString());
            assertThat(post.statusCode()).isEqualTo(405);
            assertThat(post.headers().firstValue("Allow")).hasValue("GET, HEAD");
            HttpResponse<String> head = http.send(HttpRequest.newBuilder(endpoint.uri())
                    .method("HEAD", HttpRequest.BodyPublishers.noBody()).build(), HttpResponse.BodyHandlers.ofString());
            assertThat(head.statusCode()).isEqualTo(200);
            assertThat(head.body()).isEmpty();
        }
    }

    @Test
    void closedEndpointRefusesConnectionsAndABusyPortIsOneClearError() throws Exception {
        URI uri;
        try (MetricsEndpoint endpoint = MetricsEndpoint.start(0)) {
            uri = endpoint.uri();
            assertThat(get(uri).statusCode()).isEqualTo(200);
            assertThatThrownBy(() -> MetricsEndpoint.start(endpoint.port()))
                    .isInstanceOf(java.io.UncheckedIOException.class)
                    .hasMessageStartingWith("cannot serve metrics on 127.0.0.1:" + endpoint.port());
        }
        assertThatThrownBy(() -> get(uri)).isInstanceOf(ConnectException.class);
        assertThatThrownBy(() -> MetricsEndpoint.start(70000)).isInstanceOf(IllegalArgumentException.class)
                .hasMessageContaining("70000");
    }

    /** A command that uses the mixin as a long-running command would. */
    @Command(name = "probe")
    static final class Probe implements java.util.concurrent.Callable<Integer> {
        @Mixin
        MetricsOptions metrics = new MetricsOptions();
        final ByteArrayOutputStream printed = new ByteArrayOutputStream();
        String scraped;
        boolean served;

        @Override
        public Integer call() throws Exception {
            PrintStream out = new PrintStream(printed, true, StandardCharsets.UTF_8);
            try (MetricsOptions.Scope scope = metrics.start(out)) {
                io.micrometer.core.instrument.Counter.builder("kvtransfer.probe").register(scope.registry("ctx"))
                        .increment(7);
                served = scope.endpoint().isPresent();
                if (served) {
                    scraped = HttpClient.newHttpClient().send(HttpRequest.newBuilder(scope.endpoint().get().uri())
                            .build(), HttpResponse.BodyHandlers.ofString()).body();
                }
            }
            return 0;
        }
    }

    @Test
    void theMixinServesWhileTheCommandRunsAndIsOffByDefault() throws Exception {
        int port;
        try (ServerSocket probe = new ServerSocket(0, 1, InetAddress.getLoopbackAddress())) {
            port = probe.getLocalPort();
        }
        Probe on = new Probe();
        assertThat(new CommandLine(on).execute("--metrics-port", Integer.toString(port))).isZero();
        assertThat(on.served).isTrue();
        assertThat(on.printed.toString(StandardCharsets.UTF_8))
                .contains("metrics").contains("http://127.0.0.1:" + port + "/metrics");
        assertThat(on.scraped).contains("kvtransfer_probe_total{instance=\"ctx\"} 7.0");
        // Closed with the command: the port is free again.
        try (ServerSocket again = new ServerSocket(port, 1, InetAddress.getLoopbackAddress())) {
            assertThat(again.getLocalPort()).isEqualTo(port);
        }

        Probe off = new Probe();
        assertThat(new CommandLine(off).execute()).isZero();
        assertThat(off.served).isFalse();
        assertThat(off.printed.toString(StandardCharsets.UTF_8)).isEmpty();
        Probe zero = new Probe();
        assertThat(new CommandLine(zero).execute("--metrics-port=0")).isZero();
        assertThat(zero.served).isFalse();

        Probe bad = new Probe();
        ByteArrayOutputStream err = new ByteArrayOutputStream();
        CommandLine cl = new CommandLine(bad);
        cl.setErr(new java.io.PrintWriter(err, true, StandardCharsets.UTF_8));
        assertThat(cl.execute("--metrics-port=-3")).isEqualTo(2);
        assertThat(err.toString(StandardCharsets.UTF_8)).contains("--metrics-port -3: must be 0 (off) or a TCP port");
    }

    @Test
    void theDemoServesBothInstancesMetersWhileItRuns() throws Exception {
        int port;
        try (ServerSocket probe = new ServerSocket(0, 1, InetAddress.getLoopbackAddress())) {
            port = probe.getLocalPort();
        }
        URI uri = URI.create("http://127.0.0.1:" + port + MetricsEndpoint.PATH);
        java.util.concurrent.atomic.AtomicReference<Map<String, Double>> last =
                new java.util.concurrent.atomic.AtomicReference<>();
        // Long enough to be scraped while it runs: 4 requests one at a time, each with a simulated 4 x 100 ms prefill.
        DemoRun run = demoUnderScrape(BOUND, () -> {
            Map<String, Double> s = samples(get(uri).body());
            // A transfer completed on the generation side and on both context ranks (a context rank counts its
            // request when its own sends end, which may come after the generation side's).
            // The scrape reads meter by meter while transfers end, so it also waits for the bytes to show.
            if (completedOn(s, "gen", "generation")
                    && sample(s, "kvtransfer_bytes_total", "instance=\"gen\"", "role=\"generation\"") > 0
                    && java.util.stream.IntStream.range(0, 2).allMatch(
                    r -> s.keySet().stream().anyMatch(k -> k.startsWith("kvtransfer_transfers_total{")
                            && k.contains("instance=\"ctx\"") && k.contains("rank=\"rank-" + r + "\"")
                            && k.contains("role=\"context\"") && k.contains("outcome=\"complete\"")
                            && s.get(k) >= 1))) {
                last.set(s);
                return true;
            }
            return false;
        }, "--backend=loopback", "--metrics-port=" + port, "--ctx-tp=2");
        Map<String, Double> seen = last.get();
        assertThat(run.exit()).as(run.output()).isZero();
        assertThat(run.output()).contains("metrics").contains(uri.toString());
        assertThat(seen).as("a scrape while the demo ran saw a completed transfer; demo output:%n%s", run.output())
                .isNotNull();
        for (int r = 0; r < 2; r++) {
            assertThat(sample(seen, "kvtransfer_transfers_total", "instance=\"ctx\"", "rank=\"rank-" + r + "\"",
                    "role=\"context\"", "outcome=\"complete\"")).isGreaterThanOrEqualTo(1.0);
        }
        assertThat(sample(seen, "kvtransfer_bytes_total", "instance=\"gen\"", "role=\"generation\""))
                .isPositive();
        assertThat(buckets(seen, "kvtransfer_transfer_time_seconds", "instance=\"gen\"", "role=\"generation\""))
                .isNotEmpty();
        // Closed with the demo.
        assertThatThrownBy(() -> get(uri)).isInstanceOf(ConnectException.class);
    }

    @Test
    void aDemoWithTheGenerationInstanceInAChildJvmServesItsMetersOnTheNextPort() throws Exception {
        SplitScrape s = scrapeSplitDemo(Duration.ofSeconds(90), "--backend=aeron", "--gen-tp=2");
        assertThat(s.run().output()).contains(s.ctxUri().toString()).contains("metrics (gen)")
                .contains(s.genUri().toString());
        // Each JVM serves its own instance: the generation ranks only on the child's port, the context's on ours.
        for (int r = 0; r < 2; r++) {
            assertThat(sample(s.gen(), "kvtransfer_transfers_total", "instance=\"gen\"", "rank=\"rank-" + r + "\"",
                    "role=\"generation\"", "outcome=\"complete\"")).isGreaterThanOrEqualTo(1.0);
        }
        assertThat(buckets(s.gen(), "kvtransfer_transfer_time_seconds", "instance=\"gen\"",
                "role=\"generation\"")).isNotEmpty();
    }

    @Test
    void mpiRanksServeTheirInstancesMetersOnConsecutivePorts() throws Exception {
        dev.kvtransfer.api.transport.TransportProvider mpi =
                dev.kvtransfer.core.plugin.Plugins.discover().transport("mpi");
        org.junit.jupiter.api.Assumptions.assumeTrue(mpi.isAvailable(),
                () -> "SKIPPED: transport mpi unavailable here: " + mpi.unavailabilityCause());
        // One context and one generation rank under mpirun: world rank 0 on P, world rank 1 on P + 1.
        SplitScrape s = scrapeSplitDemo(Duration.ofSeconds(120), "--backend=mpi");
        assertThat(s.run().output()).contains("metrics (mpi)").contains(s.ctxUri().toString());
        assertThat(sample(s.gen(), "kvtransfer_transfers_total", "instance=\"gen\"", "rank=\"rank-0\"",
                "role=\"generation\"", "outcome=\"complete\"")).isGreaterThanOrEqualTo(1.0);
        assertThat(sample(s.ctx(), "kvtransfer_transfers_total", "instance=\"ctx\"", "rank=\"rank-0\"",
                "role=\"context\"", "outcome=\"complete\"")).isGreaterThanOrEqualTo(1.0);
    }

    /** A demo whose context and generation instances serve on ports P and P + 1, and a scrape of each. */
    private record SplitScrape(DemoRun run, URI ctxUri, URI genUri, Map<String, Double> ctx,
                               Map<String, Double> gen) {
    }

    /**
     * Runs {@link #demoUnderScrape} with {@code --metrics-port P} and {@code args}, scraping P (the context
     * instance) and P + 1 (the generation instance) until both saw a completed transfer; checks that the demo
     * succeeded, that each port served only its own instance, and that both were closed with the demo.
     */
    private SplitScrape scrapeSplitDemo(Duration bound, String... args) throws Exception {
        int port = twoFreePorts();
        URI ctxUri = URI.create("http://127.0.0.1:" + port + MetricsEndpoint.PATH);
        URI genUri = URI.create("http://127.0.0.1:" + (port + 1) + MetricsEndpoint.PATH);
        java.util.concurrent.atomic.AtomicReference<Map<String, Double>> gen =
                new java.util.concurrent.atomic.AtomicReference<>();
        java.util.concurrent.atomic.AtomicReference<Map<String, Double>> ctx =
                new java.util.concurrent.atomic.AtomicReference<>();
        List<String> all = new ArrayList<>(List.of(args));
        all.add("--metrics-port=" + port);
        DemoRun run = demoUnderScrape(bound, () -> {
            Map<String, Double> c = samples(get(ctxUri).body());
            Map<String, Double> g = samples(get(genUri).body());
            if (completedOn(g, "gen", "generation") && completedOn(c, "ctx", "context")) {
                gen.set(g);
                ctx.set(c);
                return true;
            }
            return false;
        }, all.toArray(String[]::new));
        assertThat(run.exit()).as(run.output()).isZero();
        assertThat(gen.get()).as("scrapes of both ports while the demo ran saw a completed transfer; output:%n%s",
                run.output()).isNotNull();
        assertThat(gen.get().keySet()).noneMatch(k -> k.contains("instance=\"ctx\""));
        assertThat(ctx.get().keySet()).noneMatch(k -> k.contains("instance=\"gen\""));
        assertThatThrownBy(() -> get(genUri)).isInstanceOf(ConnectException.class);
        assertThatThrownBy(() -> get(ctxUri)).isInstanceOf(ConnectException.class);
        return new SplitScrape(run, ctxUri, genUri, ctx.get(), gen.get());
    }

    /** A demo's exit code and what it printed. */
    private record DemoRun(int exit, String output) {
    }

    /**
     * Runs a small demo (4 requests one at a time, each with a simulated 4 x 100 ms prefill, so it can be scraped
     * while it runs) with {@code args} added, polling {@code seen} until it holds, the demo ends, or the bound.
     * A refused connection counts as not yet (the demo has not bound its port).
     */
    private static DemoRun demoUnderScrape(Duration bound, java.util.concurrent.Callable<Boolean> seen, String... args)
            throws InterruptedException {
        List<String> all = new ArrayList<>(List.of("demo", "--requests=4", "--max-inflight=1", "--warmup=0",
                "--isl=32", "--layers=4", "--kv-heads=4", "--size-per-head=8", "--tokens-per-block=16",
                "--prefill-ms-per-layer=100", "--no-copy-baseline"));
        all.addAll(List.of(args));
        ByteArrayOutputStream captured = new ByteArrayOutputStream();
        PrintStream old = System.out;
        java.util.concurrent.atomic.AtomicInteger exit = new java.util.concurrent.atomic.AtomicInteger(-1);
        Thread demo = new Thread(() -> exit.set(new CommandLine(new KvTransferCli()).execute(
                all.toArray(String[]::new))), "demo-under-scrape");
        System.setOut(new PrintStream(captured, true, StandardCharsets.UTF_8));
        try {
            demo.start();
            await().atMost(bound).pollInterval(Duration.ofMillis(20)).until(() -> {
                if (exit.get() >= 0) {
                    return true; // ended before the scrapes saw it: the caller's assertions say so
                }
                try {
                    return seen.call();
                } catch (ConnectException notYet) {
                    return false;
                }
            });
            demo.join(bound.toMillis());
        } finally {
            System.setOut(old);
        }
        return new DemoRun(exit.get(), captured.toString(StandardCharsets.UTF_8));
    }

    private static boolean completedOn(Map<String, Double> s, String instance, String role) {
        return s.keySet().stream().anyMatch(k -> k.startsWith("kvtransfer_transfers_total{")
                && k.contains("instance=\"" + instance + "\"") && k.contains("role=\"" + role + "\"")
                && k.contains("outcome=\"complete\"") && s.get(k) >= 1);
    }

    /** @return a port P with P and P + 1 free on loopback just now */
    private static int twoFreePorts() throws java.io.IOException {
        for (int i = 0; i < 50; i++) {
            try (ServerSocket a = new ServerSocket(0, 1, InetAddress.getLoopbackAddress())) {
                int p = a.getLocalPort();
                if (p >= 65535) {
                    continue;
                }
                try (ServerSocket b = new ServerSocket(p + 1, 1, InetAddress.getLoopbackAddress())) {
                    return p;
                } catch (java.io.IOException busy) {
                    // try another pair
                }
            }
        }
        throw new IllegalStateException("no two consecutive free loopback ports in 50 tries");
    }
}
