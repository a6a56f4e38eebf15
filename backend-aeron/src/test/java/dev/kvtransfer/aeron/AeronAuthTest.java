package dev.kvtransfer.aeron;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.transport.Connection;
import dev.kvtransfer.api.transport.TransportConfig;
import dev.kvtransfer.api.transport.TransportException;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.TimeUnit;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;
import static org.awaitility.Awaitility.await;

/**
 * HELLOs authenticated with {@code TransportConfig.authSecret()}: peers with the
 * secret talk; a peer without it, with another one, a forged HELLO claiming a genuine peer, a replayed HELLO, a
 * stale one and one addressed to another manager are refused with {@code UNAUTHORIZED}, counted, reported once
 * without the secret, and everyone else keeps being served.
 */
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class AeronAuthTest {
    private static final Duration T = Duration.ofSeconds(20);
    private static final byte[] SECRET = "kvtransfer-test-secret-0123456789".getBytes(StandardCharsets.UTF_8);
    private final List<AutoCloseable> closeables = new ArrayList<>();
    private final List<Throwable> errors = new CopyOnWriteArrayList<>();

    @AfterEach
    void stop() throws Exception {
        for (int i = closeables.size() - 1; i >= 0; i--) {
            closeables.get(i).close();
        }
        assertThat(AeronRuntime.running()).isZero();
    }

    private AeronConnectionManager manager(String name, byte[] secret, String... props) {
        TransportConfig.Builder b = TransportConfig.builder().name(name).defaultTimeout(T).authSecret(secret)
                .property(AeronSettings.PEER_TIMEOUT_MS, "1500").errorHandler(errors::add);
        for (int i = 0; i < props.length; i += 2) {
            b.property(props[i], props[i + 1]);
        }
        AeronConnectionManager m = (AeronConnectionManager) new AeronTransportProvider().create(b.build());
        closeables.add(m);
        return m;
    }

    private OffHeapBuffer buffer(long size) {
        OffHeapBuffer b = OffHeapBuffer.allocate(size);
        closeables.add(b);
        return b;
    }

    private static void roundTrip(AeronConnectionManager from, AeronConnectionManager to, int tag, long seed,
                                  long size, OffHeapBuffer buf) throws Exception {
        TestPattern.fill(buf, 0, size, seed);
        Thread t = new Thread(() -> from.connection(to.localAddress()).send(tag, buf, 0, size, T));
        t.start();
        Connection back = to.recvConnect(tag, buf, size, size, T);
        t.join(T.toMillis());
        assertThat(back.peer()).isEqualTo(from.localAddress());
        TestPattern.assertPattern(buf, size, size, seed);
    }

    private void assertRefusedWithoutTheSecret(AeronConnectionManager m, long atLeast) {
        await().atMost(T).until(() -> m.counters().get("unauthorized") >= atLeast);
        assertThat(errors).filteredOn(e -> e instanceof TransportException t && t.code() == ErrorCode.UNAUTHORIZED)
                .hasSizeGreaterThanOrEqualTo((int) atLeast)
                .allSatisfy(e -> assertThat(e.getMessage()).doesNotContain(new String(SECRET, StandardCharsets.UTF_8))
                        .doesNotContain(HexFormat.of().formatHex(SECRET)));
    }

    /**
     * A send from a peer without the right secret: its offer goes out, or, when the receiver already refused the
     * stream its HELLO opened (a receiver woken by its doorbell is that quick), it fails as UNAUTHORIZED.
     */
    private static void sendOrRefused(AeronConnectionManager from, AeronConnectionManager to, OffHeapBuffer buf) {
        sendOrRefused(from.connection(to.localAddress()), 20, buf);
    }

    /** An eager send of a peer without the secret: it goes out, or the receiver refused the stream already. */
    private static void sendOrRefused(Connection c, int tag, OffHeapBuffer buf) {
        try {
            c.send(tag, buf, 0, 64, T);
        } catch (TransportException e) {
            assertThat(e.code()).as("%s", e).isEqualTo(ErrorCode.UNAUTHORIZED);
        }
    }

    @Test
    void peersWithTheSecretTalkOverIpcAndUdp() throws Exception {
        AeronConnectionManager a = manager("a", SECRET);
        AeronConnectionManager b = manager("b", SECRET);
        AeronConnectionManager u = manager("u", SECRET, AeronSettings.IPC, "false");
        OffHeapBuffer buf = buffer(5 << 20);
        roundTrip(a, b, 10, 1, 100, buf);
        roundTrip(b, a, 11, 2, (2 << 20) + 3, buf);
        roundTrip(u, a, 12, 3, 70_000, buf);
        assertThat(a.counters().get("unauthorized")).isZero();
        assertThat(errors).isEmpty();
    }

    @Test
    void aPeerWithoutTheSecretOrWithAnotherIsRefusedAndTheOthersAreServed() throws Exception {
        AeronConnectionManager a = manager("a", SECRET);
        AeronConnectionManager b = manager("b", SECRET);
        AeronConnectionManager none = manager("none", null);
        AeronConnectionManager other = manager("other", "another-secret-of-sixteen+".getBytes(StandardCharsets.UTF_8));
        OffHeapBuffer buf = buffer(1 << 20);
        TestPattern.fill(buf, 0, 64, 5);
        sendOrRefused(none, a, buf);
        sendOrRefused(other, a, buf);
        assertRefusedWithoutTheSecret(a, 2);
        // Nothing of theirs is ever delivered; b is served as before.
        assertThatThrownBy(() -> a.recvConnect(20, buf, 1000, 64, Duration.ofMillis(500)))
                .isInstanceOfSatisfying(TransportException.class, e -> assertThat(e.code()).isEqualTo(ErrorCode.TIMEOUT));
        roundTrip(b, a, 21, 6, 1000, buf);
        assertThat(errors).anySatisfy(e -> assertThat(e.getMessage()).contains("carries no MAC"));
        assertThat(errors).anySatisfy(e -> assertThat(e.getMessage()).contains("wrong MAC"));
    }

    @Test
    void aForgedHelloClaimingAGenuinePeerIsRefusedAndTheGenuineOneKeepsItsSession() throws Exception {
        AeronConnectionManager a = manager("a", SECRET, AeronSettings.IPC, "false");
        AeronConnectionManager b = manager("b", SECRET, AeronSettings.IPC, "false");
        OffHeapBuffer buf = buffer(1 << 20);
        roundTrip(b, a, 30, 7, 100, buf);
        RawPeer raw = new RawPeer(a);
        closeables.add(raw);
        RawPeer.Stream forged = raw.stream();
        closeables.add(forged);
        Handshake wrong = new Handshake("not-the-deployment-secret".getBytes(StandardCharsets.UTF_8), 60_000);
        assertThat(forged.offer(forged.hello(wrong, b.localAddress(), a.localAddress(), 1, System.currentTimeMillis()),
                T)).isTrue();
        forged.header(Wire.EAGER, 31, 0, 100);
        assertThat(forged.offer(Wire.HEADER_LENGTH + 100, T)).isTrue();
        assertRefusedWithoutTheSecret(a, 1);
        TestPattern.fill(buf, 0, 100, 31);
        b.connection(a.localAddress()).send(31, buf, 0, 100, T);
        a.connection(b.localAddress()).recv(31, buf, 500, 100, T);
        TestPattern.assertPattern(buf, 500, 100, 31);
    }

    @Test
    void aReplayedHelloAStaleOneAndOneForAnotherManagerAreRefused() throws Exception {
        AeronConnectionManager a = manager("a", SECRET, AeronSettings.IPC, "false", AeronSettings.AUTH_WINDOW_MS,
                "2000");
        AeronConnectionManager b = manager("b", SECRET, AeronSettings.IPC, "false");
        Handshake h = new Handshake(SECRET, 60_000);
        RawPeer raw = new RawPeer(a);
        closeables.add(raw);
        // A genuine HELLO (what a capture would hold) accepted once...
        RawPeer.Stream first = raw.stream();
        closeables.add(first);
        int len = first.hello(h, "127.0.0.1:3", a.localAddress(), 77, System.currentTimeMillis());
        byte[] captured = new byte[len];
        first.buffer.getBytes(0, captured);
        assertThat(first.offer(len, T)).isTrue();
        await().atMost(T).until(() -> a.peerCount() == 1);
        // ...replayed byte for byte from another session: refused.
        RawPeer.Stream replay = raw.stream();
        closeables.add(replay);
        replay.buffer.putBytes(0, captured);
        assertThat(replay.offer(len, T)).isTrue();
        assertRefusedWithoutTheSecret(a, 1);
        assertThat(errors).anySatisfy(e -> assertThat(e.getMessage()).contains("replays a nonce"));
        // A HELLO signed 10 s ago (outside the 2 s window), and one addressed to b.
        RawPeer.Stream stale = raw.stream();
        closeables.add(stale);
        assertThat(stale.offer(stale.hello(h, "127.0.0.1:4", a.localAddress(), 78, System.currentTimeMillis()
                - 10_000), T)).isTrue();
        RawPeer.Stream misdirected = raw.stream();
        closeables.add(misdirected);
        assertThat(misdirected.offer(misdirected.hello(h, "127.0.0.1:5", b.localAddress(), 79,
                System.currentTimeMillis()), T)).isTrue();
        assertRefusedWithoutTheSecret(a, 3);
        assertThat(errors).anySatisfy(e -> assertThat(e.getMessage()).contains("ms old"));
        assertThat(errors).anySatisfy(e -> assertThat(e.getMessage()).contains("not to this manager"));
        OffHeapBuffer buf = buffer(1 << 16);
        roundTrip(b, a, 40, 8, 100, buf);
    }

    @Test
    void anAuthenticatedNewIncarnationReplacesTheOldSessionOnceTheOldStreamEnds() throws Exception {
        AeronConnectionManager a = manager("a", SECRET, AeronSettings.IPC, "false");
        Handshake h = new Handshake(SECRET, 60_000);
        RawPeer raw = new RawPeer(a);
        closeables.add(raw);
        RawPeer.Stream old = raw.stream();
        closeables.add(old);
        assertThat(old.offer(old.hello(h, "127.0.0.1:6", a.localAddress(), 1, System.currentTimeMillis()), T))
                .isTrue();
        await().atMost(T).until(() -> a.peerCount() == 1);
        // The same peer restarted (a new incarnation, authenticated) before its old stream timed out...
        RawPeer.Stream restarted = raw.stream();
        closeables.add(restarted);
        assertThat(restarted.offer(restarted.hello(h, "127.0.0.1:6", a.localAddress(), 2, System.currentTimeMillis()),
                T)).isTrue();
        restarted.header(Wire.EAGER, 50, 0, 8);
        restarted.buffer.putLong(Wire.HEADER_LENGTH, 0x1234_5678_9abc_def0L);
        assertThat(restarted.offer(Wire.HEADER_LENGTH + 8, T)).isTrue();
        OffHeapBuffer buf = buffer(64);
        // ...is held while the old stream lives (a claim is no proof that the first peer is gone)...
        assertThatThrownBy(() -> a.recvConnect(50, buf, 0, 8, Duration.ofMillis(300)))
                .isInstanceOfSatisfying(TransportException.class, e -> assertThat(e.code()).isEqualTo(ErrorCode.TIMEOUT));
        assertThat(a.counters().get("peersLost")).isZero();
        // ...and takes over once the old stream ended.
        old.close();
        Connection c = a.recvConnect(50, buf, 0, 8, T);
        assertThat(c.peer()).isEqualTo("127.0.0.1:6");
        assertThat(buf.asByteBuffer().getLong(0)).isEqualTo(0x1234_5678_9abc_def0L);
        assertThat(a.counters().get("peersLost")).isEqualTo(1);
    }

    /**
     * An insider holds the secret and sends a valid HELLO claiming the genuine peer's
     * address. It used to replace the genuine session (3 of 3 requests then failed PEER_LOST). It is held and, as
     * the genuine stream stays alive, refused after the pending time; the genuine pair is never cut off.
     */
    @Test
    void anInsidersValidHelloClaimingALivePeerDoesNotCutItOff() throws Exception {
        AeronConnectionManager a = manager("a", SECRET, AeronSettings.IPC, "false");
        AeronConnectionManager b = manager("b", SECRET, AeronSettings.IPC, "false");
        OffHeapBuffer buf = buffer(1 << 20);
        roundTrip(b, a, 90, 1, 1000, buf);
        Handshake insider = new Handshake(SECRET, 60_000);
        RawPeer raw = new RawPeer(a);
        closeables.add(raw);
        RawPeer.Stream claim = raw.stream();
        closeables.add(claim);
        assertThat(claim.offer(claim.hello(insider, b.localAddress(), a.localAddress(), 12345,
                System.currentTimeMillis()), T)).isTrue();
        claim.header(Wire.EAGER, 91, 0, 8);
        claim.buffer.putLong(Wire.HEADER_LENGTH, 0x6666_6666_6666_6666L);
        assertThat(claim.offer(Wire.HEADER_LENGTH + 8, T)).isTrue();
        long t0 = System.nanoTime();
        // Requests both ways keep being served while the claim is held, and after it is refused.
        int served = 0;
        Connection ab = a.connection(b.localAddress());
        for (int i = 0; i < 6; i++) {
            roundTrip(b, a, 92 + 2 * i, 10 + i, 4096, buf);
            TestPattern.fill(buf, 0, 512, 50 + i);
            ab.send(93 + 2 * i, buf, 0, 512, T);
            b.connection(a.localAddress()).recv(93 + 2 * i, buf, 10_000, 512, T);
            TestPattern.assertPattern(buf, 10_000, 512, 50 + i);
            served++;
            if (i == 2) {
                await().atMost(T).until(() -> errors.stream().anyMatch(e -> String.valueOf(e.getMessage())
                        .contains("whose current stream is still alive")));
            }
        }
        long heldMs = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - t0);
        // Nothing the insider sent under b's name was delivered.
        assertThatThrownBy(() -> a.recvConnect(91, buf, 0, 8, Duration.ofMillis(300)))
                .isInstanceOfSatisfying(TransportException.class, e -> assertThat(e.code()).isEqualTo(ErrorCode.TIMEOUT));
        System.out.println("insider HELLO claiming a live peer: genuine requests served " + served + " of 6, peers lost "
                + a.counters().get("peersLost") + ", claim refused within " + heldMs + " ms");
        assertThat(served).isEqualTo(6);
        assertThat(a.counters().get("peersLost")).isZero();
    }

    /**
     * A peer with a wrong secret (or none) used to wait out its whole deadline and see TIMEOUT. The
     * refusing manager now rejects the stream (Aeron's error frame), and the peer's waiting calls fail UNAUTHORIZED
     * long before their 20 s deadline, over UDP and IPC, for a receive and for a large send waiting for its CTS.
     */
    @Test
    void aPeerWithAWrongSecretSeesUnauthorizedNotATimeout() throws Exception {
        for (String ipc : new String[] {"false", "true"}) {
            errors.clear();
            AeronConnectionManager a = manager("a-" + ipc, SECRET, AeronSettings.IPC, ipc);
            AeronConnectionManager other = manager("other-" + ipc,
                    "another-secret-of-sixteen+".getBytes(StandardCharsets.UTF_8), AeronSettings.IPC, ipc);
            AeronConnectionManager none = manager("none-" + ipc, null, AeronSettings.IPC, ipc);
            OffHeapBuffer buf = buffer(2 << 20);
            TestPattern.fill(buf, 0, 64, 9);
            for (AeronConnectionManager intruder : List.of(other, none)) {
                Connection c = intruder.connection(a.localAddress());
                long t0 = System.nanoTime();
                // Eager: it is in the log buffer and a accepts nothing of it; a woken at once (the doorbell) may have
                // refused the stream before the send goes out, and then the send is the call told UNAUTHORIZED.
                sendOrRefused(c, 60, buf);
                assertThatThrownBy(() -> c.recv(61, buf, 1000, 64, T))
                        .isInstanceOfSatisfying(TransportException.class, e -> {
                            assertThat(e.code()).as("%s", e).isEqualTo(ErrorCode.UNAUTHORIZED);
                            assertThat(e.getMessage()).contains("refused our stream")
                                    .doesNotContain(new String(SECRET, StandardCharsets.UTF_8));
                        });
                long ms = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - t0);
                // A large send waits for a CTS that never comes: it fails the same way, on a fresh connection.
                Connection again = intruder.connection(a.localAddress());
                long t1 = System.nanoTime();
                assertThatThrownBy(() -> again.send(62, buf, 0, 1 << 20, T))
                        .isInstanceOfSatisfying(TransportException.class,
                                e -> assertThat(e.code()).as("%s", e).isEqualTo(ErrorCode.UNAUTHORIZED));
                long ms2 = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - t1);
                System.out.println("wrong secret (" + intruder.name + ", ipc=" + ipc + "): recv UNAUTHORIZED after "
                        + ms + " ms, 1 MiB send after " + ms2 + " ms (deadline " + T.toMillis() + " ms)");
            }
            // a delivered nothing of theirs and serves a genuine peer as before.
            assertThatThrownBy(() -> a.recvConnect(60, buf, 1000, 64, Duration.ofMillis(300)))
                    .isInstanceOfSatisfying(TransportException.class,
                            e -> assertThat(e.code()).isEqualTo(ErrorCode.TIMEOUT));
            AeronConnectionManager b = manager("b-" + ipc, SECRET, AeronSettings.IPC, ipc);
            roundTrip(b, a, 63, 10, 70_000, buf);
        }
    }

    private AeronConnectionManager managerOnPort(String name, int port) {
        // The old socket may take a moment to be released by the driver after the first manager closed.
        AeronConnectionManager[] m = new AeronConnectionManager[1];
        await().atMost(T).ignoreExceptions().until(() -> {
            m[0] = (AeronConnectionManager) new AeronTransportProvider().create(TransportConfig.builder().name(name)
                    .port(port).defaultTimeout(T).authSecret(SECRET).property(AeronSettings.PEER_TIMEOUT_MS, "1500")
                    .property(AeronSettings.IPC, "false").errorHandler(errors::add).build());
            return true;
        });
        closeables.add(m[0]);
        return m[0];
    }

    /** Request/response pairs gen -> ctx -> gen, every byte checked both ways; returns how many were served. */
    private static int requests(AeronConnectionManager gen, AeronConnectionManager ctx, int n, int tag,
                                OffHeapBuffer buf) throws Exception {
        Connection toCtx = gen.connection(ctx.localAddress());
        int served = 0;
        for (int i = 0; i < n; i++) {
            long seed = 1000L * tag + i;
            int size = 64 + (i % 5) * 4000;
            TestPattern.fill(buf, 0, size, seed);
            toCtx.send(tag, buf, 0, size, T);
            Connection back = ctx.recvConnect(tag, buf, 100_000, size, T);
            TestPattern.assertPattern(buf, 100_000, size, seed);
            TestPattern.fill(buf, 200_000, size, seed + 1);
            back.send(tag + 1, buf, 200_000, size, T);
            toCtx.recv(tag + 1, buf, 300_000, size, T);
            TestPattern.assertPattern(buf, 300_000, size, seed + 1);
            served++;
        }
        return served;
    }

    /**
     * A HELLO captured on the wire (here: the bytes the context side's handshake writes for the
     * generation side) and replayed after the generation side restarted on the same port, within the 120 s
     * window. It used to be accepted (the nonce cache had restarted too) and cut the pair off. The HELLO's MAC
     * covers the receiver's address, which carries its incarnation: the restarted manager refuses it, and genuine
     * requests both ways keep succeeding.
     */
    @Test
    void aHelloReplayedAfterTheReceiverRestartedOnTheSamePortIsRefused() throws Exception {
        int port;
        try (java.net.DatagramSocket probe = new java.net.DatagramSocket(0)) {
            port = probe.getLocalPort();
        }
        AeronConnectionManager ctx = manager("ctx", SECRET, AeronSettings.IPC, "false");
        AeronConnectionManager gen1 = managerOnPort("gen1", port);
        OffHeapBuffer buf = buffer(1 << 20);
        assertThat(requests(gen1, ctx, 20, 70, buf)).isEqualTo(20);
        // What an eavesdropper holds: the context side's HELLO to gen1, valid MAC, fresh timestamp.
        org.agrona.concurrent.UnsafeBuffer captured = new org.agrona.concurrent.UnsafeBuffer(
                java.nio.ByteBuffer.allocateDirect(Wire.HEADER_LENGTH + Handshake.maxLength()));
        int body = ctx.handshake.encode(captured, Wire.HEADER_LENGTH, ctx.localAddress(), gen1.localAddress(),
                ctx.incarnation);
        Wire.write(captured, Wire.HELLO, 0, 0, body);
        int len = Wire.HEADER_LENGTH + body;
        String oldAddress = gen1.localAddress();
        gen1.close();
        AeronConnectionManager gen2 = managerOnPort("gen2", port);
        assertThat(Address.parse(gen2.localAddress()).hostPort()).isEqualTo(Address.parse(oldAddress).hostPort());
        assertThat(gen2.localAddress()).isNotEqualTo(oldAddress);
        RawPeer raw = new RawPeer(gen2);
        closeables.add(raw);
        RawPeer.Stream replay = raw.stream();
        closeables.add(replay);
        replay.buffer.putBytes(0, captured, 0, len);
        long t0 = System.nanoTime();
        assertThat(replay.offer(len, T)).isTrue();
        assertRefusedWithoutTheSecret(gen2, 1);
        long refusedMs = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - t0);
        assertThat(errors).anySatisfy(e -> assertThat(e.getMessage()).contains("is for incarnation"));
        assertThat(gen2.peerCount()).as("the replay bound no peer").isZero();
        // The genuine pair is not cut off: requests both ways, every byte checked.
        int served = requests(gen2, ctx, 200, 80, buf);
        System.out.println("replayed HELLO after restart: refused in " + refusedMs + " ms; genuine requests served "
                + served + " of 200, unauthorized at gen2 " + gen2.counters().get("unauthorized"));
        assertThat(served).isEqualTo(200);
        assertThat(gen2.counters().get("unauthorized")).isEqualTo(1);
    }
}
