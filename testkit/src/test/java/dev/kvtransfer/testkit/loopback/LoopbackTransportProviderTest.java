package dev.kvtransfer.testkit.loopback;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.memory.MemoryKind;
import dev.kvtransfer.api.transport.Connection;
import dev.kvtransfer.api.transport.ConnectionManager;
import dev.kvtransfer.api.transport.TransportCapability;
import dev.kvtransfer.api.transport.TransportConfig;
import dev.kvtransfer.api.transport.TransportException;
import dev.kvtransfer.api.transport.TransportProvider;
import dev.kvtransfer.core.memory.HostBufferManager;
import dev.kvtransfer.core.memory.MemoryAccess;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.ServiceLoader;
import java.util.stream.Collectors;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/** Loopback specifics beyond the conformance suite: discovery, fabrics, addresses, closed peers. */
class LoopbackTransportProviderTest {
    private final HostBufferManager mm = new HostBufferManager();
    private final List<ConnectionManager> managers = new ArrayList<>();
    private final List<MemoryBuffer> buffers = new ArrayList<>();

    @AfterEach
    void tearDown() {
        managers.forEach(ConnectionManager::close);
        buffers.forEach(MemoryBuffer::close);
        mm.close();
    }

    private ConnectionManager manager(String fabric) {
        TransportConfig.Builder b = TransportConfig.builder().name("t").defaultTimeout(Duration.ofSeconds(5));
        if (fabric != null) {
            b.property(LoopbackTransportProvider.FABRIC_PROPERTY, fabric);
        }
        ConnectionManager m = new LoopbackTransportProvider().create(b.build());
        managers.add(m);
        return m;
    }

    private MemoryBuffer buffer(long n) {
        MemoryBuffer b = mm.allocate(n, MemoryKind.HOST);
        buffers.add(b);
        return b;
    }

    @Test
    void isDiscoveredByServiceLoaderWithItsCapabilities() {
        List<TransportProvider> found = ServiceLoader.load(TransportProvider.class).stream()
                .map(ServiceLoader.Provider::get).collect(Collectors.toList());
        TransportProvider p = found.stream().filter(x -> x.name().equals("loopback")).findFirst().orElseThrow();
        assertThat(p.isAvailable()).isTrue();
        assertThat(p.unavailabilityCause()).isNull();
        assertThat(p.capabilities()).containsExactlyInAnyOrder(TransportCapability.PEER_FAILURE_DETECTION,
                TransportCapability.ONE_SIDED_WRITE);
    }

    @Test
    void addressesNameTheFabricAndAreNeverReused() {
        ConnectionManager a = manager("fab-x");
        ConnectionManager b = manager("fab-x");
        assertThat(a.localAddress()).startsWith("loopback://fab-x/");
        assertThat(b.localAddress()).isNotEqualTo(a.localAddress());
        assertThat(manager(null).localAddress()).startsWith("loopback://default/");
        String old = a.localAddress();
        a.close();
        assertThat(manager("fab-x").localAddress()).isNotEqualTo(old);
    }

    @Test
    void fabricsAreIsolated() {
        ConnectionManager a = manager("fab-a");
        ConnectionManager b = manager("fab-b");
        assertThatThrownBy(() -> a.connection(b.localAddress()))
                .isInstanceOfSatisfying(TransportException.class, e -> assertThat(e.code()).isEqualTo(ErrorCode.NETWORK))
                .hasMessageContaining("fab-a");
        assertThatThrownBy(() -> a.connection("tcp://127.0.0.1:1")).isInstanceOf(TransportException.class);
        assertThatThrownBy(() -> a.connection("loopback://fab-a/x")).isInstanceOf(TransportException.class)
                .hasMessageContaining("malformed");
        Connection never = a.connection("loopback://fab-a/" + Long.MAX_VALUE);
        MemoryBuffer buf = buffer(8);
        assertThatThrownBy(() -> never.send(1, buf, 0, 8))
                .isInstanceOfSatisfying(TransportException.class, e -> assertThat(e.code()).isEqualTo(ErrorCode.NETWORK))
                .hasMessageContaining("no loopback manager");
        assertThatThrownBy(() -> new LoopbackTransportProvider().create(TransportConfig.builder()
                .property(LoopbackTransportProvider.FABRIC_PROPERTY, "a/b").build()))
                .isInstanceOf(IllegalArgumentException.class).hasMessageContaining("loopback.fabric");
    }

    @Test
    void connectionsAreReused() {
        ConnectionManager a = manager("reuse");
        ConnectionManager b = manager("reuse");
        assertThat(a.connection(b.localAddress())).isSameAs(a.connection(b.localAddress()));
    }

    @Test
    void sendingToAClosedPeerIsPeerLostButWhatItSentBeforeClosingIsDelivered() {
        ConnectionManager a = manager("closing");
        ConnectionManager b = manager("closing");
        MemoryBuffer buf = buffer(16);
        MemoryAccess.putLong(buf.address(), 0x55AA55AA55AA55AAL);
        a.connection(b.localAddress()).send(9, buf, 0, 8);
        a.close();
        MemoryBuffer in = buffer(8);
        Connection ba = b.connection(a.localAddress());
        ba.recv(9, in, 0, 8);
        assertThat(MemoryAccess.getLong(in.address())).isEqualTo(0x55AA55AA55AA55AAL);
        assertThatThrownBy(() -> ba.send(9, buf, 0, 8))
                .isInstanceOfSatisfying(TransportException.class, e -> assertThat(e.code()).isEqualTo(ErrorCode.PEER_LOST));
        assertThatThrownBy(() -> ba.recv(9, in, 0, 8))
                .isInstanceOfSatisfying(TransportException.class, e -> assertThat(e.code()).isEqualTo(ErrorCode.PEER_LOST));
    }

    @Test
    void lengthMismatchOnAPostedReceiveFailsTheReceiveNotTheSender() throws Exception {
        ConnectionManager a = manager("mismatch");
        ConnectionManager b = manager("mismatch");
        MemoryBuffer in = buffer(32);
        MemoryBuffer out = buffer(32);
        TransportException[] seen = new TransportException[1];
        Thread t = new Thread(() -> {
            try {
                b.connection(a.localAddress()).recv(5, in, 0, 32, Duration.ofSeconds(30));
            } catch (TransportException e) {
                seen[0] = e;
            }
        });
        t.start();
        org.awaitility.Awaitility.await().atMost(Duration.ofSeconds(30)).until(() -> {
            // Posted once the receiving thread parks.
            return t.getState() == Thread.State.TIMED_WAITING;
        });
        a.connection(b.localAddress()).send(5, out, 0, 16); // returns normally
        t.join(30_000);
        assertThat(seen[0]).isNotNull();
        assertThat(seen[0].code()).isEqualTo(ErrorCode.MALFORMED);
        assertThat(seen[0]).hasMessageContaining("16 bytes").hasMessageContaining("expected 32");
    }

    @Test
    void defaultTimeoutAppliesToReceivesWithoutOne() {
        ConnectionManager a = new LoopbackTransportProvider().create(TransportConfig.builder()
                .defaultTimeout(Duration.ofMillis(150)).build());
        managers.add(a);
        ConnectionManager b = new LoopbackTransportProvider().create(TransportConfig.builder().build());
        managers.add(b);
        MemoryBuffer in = buffer(8);
        assertThatThrownBy(() -> a.connection(b.localAddress()).recv(77, in, 0, 8))
                .isInstanceOfSatisfying(TransportException.class, e -> assertThat(e.code()).isEqualTo(ErrorCode.TIMEOUT));
    }
}
