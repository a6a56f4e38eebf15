package dev.kvtransfer.aeron;

import dev.kvtransfer.api.transport.Connection;
import dev.kvtransfer.api.transport.HostSupport;
import dev.kvtransfer.api.transport.TransportConfig;
import dev.kvtransfer.testkit.process.ChildJvm;
import io.aeron.Aeron;
import io.aeron.ExclusivePublication;
import io.aeron.Publication;
import io.aeron.Subscription;
import io.aeron.logbuffer.FragmentHandler;
import org.agrona.concurrent.IdleStrategy;
import org.agrona.concurrent.UnsafeBuffer;

import java.nio.ByteBuffer;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.TimeUnit;

/**
 * Small-message latency and rate between two processes over Aeron IPC on one shared media driver (bench scope),
 * ours and raw Aeron in the same run:
 * <ul>
 *   <li>round trip of one {@code size}-byte message, one in flight: min / p50 / p99 / max µs;</li>
 *   <li>messages per second with {@code window} in flight (the receiver answers each with a message of the same
 *       size; the sender keeps {@code window} unanswered).</li>
 * </ul>
 * Raw = an exclusive IPC publication and a subscription each way, both sides polling with the same idle strategy
 * as our agent (backoff), the echo copying each fragment into a reply: the least any transport does.
 *
 * <p>Arguments: {@code [size=64] [samples=20000] [window=64] [key=value ...]}.
 */
public final class LatencyBench {
    private static final int PING = 6100;
    private static final int PONG = 6101;
    private static final int RAW_PING = 0x7A01;
    private static final int RAW_PONG = 0x7A02;

    private LatencyBench() {
    }

    public static void main(String[] args) throws Exception {
        if (args.length > 0 && args[0].equals("pong-ours")) {
            pongOurs(args[1], Integer.parseInt(args[2]));
            return;
        }
        if (args.length > 0 && args[0].equals("pong-raw")) {
            pongRaw(args[1], Integer.parseInt(args[2]));
            return;
        }
        int size = args.length > 0 ? Integer.parseInt(args[0]) : 64;
        int samples = args.length > 1 ? Integer.parseInt(args[1]) : 20_000;
        int window = args.length > 2 ? Integer.parseInt(args[2]) : 64;
        TransportConfig.Builder b = TransportConfig.builder().defaultTimeout(Duration.ofSeconds(30));
        for (int i = 3; i < args.length; i++) {
            int eq = args[i].indexOf('=');
            b.property(args[i].substring(0, eq), args[i].substring(eq + 1));
        }
        TransportConfig base = b.build();
        AeronTransportProvider provider = new AeronTransportProvider();
        try (HostSupport host = provider.startHostSupport(base)) {
            String dir = host.properties().get(AeronSettings.DIR);
            List<String> childArgs = new ArrayList<>(List.of("pong-ours", dir, Integer.toString(size)));
            base.properties().forEach((k, v) -> childArgs.add(k + "=" + v));
            double[] ours;
            double oursRate;
            try (ChildJvm child = ChildJvm.start(LatencyBench.class, "256m", childArgs);
                 AeronConnectionManager m = (AeronConnectionManager) provider.create(base.toBuilder().name("ping")
                         .properties(host.properties()).build());
                 OffHeapBuffer buf = OffHeapBuffer.allocate(Math.max(size, 8) * 2L)) {
                String address = child.awaitLine("ADDRESS", Duration.ofSeconds(60));
                Connection c = m.connection(address);
                long[] rtt = new long[samples];
                for (int i = -samples / 2; i < samples; i++) { // first half: warm-up
                    long t0 = System.nanoTime();
                    c.send(PING, buf, 0, size);
                    c.recv(PONG, buf, size, size);
                    if (i >= 0) {
                        rtt[i] = System.nanoTime() - t0;
                    }
                }
                ours = percentiles(rtt);
                oursRate = rateOurs(c, buf, size, samples * 4, window);
                System.out.println("ours over " + ((AeronConnection) c).channel());
            }
            double[] raw;
            double rawRate;
            try (ChildJvm child = ChildJvm.start(LatencyBench.class, "256m", List.of("pong-raw", dir,
                    Integer.toString(size)));
                 Aeron client = Aeron.connect(new Aeron.Context().aeronDirectoryName(dir))) {
                child.awaitLine("READY", Duration.ofSeconds(60));
                RawSide side = new RawSide(client, RAW_PING, RAW_PONG, size, AeronSettings.from(base));
                side.awaitConnected();
                long[] rtt = new long[samples];
                for (int i = -samples / 2; i < samples; i++) {
                    long t0 = System.nanoTime();
                    side.send();
                    side.awaitOne();
                    if (i >= 0) {
                        rtt[i] = System.nanoTime() - t0;
                    }
                }
                raw = percentiles(rtt);
                rawRate = side.rate(samples * 4, window);
                side.close();
            }
            System.out.printf("%d-byte messages between two processes, aeron:ipc on one shared driver, %d samples%n",
                    size, samples);
            System.out.println("| | min µs | p50 µs | p99 µs | max µs | msgs/s, " + window + " in flight |");
            System.out.println("| ---: | ---: | ---: | ---: | ---: | ---: |");
            System.out.printf("| ours | %.1f | %.1f | %.1f | %.1f | %.0f |%n", ours[0], ours[1], ours[2], ours[3],
                    oursRate);
            System.out.printf("| raw Aeron | %.1f | %.1f | %.1f | %.1f | %.0f |%n", raw[0], raw[1], raw[2], raw[3],
                    rawRate);
        }
    }

    private static double[] percentiles(long[] ns) {
        long[] s = ns.clone();
        Arrays.sort(s);
        return new double[] {s[0] / 1e3, s[s.length / 2] / 1e3, s[(int) (s.length * 0.99)] / 1e3,
            s[s.length - 1] / 1e3};
    }

    /** {@code count} messages with {@code window} unanswered: a receiving thread counts the answers. */
    private static double rateOurs(Connection c, OffHeapBuffer buf, int size, int count, int window)
            throws Exception {
        java.util.concurrent.Semaphore credits = new java.util.concurrent.Semaphore(window);
        Thread receiver = new Thread(() -> {
            try (OffHeapBuffer in = OffHeapBuffer.allocate(Math.max(size, 1))) {
                for (int i = 0; i < count; i++) {
                    c.recv(PONG, in, 0, size);
                    credits.release();
                }
            }
        }, "rate-receiver");
        long t0 = System.nanoTime();
        receiver.start();
        for (int i = 0; i < count; i++) {
            credits.acquire();
            c.send(PING, buf, 0, size);
        }
        receiver.join(TimeUnit.MINUTES.toMillis(2));
        return count / ((System.nanoTime() - t0) / 1e9);
    }

    /** The child: answers every PING with a PONG of the same bytes, over our transport. */
    private static void pongOurs(String dir, int size) {
        TransportConfig.Builder b = TransportConfig.builder().name("pong").defaultTimeout(Duration.ofSeconds(60))
                .property(AeronSettings.DIR, dir);
        try (AeronConnectionManager m = (AeronConnectionManager) new AeronTransportProvider().create(b.build());
             OffHeapBuffer buf = OffHeapBuffer.allocate(Math.max(size, 1))) {
            System.out.println("ADDRESS " + m.localAddress());
            System.out.flush();
            watchStdin();
            Connection c = m.recvConnect(PING, buf, 0, size);
            while (true) {
                c.send(PONG, buf, 0, size);
                c.recv(PING, buf, 0, size, Duration.ofHours(1));
            }
        }
    }

    /** The child: the same over plain Aeron IPC publications and subscriptions. */
    private static void pongRaw(String dir, int size) {
        try (Aeron client = Aeron.connect(new Aeron.Context().aeronDirectoryName(dir))) {
            RawSide side = new RawSide(client, RAW_PONG, RAW_PING, size, AeronSettings.from(
                    TransportConfig.builder().build()));
            System.out.println("READY");
            System.out.flush();
            watchStdin();
            side.echoForever();
        }
    }

    private static void watchStdin() {
        Thread t = new Thread(() -> {
            try {
                while (System.in.read() >= 0) {
                    // parent alive
                }
            } catch (java.io.IOException e) {
                // parent gone
            }
            Runtime.getRuntime().halt(0);
        }, "stdin-watch");
        t.setDaemon(true);
        t.start();
    }

    /** One side of the raw baseline: a publication out and a subscription in. */
    private static final class RawSide {
        final ExclusivePublication out;
        final Subscription in;
        final UnsafeBuffer msg;
        final UnsafeBuffer reply;
        final IdleStrategy idle;
        long received;
        final FragmentHandler count = (b, o, l, h) -> received++;
        final FragmentHandler echo;

        RawSide(Aeron client, int outStream, int inStream, int size, AeronSettings s) {
            this.out = client.addExclusivePublication("aeron:ipc?term-length=16m|sparse=true", outStream);
            this.in = client.addSubscription("aeron:ipc", inStream);
            this.msg = new UnsafeBuffer(ByteBuffer.allocateDirect(Math.max(size, 1)));
            this.reply = new UnsafeBuffer(ByteBuffer.allocateDirect(Math.max(size, 1)));
            this.idle = s.newIdleStrategy();
            this.echo = (b, o, l, h) -> {
                reply.putBytes(0, b, o, l);
                while (out.offer(reply, 0, l) < 0) {
                    Thread.onSpinWait();
                }
            };
        }

        void awaitConnected() {
            while (!out.isConnected()) {
                idle.idle();
            }
        }

        void send() {
            long r;
            while ((r = out.offer(msg, 0, msg.capacity())) < 0) {
                if (r == Publication.CLOSED) {
                    throw new IllegalStateException("closed");
                }
                idle.idle();
            }
        }

        void awaitOne() {
            long want = received + 1;
            idle.reset();
            while (received < want) {
                idle.idle(in.poll(count, 1));
            }
        }

        double rate(int count, int window) {
            long t0 = System.nanoTime();
            long sent = 0;
            long base = received;
            while (received - base < count) {
                int work = 0;
                while (sent < count && sent - (received - base) < window && out.offer(msg, 0, msg.capacity()) > 0) {
                    sent++;
                    work++;
                }
                work += in.poll(this.count, 64);
                idle.idle(work);
            }
            return count / ((System.nanoTime() - t0) / 1e9);
        }

        void echoForever() {
            while (true) {
                idle.idle(in.poll(echo, 64));
            }
        }

        void close() {
            out.close();
            in.close();
        }
    }
}
