package dev.kvtransfer.aeron;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.transport.Connection;
import dev.kvtransfer.api.transport.ConnectionManager;
import dev.kvtransfer.api.transport.TransportConfig;
import dev.kvtransfer.api.transport.TransportException;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;
import org.junit.jupiter.params.provider.ValueSource;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.stream.LongStream;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/**
 * The IPC path: managers of one process on the same media driver reach each other over {@code aeron:ipc}
 * (their address stays the UDP {@code host:port}); {@code aeron.ipc=false}, another driver or another process
 * means UDP.
 */
@Timeout(value = 90, unit = TimeUnit.SECONDS)
class AeronIpcTest {
    private static final Duration T = Duration.ofSeconds(20);
    private final List<AutoCloseable> closeables = new ArrayList<>();
    private ExecutorService pool;

    @BeforeEach
    void start() {
        pool = Executors.newCachedThreadPool();
    }

    @AfterEach
    void stop() throws Exception {
        pool.shutdownNow();
        assertThat(pool.awaitTermination(20, TimeUnit.SECONDS)).as("test threads ended").isTrue();
        // managers first: nothing may write a buffer after it is freed
        for (AutoCloseable c : closeables) {
            if (c instanceof ConnectionManager) {
                c.close();
            }
        }
        for (AutoCloseable c : closeables) {
            c.close();
        }
        assertThat(EmbeddedDriver.running()).as("embedded drivers left running").isZero();
    }

    private AeronConnectionManager manager(String name, TransportConfig.Builder builder) {
        AeronConnectionManager m = (AeronConnectionManager) new AeronTransportProvider().create(builder.name(name)
                .defaultTimeout(T).property(AeronSettings.PEER_TIMEOUT_MS, "1500").build());
        closeables.add(m);
        return m;
    }

    private AeronConnectionManager manager(String name) {
        return manager(name, TransportConfig.builder());
    }

    private OffHeapBuffer buffer(long size) {
        OffHeapBuffer buf = OffHeapBuffer.allocate(size);
        closeables.add(buf);
        return buf;
    }

    private static String channel(Connection c) {
        return ((AeronConnection) c).channel();
    }

    /** Sizes around the eager/rendezvous boundary, a multi-chunk message and a large one. */
    static LongStream sizes() {
        long eager = AeronSettings.from(TransportConfig.builder().build()).eagerLimit();
        return LongStream.of(0, 1, 4096, eager, eager + 1, (1 << 20) + 3, 64L << 20);
    }

    /**
     * Sends {@code size} bytes from {@code from} to {@code to} on a fresh tag, receives with recvConnect (which must
     * name the sender), then sends back on the returned connection; checks every byte both ways.
     *
     * @return {from's connection to to, to's connection back}
     */
    private Connection[] roundTrip(ConnectionManager from, ConnectionManager to, int tag, long size)
            throws Exception {
        OffHeapBuffer src = buffer(size + 16);
        OffHeapBuffer dst = buffer(size + 16);
        TestPattern.fill(src, 3, size, size + tag);
        TestPattern.clear(dst, 0, size + 16);
        Connection there = from.connection(to.localAddress());
        Future<Connection> r = pool.submit(() -> to.recvConnect(tag, dst, 9, size, T));
        there.send(tag, src, 3, size, T);
        Connection back = r.get(60, TimeUnit.SECONDS);
        assertThat(back.peer()).as("recvConnect names the sender").isEqualTo(from.localAddress());
        TestPattern.assertPattern(dst, 9, size, size + tag);
        TestPattern.fill(dst, 9, size, size + tag + 1);
        Future<?> reply = pool.submit(() -> there.recv(tag + 1, src, 3, size, T));
        back.send(tag + 1, dst, 9, size, T);
        reply.get(60, TimeUnit.SECONDS);
        TestPattern.assertPattern(src, 3, size, size + tag + 1);
        return new Connection[] {there, back};
    }

    @ParameterizedTest
    @MethodSource("sizes")
    void managersOfOneProcessTalkIpcInBothDirections(long size) throws Exception {
        AeronConnectionManager a = manager("a");
        AeronConnectionManager b = manager("b");
        assertThat(a.ipcEnabled()).isTrue();
        assertThat(b.ipcEnabled()).isTrue();
        assertThat(a.localAddress()).as("UDP host:port, then the driver and the IPC stream")
                .matches("127\\.0\\.0\\.1:\\d+/inc/[0-9a-f]{16}/ipc/[0-9a-f-]+/\\d+");
        Connection[] c = roundTrip(a, b, 100, size);
        assertThat(channel(c[0])).startsWith("aeron:ipc?");
        assertThat(channel(c[1])).startsWith("aeron:ipc?");
        // and the other way round on fresh tags, starting from b
        roundTrip(b, a, 200, size);
        assertThat(b.errorCount() + a.errorCount()).as("background errors").isZero();
    }

    @Test
    void manyMessagesOfMixedSizesKeepTheirOrderOverIpc() throws Exception {
        AeronConnectionManager a = manager("a");
        AeronConnectionManager b = manager("b");
        long eager = a.settings().eagerLimit();
        long[] sizes = {1, eager, eager + 1, 3 << 20, 0, 17};
        long total = LongStream.of(sizes).sum();
        OffHeapBuffer src = buffer(total);
        OffHeapBuffer dst = buffer(total);
        Connection ab = a.connection(b.localAddress());
        long at = 0;
        for (int i = 0; i < sizes.length; i++) {
            TestPattern.fill(src, at, sizes[i], 1000 + i);
            at += sizes[i];
        }
        TestPattern.clear(dst, 0, total);
        // the sender runs ahead: small messages arrive before their receive, large ones wait for it
        Future<?> sending = pool.submit(() -> {
            long pos = 0;
            for (long s : sizes) {
                ab.send(7, src, pos, s, T);
                pos += s;
            }
        });
        Connection ba = b.recvConnect(7, dst, 0, sizes[0], T);
        at = sizes[0];
        for (int i = 1; i < sizes.length; i++) {
            ba.recv(7, dst, at, sizes[i], T);
            at += sizes[i];
        }
        sending.get(60, TimeUnit.SECONDS);
        at = 0;
        for (int i = 0; i < sizes.length; i++) {
            TestPattern.assertPattern(dst, at, sizes[i], 1000 + i);
            at += sizes[i];
        }
        assertThat(channel(ab)).startsWith("aeron:ipc?");
    }

    @Test
    void aClosedIpcPeerFailsABlockedRecvWithPeerLost() throws Exception {
        AeronConnectionManager a = manager("a");
        AeronConnectionManager b = manager("b");
        AeronConnectionManager c = manager("c");
        OffHeapBuffer buf = buffer(1 << 20);
        Connection cb = c.connection(b.localAddress());
        cb.send(1, buf, 0, 1, T);
        Connection bc = b.recvConnect(1, buf, 0, 1, T);
        assertThat(channel(cb)).startsWith("aeron:ipc?");
        Future<?> waiting = pool.submit(() -> bc.recv(10, buf, 0, 1 << 20, Duration.ofSeconds(60)));
        // a receive posted on a connection opens its publication (so the peer's liveness is watched)
        org.awaitility.Awaitility.await().atMost(Duration.ofSeconds(10)).until(() -> channel(bc) != null);
        assertThat(channel(bc)).startsWith("aeron:ipc?");
        long t0 = System.nanoTime();
        c.close();
        assertThatThrownBy(() -> waiting.get(20, TimeUnit.SECONDS)).cause()
                .isInstanceOfSatisfying(TransportException.class,
                        e -> assertThat(e.code()).isEqualTo(ErrorCode.PEER_LOST));
        long tookMs = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - t0);
        assertThat(tookMs).as("PEER_LOST after close, ms").isLessThan(10_000);
        assertThatThrownBy(() -> bc.send(1, buf, 0, 1, T)).isInstanceOfSatisfying(TransportException.class,
                e -> assertThat(e.code()).isEqualTo(ErrorCode.PEER_LOST));
        // b keeps serving others over IPC
        roundTrip(a, b, 300, 100);
    }

    @ParameterizedTest
    @ValueSource(strings = {"true", "false"})
    void whatASenderHandedOverBeforeClosingStillArrives(String ipc) throws Exception {
        AeronConnectionManager a = manager("a", TransportConfig.builder().property(AeronSettings.IPC, ipc));
        AeronConnectionManager b = manager("b", TransportConfig.builder().property(AeronSettings.IPC, ipc));
        long large = (8 << 20) + 1;
        int small = 1000;
        int count = 50;
        OffHeapBuffer src = buffer(large + (long) small * count);
        OffHeapBuffer dst = buffer(large + (long) small * count);
        TestPattern.fill(src, 0, large, 77);
        for (int i = 0; i < count; i++) {
            TestPattern.fill(src, large + (long) i * small, small, i);
        }
        TestPattern.clear(dst, 0, large + (long) small * count);
        Connection ab = a.connection(b.localAddress());
        Connection ba = b.connection(a.localAddress());
        Future<?> largeRecv = pool.submit(() -> ba.recv(1, dst, 0, large, T));
        ab.send(1, src, 0, large, T);
        for (int i = 0; i < count; i++) {
            ab.send(2, src, large + (long) i * small, small, T);
        }
        boolean viaIpc = channel(ab).startsWith("aeron:ipc?");
        long t0 = System.nanoTime();
        a.close(); // right after the last send returned: its bytes are in the log, not yet at b
        long closeMs = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - t0);
        assertThat(viaIpc).isEqualTo(Boolean.parseBoolean(ipc));
        largeRecv.get(30, TimeUnit.SECONDS);
        TestPattern.assertPattern(dst, 0, large, 77);
        for (int i = 0; i < count; i++) {
            ba.recv(2, dst, large + (long) i * small, small, T);
            TestPattern.assertPattern(dst, large + (long) i * small, small, i);
        }
        assertThatThrownBy(() -> ba.recv(2, dst, 0, small, T)).isInstanceOfSatisfying(TransportException.class,
                e -> assertThat(e.code()).isEqualTo(ErrorCode.PEER_LOST));
        System.out.println("aeron.ipc=" + ipc + ": close() of a sender with data in flight took " + closeMs + " ms");
    }

    @Test
    void aPeerThatOnlyReceivesIsLostWhenItCloses() throws Exception {
        // b never sends to a, so a learns of the loss from its own IPC publication losing its subscriber
        AeronConnectionManager a = manager("a");
        AeronConnectionManager b = manager("b");
        OffHeapBuffer buf = buffer(1 << 20);
        Connection ab = a.connection(b.localAddress());
        ab.send(1, buf, 0, 8, T);
        b.recvConnect(1, buf, 0, 8, T);
        Future<?> waiting = pool.submit(() -> ab.recv(2, buf, 0, 8, Duration.ofSeconds(60)));
        b.close();
        assertThatThrownBy(() -> waiting.get(20, TimeUnit.SECONDS)).cause()
                .isInstanceOfSatisfying(TransportException.class,
                        e -> assertThat(e.code()).isEqualTo(ErrorCode.PEER_LOST));
    }

    @Test
    void withIpcOffManagersTalkUdp() throws Exception {
        AeronConnectionManager a = manager("a", TransportConfig.builder().property(AeronSettings.IPC, "false"));
        AeronConnectionManager b = manager("b", TransportConfig.builder().property(AeronSettings.IPC, "false"));
        assertThat(a.ipcEnabled()).isFalse();
        Connection[] c = roundTrip(a, b, 100, (4 << 20) + 5);
        assertThat(channel(c[0])).startsWith("aeron:udp?endpoint=" + Address.parse(b.localAddress()).hostPort() + "|");
        assertThat(channel(c[1])).startsWith("aeron:udp?endpoint=" + Address.parse(a.localAddress()).hostPort() + "|");
    }

    @Test
    void ipcNeedsBothSidesAndTheSameDriver() throws Exception {
        AeronConnectionManager on = manager("on");
        AeronConnectionManager off = manager("off", TransportConfig.builder().property(AeronSettings.IPC, "false"));
        // other driver settings, hence another embedded driver: IPC cannot cross drivers
        AeronConnectionManager other = manager("other", TransportConfig.builder()
                .property(AeronSettings.TERM_LENGTH, String.valueOf(8 << 20)));
        assertThat(other.ipcEnabled()).isTrue();
        assertThat(EmbeddedDriver.running()).isEqualTo(2);
        Connection[] c = roundTrip(on, off, 10, 70_000);
        assertThat(channel(c[0])).startsWith("aeron:udp?");
        assertThat(channel(c[1])).startsWith("aeron:udp?");
        c = roundTrip(on, other, 20, 70_000);
        assertThat(channel(c[0])).startsWith("aeron:udp?");
        assertThat(channel(c[1])).startsWith("aeron:udp?");
    }

    @Test
    void aManagerReceivesFromIpcAndUdpPeersAtOnce() throws Exception {
        // b's images from its IPC and its UDP subscription are told apart even if session ids coincide
        AeronConnectionManager b = manager("b");
        AeronConnectionManager viaIpc = manager("ipc");
        AeronConnectionManager viaUdp = manager("udp", TransportConfig.builder().property(AeronSettings.IPC, "false"));
        long size = (2 << 20) + 11;
        OffHeapBuffer src = buffer(2 * size);
        OffHeapBuffer dst = buffer(2 * size);
        TestPattern.fill(src, 0, size, 1);
        TestPattern.fill(src, size, size, 2);
        TestPattern.clear(dst, 0, 2 * size);
        Connection fromIpc = viaIpc.connection(b.localAddress());
        Connection fromUdp = viaUdp.connection(b.localAddress());
        Future<?> s1 = pool.submit(() -> fromIpc.send(5, src, 0, size, T));
        Future<?> s2 = pool.submit(() -> fromUdp.send(5, src, size, size, T));
        Connection first = b.recvConnect(5, dst, 0, size, T);
        Connection second = b.recvConnect(5, dst, size, size, T);
        s1.get(60, TimeUnit.SECONDS);
        s2.get(60, TimeUnit.SECONDS);
        assertThat(List.of(first.peer(), second.peer()))
                .containsExactlyInAnyOrder(viaIpc.localAddress(), viaUdp.localAddress());
        TestPattern.assertPattern(dst, 0, size, first.peer().equals(viaIpc.localAddress()) ? 1 : 2);
        TestPattern.assertPattern(dst, size, size, second.peer().equals(viaIpc.localAddress()) ? 1 : 2);
        assertThat(channel(fromIpc)).startsWith("aeron:ipc?");
        assertThat(channel(fromUdp)).startsWith("aeron:udp?");
        assertThat(channel(b.connection(viaIpc.localAddress()))).startsWith("aeron:ipc?");
        assertThat(channel(b.connection(viaUdp.localAddress()))).startsWith("aeron:udp?");
    }

    @Test
    void anInvalidIpcValueIsRefusedNamingTheKey() {
        TransportConfig config = TransportConfig.builder().name("x").property(AeronSettings.IPC, "yes").build();
        assertThatThrownBy(() -> AeronSettings.from(config)).isInstanceOf(IllegalArgumentException.class)
                .hasMessageContaining("aeron.ipc").hasMessageContaining("yes");
    }
}
