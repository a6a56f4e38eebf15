package dev.kvtransfer.crosshost;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.kvtransfer.registry.RegistryAuth;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.io.File;
import java.io.IOException;
import java.lang.management.ManagementFactory;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.attribute.PosixFilePermissions;
import java.security.SecureRandom;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Base64;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

/**
 * The faults of a standalone deployment across network namespaces: a real etcd and {@code kvtransfer route} in the
 * hub namespace, two context and two generation {@code kvtransfer serve} instances each in a spoke namespace of its
 * own, every one of them registered in etcd ({@code --registry etcd://HUB:2379}), over Aeron UDP between the
 * spokes; 1,000 requests of mixed ISL at a fixed rate, every element verified. While they run, one after the other:
 * etcd stopped (the running instances keep serving the peers they know, a new instance fails in one line) and
 * started again (everything recovers); a generation instance killed with SIGKILL and started again; a context
 * instance the same; a generation instance stopped (SIGSTOP) past its lease and continued; a context instance's
 * link made lossy and slow (a token bucket whose queue overflows). Each fault's time to error and the registry's
 * eviction time are printed; the test JVM reaches the hub only through {@code ip netns exec HUB curl} (etcd's JSON
 * gateway for the registry, the router's signed stats route for what was served and what failed). The same
 * schedule runs over UCX TCP too ({@code -Dcrosshost.faultsUcx=false} leaves it out). Needs root, {@code ip netns}, etcd and curl;
 * skipped with the reason elsewhere. Every child runs under {@code setpriv --pdeathsig KILL} and the namespaces'
 * processes are killed before they are deleted, so nothing is left however the test ends.
 */
class ServeNetnsFaultsTest {
    private static final int REQUESTS = 1000;
    /** Offered load: slow enough that the five faults (each with JVM restarts) fit in the run on two busy cores. */
    private static final int RATE = Integer.getInteger("crosshost.faultsRate", 8);
    private static final int ETCD_PORT = 2379;
    private static final int ROUTER_PORT = 7000;
    private static final String[] IDS = {"ctx-0", "ctx-1", "gen-0", "gen-1"};
    private static final String[] ROLES = {"context", "context", "generation", "generation"};
    /** The lossy link: tbf rate, burst, queue limit (what overflows the queue is dropped). */
    private static final String[] LOSSY = {"100mbit", "32kb", "64kb"};
    @TempDir
    Path dir;
    private final List<Process> procs = new ArrayList<>();
    private final Map<String, Process> byName = new LinkedHashMap<>();
    private final Map<String, Path> logs = new LinkedHashMap<>();
    private final Map<String, String> figures = new LinkedHashMap<>();
    private final ObjectMapper json = new ObjectMapper();
    /** The faults in the order injected: what, on which instance, when (wall clock, ms). */
    private final List<Fault> faults = new ArrayList<>();
    private NetnsStar star;
    private RegistryAuth auth;
    private Path secretFile;
    private Process etcd;
    private List<String> backend = List.of();
    private Process route;
    private String hub;

    /** One injected fault. */
    private record Fault(String name, String instance, long epochMs) {
    }

    @BeforeAll
    static void needsNamespacesAndEtcd() {
        String cause = NetnsPair.unavailabilityCause();
        Assumptions.assumeTrue(cause == null, cause);
        Assumptions.assumeTrue(Files.isExecutable(Path.of("/usr/bin/etcd")), "etcd is not installed (/usr/bin/etcd "
                + "missing): run scripts/install-deps.sh or apt-get install etcd-server");
        Assumptions.assumeTrue(Files.isExecutable(Path.of("/usr/bin/curl")), "curl is not installed (/usr/bin/curl "
                + "missing): the test reaches the hub namespace through ip netns exec … curl");
    }

    @AfterEach
    void stopAll() throws Exception {
        try {
            for (Process p : procs) {
                if (p.isAlive()) {
                    p.destroyForcibly(); // SIGKILL also ends a stopped process
                    p.waitFor(10, TimeUnit.SECONDS);
                }
            }
        } finally {
            if (star != null) {
                star.close(); // kills anything still inside, then deletes the namespaces
            }
            for (Map.Entry<String, Path> l : logs.entrySet()) {
                if (Files.exists(l.getValue())) {
                    System.out.println("---- " + l.getKey() + " ----\n" + Files.readString(l.getValue(),
                            StandardCharsets.UTF_8));
                }
            }
        }
    }

    private Process start(NetnsPair.Side side, String name, List<String> program) throws IOException {
        List<String> cmd = new ArrayList<>(NetnsPair.exec(side));
        // The child dies with the test JVM even when that is killed (ip netns exec and setpriv exec in place).
        cmd.addAll(List.of("setpriv", "--pdeathsig", "KILL"));
        cmd.addAll(program);
        Path log = dir.resolve(name + "-" + System.nanoTime() + ".log");
        logs.put(name + " (" + log.getFileName() + ")", log);
        Process p = new ProcessBuilder(cmd).redirectErrorStream(true).redirectOutput(log.toFile()).start();
        procs.add(p);
        byName.put(name, p);
        return p;
    }

    private Process cli(NetnsPair.Side side, String name, List<String> args) throws IOException {
        List<String> cmd = new ArrayList<>();
        cmd.add(System.getProperty("java.home") + File.separator + "bin" + File.separator + "java");
        for (String a : ManagementFactory.getRuntimeMXBean().getInputArguments()) {
            if (a.startsWith("--add-opens") || a.startsWith("--add-exports") || a.startsWith("-Dchronicle")) {
                cmd.add(a);
            }
        }
        cmd.addAll(List.of("-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-cp",
                System.getProperty("java.class.path"), "dev.kvtransfer.cli.KvTransferCli"));
        cmd.addAll(args);
        return start(side, name, cmd);
    }

    /** The first log of a name (a restarted instance writes a new one; the checks read the first incarnation's). */
    private String log(String name) {
        for (Map.Entry<String, Path> l : logs.entrySet()) {
            if (l.getKey().startsWith(name + " (")) {
                try {
                    return Files.readString(l.getValue(), StandardCharsets.UTF_8);
                } catch (IOException e) {
                    return "";
                }
            }
        }
        return "";
    }

    private void startEtcd() throws IOException {
        String c = "http://" + hub + ":" + ETCD_PORT;
        String p = "http://" + hub + ":" + (ETCD_PORT + 1);
        etcd = start(star.hub(), "etcd", List.of("/usr/bin/etcd", "--name", "kvt", "--data-dir",
                dir.resolve("etcd").toString(), "--listen-client-urls", c, "--advertise-client-urls", c,
                "--listen-peer-urls", p, "--initial-advertise-peer-urls", p, "--initial-cluster", "kvt=" + p));
        await().atMost(Duration.ofSeconds(30)).pollInterval(Duration.ofMillis(200)).ignoreExceptions()
                .until(() -> curl("GET", "http://" + hub + ":" + ETCD_PORT + "/health", null, null)
                        .contains("\"health\":\"true\""));
    }

    /** One HTTP call from inside the hub namespace; the body of the answer ("" when there is none). */
    private String curl(String method, String url, String body, String header) {
        List<String> cmd = new ArrayList<>(NetnsPair.exec(star.hub()));
        cmd.addAll(List.of("curl", "-s", "-m", "5", "-X", method));
        if (header != null) {
            cmd.addAll(List.of("-H", header));
        }
        if (body != null) {
            cmd.addAll(List.of("-H", "Content-Type: application/json", "--data-binary", body));
        }
        cmd.add(url);
        return NetnsStar.run(cmd.toArray(String[]::new));
    }

    /** Whether etcd holds the instance's key (read through etcd's JSON gateway, {@code POST /v3/kv/range}). */
    private boolean inEtcd(String id) {
        String key = Base64.getEncoder().encodeToString(("/kvtransfer/instances/" + id)
                .getBytes(StandardCharsets.UTF_8));
        String out = curl("POST", "http://" + hub + ":" + ETCD_PORT + "/v3/kv/range", "{\"key\":\"" + key
                + "\",\"keys_only\":true}", null);
        if (!out.contains("\"header\"")) {
            throw new IllegalStateException("etcd answered " + out);
        }
        return out.contains("\"kvs\"");
    }

    /** The router's stats ({@code GET /v1/router/stats}, signed with the deployment secret). */
    private JsonNode stats() throws IOException {
        if (!route.isAlive()) {
            throw new AssertionError("route ended (exit " + route.exitValue() + ") before the faults were done: the "
                    + "run is too short for this machine (-Dcrosshost.faultsRate lower than " + RATE + ")\n"
                    + log("route"));
        }
        String path = "/v1/router/stats";
        String out = curl("GET", "http://" + hub + ":" + ROUTER_PORT + path, null, RegistryAuth.HEADER + ": "
                + auth.sign("GET", path, new byte[0]));
        return json.readTree(out);
    }

    private int served(String id) throws IOException {
        JsonNode v = stats().get("servedBy").get(id);
        return v == null ? 0 : v.asInt();
    }

    private List<String> serveArgs(int i, String id, int port) {
        return List.of("serve", "--role=" + ROLES[i], "--id=" + id, "--listen=" + star.spoke(i).address() + ":"
                        + port, "--registry=etcd://" + hub + ":" + ETCD_PORT, "--secret-file=" + secretFile,
                "--timeout-s=8", "--heartbeat-ms=300", "--max-inflight=16", "--max-isl=1024", "--layers=4",
                "--kv-heads=4", "--size-per-head=16", "--tokens-per-block=16",
                // 40 ms of simulated prefill: requests stay in flight long enough that a fault catches some
                "--prefill-ms-per-layer=" + (ROLES[i].equals("context") ? "10" : "0"));
    }

    private Process serve(int i, int port) throws IOException {
        List<String> args = new ArrayList<>(serveArgs(i, IDS[i], port));
        args.addAll(backend);
        return cli(star.spoke(i), IDS[i], args);
    }

    private static void signal(Process p, String sig) throws Exception {
        Process k = new ProcessBuilder("kill", "-" + sig, Long.toString(p.pid())).start();
        assertThat(k.waitFor(10, TimeUnit.SECONDS)).isTrue();
        assertThat(k.exitValue()).as("kill -" + sig).isZero();
    }

    private static long sinceMs(long t0) {
        return TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - t0);
    }

    private int inFlight(String id) throws IOException {
        JsonNode v = stats().get("inFlight").get(id);
        return v == null ? 0 : v.asInt();
    }

    private static int count(String text, String line) {
        int n = 0;
        for (int at = text.indexOf(line); at >= 0; at = text.indexOf(line, at + 1)) {
            n++;
        }
        return n;
    }

    /**
     * SIGKILL an instance while the router has requests in flight there, measure its eviction from etcd, start it
     * again and wait until it is served.
     */
    private void killAndRestart(int i, int restartPort) throws Exception {
        String id = IDS[i];
        await().atMost(Duration.ofSeconds(60)).pollInterval(Duration.ofMillis(50)).until(() -> inFlight(id) > 0);
        faults.add(new Fault("kill -9", id, System.currentTimeMillis()));
        long t0 = System.nanoTime();
        byName.get(id).destroyForcibly();
        await().atMost(Duration.ofSeconds(20)).pollInterval(Duration.ofMillis(100)).until(() -> !inEtcd(id));
        long evicted = sinceMs(t0);
        int before = served(id);
        long t1 = System.nanoTime();
        serve(i, restartPort);
        await().atMost(Duration.ofSeconds(90)).pollInterval(Duration.ofMillis(250)).until(() -> served(id) > before);
        long rejoined = sinceMs(t1);
        figures.put(id + " kill -9", "left etcd after " + evicted + " ms (lease 3 s); restarted, served again "
                + rejoined + " ms after its start");
        System.out.println("fault: " + id + " kill -9: " + figures.get(id + " kill -9"));
    }

    /**
     * Each failure belongs to the latest fault before it on an instance it involved; prints every fault's failures
     * and time to error (first and last failure after the fault) and fails on a failure no fault explains or a
     * cause the fault does not give (PEER_LOST or TIMEOUT; after SIGCONT also the stopped instance's stream that
     * its peer refused as joined mid-stream).
     */
    private void attribute(JsonNode failures) {
        Map<Fault, List<JsonNode>> by = new LinkedHashMap<>();
        faults.forEach(f -> by.put(f, new ArrayList<>()));
        List<String> unexplained = new ArrayList<>();
        for (JsonNode f : failures) {
            long end = f.get("endEpochMs").asLong();
            Fault owner = null;
            for (Fault fault : faults) {
                if (fault.epochMs() <= end && (fault.instance().equals(f.get("context").asText())
                        || fault.instance().equals(f.get("generation").asText()))) {
                    owner = fault;
                }
            }
            String code = f.get("code").asText();
            boolean expected = code.equals("PEER_LOST") || code.equals("TIMEOUT") || (owner != null
                    && owner.name().equals("SIGSTOP") && code.equals("NETWORK")
                    && f.get("error").asText().contains("refused our stream"));
            if (owner == null || !expected) {
                unexplained.add(f.toString());
            } else {
                by.get(owner).add(f);
            }
            assertThat(f.get("error").asText()).as("the failure names its request")
                    .contains(f.get("requestId").asText());
        }
        for (Map.Entry<Fault, List<JsonNode>> e : by.entrySet()) {
            Fault fault = e.getKey();
            List<JsonNode> fs = e.getValue();
            Map<String, Integer> codes = new LinkedHashMap<>();
            long first = Long.MAX_VALUE;
            long last = -1;
            for (JsonNode f : fs) {
                codes.merge(f.get("code").asText(), 1, Integer::sum);
                long after = f.get("endEpochMs").asLong() - fault.epochMs();
                first = Math.min(first, after);
                last = Math.max(last, after);
            }
            String line = fs.isEmpty() ? "no request failed" : fs.size() + " requests failed " + codes
                    + ", time to error " + first + " ms (first) / " + last + " ms (last) after the fault";
            String key = fault.instance() + " " + fault.name();
            figures.merge(key, line, (a, b) -> a + "; " + b);
            System.out.println("fault " + key + ": " + line);
        }
        assertThat(unexplained).as("failures no fault explains").isEmpty();
    }

    @Test
    void overAeronUdpEachFaultEndsWithEveryElementVerified() throws Exception {
        runWithFaults("Aeron UDP", List.of());
    }

    /**
     * The same over UCX TCP (as long again; {@code -Dcrosshost.faultsUcx=false} leaves it out); skipped with the
     * reason where UCX is unavailable.
     */
    @Test
    void overUcxTcpEachFaultEndsWithEveryElementVerified() throws Exception {
        Assumptions.assumeTrue(Boolean.parseBoolean(System.getProperty("crosshost.faultsUcx", "true")),
                "the UCX run of the faults was left out (-Dcrosshost.faultsUcx=false)");
        dev.kvtransfer.ucx.UcxTransportProvider ucx = new dev.kvtransfer.ucx.UcxTransportProvider();
        Assumptions.assumeTrue(ucx.isAvailable(), () -> "UCX unavailable: " + ucx.unavailabilityCause());
        runWithFaults("UCX TCP", List.of("--backend=ucx", "--transport-set=ucx.transports=net"));
    }

    private void runWithFaults(String transport, List<String> backendArgs) throws Exception {
        backend = backendArgs;
        byte[] secret = new byte[32];
        new SecureRandom().nextBytes(secret);
        auth = RegistryAuth.of(secret);
        secretFile = dir.resolve("secret");
        Files.createFile(secretFile, PosixFilePermissions.asFileAttribute(PosixFilePermissions.fromString("rw-------")));
        Files.write(secretFile, secret);
        star = NetnsStar.create(4);
        hub = star.hub().address();
        startEtcd();
        Path report = dir.resolve("report.json");
        route = cli(star.hub(), "route", List.of("route", "--registry=etcd://" + hub + ":" + ETCD_PORT,
                "--listen=" + hub + ":" + ROUTER_PORT, "--secret-file=" + secretFile, "--contexts=2",
                "--generations=2", "--lease-ms=3000", "--requests=" + REQUESTS, "--isl=16,64,256,1024",
                "--rate=" + RATE, "--concurrency=12", "--request-timeout-s=20", "--format=json", "--out=" + report,
                "--wait-s=120", "--keep-serving"));
        for (int i = 0; i < 4; i++) {
            // One at a time: five cold JVMs at once on two cores once kept an instance's first etcd call (gRPC's
            // start included) past its 3 s deadline, and that instance ended before it served.
            Process p = serve(i, 7100);
            String id = IDS[i];
            await().atMost(Duration.ofSeconds(60)).pollInterval(Duration.ofMillis(100))
                    .until(() -> log(id).contains("ready ") || !p.isAlive());
            assertThat(p.isAlive()).as(id + " started: " + log(id)).isTrue();
        }
        await().atMost(Duration.ofSeconds(120)).pollInterval(Duration.ofMillis(250)).ignoreExceptions()
                .until(() -> stats().get("done").asInt() >= 40);

        // 1. etcd stopped: known peers keep being served, a new instance fails in one line; etcd back, all recover.
        faults.add(new Fault("stopped", "etcd", System.currentTimeMillis()));
        long t0 = System.nanoTime();
        etcd.destroy();
        assertThat(etcd.waitFor(20, TimeUnit.SECONDS)).as("etcd stopped").isTrue();
        int atStop = stats().get("done").asInt();
        List<String> lateArgs = new ArrayList<>(serveArgs(3, "gen-late", 7150));
        lateArgs.addAll(backend);
        Process late = cli(star.spoke(3), "gen-late", lateArgs);
        for (String id : IDS) {
            await().atMost(Duration.ofSeconds(20)).pollInterval(Duration.ofMillis(50)).until(() -> log(id).contains(
                    "heartbeat failed, still serving known peers"));
        }
        long noticed = sinceMs(t0);
        assertThat(late.waitFor(90, TimeUnit.SECONDS)).as("the late instance ended").isTrue();
        long lateMs = sinceMs(t0);
        assertThat(late.exitValue()).isEqualTo(1);
        assertThat(log("gen-late").lines().filter(l -> l.startsWith("kvtransfer:")).toList()).singleElement()
                .asString().startsWith("kvtransfer: etcd [http://" + hub + ":" + ETCD_PORT + "]: register gen-late: ");
        await().atMost(Duration.ofSeconds(60)).pollInterval(Duration.ofMillis(250))
                .until(() -> stats().get("done").asInt() >= atStop + 2 * RATE);
        int during = stats().get("done").asInt() - atStop;
        long down = sinceMs(t0);
        long t1 = System.nanoTime();
        startEtcd();
        long up = sinceMs(t1);
        for (String id : IDS) {
            await().atMost(Duration.ofSeconds(30)).until(() -> log(id).contains("registry reachable again")
                    || log(id).contains("registered again"));
        }
        long recovered = sinceMs(t1);
        // Settled: every instance in etcd without a gap for longer than a lease (an instance whose lease ran out
        // during the outage drops out once more and registers again; the next fault must not meet that).
        await().during(Duration.ofSeconds(4)).atMost(Duration.ofSeconds(40)).pollInterval(Duration.ofMillis(100))
                .until(() -> java.util.Arrays.stream(IDS).allMatch(this::inEtcd));
        long settled = sinceMs(t1);
        figures.put("etcd stopped", "every instance noticed within " + noticed + " ms; a new instance failed in one "
                + "line " + lateMs + " ms after the stop (JVM start included); " + during + " requests completed "
                + "in the " + down + " ms etcd was down; etcd answered " + up + " ms after its start, every "
                + "instance back in it within " + recovered + " ms, all of them there for 4 s on end " + settled
                + " ms after etcd's start");
        System.out.println("fault: etcd stopped: " + figures.get("etcd stopped"));

        // 2. and 3. kill -9 of a generation, then of a context instance; each restarted (new control port).
        killAndRestart(3, 7120);
        killAndRestart(1, 7120);

        // 4. SIGSTOP past the lease: etcd drops it; after SIGCONT it registers again and is served.
        Process gen0 = byName.get("gen-0");
        int rejoinedBefore = count(log("gen-0"), "registered again (the registry had dropped this instance)");
        await().atMost(Duration.ofSeconds(60)).pollInterval(Duration.ofMillis(50)).until(() -> inFlight("gen-0") > 0);
        faults.add(new Fault("SIGSTOP", "gen-0", System.currentTimeMillis()));
        long t2 = System.nanoTime();
        signal(gen0, "STOP");
        long evicted;
        try {
            await().atMost(Duration.ofSeconds(20)).pollInterval(Duration.ofMillis(100)).until(() -> !inEtcd("gen-0"));
            evicted = sinceMs(t2);
        } finally {
            signal(gen0, "CONT");
        }
        long t3 = System.nanoTime();
        await().atMost(Duration.ofSeconds(30)).until(() -> count(log("gen-0"),
                "registered again (the registry had dropped this instance)") > rejoinedBefore);
        long back = sinceMs(t3);
        int before = served("gen-0");
        await().atMost(Duration.ofSeconds(60)).pollInterval(Duration.ofMillis(250)).until(() -> served("gen-0")
                > before);
        figures.put("gen-0 SIGSTOP", "left etcd " + evicted + " ms after SIGSTOP; registered again " + back
                + " ms after SIGCONT and served again");
        System.out.println("fault: gen-0 SIGSTOP: " + figures.get("gen-0 SIGSTOP"));

        // 5. ctx-0's link lossy and slow: a token bucket whose small queue overflows drops packets.
        int ctx0 = served("ctx-0");
        faults.add(new Fault("lossy link", "ctx-0", System.currentTimeMillis()));
        star.lossyLink(0, LOSSY[0], LOSSY[1], LOSSY[2]);
        String tc;
        try {
            await().atMost(Duration.ofSeconds(90)).pollInterval(Duration.ofMillis(250))
                    .until(() -> served("ctx-0") >= ctx0 + 4 * RATE);
            tc = star.qdiscStats(0);
        } finally {
            star.clearLink(0);
        }
        Matcher m = Pattern.compile("Sent (\\d+) bytes (\\d+) pkt \\(dropped (\\d+), overlimits (\\d+)").matcher(tc);
        assertThat(m.find()).as(tc).isTrue();
        long dropped = Long.parseLong(m.group(3));
        figures.put("ctx-0 lossy link", "tbf rate " + LOSSY[0] + " burst " + LOSSY[1] + " limit " + LOSSY[2]
                + " on ctx-0's egress: " + (served("ctx-0") - ctx0) + " requests through it, the bucket sent "
                + m.group(1) + " B in " + m.group(2) + " packets and dropped " + dropped);
        System.out.println("fault: ctx-0 lossy link: " + figures.get("ctx-0 lossy link"));
        assertThat(dropped).as("the bucket dropped packets (real loss on the link): " + tc).isPositive();

        // The run ends: every completed request verified, each failure explained by a fault.
        await().atMost(Duration.ofSeconds(300)).pollInterval(Duration.ofMillis(500)).ignoreExceptions()
                .until(() -> json.readTree(report.toFile()).has("mismatches"));
        JsonNode r = json.readTree(report.toFile());
        JsonNode failures = stats().get("failures");
        route.destroy();
        assertThat(route.waitFor(30, TimeUnit.SECONDS)).as("route stopped on SIGTERM").isTrue();
        System.out.println("route report: " + r);
        assertThat(r.get("requests").asInt()).isEqualTo(REQUESTS);
        assertThat(r.get("mismatches").asLong()).as("wrong elements").isZero();
        assertThat(r.get("checked").asLong()).isPositive();
        assertThat(r.get("completed").asInt() + r.get("failed").asInt()).isEqualTo(REQUESTS);
        assertThat(failures.size()).as("the router lists every failure").isEqualTo(r.get("failed").asInt());
        attribute(failures);
        assertThat(r.get("evictions").asLong()).as("instances etcd dropped (three faults)").isGreaterThanOrEqualTo(3);
        for (Process p : List.copyOf(procs)) {
            if (p.isAlive() && p != etcd) {
                p.destroy(); // SIGTERM: the instances drain and exit 0
            }
        }
        for (String id : IDS) {
            Process p = byName.get(id);
            assertThat(p.waitFor(30, TimeUnit.SECONDS)).as(id + " exited").isTrue();
            assertThat(p.exitValue()).as(id + " (its running incarnation) drained and exited 0").isZero();
        }
        System.out.printf(Locale.ROOT, "2P2D + etcd across namespaces, %s, %d requests at %d/s with five "
                        + "faults: %d completed, %d failed %s, %.1f req/s, transfer p50 %.2f ms p99 %.2f ms, %d "
                        + "elements verified, %d mismatches, %d evictions%n", transport, REQUESTS, RATE,
                r.get("completed").asInt(), r.get("failed").asInt(), r.get("failuresByCause"),
                r.get("requestsPerSecond").asDouble(), r.get("transferP50Ms").asDouble(),
                r.get("transferP99Ms").asDouble(), r.get("checked").asLong(), r.get("mismatches").asLong(),
                r.get("evictions").asLong());
        figures.forEach((k, v) -> System.out.println("fault (" + transport + ") " + k + ": " + v));
    }
}
