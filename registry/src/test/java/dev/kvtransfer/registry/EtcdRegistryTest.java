package dev.kvtransfer.registry;

import io.etcd.jetcd.ByteSequence;
import io.etcd.jetcd.Client;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.TimeUnit;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;
import static org.awaitility.Awaitility.await;

/** The etcd registry against a real etcd: leases, watches, sealed entries, duplicates, etcd stopped and back. */
class EtcdRegistryTest {
    private static final byte[] SECRET = "0123456789abcdef0123456789abcdef".getBytes(StandardCharsets.US_ASCII);

    @BeforeAll
    static void needsEtcd() {
        String why = EtcdServer.unavailable();
        Assumptions.assumeTrue(why.isEmpty(), why);
    }

    private static InstanceRecord record(String id, String role, long incarnation) {
        return new InstanceRecord(id, role, incarnation, "aeron", "pull", "TP1 PP1 CP1", "", List.of("127.0.0.1:1"),
                "http://127.0.0.1:1", 0);
    }

    @Test
    void leasesWatchesDuplicatesAndForeignEntries(@TempDir Path dir) throws Exception {
        // gen-0 outlives the test on a 10 s lease; ctx-0, whose death the test watches, has etcd's shortest (2 s).
        // (With 2 s for gen-0 too, a CI host that stalled etcd's lease renewals for 2 s expired gen-0 mid-test.)
        try (EtcdServer etcd = new EtcdServer(dir).start();
             EtcdRegistry a = EtcdRegistry.open(etcd.registryUrl(), RegistryAuth.of(SECRET), Duration.ofSeconds(10));
             EtcdRegistry router = EtcdRegistry.open(etcd.registryUrl(), RegistryAuth.of(SECRET),
                     Duration.ofSeconds(10))) {
            List<Registry.Event> events = new CopyOnWriteArrayList<>();
            AutoCloseable w = router.watch(events::add);
            assertThat(a.register(record("gen-0", InstanceRecord.GENERATION, 1))).isEqualTo(10_000);
            EtcdRegistry ctxProcess = EtcdRegistry.open(etcd.registryUrl(), RegistryAuth.of(SECRET),
                    Duration.ofSeconds(2));
            ctxProcess.register(record("ctx-0", InstanceRecord.CONTEXT, 5));
            a.heartbeat("gen-0", 1, 4);
            assertThat(router.list()).extracting(InstanceRecord::id).containsExactly("ctx-0", "gen-0");
            assertThat(router.list().get(1).load()).isEqualTo(4);
            await().atMost(Duration.ofSeconds(5)).until(() -> events.size() >= 2);

            // Another process under a live id is refused.
            assertThatThrownBy(() -> router.register(record("gen-0", InstanceRecord.GENERATION, 2)))
                    .isInstanceOf(RegistryException.class)
                    .hasMessageContaining("instance id gen-0 is already registered by a live generation instance");

            // Someone with write access to etcd but without the secret cannot join.
            try (Client raw = Client.builder().endpoints(etcd.url()).build()) {
                raw.getKVClient().put(ByteSequence.from(EtcdRegistry.PREFIX + "rogue", StandardCharsets.UTF_8),
                        ByteSequence.from("{\"record\":{\"id\":\"rogue\",\"role\":\"generation\",\"controlUrl\":"
                                + "\"http://evil:1\"},\"mac\":\"00\"}", StandardCharsets.UTF_8)).get(5, TimeUnit.SECONDS);
            }
            long refusedBefore = router.refused();
            assertThat(router.list()).extracting(InstanceRecord::id).doesNotContain("rogue");
            assertThat(router.refused()).isGreaterThan(refusedBefore);

            // ctx-0's process dies (its client and keep-alive stream go, nothing revokes the lease): etcd drops it
            // with its lease, the watcher sees it go.
            ctxProcess.close();
            long t0 = System.nanoTime();
            await().atMost(Duration.ofSeconds(10)).pollInterval(Duration.ofMillis(100)).until(() -> {
                a.heartbeat("gen-0", 1, 0);
                return router.list().stream().noneMatch(r -> r.id().equals("ctx-0"));
            });
            long ms = (System.nanoTime() - t0) / 1_000_000;
            System.out.println("etcd dropped ctx-0 " + ms + " ms after its process's client went (lease 2 s)");
            assertThat(ms).isLessThan(5000);
            await().atMost(Duration.ofSeconds(5)).until(() -> events.stream().anyMatch(e ->
                    e.type() == Registry.Event.Type.EVICTED && e.instance().id().equals("ctx-0")));
            assertThat(router.list()).extracting(InstanceRecord::id).containsExactly("gen-0");
            a.deregister("gen-0", 1);
            await().atMost(Duration.ofSeconds(5)).until(() -> router.list().isEmpty());
            w.close();
        }
    }

    @Test
    void etcdStoppedFailsNewRegistrationsInOneLineAndRecovers(@TempDir Path dir) throws Exception {
        try (EtcdServer etcd = new EtcdServer(dir).start();
             EtcdRegistry a = EtcdRegistry.open(etcd.registryUrl(), RegistryAuth.of(SECRET), Duration.ofSeconds(2))) {
            a.register(record("gen-0", InstanceRecord.GENERATION, 1));
            etcd.stop();
            long t0 = System.nanoTime();
            assertThatThrownBy(() -> a.register(record("gen-1", InstanceRecord.GENERATION, 2)))
                    .isInstanceOf(RegistryException.class)
                    .hasMessageStartingWith("etcd [" + etcd.url() + "]: register gen-1: ")
                    .satisfies(e -> assertThat(e.getMessage()).doesNotContain("\n"))
                    .extracting(e -> ((RegistryException) e).kind()).isEqualTo(RegistryException.Kind.UNAVAILABLE);
            System.out.println("registration with etcd stopped failed after " + (System.nanoTime() - t0) / 1_000_000
                    + " ms");
            assertThatThrownBy(() -> a.heartbeat("gen-0", 1, 0)).isInstanceOf(RegistryException.class)
                    .extracting(e -> ((RegistryException) e).kind()).isEqualTo(RegistryException.Kind.UNAVAILABLE);

            etcd.start();
            // Back: the instance that kept beating is (again) listed, new registrations go through.
            await().atMost(Duration.ofSeconds(30)).ignoreExceptions().until(() -> {
                try {
                    a.heartbeat("gen-0", 1, 0);
                } catch (RegistryException e) {
                    if (e.kind() != RegistryException.Kind.UNKNOWN_INSTANCE) {
                        throw e;
                    }
                    a.register(record("gen-0", InstanceRecord.GENERATION, 1));
                }
                return true;
            });
            a.register(record("gen-1", InstanceRecord.GENERATION, 2));
            assertThat(a.list()).extracting(InstanceRecord::id).containsExactly("gen-0", "gen-1");
        }
    }
}
