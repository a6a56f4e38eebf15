package dev.kvtransfer.cli;

import dev.kvtransfer.registry.InstanceRecord;
import dev.kvtransfer.registry.Registry;
import dev.kvtransfer.registry.RegistryAuth;
import dev.kvtransfer.registry.RegistryException;
import org.junit.jupiter.api.Test;

import java.time.Duration;
import java.util.List;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.function.Consumer;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/**
 * The router's choices without instances behind them: equally idle instances take turns; and while its registry
 * cannot be reached (etcd stopped) it routes from the last listing, one request per probe interval asking the
 * registry again, so the requests do not each wait out a call to a registry that is gone (each such call to a
 * stopped etcd takes seconds).
 */
class RouterTest {
    /** A registry whose listing fails UNAVAILABLE while {@code down}; counts the listings asked for. */
    private static class Flaky implements Registry {
        final AtomicBoolean down = new AtomicBoolean();
        final AtomicInteger lists = new AtomicInteger();
        volatile List<InstanceRecord> records;

        Flaky(List<InstanceRecord> records) {
            this.records = records;
        }

        @Override
        public long register(InstanceRecord record) {
            throw new UnsupportedOperationException();
        }

        @Override
        public void heartbeat(String id, long incarnation, int load) {
            throw new UnsupportedOperationException();
        }

        @Override
        public void deregister(String id, long incarnation) {
            throw new UnsupportedOperationException();
        }

        @Override
        public List<InstanceRecord> list() {
            lists.incrementAndGet();
            if (down.get()) {
                throw new RegistryException(RegistryException.Kind.UNAVAILABLE, "etcd [http://10.0.0.9:2379]: list: "
                        + "no answer within 3000 ms (is etcd running and reachable?)");
            }
            return records;
        }

        @Override
        public AutoCloseable watch(Consumer<Event> listener) {
            return () -> { };
        }

        @Override
        public void close() {
        }
    }

    private static InstanceRecord record(String id, String role) {
        return new InstanceRecord(id, role, 1, "aeron", "pull", "TP1 PP1 CP1", "", List.of("127.0.0.1:1"),
                "http://127.0.0.1:1", 0);
    }

    private static Router router(Registry r, Duration downProbe) {
        return new Router(r, RegistryAuth.OFF, "pull", false, Duration.ofSeconds(1), Duration.ofSeconds(1),
                downProbe);
    }

    @Test
    void whileTheRegistryIsDownOneRequestPerIntervalAsksItAndTheOthersUseTheLastListing() {
        List<InstanceRecord> known = List.of(record("ctx-0", InstanceRecord.CONTEXT),
                record("gen-0", InstanceRecord.GENERATION));
        Flaky registry = new Flaky(known);
        // An interval no test run reaches: after the failed call, nothing asks the registry again.
        Router router = router(registry, Duration.ofHours(1));
        assertThat(router.live()).isEqualTo(known);
        registry.down.set(true);
        for (int i = 0; i < 100; i++) {
            assertThat(router.live()).as("call %d while down", i).isEqualTo(known);
        }
        assertThat(registry.lists.get()).as("listings asked: one while up, one that found it down").isEqualTo(2);
    }

    @Test
    void whenTheRegistryIsBackTheNextProbeSeesTheNewListing() {
        List<InstanceRecord> known = List.of(record("ctx-0", InstanceRecord.CONTEXT));
        Flaky registry = new Flaky(known);
        Router router = router(registry, Duration.ZERO);
        router.live();
        registry.down.set(true);
        assertThat(router.live()).isEqualTo(known);
        assertThat(router.live()).isEqualTo(known);
        assertThat(registry.lists.get()).as("with no interval every call asks").isEqualTo(3);
        List<InstanceRecord> grown = List.of(record("ctx-0", InstanceRecord.CONTEXT),
                record("gen-1", InstanceRecord.GENERATION));
        registry.records = grown;
        registry.down.set(false);
        assertThat(router.live()).isEqualTo(grown);
    }

    @Test
    void aRefusalOtherThanUnavailableIsNotTakenForAnOutage() {
        Registry refusing = new Flaky(List.of()) {
            @Override
            public List<InstanceRecord> list() {
                throw new RegistryException(RegistryException.Kind.UNAUTHORIZED, "registry: list: bad signature");
            }
        };
        assertThatThrownBy(() -> router(refusing, Duration.ofHours(1)).live())
                .isInstanceOf(RegistryException.class).hasMessageContaining("bad signature");
    }

    @Test
    void equallyIdleInstancesTakeTurnsAndOneThatJoinsIsPickedAtOnce() {
        InstanceRecord c0 = record("ctx-0", InstanceRecord.CONTEXT);
        InstanceRecord g0 = record("gen-0", InstanceRecord.GENERATION);
        InstanceRecord g1 = record("gen-1", InstanceRecord.GENERATION);
        Router router = router(new Flaky(List.of()), Duration.ofHours(1));
        List<String> picked = new java.util.ArrayList<>();
        for (int i = 0; i < 4; i++) {
            picked.add(router.pick(List.of(c0, g0, g1), false, c0).orElseThrow().id());
        }
        assertThat(picked).containsExactly("gen-0", "gen-1", "gen-0", "gen-1");
        // A restarted gen-1 (a new incarnation) has never been picked: it is next, although gen-0 sorts first.
        InstanceRecord g1again = new InstanceRecord("gen-1", InstanceRecord.GENERATION, 2, "aeron", "pull",
                "TP1 PP1 CP1", "", List.of("127.0.0.1:1"), "http://127.0.0.1:2", 0);
        router.pick(List.of(c0, g0), false, c0);
        assertThat(router.pick(List.of(c0, g0, g1again), false, c0).orElseThrow()).isEqualTo(g1again);
        assertThat(router.pick(List.of(c0, g0, g1again), true, null).orElseThrow()).isEqualTo(c0);
    }
}
