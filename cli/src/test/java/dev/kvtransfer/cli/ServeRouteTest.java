package dev.kvtransfer.cli;

import com.fasterxml.jackson.databind.JsonNode;
import dev.kvtransfer.registry.ControlHttp;
import dev.kvtransfer.registry.InstanceRecord;
import dev.kvtransfer.registry.RegistryAuth;
import dev.kvtransfer.registry.RegistryException;
import dev.kvtransfer.registry.RegistryServer;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.io.IOException;
import java.net.ServerSocket;
import java.net.URI;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.attribute.PosixFilePermissions;
import java.security.SecureRandom;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;
import static org.awaitility.Awaitility.await;

/**
 * The standalone deployment on loopback: {@code route} (with the embedded registry) in this JVM, every
 * {@code serve} instance in its own JVM, over Aeron (a media driver embedded in each process, UDP on 127.0.0.1).
 * 2P2D, every element verified, a generation instance killed with SIGKILL mid-run and restarted, drain on SIGTERM,
 * and the one-line errors of bad deployments.
 */
class ServeRouteTest {
    private static final Duration LEASE = Duration.ofMillis(1500);
    @TempDir
    Path dir;
    private final List<ServeProcess> procs = new ArrayList<>();
    private byte[] secret;
    private Path secretFile;
    private int port;

    @AfterEach
    void stopAll() throws Exception {
        for (ServeProcess p : procs) {
            p.close();
            // The children's logs, for a failure's report (surefire keeps this test's output).
            System.out.println("---- " + p.name + " ----\n" + p.output());
        }
    }

    private void deployment() throws IOException {
        secret = new byte[32];
        new SecureRandom().nextBytes(secret);
        secretFile = dir.resolve("secret");
        Files.createFile(secretFile, PosixFilePermissions.asFileAttribute(PosixFilePermissions.fromString("rw-------")));
        Files.write(secretFile, secret);
        try (ServerSocket s = new ServerSocket(0)) {
            port = s.getLocalPort();
        }
    }

    private String registryUrl() {
        return "http://127.0.0.1:" + port;
    }

    private ServeProcess serve(String role, String id, String... extra) throws IOException {
        List<String> a = new ArrayList<>(List.of("serve", "--role=" + role, "--id=" + id, "--registry=" + registryUrl(),
                "--secret-file=" + secretFile, "--timeout-s=8", "--heartbeat-ms=300", "--max-inflight=48",
                "--max-isl=256", "--layers=4", "--size-per-head=16", "--tokens-per-block=16"));
        a.addAll(List.of(extra));
        if (a.stream().noneMatch(x -> x.startsWith("--kv-heads"))) {
            a.add("--kv-heads=4");
        }
        ServeProcess p = ServeProcess.start(dir, id, a);
        procs.add(p);
        return p;
    }

    private ControlHttp.Client client(String url) {
        return new ControlHttp.Client(URI.create(url), RegistryAuth.of(secret), Duration.ofSeconds(2), "test");
    }

    private List<InstanceRecord> live() {
        return client(registryUrl()).call("GET", RegistryServer.PREFIX, null, RegistryServer.Listing.class,
                Duration.ofSeconds(5)).instances();
    }

    private Map<?, ?> stats() {
        return client(registryUrl()).call("GET", "/v1/router/stats", null, Map.class, Duration.ofSeconds(5));
    }

    private static int served(Map<?, ?> stats, String id) {
        Object v = ((Map<?, ?>) stats.get("servedBy")).get(id);
        return v == null ? 0 : ((Number) v).intValue();
    }

    @Test
    void twoByTwoSurvivesAKilledGenerationInstanceWithEveryElementVerified() throws Exception {
        deployment();
        Path report = dir.resolve("report.json");
        // The route's registry lives as long as its requests (25 s at 40/s): long enough for the kill, the duplicate
        // and the restart below on a loaded 2-core machine (at 700 it once ended while gen-1 was restarting).
        int requests = 1000;
        CompletableFuture<Integer> route = CompletableFuture.supplyAsync(() -> KvTransferCli.run("route",
                "--listen=127.0.0.1:" + port, "--secret-file=" + secretFile, "--contexts=2", "--generations=2",
                "--lease-ms=" + LEASE.toMillis(), "--requests=" + requests, "--isl=16,64,256", "--rate=40",
                "--concurrency=6", "--request-timeout-s=20", "--format=json", "--out=" + report, "--wait-s=90"));
        serve("context", "ctx-0");
        serve("context", "ctx-1", "--prefill-ms-per-layer=0.5");
        serve("generation", "gen-0");
        ServeProcess gen1 = serve("generation", "gen-1");
        await().atMost(Duration.ofSeconds(90)).ignoreExceptions().until(() -> ((Number) stats().get("done"))
                .intValue() >= 80);
        assertThat(served(stats(), "gen-1")).as("gen-1 takes part before the kill").isPositive();

        // Role mismatch: a generation instance asked for a context phase says so in one line.
        InstanceRecord g0 = live().stream().filter(r -> r.id().equals("gen-0")).findFirst().orElseThrow();
        assertThatThrownBy(() -> client(g0.controlUrl()).call("POST", "/v1/context",
                new ControlApi.ContextRequest(1, 16, false), Map.class, Duration.ofSeconds(5)))
                .isInstanceOf(RegistryException.class)
                .hasMessageContaining("instance gen-0 is a generation instance, the call needs a context one");

        gen1.kill();
        long killed = System.nanoTime();
        await().atMost(LEASE.multipliedBy(3)).pollInterval(Duration.ofMillis(50))
                .until(() -> live().stream().noneMatch(r -> r.id().equals("gen-1")));
        long droppedMs = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - killed);
        System.out.println("gen-1 killed: dropped from the registry after " + droppedMs + " ms (lease "
                + LEASE.toMillis() + " ms)");
        assertThat(droppedMs).isLessThan(LEASE.toMillis() * 2);

        // A second live instance under a taken id is refused, one line, exit 1; meanwhile the restarted gen-1
        // rejoins and is served.
        ServeProcess dup = serve("generation", "gen-0");
        serve("generation", "gen-1");
        assertThat(dup.waitFor(60)).isEqualTo(1);
        assertThat(dup.output()).contains("kvtransfer: registry " + registryUrl()
                + ": instance id gen-0 is already registered by a live generation instance");
        await().atMost(Duration.ofSeconds(60)).until(() -> live().stream().anyMatch(r -> r.id().equals("gen-1")));
        int before = served(stats(), "gen-1");
        await().atMost(Duration.ofSeconds(60)).until(() -> served(stats(), "gen-1") > before);
        // The stats route lists every failed request so far (the killed instance's), and the requests in flight.
        Map<?, ?> s = stats();
        List<?> failures = (List<?>) s.get("failures");
        assertThat(failures).hasSize(((Number) s.get("failed")).intValue());
        for (Object o : failures) {
            Map<?, ?> f = (Map<?, ?>) o;
            assertThat(f.get("code")).as(f.toString()).isEqualTo("PEER_LOST");
            assertThat(f.get("generation")).as(f.toString()).isEqualTo("gen-1");
            assertThat((String) f.get("error")).contains(String.valueOf(f.get("requestId")));
            assertThat(((Number) f.get("endEpochMs")).longValue()).isLessThanOrEqualTo(System.currentTimeMillis());
        }
        assertThat(((Map<?, ?>) s.get("inFlight")).keySet()).map(String::valueOf).contains("ctx-0", "ctx-1", "gen-0",
                "gen-1");

        assertThat(route.get(180, TimeUnit.SECONDS)).isIn(0, 1);
        JsonNode r = ControlHttp.JSON.readTree(report.toFile());
        System.out.println("route report: " + r);
        assertThat(r.get("requests").asInt()).isEqualTo(requests);
        assertThat(r.get("mismatches").asLong()).isZero();
        assertThat(r.get("checked").asLong()).isPositive();
        // Only the requests gen-1 held when it died failed, each PEER_LOST; everything else completed.
        JsonNode causes = r.get("failuresByCause");
        causes.fieldNames().forEachRemaining(k -> assertThat(k).isEqualTo("PEER_LOST"));
        assertThat(r.get("failed").asInt()).isLessThanOrEqualTo(6);
        assertThat(r.get("completed").asInt()).isEqualTo(requests - r.get("failed").asInt());
        if (r.get("failed").asInt() > 0) {
            assertThat(r.get("firstError").asText()).contains("gen-1");
        }
        assertThat(r.get("evictions").asLong()).isGreaterThanOrEqualTo(1);

        // SIGTERM drains: exit 0, deregistered.
        ServeProcess ctx0 = procs.get(0);
        ctx0.terminate();
        assertThat(ctx0.waitFor(30)).as(ctx0.output()).isZero();
        assertThat(ctx0.output()).contains("drained").contains("stopped            ctx-0");
    }

    private static void signal(ServeProcess p, String sig) throws Exception {
        Process k = new ProcessBuilder("kill", "-" + sig, Long.toString(p.process.pid())).start();
        assertThat(k.waitFor(10, TimeUnit.SECONDS)).isTrue();
        assertThat(k.exitValue()).isZero();
    }

    @Test
    void aStoppedGenerationInstanceRejoinsAndAKilledContextInstanceIsRoutedAround() throws Exception {
        deployment();
        Path report = dir.resolve("report.json");
        int requests = 600;
        CompletableFuture<Integer> route = CompletableFuture.supplyAsync(() -> KvTransferCli.run("route",
                "--listen=127.0.0.1:" + port, "--secret-file=" + secretFile, "--contexts=2", "--generations=2",
                "--lease-ms=" + LEASE.toMillis(), "--requests=" + requests, "--isl=16,64,256", "--rate=40",
                "--concurrency=6", "--request-timeout-s=20", "--format=json", "--out=" + report, "--wait-s=90"));
        serve("context", "ctx-0");
        ServeProcess ctx1 = serve("context", "ctx-1");
        serve("generation", "gen-0");
        ServeProcess gen1 = serve("generation", "gen-1");
        await().atMost(Duration.ofSeconds(90)).ignoreExceptions().until(() -> ((Number) stats().get("done"))
                .intValue() >= 60);

        // SIGSTOP longer than the liveness bound: the registry drops it; after SIGCONT it registers again and is
        // served.
        signal(gen1, "STOP");
        long stopped = System.nanoTime();
        await().atMost(LEASE.multipliedBy(3)).pollInterval(Duration.ofMillis(50))
                .until(() -> live().stream().noneMatch(r -> r.id().equals("gen-1")));
        long evictedMs = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - stopped);
        signal(gen1, "CONT");
        await().atMost(Duration.ofSeconds(20)).until(() -> live().stream().anyMatch(r -> r.id().equals("gen-1")));
        // It prints this once the registry answered (the registry lists it a moment before).
        await().atMost(Duration.ofSeconds(10)).until(() -> gen1.output()
                .contains("registered again (the registry had dropped this instance)"));
        int before = served(stats(), "gen-1");
        await().atMost(Duration.ofSeconds(30)).until(() -> served(stats(), "gen-1") > before);

        // kill -9 of a context instance: dropped within the lease, requests go to the other one.
        ctx1.kill();
        long killed = System.nanoTime();
        await().atMost(LEASE.multipliedBy(3)).pollInterval(Duration.ofMillis(50))
                .until(() -> live().stream().noneMatch(r -> r.id().equals("ctx-1")));
        long droppedMs = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - killed);
        int ctx0 = served(stats(), "ctx-0");
        await().atMost(Duration.ofSeconds(30)).until(() -> served(stats(), "ctx-0") > ctx0 + 20);

        assertThat(route.get(180, TimeUnit.SECONDS)).isIn(0, 1);
        JsonNode r = ControlHttp.JSON.readTree(report.toFile());
        System.out.println("gen-1 SIGSTOP: evicted after " + evictedMs + " ms; ctx-1 SIGKILL: dropped after "
                + droppedMs + " ms (lease " + LEASE.toMillis() + " ms); failures " + r.get("failuresByCause")
                + ", slowest after " + r.get("timeToErrorMaxMs") + " ms; route report: " + r);
        assertThat(evictedMs).isLessThan(LEASE.toMillis() * 2);
        assertThat(droppedMs).isLessThan(LEASE.toMillis() * 2);
        assertThat(r.get("requests").asInt()).isEqualTo(requests);
        assertThat(r.get("mismatches").asLong()).isZero();
        // Only requests the killed context instance held fail: PEER_LOST on the generation side (Aeron sees the
        // context's stream end), before the transfer deadline (--timeout-s 8) would have said TIMEOUT.
        r.get("failuresByCause").fieldNames().forEachRemaining(k -> assertThat(k).isEqualTo("PEER_LOST"));
        assertThat(r.get("timeToErrorMaxMs").asDouble()).isLessThan(8000);
        assertThat(r.get("failed").asInt()).isLessThanOrEqualTo(6);
        assertThat(r.get("completed").asInt()).isEqualTo(requests - r.get("failed").asInt());
    }

    @Test
    void badDeploymentsEndWithOneLine() throws Exception {
        deployment();
        // An unknown registry URL: refused before the instance starts.
        ServeProcess unknown = ServeProcess.start(dir, "unknown", List.of("serve", "--role=generation",
                "--registry=etcd3://127.0.0.1:1", "--secret-file=" + secretFile));
        procs.add(unknown);
        // A registry nobody listens on.
        ServeProcess nobody = ServeProcess.start(dir, "nobody", List.of("serve", "--role=context",
                "--registry=" + registryUrl(), "--secret-file=" + secretFile));
        procs.add(nobody);
        // A secret others can read.
        Path open = dir.resolve("open-secret");
        Files.write(open, secret);
        Files.setPosixFilePermissions(open, PosixFilePermissions.fromString("rw-r--r--"));
        assertThat(KvTransferCli.run("serve", "--role=context", "--secret-file=" + open)).isEqualTo(1);
        assertThat(KvTransferCli.run("serve", "--role=sideways", "--secret-file=" + secretFile)).isEqualTo(1);
        java.io.ByteArrayOutputStream errs = new java.io.ByteArrayOutputStream();
        java.io.PrintStream oldErr = System.err;
        System.setErr(new java.io.PrintStream(errs, true, java.nio.charset.StandardCharsets.UTF_8));
        try {
            assertThat(KvTransferCli.run("frobnicate")).isEqualTo(2);
        } finally {
            System.setErr(oldErr);
        }
        assertThat(errs.toString(java.nio.charset.StandardCharsets.UTF_8).lines().toList()).singleElement()
                .asString().startsWith("kvtransfer: unknown command 'frobnicate' (commands: demo, serve, route,");
        java.io.ByteArrayOutputStream help = new java.io.ByteArrayOutputStream();
        java.io.PrintStream old = System.out;
        System.setOut(new java.io.PrintStream(help, true, java.nio.charset.StandardCharsets.UTF_8));
        try {
            assertThat(KvTransferCli.run("serve", "--help")).isZero();
        } finally {
            System.setOut(old);
        }
        assertThat(help.toString(java.nio.charset.StandardCharsets.UTF_8)).startsWith("Usage: kvtransfer serve ")
                .contains("--role=<role>").contains("--listen=HOST[:PORT]");

        assertThat(unknown.waitFor(60)).isEqualTo(1);
        assertThat(unknown.output().strip()).isEqualTo("kvtransfer: registry URL 'etcd3://127.0.0.1:1': unknown "
                + "scheme 'etcd3' (expected http://HOST:PORT of a router's registry, or etcd://HOST:PORT)  "
                + "(--verbose for the stack trace)");
        assertThat(nobody.waitFor(60)).isEqualTo(1);
        assertThat(nobody.output()).contains("kvtransfer: registry " + registryUrl() + ": cannot connect");
        assertThat(nobody.output().lines().filter(l -> l.startsWith("kvtransfer:")).count()).isEqualTo(1);
    }

    @Test
    void aGenerationInstanceTheFormatterCannotServeIsNamedInOneLine() throws Exception {
        deployment();
        ServeProcess route = ServeProcess.start(dir, "route", List.of("route", "--listen=127.0.0.1:" + port,
                "--secret-file=" + secretFile, "--requests=40", "--isl=32", "--concurrency=2", "--wait-s=90"));
        procs.add(route);
        serve("context", "ctx-0");
        // Two heads per layer on the generation side against four on the context side: no formatter re-shards that.
        serve("generation", "gen-odd", "--kv-heads=2");
        assertThat(route.waitFor(120)).isEqualTo(1);
        String out = route.output();
        assertThat(out).containsPattern("kvtransfer: route: generation instance gen-odd \\(TP1 PP1 CP1 DEFAULT "
                + "4x2x16 FLOAT16\\) cannot be served from context instance ctx-0 \\(TP1 PP1 CP1 DEFAULT 4x4x16 "
                + "FLOAT16\\): request [0-9]+: .*UNSUPPORTED_LAYOUT");
    }
}
