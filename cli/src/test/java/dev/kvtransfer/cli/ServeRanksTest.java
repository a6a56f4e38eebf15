package dev.kvtransfer.cli;

import com.fasterxml.jackson.databind.JsonNode;
import dev.kvtransfer.registry.ControlHttp;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.io.IOException;
import java.net.ServerSocket;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.attribute.PosixFilePermissions;
import java.security.SecureRandom;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReference;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

/**
 * {@code serve --rank}: a TP2 context instance whose two ranks are two {@code serve} processes (rank 0 leads, rank 1
 * joins it with {@code --leader}; their status checks agree over {@code TransportGroupComm} on Aeron), a TP2
 * generation instance in a third, and {@code route} in this JVM: every request routed and every element verified.
 */
class ServeRanksTest {
    private static final Pattern LEADER = Pattern.compile("(?m)^leader +(\\S+) ");
    @TempDir
    Path dir;
    private final List<ServeProcess> procs = new ArrayList<>();
    private Path secretFile;
    private int port;

    @AfterEach
    void stopAll() throws Exception {
        for (ServeProcess p : procs) {
            p.close();
            System.out.println("---- " + p.name + " ----\n" + p.output());
        }
    }

    private ServeProcess serve(String name, String role, String id, String... extra) throws IOException {
        List<String> a = new ArrayList<>(List.of("serve", "--role=" + role, "--id=" + id,
                "--registry=http://127.0.0.1:" + port, "--secret-file=" + secretFile, "--timeout-s=8",
                "--heartbeat-ms=300", "--max-inflight=16", "--max-isl=256", "--layers=4", "--size-per-head=16",
                "--tokens-per-block=16", "--kv-heads=4", "--tp=2"));
        a.addAll(List.of(extra));
        ServeProcess p = ServeProcess.start(dir, name, a);
        procs.add(p);
        return p;
    }

    private void deployment() throws IOException {
        byte[] secret = new byte[32];
        new SecureRandom().nextBytes(secret);
        secretFile = dir.resolve("secret");
        Files.createFile(secretFile, PosixFilePermissions.asFileAttribute(PosixFilePermissions.fromString("rw-------")));
        Files.write(secretFile, secret);
        try (ServerSocket s = new ServerSocket(0)) {
            port = s.getLocalPort();
        }
    }

    private CompletableFuture<Integer> route(int requests, Path report) {
        return CompletableFuture.supplyAsync(() -> KvTransferCli.run("route",
                "--listen=127.0.0.1:" + port, "--secret-file=" + secretFile, "--contexts=1", "--generations=1",
                "--requests=" + requests, "--isl=16,64,256", "--concurrency=4", "--request-timeout-s=20",
                "--format=json", "--out=" + report, "--wait-s=90"));
    }

    /** Starts rank 0 and waits for its 'leader' line. */
    private String leader(ServeProcess rank0) {
        AtomicReference<String> leader = new AtomicReference<>();
        await().atMost(Duration.ofSeconds(60)).pollInterval(Duration.ofMillis(50)).until(() -> {
            Matcher m = LEADER.matcher(rank0.output());
            if (m.find()) {
                leader.set(m.group(1));
            }
            return leader.get() != null || !rank0.process.isAlive();
        });
        assertThat(leader.get()).as(rank0.output()).isNotNull();
        return leader.get();
    }

    @Test
    void aTp2ContextInstanceWhoseRanksAreTwoProcessesServesEveryRequestVerified() throws Exception {
        deployment();
        Path report = dir.resolve("report.json");
        int requests = 60;
        CompletableFuture<Integer> route = route(requests, report);
        // A loaded machine can stall a JVM past Aeron's 3 s peer timeout, which ends a split instance (a rank is
        // gone): this test is about routing, so its ranks allow 15 s of silence. The kill test keeps the default.
        String patient = "--transport-set=aeron.peerTimeoutMs=15000";
        ServeProcess rank0 = serve("ctx-rank-0", "context", "ctx-0", "--rank=0", patient);
        AtomicReference<String> leader = new AtomicReference<>(leader(rank0));
        ServeProcess rank1 = serve("ctx-rank-1", "context", "ctx-0", "--rank=1", "--leader=" + leader.get(),
                patient);
        serve("gen", "generation", "gen-0", patient);

        assertThat(route.get(180, TimeUnit.SECONDS)).as("route's exit status").isZero();
        JsonNode r = ControlHttp.JSON.readTree(report.toFile());
        System.out.println("route report: " + r);
        assertThat(r.get("requests").asInt()).isEqualTo(requests);
        assertThat(r.get("completed").asInt()).isEqualTo(requests);
        assertThat(r.get("mismatches").asLong()).isZero();
        assertThat(r.get("checked").asLong()).isPositive();
        assertThat(rank0.output()).contains("ranks              2 of 2 joined");
        assertThat(rank1.output()).contains("rank 1 of 2").contains("led by rank 0 at " + leader.get());

        // SIGTERM to rank 0 drains the instance: rank 0 deregisters and stops rank 1; both exit 0.
        rank0.terminate();
        assertThat(rank0.waitFor(30)).as(rank0.output()).isZero();
        assertThat(rank1.waitFor(30)).as(rank1.output()).isZero();
        assertThat(rank1.output()).contains("rank 0 stopped the instance");
    }

    @Test
    void aKilledRankStopsTheOtherRankOfItsInstanceWithOneLine() throws Exception {
        deployment();
        Path report = dir.resolve("report.json");
        CompletableFuture<Integer> route = route(8, report);
        ServeProcess rank0 = serve("ctx-rank-0", "context", "ctx-1", "--rank=0");
        String leader = leader(rank0);
        ServeProcess rank1 = serve("ctx-rank-1", "context", "ctx-1", "--rank=1", "--leader=" + leader);
        serve("gen", "generation", "gen-1");
        assertThat(route.get(180, TimeUnit.SECONDS)).as("route's exit status").isZero();

        // kill -9 rank 1: rank 0's status group loses it (PEER_LOST, Aeron's peer timeout), rank 0 drains, exit 1.
        rank1.kill();
        long killed = System.nanoTime();
        assertThat(rank0.waitFor(60)).as(rank0.output()).isEqualTo(1);
        System.out.println("rank 1 killed: rank 0 stopped after "
                + TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - killed) + " ms");
        assertThat(rank0.output()).contains("kvtransfer: instance ctx-1: a rank is gone, draining:")
                .contains("member 1 (").contains("stopped            ctx-1");
    }

    @Test
    void rankOptionsThatCannotWorkEndWithOneLine() {
        assertThat(KvTransferCli.run("serve", "--role=generation", "--rank=0", "--set=kvtransfer.auth=off"))
                .isEqualTo(1);
        assertThat(KvTransferCli.run("serve", "--role=context", "--tp=2", "--rank=1", "--set=kvtransfer.auth=off"))
                .isEqualTo(1);
        assertThat(KvTransferCli.run("serve", "--role=context", "--tp=2", "--rank=2", "--leader=x",
                "--set=kvtransfer.auth=off")).isEqualTo(1);
        assertThat(KvTransferCli.run("serve", "--role=context", "--leader=x", "--set=kvtransfer.auth=off"))
                .isEqualTo(1);
    }
}
