package dev.kvtransfer.aeron;

import dev.kvtransfer.api.transport.Connection;
import dev.kvtransfer.api.transport.TransportConfig;
import io.aeron.protocol.HeaderFlyweight;
import io.aeron.protocol.SetupFlyweight;
import org.agrona.concurrent.UnsafeBuffer;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.net.DatagramPacket;
import java.net.DatagramSocket;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Random;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

/**
 * Forged Aeron SETUP frames from a raw UDP socket on loopback, without the secret. Each valid-looking
 * SETUP makes the media driver create an image (a stream) that never says HELLO; at 2,500 a second they filled
 * the stream cap and kept a new genuine peer out, and malformed ones logged a stack trace each (18× the bytes
 * sent). Streams awaiting their HELLO are now bounded per source and in all (the oldest is evicted and
 * rejected), and the driver's error log is rate-limited: a genuine peer connects during the flood, and the log
 * stays smaller than the flood.
 */
@Timeout(value = 3, unit = TimeUnit.MINUTES)
class AeronSetupFloodTest {
    /** Generous: the driver works through the flood's backlog (an image per SETUP) before it sees a new peer. */
    private static final Duration T = Duration.ofSeconds(40);
    private static final byte[] SECRET = "kvtransfer-test-secret-0123456789".getBytes(StandardCharsets.UTF_8);
    private final List<AutoCloseable> closeables = new ArrayList<>();
    private final AtomicLong handlerErrors = new AtomicLong();

    @AfterEach
    void stop() throws Exception {
        for (int i = closeables.size() - 1; i >= 0; i--) {
            closeables.get(i).close();
        }
    }

    private AeronConnectionManager manager(String name, String... props) {
        TransportConfig.Builder b = TransportConfig.builder().name(name).defaultTimeout(T).authSecret(SECRET)
                .property(AeronSettings.IPC, "false").errorHandler(e -> handlerErrors.incrementAndGet());
        for (int i = 0; i < props.length; i += 2) {
            b.property(props[i], props[i + 1]);
        }
        AeronConnectionManager m = (AeronConnectionManager) new AeronTransportProvider().create(b.build());
        closeables.add(m);
        return m;
    }

    /** Sends forged SETUPs from {@code sources} sockets, round robin; returns the frames sent. */
    private static long flood(int port, int sources, int frames, int termLength, long seed) throws Exception {
        List<DatagramSocket> sockets = new ArrayList<>();
        try {
            for (int i = 0; i < sources; i++) {
                sockets.add(new DatagramSocket(new InetSocketAddress(InetAddress.getLoopbackAddress(), 0)));
            }
            UnsafeBuffer buf = new UnsafeBuffer(new byte[SetupFlyweight.HEADER_LENGTH]);
            SetupFlyweight f = new SetupFlyweight(buf);
            InetSocketAddress to = new InetSocketAddress(InetAddress.getLoopbackAddress(), port);
            Random rnd = new Random(seed);
            long sent = 0;
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(20);
            for (int i = 0; i < frames && System.nanoTime() - deadline < 0; i++) {
                f.frameLength(SetupFlyweight.HEADER_LENGTH);
                f.version(HeaderFlyweight.CURRENT_VERSION);
                f.flags((short) 0);
                f.headerType(HeaderFlyweight.HDR_TYPE_SETUP);
                f.termOffset(0).sessionId(rnd.nextInt()).streamId(AeronSettings.STREAM_ID).initialTermId(7)
                        .activeTermId(7).termLength(termLength).mtuLength(1408).ttl(0);
                sockets.get(i % sources).send(new DatagramPacket(buf.byteArray(), SetupFlyweight.HEADER_LENGTH, to));
                sent++;
            }
            return sent;
        } finally {
            for (DatagramSocket s : sockets) {
                s.close();
            }
        }
    }

    private static void roundTrip(AeronConnectionManager from, AeronConnectionManager to, int tag, long seed,
                                  OffHeapBuffer buf) throws Exception {
        int size = 40_000; // eager: the send returns before the receive is posted
        TestPattern.fill(buf, 0, size, seed);
        Connection c = from.connection(to.localAddress());
        c.send(tag, buf, 0, size, T);
        Connection back = to.recvConnect(tag, buf, 100_000, size, T);
        TestPattern.assertPattern(buf, 100_000, size, seed);
        TestPattern.fill(buf, 200_000, size, seed + 1);
        back.send(tag + 1, buf, 200_000, size, T);
        c.recv(tag + 1, buf, 300_000, size, T);
        TestPattern.assertPattern(buf, 300_000, size, seed + 1);
    }

    @Test
    void aFloodOfForgedSetupsDoesNotKeepAGenuinePeerOut() throws Exception {
        AeronConnectionManager a = manager("a", AeronSettings.MAX_PENDING_HANDSHAKES, "64",
                AeronSettings.MAX_PENDING_PER_SOURCE, "16");
        int port = Address.parse(a.localAddress()).port();
        OffHeapBuffer buf = OffHeapBuffer.allocate(1 << 20);
        closeables.add(buf);
        long[] sent = new long[2];
        Throwable[] floodFailure = new Throwable[1];
        Thread flooder = new Thread(() -> {
            try {
                sent[0] = flood(port, 1, 600, 64 * 1024, 1); // one source: its bound
                sent[1] = flood(port, 48, 1200, 64 * 1024, 2); // many sources: the total bound, oldest evicted
            } catch (Throwable t) {
                floodFailure[0] = t;
            }
        }, "setup-flood");
        flooder.start();
        await().atMost(T).until(() -> a.counters().get("streamsRefused") > 0);
        // New genuine peers connect while the flood goes on; every byte is checked both ways.
        int served = 0;
        long worstMs = 0;
        for (int i = 0; i < 3; i++) {
            AeronConnectionManager b = manager("b" + i);
            long t0 = System.nanoTime();
            roundTrip(b, a, 10 + 2 * i, 100 + i, buf);
            worstMs = Math.max(worstMs, TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - t0));
            served++;
        }
        flooder.join(TimeUnit.SECONDS.toMillis(60));
        assertThat(flooder.isAlive()).isFalse();
        assertThat(floodFailure[0]).isNull();
        AeronConnectionManager late = manager("late");
        roundTrip(late, a, 40, 200, buf);
        served++;
        long refused = a.counters().get("streamsRefused");
        System.out.println("SETUP flood: " + sent[0] + " forged SETUPs from 1 source + " + sent[1] + " from 48;"
                + " streams refused " + refused + "; genuine peers served " + served + " of 4 (slowest round trip "
                + worstMs + " ms during the flood); errors passed to the handler " + handlerErrors.get());
        assertThat(served).isEqualTo(4);
        assertThat(refused).isPositive();
        // The handler saw a bounded number of reports, not one per forged stream.
        assertThat(handlerErrors.get()).isLessThan(sent[0] + sent[1]);
    }

    @Test
    void malformedSetupsAreCountedButTheLogStaysSmallerThanTheFlood() throws Exception {
        AeronConnectionManager a = manager("a");
        int port = Address.parse(a.localAddress()).port();
        DriverErrorLog log = a.runtime.driverErrors();
        long errorsBefore = log.count();
        long charsBefore = log.charsLogged();
        long t0 = System.nanoTime();
        // A term length that is not a power of two: the driver refuses to build an image and reports an error.
        long sent = flood(port, 4, 10_000, 12_345, 3);
        await().atMost(T).until(() -> log.count() - errorsBefore > 0);
        long seconds = Math.max(1, TimeUnit.NANOSECONDS.toSeconds(System.nanoTime() - t0) + 1);
        long errors = log.count() - errorsBefore;
        long chars = log.charsLogged() - charsBefore;
        long bytesSent = sent * SetupFlyweight.HEADER_LENGTH;
        System.out.println("malformed SETUPs: " + sent + " frames (" + bytesSent + " B) -> " + errors
                + " driver errors counted, " + chars + " chars logged in " + log.linesLogged() + " lines");
        assertThat(chars).as("log bytes vs bytes sent").isLessThan(bytesSent);
        assertThat(log.linesLogged()).isLessThanOrEqualTo((DriverErrorLog.PER_SECOND + 1) * (seconds + 1)
                + DriverErrorLog.WITH_STACK);
        OffHeapBuffer buf = OffHeapBuffer.allocate(1 << 20);
        closeables.add(buf);
        roundTrip(manager("b"), a, 50, 300, buf);
    }
}
