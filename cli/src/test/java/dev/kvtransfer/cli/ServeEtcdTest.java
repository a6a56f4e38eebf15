package dev.kvtransfer.cli;

import com.fasterxml.jackson.databind.JsonNode;
import dev.kvtransfer.registry.ControlHttp;
import dev.kvtransfer.registry.RegistryAuth;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.io.IOException;
import java.net.ServerSocket;
import java.net.Socket;
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
import static org.awaitility.Awaitility.await;

/**
 * serve / route over a real etcd (Debian's etcd-server; skipped with the reason where it is not installed): etcd
 * stopped mid-run, the running instances keep serving the peers they know, a new instance fails with one line,
 * and once etcd is back a new instance registers.
 */
class ServeEtcdTest {
    private static final Path ETCD = Path.of("/usr/bin/etcd");
    @TempDir
    Path dir;
    private final List<ServeProcess> procs = new ArrayList<>();
    private Process etcd;

    @BeforeAll
    static void needsEtcd() {
        Assumptions.assumeTrue(Files.isExecutable(ETCD), "etcd is not installed (" + ETCD + " missing): run "
                + "scripts/install-deps.sh or apt-get install etcd-server");
    }

    @AfterEach
    void stopAll() throws Exception {
        for (ServeProcess p : procs) {
            p.close();
            System.out.println("---- " + p.name + " ----\n" + p.output());
        }
        stopEtcd();
    }

    private static int freePort() throws IOException {
        try (ServerSocket s = new ServerSocket(0)) {
            return s.getLocalPort();
        }
    }

    private void startEtcd(int client, int peer) throws IOException {
        String c = "http://127.0.0.1:" + client;
        String p = "http://127.0.0.1:" + peer;
        etcd = new ProcessBuilder(ETCD.toString(), "--name", "kvt", "--data-dir", dir.resolve("etcd").toString(),
                "--listen-client-urls", c, "--advertise-client-urls", c, "--listen-peer-urls", p,
                "--initial-advertise-peer-urls", p, "--initial-cluster", "kvt=" + p)
                .redirectErrorStream(true).redirectOutput(dir.resolve("etcd-" + System.nanoTime() + ".log").toFile())
                .start();
        await().atMost(Duration.ofSeconds(30)).ignoreExceptions().until(() -> {
            try (Socket s = new Socket("127.0.0.1", client)) {
                return etcd.isAlive();
            }
        });
    }

    private void stopEtcd() throws InterruptedException {
        if (etcd != null && etcd.isAlive()) {
            etcd.destroy();
            etcd.waitFor(10, TimeUnit.SECONDS);
        }
    }

    @Test
    void etcdStoppedMidRunKnownPeersKeepServingNewOnesFailInOneLineAndItRecovers() throws Exception {
        byte[] secret = new byte[32];
        new SecureRandom().nextBytes(secret);
        Path secretFile = dir.resolve("secret");
        Files.createFile(secretFile, PosixFilePermissions.asFileAttribute(PosixFilePermissions.fromString("rw-------")));
        Files.write(secretFile, secret);
        int client = freePort();
        int peer = freePort();
        int routerPort = freePort();
        startEtcd(client, peer);
        String url = "etcd://127.0.0.1:" + client;
        List<String> common = List.of("--registry=" + url, "--secret-file=" + secretFile, "--timeout-s=8",
                "--heartbeat-ms=300", "--max-inflight=16", "--max-isl=256", "--layers=4", "--kv-heads=4",
                "--size-per-head=16", "--tokens-per-block=16");
        Path report = dir.resolve("report.json");
        int requests = 500;
        CompletableFuture<Integer> route = CompletableFuture.supplyAsync(() -> KvTransferCli.run("route",
                "--registry=" + url, "--listen=127.0.0.1:" + routerPort, "--secret-file=" + secretFile,
                "--requests=" + requests, "--isl=16,64,256", "--rate=40", "--concurrency=4", "--format=json",
                "--out=" + report, "--wait-s=90"));
        List<String> ctx = new ArrayList<>(List.of("serve", "--role=context", "--id=ctx-0"));
        ctx.addAll(common);
        List<String> gen = new ArrayList<>(List.of("serve", "--role=generation", "--id=gen-0"));
        gen.addAll(common);
        ServeProcess c = ServeProcess.start(dir, "ctx-0", ctx);
        procs.add(c);
        ServeProcess g = ServeProcess.start(dir, "gen-0", gen);
        procs.add(g);
        ControlHttp.Client router = new ControlHttp.Client(URI.create("http://127.0.0.1:" + routerPort),
                RegistryAuth.of(secret), Duration.ofSeconds(2), "router");
        await().atMost(Duration.ofSeconds(90)).ignoreExceptions().until(() -> ((Number) router.call("GET",
                "/v1/router/stats", null, Map.class, Duration.ofSeconds(5)).get("done")).intValue() >= 60);

        stopEtcd();
        int atStop = ((Number) router.call("GET", "/v1/router/stats", null, Map.class, Duration.ofSeconds(5))
                .get("done")).intValue();
        // A new instance cannot register: one line, exit 1.
        List<String> late = new ArrayList<>(List.of("serve", "--role=generation", "--id=gen-late"));
        late.addAll(common);
        ServeProcess refused = ServeProcess.start(dir, "gen-late", late);
        procs.add(refused);
        assertThat(refused.waitFor(60)).isEqualTo(1);
        assertThat(refused.output().lines().filter(l -> l.startsWith("kvtransfer:")).toList()).singleElement()
                .asString().startsWith("kvtransfer: etcd [http://127.0.0.1:" + client + "]: register gen-late: ");
        // The running pair kept serving meanwhile.
        int during = ((Number) router.call("GET", "/v1/router/stats", null, Map.class, Duration.ofSeconds(5))
                .get("done")).intValue();
        assertThat(during).isGreaterThan(atStop);
        await().atMost(Duration.ofSeconds(15)).until(() -> g.output()
                .contains("heartbeat failed, still serving known peers"));

        // etcd back: a new instance registers and the running ones say so.
        startEtcd(client, peer);
        ServeProcess again = ServeProcess.start(dir, "gen-late", late);
        procs.add(again);
        await().atMost(Duration.ofSeconds(60)).until(() -> again.output().contains("registered with " + url));
        // The running instances resume their heartbeats on their entries of before the outage.
        await().atMost(Duration.ofSeconds(30)).until(() -> g.output().contains("registry reachable again")
                && c.output().contains("registry reachable again"));

        assertThat(route.get(180, TimeUnit.SECONDS)).isZero();
        JsonNode r = ControlHttp.JSON.readTree(report.toFile());
        System.out.println("route report: " + r);
        assertThat(r.get("completed").asInt()).isEqualTo(requests);
        assertThat(r.get("mismatches").asLong()).isZero();
        assertThat(r.get("checked").asLong()).isPositive();
    }
}
