package dev.kvtransfer.aeron;

import dev.kvtransfer.api.transport.Connection;
import dev.kvtransfer.api.transport.TransportConfig;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.net.DatagramPacket;
import java.net.DatagramSocket;
import java.net.InetAddress;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.SplittableRandom;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * Hostile inputs at a manager's UDP endpoint, bounded in count and time, loopback only, while a
 * genuine peer keeps transferring verified messages to it: raw datagrams (random bytes, truncated and random
 * Aeron frame headers — the media driver's parser), and whole Aeron streams (our protocol's parser): random
 * first messages, HELLOs claiming the genuine peer, replayed HELLOs, frames shorter than our header, unknown
 * types, eager/rendezvous/data frames with huge or negative lengths and offsets, random bytes after a valid HELLO.
 * The process stays up, every genuine transfer completes verified, and what the manager holds stays within its
 * bounds whatever lengths the inputs claim (a length field an attacker chose never sizes an allocation).
 */
@Timeout(value = 3, unit = TimeUnit.MINUTES)
class AeronFuzzTest {
    private static final Duration T = Duration.ofSeconds(30);
    private static final long SEED = 0x5EED_F0220L;

    @Test
    void hostileInputsNeitherCrashNorCorruptNorGrowTheManager() throws Exception {
        List<Throwable> errors = new CopyOnWriteArrayList<>();
        long earlyBound = 8L << 20;
        TransportConfig.Builder base = TransportConfig.builder().defaultTimeout(T)
                .property(AeronSettings.IPC, "false").property(AeronSettings.PEER_TIMEOUT_MS, "2000")
                .property(AeronSettings.HANDSHAKE_TIMEOUT_MS, "1000")
                .property(AeronSettings.EARLY_BUFFER_BYTES, String.valueOf(earlyBound));
        SplittableRandom rnd = new SplittableRandom(SEED);
        try (AeronConnectionManager target = (AeronConnectionManager) new AeronTransportProvider().create(
                base.name("target").errorHandler(errors::add).build());
             AeronConnectionManager genuine = (AeronConnectionManager) new AeronTransportProvider().create(
                     base.name("genuine").errorHandler(e -> { }).build());
             RawPeer raw = new RawPeer(target);
             OffHeapBuffer src = OffHeapBuffer.allocate(4 << 20);
             OffHeapBuffer dst = OffHeapBuffer.allocate(4 << 20)) {
            ExecutorService pool = Executors.newFixedThreadPool(2);
            AtomicBoolean fuzzing = new AtomicBoolean(true);
            AtomicLong verified = new AtomicLong();
            long[] sizes = {0, 1, 100, 4096, 65_536, 65_537, 1 << 20, (4 << 20) - 7};
            // The genuine peer's traffic, all through the fuzzing. The receiver alone decides when it ends (its ack
            // byte says whether another message follows), so both loops stop after the same message.
            Connection out = genuine.connection(target.localAddress());
            Connection in = target.connection(genuine.localAddress());
            Future<?> sender = pool.submit(() -> {
                for (int i = 0; ; i++) {
                    long n = sizes[i % sizes.length];
                    TestPattern.fill(src, 0, n, i);
                    out.send(9000, src, 0, n, T);
                    out.recv(9001, src, 0, 1, T); // one-byte ack: the receiver verified message i
                    if (src.asByteBuffer().get(0) == 0) {
                        return null;
                    }
                }
            });
            Future<?> receiver = pool.submit(() -> {
                for (int i = 0; ; i++) {
                    long n = sizes[i % sizes.length];
                    in.recv(9000, dst, 0, n, T);
                    TestPattern.assertPattern(dst, 0, n, i);
                    verified.incrementAndGet();
                    boolean more = fuzzing.get() || i + 1 < 20;
                    dst.asByteBuffer().put(0, (byte) (more ? 1 : 0));
                    in.send(9001, dst, 0, 1, T);
                    if (!more) {
                        return null;
                    }
                }
            });

            long t0 = System.nanoTime();
            int datagrams = rawDatagrams(target, rnd, 3000);
            int[] streamInputs = streams(raw, target, genuine, rnd, 120);
            long maxHeld = target.earlyBufferedBytes();
            fuzzing.set(false);
            sender.get(2, TimeUnit.MINUTES);
            receiver.get(2, TimeUnit.MINUTES);
            pool.shutdown();
            long fuzzMs = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - t0);

            assertThat(target.isRunning()).isTrue();
            assertThat(verified.get()).as("genuine messages verified during the fuzzing").isGreaterThanOrEqualTo(20);
            assertThat(maxHeld).isLessThanOrEqualTo(earlyBound);
            assertThat(target.earlyBufferedBytes()).isLessThanOrEqualTo(earlyBound);
            System.out.printf("fuzz (seed %x): %d raw datagrams, %d streams with %d frames in %d ms; %d genuine"
                    + " messages verified meanwhile; target counted %d errors (%d refused streams), held at most %d B"
                    + " early%n", SEED, datagrams, streamInputs[0], streamInputs[1], fuzzMs, verified.get(),
                    target.errorCount(), target.counters().get("streamsRefused"), maxHeld);
            assertThat(target.counters().get("streamsRefused")).isPositive();
        }
    }

    /** Raw UDP datagrams at the endpoint: random bytes and frame-shaped headers with random fields. */
    private static int rawDatagrams(AeronConnectionManager target, SplittableRandom rnd, int count) throws Exception {
        Address a = Address.parse(target.localAddress());
        InetAddress host = InetAddress.getByName(a.host());
        try (DatagramSocket s = new DatagramSocket(0, InetAddress.getLoopbackAddress())) {
            byte[] b = new byte[1500];
            for (int i = 0; i < count; i++) {
                int len = rnd.nextInt(b.length + 1);
                for (int k = 0; k < len; k++) {
                    b[k] = (byte) rnd.nextInt();
                }
                if (i % 2 == 0 && len >= 32) {
                    // An Aeron frame header: frame length, version, flags, type (data, setup, SM, NAK, RTT...),
                    // then random term offset / session / stream / term id / lengths.
                    ByteBuffer f = ByteBuffer.wrap(b).order(ByteOrder.LITTLE_ENDIAN);
                    f.putInt(0, i % 4 == 0 ? len : rnd.nextInt());
                    f.put(4, (byte) 0);
                    f.put(5, (byte) rnd.nextInt());
                    f.putShort(6, (short) (1 + rnd.nextInt(8)));
                    if (i % 8 == 0) {
                        f.putInt(16, AeronSettings.STREAM_ID);
                    }
                }
                s.send(new DatagramPacket(b, len, host, a.port()));
            }
        }
        return count;
    }

    /** Whole Aeron streams carrying hostile content for our protocol. */
    private static int[] streams(RawPeer raw, AeronConnectionManager target, AeronConnectionManager genuine,
                                 SplittableRandom rnd, int count) {
        Handshake h = new Handshake(null, 60_000);
        int frames = 0;
        List<RawPeer.Stream> open = new ArrayList<>();
        byte[] captured = null;
        for (int i = 0; i < count; i++) {
            RawPeer.Stream s = raw.stream();
            open.add(s);
            int kind = i % 6;
            if (kind == 0) {
                // Random first message: refused, never read again.
                int len = rnd.nextInt(1, 4096);
                for (int k = 0; k < len; k++) {
                    s.buffer.putByte(k, (byte) rnd.nextInt());
                }
                frames += s.offer(len, Duration.ofMillis(200)) ? 1 : 0;
                continue;
            }
            if (kind == 1) {
                // A HELLO claiming the genuine peer: held, then refused; the genuine session is untouched.
                frames += s.offer(s.hello(h, genuine.localAddress(), target.localAddress(), rnd.nextLong(),
                        System.currentTimeMillis()), Duration.ofMillis(200)) ? 1 : 0;
            } else {
                int len = s.hello(h, "127.0.0.1:" + (30_000 + i), target.localAddress(), i,
                        System.currentTimeMillis());
                if (captured == null) {
                    captured = new byte[len];
                    s.buffer.getBytes(0, captured);
                } else if (kind == 2) {
                    s.buffer.putBytes(0, captured); // a replayed HELLO: held (its claim is live) or bound anew
                    len = captured.length;
                }
                frames += s.offer(len, Duration.ofMillis(200)) ? 1 : 0;
            }
            for (int f = 0; f < 60; f++) {
                int pick = rnd.nextInt(7);
                int len;
                switch (pick) {
                    case 0: // shorter than our header
                        len = rnd.nextInt(1, Wire.HEADER_LENGTH);
                        for (int k = 0; k < len; k++) {
                            s.buffer.putByte(k, (byte) rnd.nextInt());
                        }
                        break;
                    case 1: // unknown type
                        s.header(100 + rnd.nextInt(1000), rnd.nextInt(), rnd.nextLong(), rnd.nextLong());
                        len = Wire.HEADER_LENGTH;
                        break;
                    case 2: // eager claiming a huge or negative length
                        s.header(Wire.EAGER, rnd.nextInt(), 0, rnd.nextBoolean() ? Long.MAX_VALUE - rnd.nextInt(10)
                                : -rnd.nextInt(1, 1000));
                        len = Wire.HEADER_LENGTH + rnd.nextInt(200);
                        break;
                    case 3: // rendezvous announcing up to 2^62 bytes (held as one fixed-size record at most)
                        s.header(Wire.RTS, rnd.nextInt(), rnd.nextLong(), 1L << (20 + rnd.nextInt(42)));
                        len = Wire.HEADER_LENGTH;
                        break;
                    case 4: // data for no receive, at random offsets, spanning frames
                        s.header(Wire.DATA, rnd.nextInt(), rnd.nextLong(), rnd.nextLong());
                        len = Wire.HEADER_LENGTH + rnd.nextInt(100_000);
                        break;
                    case 5: // clear-to-send / cancel / a second HELLO for things that never existed
                        s.header(rnd.nextBoolean() ? Wire.CTS : rnd.nextBoolean() ? Wire.CANCEL : Wire.HELLO,
                                rnd.nextInt(), rnd.nextLong(), rnd.nextInt(64));
                        len = Wire.HEADER_LENGTH;
                        break;
                    default: // a plausible eager message on the genuine data tag, random bytes
                        int n = rnd.nextInt(0, 65_537);
                        s.header(Wire.EAGER, 9000, 0, n);
                        for (int k = 0; k < Math.min(n, 256); k++) {
                            s.buffer.putByte(Wire.HEADER_LENGTH + k, (byte) rnd.nextInt());
                        }
                        len = Wire.HEADER_LENGTH + n;
                }
                frames += s.offer(len, Duration.ofMillis(50)) ? 1 : 0;
            }
            if (open.size() > 16) {
                open.remove(0).close();
            }
        }
        open.forEach(RawPeer.Stream::close);
        return new int[] {count, frames};
    }
}
