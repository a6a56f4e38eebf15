package dev.kvtransfer.registry;

import io.etcd.jetcd.ByteSequence;
import io.etcd.jetcd.Client;
import io.etcd.jetcd.KeyValue;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

/**
 * An etcd outage longer than gRPC's first reconnect steps: once etcd is back, a live instance keeps its entry
 * (the same key, never deleted and created again), so a router listing etcd never sees it leave. Before the
 * client was rebuilt after an outage, the old channel reconnected seconds after etcd was back, the lease (restarted
 * by etcd at its full length) ran out first, and the instance left and registered again.
 */
class EtcdOutageTest {
    private static final byte[] SECRET = "0123456789abcdef0123456789abcdef".getBytes(StandardCharsets.US_ASCII);

    @BeforeAll
    static void needsEtcd() {
        String why = EtcdServer.unavailable();
        Assumptions.assumeTrue(why.isEmpty(), why);
    }

    private static KeyValue entry(Client raw, String id) throws Exception {
        List<KeyValue> kvs = raw.getKVClient().get(ByteSequence.from(EtcdRegistry.PREFIX + id,
                StandardCharsets.UTF_8)).get(10, TimeUnit.SECONDS).getKvs();
        return kvs.isEmpty() ? null : kvs.get(0);
    }

    @Test
    void aLiveInstanceKeepsItsEntryThroughAnOutageLongerThanItsLease(@TempDir Path dir) throws Exception {
        InstanceRecord rec = new InstanceRecord("ctx-0", InstanceRecord.CONTEXT, 11, "aeron", "pull", "TP1 PP1 CP1",
                "", List.of("127.0.0.1:1"), "http://127.0.0.1:1", 0);
        ScheduledExecutorService beat = Executors.newSingleThreadScheduledExecutor();
        try (EtcdServer etcd = new EtcdServer(dir).start();
             EtcdRegistry instance = EtcdRegistry.open(etcd.registryUrl(), RegistryAuth.of(SECRET),
                     Duration.ofSeconds(3))) {
            instance.register(rec);
            long created;
            try (Client raw = Client.builder().endpoints(etcd.url()).build()) {
                created = entry(raw, "ctx-0").getCreateRevision();
            }
            // The instance's heartbeat loop, as `serve` runs it: every 500 ms; a dropped entry registers again.
            AtomicInteger failed = new AtomicInteger();
            AtomicInteger ok = new AtomicInteger();
            List<String> registeredAgain = new CopyOnWriteArrayList<>();
            beat.scheduleWithFixedDelay(() -> {
                try {
                    instance.heartbeat("ctx-0", 11, 0);
                    ok.incrementAndGet();
                } catch (RegistryException e) {
                    if (e.kind() == RegistryException.Kind.UNKNOWN_INSTANCE) {
                        registeredAgain.add(e.getMessage());
                        instance.register(rec);
                    } else {
                        failed.incrementAndGet();
                    }
                } catch (RuntimeException e) {
                    failed.incrementAndGet();
                }
            }, 500, 500, TimeUnit.MILLISECONDS);
            await().atMost(Duration.ofSeconds(20)).until(() -> ok.get() >= 2);

            etcd.stop();
            // Eight failed beats: the old channel's reconnect backoff has grown past the lease by then.
            await().atMost(Duration.ofSeconds(60)).until(() -> failed.get() >= 8);
            etcd.start();
            int okBefore = ok.get();
            // Back: heartbeats resume, and go on for more than two leases.
            await().atMost(Duration.ofSeconds(60)).until(() -> ok.get() >= okBefore + 14);

            try (Client raw = Client.builder().endpoints(etcd.url()).build()) {
                KeyValue kv = entry(raw, "ctx-0");
                assertThat(registeredAgain).as("the instance never had to register again").isEmpty();
                assertThat(kv).as("the instance is still in etcd").isNotNull();
                assertThat(kv.getCreateRevision()).as("its entry is the one written before the outage, never "
                        + "deleted and created again").isEqualTo(created);
            }
            assertThat(instance.list()).extracting(InstanceRecord::id).containsExactly("ctx-0");
        } finally {
            beat.shutdownNow();
            beat.awaitTermination(10, TimeUnit.SECONDS);
        }
    }
}
