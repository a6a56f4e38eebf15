package dev.kvtransfer.aeron;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.transport.Connection;
import dev.kvtransfer.api.transport.TransportConfig;
import dev.kvtransfer.api.transport.TransportException;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.TimeUnit;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;
import static org.awaitility.Awaitility.await;

/**
 * Peers that do not play by the rules: floods of messages nobody receives (zero-length ones and
 * rendezvous announcements included), streams that never say HELLO, HELLOs that claim a live peer's address or an
 * overlong one, floods of bad frames; and the listener's bind address. Each test shows the bound holding, the
 * refusal counted, and the genuine peers still served.
 */
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class AeronHostilePeerTest {
    private static final Duration T = Duration.ofSeconds(20);
    private final List<AutoCloseable> closeables = new ArrayList<>();
    private final List<Throwable> errors = new CopyOnWriteArrayList<>();

    @AfterEach
    void stop() throws Exception {
        for (int i = closeables.size() - 1; i >= 0; i--) {
            closeables.get(i).close();
        }
        assertThat(AeronRuntime.running()).as("runtimes left").isZero();
    }

    private AeronConnectionManager manager(String name, TransportConfig.Builder b) {
        AeronConnectionManager m = (AeronConnectionManager) new AeronTransportProvider().create(b.name(name)
                .defaultTimeout(T).property(AeronSettings.PEER_TIMEOUT_MS, "1500")
                .property(AeronSettings.IPC, "false").errorHandler(errors::add).build());
        closeables.add(m);
        return m;
    }

    private <C extends AutoCloseable> C closeLater(C c) {
        closeables.add(c);
        return c;
    }

    private OffHeapBuffer buffer(long size) {
        return closeLater(OffHeapBuffer.allocate(size));
    }

    private static void roundTrip(AeronConnectionManager from, AeronConnectionManager to, int tag, long seed,
                                  OffHeapBuffer buf) {
        TestPattern.fill(buf, 0, 100, seed);
        from.connection(to.localAddress()).send(tag, buf, 0, 100, T);
        to.connection(from.localAddress()).recv(tag, buf, 200, 100, T);
        TestPattern.assertPattern(buf, 200, 100, seed);
    }

    @Test
    void zeroLengthMessagesAndRendezvousAnnouncementsCountAgainstTheEarlyBound() throws Exception {
        AeronConnectionManager small = manager("small", TransportConfig.builder()
                .property(AeronSettings.EARLY_BUFFER_BYTES, String.valueOf(1 << 20))
                .property(AeronSettings.EARLY_MESSAGES, "64"));
        AeronConnectionManager genuine = manager("genuine", TransportConfig.builder());
        OffHeapBuffer buf = buffer(4096);
        RawPeer raw = closeLater(new RawPeer(small));
        RawPeer.Stream s = closeLater(raw.stream());
        Handshake h = new Handshake(null, 60_000);
        assertThat(s.offer(s.hello(h, "127.0.0.1:1", small.localAddress(), 1, System.currentTimeMillis()), T)).isTrue();
        // 200,000 zero-length messages and 200,000 RTS of 1 GiB each on tags nobody receives: what is held stays
        // within the per-peer quarter of the bounds (16 messages); the rest waits in the sender's stream.
        int accepted = 0;
        for (int i = 0; i < 200_000; i++) {
            s.header(i % 2 == 0 ? Wire.EAGER : Wire.RTS, 5 + (i % 2), i, i % 2 == 0 ? 0 : 1L << 30);
            if (!s.offer(Wire.HEADER_LENGTH, Duration.ofMillis(200))) {
                break; // flow control: our agent stopped consuming this stream
            }
            accepted++;
        }
        await().atMost(T).until(() -> small.earlyBufferedBytes() > 0);
        assertThat(small.earlyBufferedBytes()).as("held for the flooding peer (bookkeeping counted)")
                .isLessThanOrEqualTo(16L * AeronSettings.ARRIVAL_OVERHEAD);
        System.out.println("flood: " + accepted + " frames offered before flow control stopped the sender; held "
                + small.earlyBufferedBytes() + " B");
        // The genuine peer's own quarter is untouched: it is served at once.
        roundTrip(genuine, small, 7, 42, buf);
    }

    @Test
    void streamsThatNeverCompleteTheHandshakeAreRefusedAndNoLongerRead() throws Exception {
        AeronConnectionManager m = manager("m", TransportConfig.builder()
                .property(AeronSettings.HANDSHAKE_TIMEOUT_MS, "500"));
        AeronConnectionManager genuine = manager("genuine", TransportConfig.builder());
        RawPeer raw = closeLater(new RawPeer(m));
        RawPeer.Stream silent = closeLater(raw.stream());
        RawPeer.Stream noHello = closeLater(raw.stream());
        noHello.header(Wire.EAGER, 19, 0, 8);
        assertThat(noHello.offer(Wire.HEADER_LENGTH + 8, T)).isTrue();
        await().atMost(T).until(() -> m.counters().get("streamsRefused") >= 2);
        assertThat(errors).anySatisfy(e -> assertThat(e.getMessage()).contains("no HELLO within 500 ms"));
        assertThat(errors).anySatisfy(e -> assertThat(e.getMessage()).contains("first message is not a HELLO"));
        assertThat(m.peerCount()).isZero();
        roundTrip(genuine, m, 7, 43, buffer(4096));
        silent.close();
        noHello.close();
    }

    @Test
    void peersMadeByHellosGoAwayWithTheirStreams() throws Exception {
        AeronConnectionManager m = manager("m", TransportConfig.builder());
        RawPeer raw = closeLater(new RawPeer(m));
        Handshake h = new Handshake(null, 60_000);
        List<RawPeer.Stream> streams = new ArrayList<>();
        for (int i = 0; i < 40; i++) {
            RawPeer.Stream s = raw.stream();
            streams.add(s);
            assertThat(s.offer(s.hello(h, "127.0.0.1:" + (20_000 + i), m.localAddress(), i + 1,
                    System.currentTimeMillis()), T)).isTrue();
        }
        await().atMost(T).until(() -> m.peerCount() == 40);
        for (RawPeer.Stream s : streams) {
            s.close();
        }
        // Each stream ends (end of stream, or silence for the peer timeout): its peer is lost and forgotten.
        await().atMost(Duration.ofSeconds(30)).until(() -> m.peerCount() == 0);
        assertThat(m.counters().get("peersLost")).isGreaterThanOrEqualTo(40);
    }

    @Test
    void anOverlongOrMalformedHelloIsRefusedAndPeerTextIsTruncatedInErrors() throws Exception {
        AeronConnectionManager m = manager("m", TransportConfig.builder());
        AeronConnectionManager genuine = manager("genuine", TransportConfig.builder());
        RawPeer raw = closeLater(new RawPeer(m));
        // A HELLO whose address claims 65,535 bytes with 100 KB of 'A's behind it.
        RawPeer.Stream big = closeLater(raw.stream());
        int body = 100_000;
        big.buffer.putInt(Wire.HEADER_LENGTH, Handshake.MAGIC, java.nio.ByteOrder.LITTLE_ENDIAN);
        big.buffer.putShort(Wire.HEADER_LENGTH + 40, (short) 0xffff, java.nio.ByteOrder.LITTLE_ENDIAN);
        for (int i = Handshake.FIXED; i < body; i++) {
            big.buffer.putByte(Wire.HEADER_LENGTH + i, (byte) 'A');
        }
        Wire.write(big.buffer, Wire.HELLO, 0, 0, body);
        assertThat(big.offer(Wire.HEADER_LENGTH + body, T)).isTrue();
        // A HELLO claiming a 256-byte address made of control characters and a 250-character host.
        RawPeer.Stream odd = closeLater(raw.stream());
        String claim = "\u0001\u0002".repeat(20) + "x".repeat(200) + ":1";
        Handshake h = new Handshake(null, 60_000);
        assertThat(odd.offer(odd.hello(h, claim, m.localAddress(), 5, System.currentTimeMillis()), T)).isTrue();
        await().atMost(T).until(() -> m.counters().get("streamsRefused") >= 2);
        for (Throwable e : errors) {
            assertThat(e.getMessage().length()).as("error text: %s", e.getMessage()).isLessThan(1200);
            assertThat(e.getMessage()).doesNotContain("\u0001").doesNotContain("A".repeat(300));
        }
        roundTrip(genuine, m, 7, 44, buffer(4096));
    }

    @Test
    void aFloodOfBadFramesIsCountedButItsLogAndHandlerAreRateLimited() throws Exception {
        AeronConnectionManager m = manager("m", TransportConfig.builder());
        RawPeer raw = closeLater(new RawPeer(m));
        RawPeer.Stream s = closeLater(raw.stream());
        Handshake h = new Handshake(null, 60_000);
        assertThat(s.offer(s.hello(h, "127.0.0.1:2", m.localAddress(), 9, System.currentTimeMillis()), T)).isTrue();
        long t0 = System.nanoTime();
        int n = 20_000;
        for (int i = 0; i < n; i++) {
            s.header(99, i, i, i);
            assertThat(s.offer(Wire.HEADER_LENGTH, T)).isTrue();
        }
        await().atMost(T).until(() -> m.errorCount() >= n);
        long seconds = TimeUnit.NANOSECONDS.toSeconds(System.nanoTime() - t0) + 2;
        assertThat(errors.size()).as("errors passed to the handler in ~%d s", seconds)
                .isLessThanOrEqualTo((int) (ErrorReporter.PER_SECOND * seconds));
        assertThat(m.counters().get("errorsSuppressed")).isGreaterThan(0);
    }

    @Test
    void aHelloClaimingALivePeerNeverJoinsItsSession() throws Exception {
        AeronConnectionManager a = manager("a", TransportConfig.builder()
                .property(AeronSettings.HANDSHAKE_TIMEOUT_MS, "500"));
        AeronConnectionManager b = manager("b", TransportConfig.builder());
        OffHeapBuffer buf = buffer(1 << 16);
        roundTrip(b, a, 1, 1, buf); // b's stream is bound at a
        // The forger claims b (same address, any incarnation) and queues bytes on the tag a expects from b next.
        RawPeer raw = closeLater(new RawPeer(a));
        RawPeer.Stream forged = closeLater(raw.stream());
        Handshake h = new Handshake(null, 60_000);
        assertThat(forged.offer(forged.hello(h, b.localAddress(), a.localAddress(), 12345,
                System.currentTimeMillis()), T)).isTrue();
        forged.header(Wire.EAGER, 77, 0, 100);
        for (int i = 0; i < 100; i++) {
            forged.buffer.putByte(Wire.HEADER_LENGTH + i, (byte) 0x66);
        }
        assertThat(forged.offer(Wire.HEADER_LENGTH + 100, T)).isTrue();
        // The genuine b's message on that tag is the one a receives; the forged one never arrives.
        TestPattern.fill(buf, 0, 100, 77);
        b.connection(a.localAddress()).send(77, buf, 0, 100, T);
        Connection ab = a.connection(b.localAddress());
        ab.recv(77, buf, 1000, 100, T);
        TestPattern.assertPattern(buf, 1000, 100, 77);
        assertThatThrownBy(() -> ab.recv(77, buf, 2000, 100, Duration.ofMillis(500)))
                .isInstanceOfSatisfying(TransportException.class, e -> assertThat(e.code()).isEqualTo(ErrorCode.TIMEOUT));
        // The held stream is refused once its time runs out; b keeps being served.
        await().atMost(T).until(() -> a.counters().get("streamsRefused") >= 1);
        assertThat(errors).anySatisfy(e -> assertThat(e.getMessage()).contains("whose current stream is still alive"));
        roundTrip(b, a, 2, 2, buf);
    }

    @Test
    void theListenerBindsOnlyTheConfiguredAddress() throws Exception {
        AeronConnectionManager m = manager("m", TransportConfig.builder().host("127.0.0.1"));
        int port = Address.parse(m.localAddress()).port();
        assertThat(m.boundAddresses()).isNotEmpty().allSatisfy(a -> assertThat(a).isEqualTo("127.0.0.1:" + port));
        Path udp = Path.of("/proc/net/udp");
        if (Files.isReadable(udp)) {
            String hexPort = String.format(":%04X", port);
            List<String> ours = Files.readAllLines(udp).stream().map(String::trim)
                    .filter(l -> l.split("\\s+").length > 2 && l.split("\\s+")[1].endsWith(hexPort)).toList();
            assertThat(ours).as("sockets on port %d", port).isNotEmpty()
                    .allSatisfy(l -> assertThat(l.split("\\s+")[1]).isEqualTo("0100007F" + hexPort));
        }
    }
}
