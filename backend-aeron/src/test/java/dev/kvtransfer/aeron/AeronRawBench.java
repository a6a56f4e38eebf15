package dev.kvtransfer.aeron;

import dev.kvtransfer.api.transport.Connection;
import dev.kvtransfer.testkit.process.ChildJvm;
import dev.kvtransfer.api.transport.TransportConfig;
import io.aeron.Aeron;
import io.aeron.ExclusivePublication;
import io.aeron.Publication;
import io.aeron.Subscription;
import io.aeron.logbuffer.FragmentHandler;
import org.agrona.UnsafeApi;
import org.agrona.concurrent.IdleStrategy;
import org.agrona.concurrent.UnsafeBuffer;

import java.io.IOException;
import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Objects;
import java.util.concurrent.TimeUnit;

/**
 * Throughput of plain Aeron (an exclusive publication offering the message in Aeron messages of {@code aeron.chunk} bytes, as ours does, to a
 * subscription whose handler copies every fragment into a destination buffer) next to our {@link Connection}
 * for the same message size and total, between two processes (the sender a child JVM) or two threads. The
 * raw side does what any Aeron receiver must do at least; the difference is our protocol's cost (rendezvous,
 * demultiplexing, headers).
 *
 * <p>{@code java -cp ... dev.kvtransfer.aeron.AeronRawBench [totalMiB] [messageMiB...]} prints the table the
 * README records.
 */
public final class AeronRawBench {
    private static final int TAG = 4096;

    private AeronRawBench() {
    }

    /**
     * One measurement.
     *
     * @param mode          "raw" or "ours"
     * @param messageBytes  bytes per message
     * @param totalBytes    bytes timed (warm-up excluded)
     * @param seconds       elapsed time of the timed part
     * @param crossProcess  whether the sender ran in another JVM
     */
    public record Result(String mode, long messageBytes, long totalBytes, double seconds, boolean crossProcess) {
        /** @return bytes per second */
        public double bytesPerSecond() {
            return totalBytes / seconds;
        }

        @Override
        public String toString() {
            return String.format(Locale.ROOT, "%s %d B x %d: %.3f GB/s (%.3f s)%s", mode, messageBytes,
                    totalBytes / messageBytes, bytesPerSecond() / 1e9, seconds, crossProcess ? " cross-process" : "");
        }
    }

    /**
     * Plain Aeron throughput.
     *
     * @param messageBytes bytes per message (sent as maximum-size Aeron messages)
     * @param totalBytes   bytes to time, rounded up to whole messages
     * @param crossProcess send from a child JVM
     * @param properties   {@code aeron.*} transport properties (term length, mtu, ...)
     * @return the result
     */
    public static Result raw(long messageBytes, long totalBytes, boolean crossProcess, Map<String, String> properties) {
        return run("raw", messageBytes, totalBytes, crossProcess, properties);
    }

    /**
     * Throughput of {@link AeronConnectionManager} connections.
     *
     * @param messageBytes bytes per message (one send / recv each)
     * @param totalBytes   bytes to time, rounded up to whole messages
     * @param crossProcess send from a child JVM
     * @param properties   {@code aeron.*} transport properties
     * @return the result
     */
    public static Result ours(long messageBytes, long totalBytes, boolean crossProcess, Map<String, String> properties) {
        return run("ours", messageBytes, totalBytes, crossProcess, properties);
    }

    private static Result run(String mode, long messageBytes, long totalBytes, boolean crossProcess,
            Map<String, String> properties) {
        Objects.requireNonNull(properties, "properties");
        if (messageBytes <= 0 || totalBytes <= 0) {
            throw new IllegalArgumentException("messageBytes = " + messageBytes + ", totalBytes = " + totalBytes
                    + ": must be positive");
        }
        long measured = (totalBytes + messageBytes - 1) / messageBytes;
        long warmup = Math.max(2, measured / 10);
        long count = warmup + measured;
        TransportConfig config = TransportConfig.builder().name("bench-recv").properties(properties)
                .defaultTimeout(Duration.ofSeconds(60)).build();
        try (OffHeapBuffer dst = OffHeapBuffer.allocate(messageBytes)) {
            double seconds = mode.equals("raw")
                    ? receiveRaw(config, dst, messageBytes, count, warmup, crossProcess)
                    : receiveOurs(config, dst, messageBytes, count, warmup, crossProcess);
            return new Result(mode, messageBytes, measured * messageBytes, seconds, crossProcess);
        }
    }

    private static double receiveOurs(TransportConfig config, OffHeapBuffer dst, long messageBytes, long count,
            long warmup, boolean crossProcess) {
        try (AeronConnectionManager m = new AeronConnectionManager(config);
             Sender sender = Sender.start("ours", m.localAddress(), messageBytes, count, config, crossProcess)) {
            Connection c = m.recvConnect(TAG, dst, 0, messageBytes);
            long t0 = warmup == 1 ? System.nanoTime() : 0;
            for (long i = 1; i < count; i++) {
                c.recv(TAG, dst, 0, messageBytes);
                if (i == warmup - 1) {
                    t0 = System.nanoTime();
                }
            }
            long t1 = System.nanoTime();
            sender.finish();
            return (t1 - t0) / 1e9;
        }
    }

    private static double receiveRaw(TransportConfig config, OffHeapBuffer dst, long messageBytes, long count,
            long warmup, boolean crossProcess) {
        AeronSettings s = AeronSettings.from(config);
        try (EmbeddedDriver.Lease lease = EmbeddedDriver.acquire(s);
             Aeron aeron = Aeron.connect(new Aeron.Context().aeronDirectoryName(lease.directory()));
             Subscription sub = aeron.addSubscription("aeron:udp?endpoint=127.0.0.1:0|so-rcvbuf=" + s.socketBuffer
                     + "|rcv-wnd=" + s.receiverWindow(), AeronSettings.STREAM_ID)) {
            String endpoint = "127.0.0.1:" + resolvePort(sub);
            long total = count * messageBytes;
            long warmBytes = warmup * messageBytes;
            long[] received = {0};
            FragmentHandler copy = (buffer, offset, length, header) -> {
                // The least any receiver does: copy each fragment to its place in the destination message.
                long at = received[0] % messageBytes;
                UnsafeApi.copyMemory(buffer.byteArray(), buffer.addressOffset() + offset, null, dst.address() + at,
                        Math.min(length, messageBytes - at));
                received[0] += length;
            };
            try (Sender sender = Sender.start("raw", endpoint, messageBytes, count, config, crossProcess)) {
                IdleStrategy idle = s.newIdleStrategy();
                long t0 = 0;
                long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(600);
                while (received[0] < total) {
                    idle.idle(sub.poll(copy, 64));
                    if (t0 == 0 && received[0] >= warmBytes) {
                        t0 = System.nanoTime();
                    }
                    if (System.nanoTime() - deadline > 0) {
                        throw new IllegalStateException("raw benchmark: " + received[0] + " of " + total
                                + " B after 600 s");
                    }
                }
                long t1 = System.nanoTime();
                sender.finish();
                return (t1 - t0) / 1e9;
            }
        }
    }

    private static int resolvePort(Subscription sub) {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
        while (System.nanoTime() - deadline < 0) {
            List<String> bound = sub.localSocketAddresses();
            if (!bound.isEmpty()) {
                String a = bound.get(0);
                return Integer.parseInt(a.substring(a.lastIndexOf(':') + 1));
            }
            Thread.onSpinWait();
        }
        throw new IllegalStateException("no bound port within 10 s");
    }

    /** The sending side: a child JVM running {@link #main} in "send" mode, or a thread of this JVM. */
    private static final class Sender implements AutoCloseable {
        private final ChildJvm child;
        private final Thread thread;
        private final Throwable[] failure = new Throwable[1];

        private Sender(ChildJvm child, Thread thread) {
            this.child = child;
            this.thread = thread;
        }

        static Sender start(String mode, String target, long messageBytes, long count, TransportConfig config,
                boolean crossProcess) {
            List<String> args = new ArrayList<>(List.of("send", mode, target, Long.toString(messageBytes),
                    Long.toString(count)));
            config.properties().forEach((k, v) -> args.add(k + "=" + v));
            if (crossProcess) {
                try {
                    long heap = Math.max(256, (messageBytes >> 20) * 2 + 128);
                    return new Sender(ChildJvm.start(AeronRawBench.class, heap + "m", args), null);
                } catch (IOException e) {
                    throw new IllegalStateException("cannot start the sender JVM: " + e, e);
                }
            }
            Sender[] self = new Sender[1];
            Thread t = new Thread(() -> {
                try {
                    send(mode, target, messageBytes, count, config.properties());
                } catch (Throwable e) {
                    self[0].failure[0] = e;
                }
            }, "bench-sender");
            self[0] = new Sender(null, t);
            t.start();
            return self[0];
        }

        void finish() {
            if (child != null) {
                int rc = child.awaitExit(Duration.ofSeconds(60));
                if (rc != 0) {
                    throw new IllegalStateException("sender JVM exited with " + rc + "; printed " + child.seen());
                }
            } else {
                try {
                    thread.join(TimeUnit.SECONDS.toMillis(60));
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
                if (failure[0] != null) {
                    throw new IllegalStateException("sender failed: " + failure[0], failure[0]);
                }
            }
        }

        @Override
        public void close() {
            if (child != null) {
                child.close();
            }
        }
    }

    private static void send(String mode, String target, long messageBytes, long count, Map<String, String> props) {
        TransportConfig config = TransportConfig.builder().name("bench-send").properties(props)
                .defaultTimeout(Duration.ofSeconds(60)).build();
        try (OffHeapBuffer src = OffHeapBuffer.allocate(messageBytes)) {
            UnsafeApi.setMemory(src.address(), messageBytes, (byte) 0x2A);
            if (mode.equals("ours")) {
                try (AeronConnectionManager m = new AeronConnectionManager(config)) {
                    Connection c = m.connection(target);
                    for (long i = 0; i < count; i++) {
                        c.send(TAG, src, 0, messageBytes);
                    }
                }
                return;
            }
            AeronSettings s = AeronSettings.from(config);
            try (EmbeddedDriver.Lease lease = EmbeddedDriver.acquire(s);
                 Aeron aeron = Aeron.connect(new Aeron.Context().aeronDirectoryName(lease.directory()));
                 ExclusivePublication pub = aeron.addExclusivePublication("aeron:udp?endpoint=" + target + "|mtu="
                         + s.mtu + "|term-length=" + s.termLength + "|so-sndbuf=" + s.socketBuffer + "|sparse=true",
                         AeronSettings.STREAM_ID)) {
                IdleStrategy idle = s.newIdleStrategy();
                long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
                while (!pub.isConnected()) {
                    if (System.nanoTime() - deadline > 0) {
                        throw new IllegalStateException("raw sender: no subscriber at " + target);
                    }
                    idle.idle();
                }
                int max = s.chunk; // the same Aeron message size our DATA chunks use
                UnsafeBuffer view = new UnsafeBuffer(0, 0);
                for (long i = 0; i < count; i++) {
                    for (long pos = 0; pos < messageBytes; pos += max) {
                        int n = (int) Math.min(max, messageBytes - pos);
                        view.wrap(src.address() + pos, n);
                        long r;
                        while ((r = pub.offer(view, 0, n)) < 0) {
                            if (r == Publication.CLOSED || r == Publication.MAX_POSITION_EXCEEDED
                                    || (r == Publication.NOT_CONNECTED && System.nanoTime() - deadline > 0)) {
                                throw new IllegalStateException("raw sender: offer failed with " + r);
                            }
                            idle.idle();
                        }
                    }
                }
                // Wait until the driver has sent it all (the publisher limit runs half a term ahead of the sender
                // position) and the end of stream follows, before this driver goes away with the data.
                while (pub.isConnected() && pub.position() > pub.positionLimit() - pub.termBufferLength() / 2) {
                    idle.idle();
                }
                java.util.concurrent.locks.LockSupport.parkNanos(TimeUnit.MILLISECONDS.toNanos(200));
            }
        }
    }

    /**
     * {@code send <raw|ours> <target> <messageBytes> <count> [key=value...]} (the child side), or
     * {@code [totalMiB] [messageMiB...]} to print the comparison table, cross-process.
     *
     * @param args see above
     */
    public static void main(String[] args) {
        if (args.length > 0 && args[0].equals("send")) {
            Map<String, String> props = new LinkedHashMap<>();
            for (int i = 5; i < args.length; i++) {
                int eq = args[i].indexOf('=');
                props.put(args[i].substring(0, eq), args[i].substring(eq + 1));
            }
            send(args[1], args[2], Long.parseLong(args[3]), Long.parseLong(args[4]), props);
            System.out.println("DONE");
            System.exit(0);
        }
        long totalMiB = args.length > 0 ? Long.parseLong(args[0]) : 1024;
        List<Long> sizes = new ArrayList<>();
        for (int i = 1; i < args.length; i++) {
            sizes.add(Long.parseLong(args[i]));
        }
        if (sizes.isEmpty()) {
            sizes = List.of(1L, 16L, 64L);
        }
        Map<String, String> props = new LinkedHashMap<>();
        for (String k : List.of(AeronSettings.TERM_LENGTH, AeronSettings.MTU, AeronSettings.CHUNK,
                AeronSettings.SOCKET_BUFFER, AeronSettings.IDLE, AeronSettings.THREADING, AeronSettings.IPC)) {
            String v = System.getProperty(k);
            if (v != null) {
                props.put(k, v);
            }
        }
        System.out.println("total " + totalMiB + " MiB per size, "
                + (Boolean.getBoolean("bench.local") ? "one process" : "cross-process") + ", properties " + props);
        System.out.println("| message | ours GB/s | raw Aeron GB/s | ours / raw |");
        System.out.println("| ---: | ---: | ---: | ---: |");
        for (long mib : sizes) {
            long msg = mib << 20;
            boolean cross = !Boolean.getBoolean("bench.local");
            Result raw = Boolean.getBoolean("bench.skipRaw") ? null : raw(msg, totalMiB << 20, cross, props);
            if (raw != null) {
                System.out.println("  " + raw);
            }
            Result ours = ours(msg, totalMiB << 20, cross, props);
            System.out.println("  " + ours);
            if (raw == null) {
                continue;
            }
            System.out.printf(Locale.ROOT, "| %d MiB | %.2f | %.2f | %.2f |%n", mib, ours.bytesPerSecond() / 1e9,
                    raw.bytesPerSecond() / 1e9, ours.bytesPerSecond() / raw.bytesPerSecond());
        }
    }
}
