package dev.kvtransfer.crosshost;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
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
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * xPyD across network namespaces: {@code kvtransfer route} (with the embedded registry) in a hub namespace, two
 * context and two generation {@code kvtransfer serve} instances each in a namespace of its own, joined to the hub's
 * bridge by veth pairs, over Aeron UDP, again with every link limited to 500 Mbit/s (tc tbf), then over UCX TCP
 * (where UCX is available); 1,000 requests of mixed ISL each, every element verified. The same deployment
 * then runs on loopback in the host's namespace, in the same run, for the figures side by side. Needs root and
 * {@code ip netns}; skipped with the reason elsewhere (the loopback variant with the kill -9 fault also runs in
 * cli's {@code ServeRouteTest}, without root).
 */
class ServeNetnsTest {
    private static final int REQUESTS = 1000;
    @TempDir
    Path dir;
    private final List<Process> procs = new ArrayList<>();
    private final List<Path> logs = new ArrayList<>();
    private Path secretFile;

    @BeforeAll
    static void needsNamespaces() {
        String cause = NetnsPair.unavailabilityCause();
        Assumptions.assumeTrue(cause == null, cause);
    }

    @AfterEach
    void stopAll() throws Exception {
        for (Process p : procs) {
            if (p.isAlive()) {
                p.destroyForcibly();
                p.waitFor(10, TimeUnit.SECONDS);
            }
        }
        for (Path l : logs) {
            System.out.println("---- " + l.getFileName() + " ----\n" + Files.readString(l, StandardCharsets.UTF_8));
        }
    }

    private Process start(List<String> prefix, String name, List<String> args) throws IOException {
        List<String> cmd = new ArrayList<>(prefix);
        cmd.add(System.getProperty("java.home") + File.separator + "bin" + File.separator + "java");
        for (String a : ManagementFactory.getRuntimeMXBean().getInputArguments()) {
            if (a.startsWith("--add-opens") || a.startsWith("--add-exports") || a.startsWith("-Dchronicle")) {
                cmd.add(a);
            }
        }
        cmd.addAll(List.of("-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-cp",
                System.getProperty("java.class.path"), "dev.kvtransfer.cli.KvTransferCli"));
        cmd.addAll(args);
        Path log = dir.resolve(name + ".log");
        logs.add(log);
        Process p = new ProcessBuilder(cmd).redirectErrorStream(true).redirectOutput(log.toFile()).start();
        procs.add(p);
        return p;
    }

    /** Starts route and the 2P2D instances at the given addresses and returns route's report. */
    private JsonNode run(String label, List<String> routerNs, String routerHost, List<List<String>> instanceNs,
                         List<String> instanceHosts, int basePort, List<String> backend) throws Exception {
        Path report = dir.resolve(label + ".json");
        String registry = "http://" + routerHost + ":" + basePort;
        Process route = start(routerNs, label + "-route", List.of("route", "--listen=" + routerHost + ":" + basePort,
                "--secret-file=" + secretFile, "--contexts=2", "--generations=2", "--requests=" + REQUESTS,
                "--isl=16,64,256,1024", "--concurrency=12", "--format=json", "--out=" + report, "--wait-s=120"));
        String[] roles = {"context", "context", "generation", "generation"};
        String[] ids = {"ctx-0", "ctx-1", "gen-0", "gen-1"};
        for (int i = 0; i < 4; i++) {
            // In a namespace every instance has an address of its own; on loopback they need ports of their own.
            int port = basePort + 100 + i * 10;
            List<String> args = new ArrayList<>(List.of("serve", "--role=" + roles[i], "--id=" + ids[i],
                    "--listen=" + instanceHosts.get(i) + ":" + port, "--registry=" + registry,
                    "--secret-file=" + secretFile, "--timeout-s=20", "--max-inflight=16", "--max-isl=1024",
                    "--layers=4", "--kv-heads=4", "--size-per-head=16", "--tokens-per-block=16"));
            args.addAll(backend);
            start(instanceNs.get(i), label + "-" + ids[i], args);
        }
        assertThat(route.waitFor(240, TimeUnit.SECONDS)).as(label + ": route finished").isTrue();
        assertThat(route.exitValue()).as(label + ": route's exit status").isZero();
        JsonNode r = new ObjectMapper().readTree(report.toFile());
        System.out.println(label + ": " + r);
        assertThat(r.get("completed").asInt()).isEqualTo(REQUESTS);
        assertThat(r.get("mismatches").asLong()).isZero();
        assertThat(r.get("checked").asLong()).isPositive();
        for (Process p : procs) {
            p.destroy(); // SIGTERM: the instances drain and exit
        }
        for (Process p : procs) {
            assertThat(p.waitFor(30, TimeUnit.SECONDS)).isTrue();
        }
        procs.clear();
        return r;
    }

    @Test
    void twoByTwoAcrossNamespacesThenOnLoopbackEveryElementVerified() throws Exception {
        secretFile = dir.resolve("secret");
        Files.createFile(secretFile, PosixFilePermissions.asFileAttribute(PosixFilePermissions.fromString("rw-------")));
        byte[] secret = new byte[32];
        new SecureRandom().nextBytes(secret);
        Files.write(secretFile, secret);
        JsonNode netns;
        JsonNode ucx = null;
        JsonNode tbf;
        try (NetnsStar star = NetnsStar.create(4)) {
            List<List<String>> ns = new ArrayList<>();
            List<String> hosts = new ArrayList<>();
            for (int i = 0; i < 4; i++) {
                ns.add(NetnsPair.exec(star.spoke(i)));
                hosts.add(star.spoke(i).address());
            }
            netns = run("netns", NetnsPair.exec(star.hub()), star.hub().address(), ns, hosts, 7000, List.of());
            // Every instance's link limited to 500 Mbit/s: requests complete, the figures say what the limit costs.
            star.rateLimit("500mbit");
            tbf = run("netns-tbf", NetnsPair.exec(star.hub()), star.hub().address(), ns, hosts, 8000, List.of());
            star.clearRateLimit();
            // UCX over TCP between the namespaces (its network transports, on the spokes' veth devices).
            dev.kvtransfer.ucx.UcxTransportProvider ucxProvider =
                    new dev.kvtransfer.ucx.UcxTransportProvider();
            if (ucxProvider.isAvailable()) {
                ucx = run("netns-ucx", NetnsPair.exec(star.hub()), star.hub().address(), ns, hosts, 9000,
                        List.of("--backend=ucx", "--transport-set=ucx.transports=net"));
            } else {
                System.out.println("netns-ucx: not run: " + ucxProvider.unavailabilityCause());
            }
        }
        JsonNode loop = run("loopback", List.of(), "127.0.0.1", List.of(List.of(), List.of(), List.of(), List.of()),
                List.of("127.0.0.1", "127.0.0.1", "127.0.0.1", "127.0.0.1"), 17000 + (int) (ProcessHandle.current()
                        .pid() % 20000), List.of());
        System.out.printf(java.util.Locale.ROOT, "2P2D %d requests: netns %.1f req/s, transfer p50 %.2f ms p99 %.2f ms"
                        + " | loopback %.1f req/s, transfer p50 %.2f ms p99 %.2f ms%n", REQUESTS,
                netns.get("requestsPerSecond").asDouble(), netns.get("transferP50Ms").asDouble(),
                netns.get("transferP99Ms").asDouble(), loop.get("requestsPerSecond").asDouble(),
                loop.get("transferP50Ms").asDouble(), loop.get("transferP99Ms").asDouble());
        System.out.printf(java.util.Locale.ROOT, "2P2D %d requests, links at 500 Mbit/s: netns %.1f req/s, transfer "
                + "p50 %.2f ms p99 %.2f ms%n", REQUESTS, tbf.get("requestsPerSecond").asDouble(),
                tbf.get("transferP50Ms").asDouble(), tbf.get("transferP99Ms").asDouble());
        if (ucx != null) {
            System.out.printf(java.util.Locale.ROOT, "2P2D %d requests over UCX TCP: netns %.1f req/s, transfer p50 "
                    + "%.2f ms p99 %.2f ms%n", REQUESTS, ucx.get("requestsPerSecond").asDouble(),
                    ucx.get("transferP50Ms").asDouble(), ucx.get("transferP99Ms").asDouble());
        }
    }
}
