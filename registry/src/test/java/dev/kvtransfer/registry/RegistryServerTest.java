package dev.kvtransfer.registry;

import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;
import static org.awaitility.Awaitility.await;

class RegistryServerTest {
    private static final byte[] SECRET = "0123456789abcdef0123456789abcdef".getBytes(StandardCharsets.US_ASCII);
    private final List<AutoCloseable> open = new ArrayList<>();

    @AfterEach
    void closeAll() throws Exception {
        for (AutoCloseable c : open) {
            c.close();
        }
    }

    private RegistryServer server(long leaseMs) {
        RegistryServer s = new RegistryServer(new EmbeddedRegistry(Duration.ofMillis(leaseMs)),
                RegistryAuth.of(SECRET), new InetSocketAddress("127.0.0.1", 0), r -> { });
        open.add(s);
        return s;
    }

    private static InstanceRecord record(String id, long incarnation) {
        return new InstanceRecord(id, InstanceRecord.GENERATION, incarnation, "aeron", "pull", "TP1 PP1 CP1", "",
                List.of("127.0.0.1:1"), "http://127.0.0.1:1", 0);
    }

    @Test
    void registersHeartbeatsAndEvictsAnInstanceThatStopsBeating() {
        RegistryServer s = server(400);
        RemoteRegistry client = new RemoteRegistry(s.url(), RegistryAuth.of(SECRET));
        open.add(client);
        List<Registry.Event> events = new CopyOnWriteArrayList<>();
        s.registry().watch(events::add);
        assertThat(client.register(record("gen-0", 7))).isEqualTo(400);
        client.heartbeat("gen-0", 7, 3);
        assertThat(client.list()).singleElement().satisfies(r -> assertThat(r.load()).isEqualTo(3));
        // No more heartbeats: gone within lease + a sweep period.
        long t0 = System.nanoTime();
        await().atMost(Duration.ofSeconds(3)).until(() -> client.list().isEmpty());
        assertThat((System.nanoTime() - t0) / 1_000_000).isLessThan(1500);
        await().atMost(Duration.ofSeconds(3)).until(() -> events.size() == 2);
        assertThat(events).extracting(Registry.Event::type)
                .containsExactly(Registry.Event.Type.JOINED, Registry.Event.Type.EVICTED);
        assertThatThrownBy(() -> client.heartbeat("gen-0", 7, 0)).isInstanceOf(RegistryException.class)
                .hasMessageContaining("gen-0").hasMessageContaining("register again")
                .extracting(e -> ((RegistryException) e).kind()).isEqualTo(RegistryException.Kind.UNKNOWN_INSTANCE);
    }

    @Test
    void aSecondLiveInstanceUnderTheSameIdIsRefusedWithOneLine() {
        RegistryServer s = server(5000);
        RemoteRegistry client = new RemoteRegistry(s.url(), RegistryAuth.of(SECRET));
        open.add(client);
        client.register(record("gen-0", 1));
        client.register(record("gen-0", 1)); // a retry of the same process is fine
        assertThatThrownBy(() -> client.register(record("gen-0", 2))).isInstanceOf(RegistryException.class)
                .hasMessageContaining("instance id gen-0 is already registered by a live generation instance")
                .extracting(e -> ((RegistryException) e).kind()).isEqualTo(RegistryException.Kind.DUPLICATE);
        assertThat(s.registry().duplicatesRefused()).isEqualTo(1);
        client.deregister("gen-0", 1);
        assertThat(client.list()).isEmpty();
        client.register(record("gen-0", 2));
    }

    @Test
    void unsignedAndWronglySignedRegistrationsAreRefusedAndCounted() {
        RegistryServer s = server(5000);
        RemoteRegistry unsigned = new RemoteRegistry(s.url(), RegistryAuth.OFF);
        RemoteRegistry wrong = new RemoteRegistry(s.url(),
                RegistryAuth.of("another-secret-of-32-bytes-------".getBytes(StandardCharsets.US_ASCII)));
        open.add(unsigned);
        open.add(wrong);
        assertThatThrownBy(() -> unsigned.register(record("rogue", 1))).isInstanceOf(RegistryException.class)
                .hasMessageContaining("not signed with the deployment secret")
                .extracting(e -> ((RegistryException) e).kind()).isEqualTo(RegistryException.Kind.UNAUTHORIZED);
        assertThatThrownBy(() -> wrong.register(record("rogue", 1))).hasMessageContaining("wrong signature");
        assertThatThrownBy(() -> wrong.list()).hasMessageContaining("wrong signature");
        assertThat(s.auth().refused()).isEqualTo(3);
        assertThat(s.registry().list()).isEmpty();
    }

    @Test
    void aReplayedSignatureIsRefused() {
        RegistryAuth auth = RegistryAuth.of(SECRET);
        byte[] body = "{}".getBytes(StandardCharsets.UTF_8);
        String sig = auth.sign("POST", "/v1/x", body);
        assertThat(auth.verify("POST", "/v1/x", body, sig)).isEmpty();
        assertThat(auth.verify("POST", "/v1/x", body, sig)).contains("replayed");
        assertThat(auth.verify("POST", "/v1/y", body, auth.sign("POST", "/v1/x", body))).contains("wrong signature");
        assertThat(auth.refused()).isEqualTo(2);
    }

    @Test
    void anUnknownRegistryUrlIsOneClearLine() {
        assertThatThrownBy(() -> RemoteRegistry.open("etcd3://somewhere:2379", RegistryAuth.OFF))
                .hasMessage("registry URL 'etcd3://somewhere:2379': unknown scheme 'etcd3' (expected http://HOST:PORT "
                        + "of a router's registry, or etcd://HOST:PORT)");
        Registry nobody = RemoteRegistry.open("http://127.0.0.1:1", RegistryAuth.OFF);
        open.add(nobody);
        assertThatThrownBy(nobody::list).isInstanceOf(RegistryException.class)
                .hasMessageStartingWith("registry http://127.0.0.1:1: cannot connect")
                .extracting(e -> ((RegistryException) e).kind()).isEqualTo(RegistryException.Kind.UNAVAILABLE);
    }

    @Test
    void connectionsHoldingAPartialRequestLineDoNotStopOtherRequests() throws Exception {
        RegistryServer s = server(5000);
        RemoteRegistry client = new RemoteRegistry(s.url(), RegistryAuth.of(SECRET));
        open.add(client);
        // More slow connections than the server has workers, each holding 23 bytes of a request line.
        List<Socket> slow = new ArrayList<>();
        for (int i = 0; i < 12; i++) {
            Socket sock = new Socket("127.0.0.1", s.url().getPort());
            open.add(sock);
            OutputStream o = sock.getOutputStream();
            o.write("GET /v1/registry/insta".getBytes(StandardCharsets.US_ASCII));
            o.flush();
            slow.add(sock);
        }
        long t0 = System.nanoTime();
        await().atMost(Duration.ofSeconds(HttpServers.READ_DEADLINE_SECONDS * 3)).ignoreExceptions()
                .until(() -> client.list().isEmpty());
        long ms = (System.nanoTime() - t0) / 1_000_000;
        System.out.println("registry answered after " + ms + " ms with " + slow.size() + " slow connections open");
        assertThat(ms).isLessThan(HttpServers.READ_DEADLINE_SECONDS * 3000);
    }
}
