package dev.kvtransfer.aeron;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.transport.RawBaseline;
import dev.kvtransfer.api.transport.TransportConfig;
import dev.kvtransfer.api.transport.TransportException;
import io.aeron.Aeron;
import io.aeron.ExclusivePublication;
import io.aeron.Publication;
import io.aeron.Subscription;
import io.aeron.logbuffer.FragmentHandler;
import org.agrona.CloseHelper;
import org.agrona.UnsafeApi;
import org.agrona.concurrent.IdleStrategy;
import org.agrona.concurrent.UnsafeBuffer;

import java.time.Duration;
import java.util.List;
import java.util.Objects;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;

/**
 * Plain Aeron on the channel our managers use, for {@code kvtransfer bench} ({@link AeronTransportProvider#rawBaseline()}):
 * an exclusive publication offering each message as Aeron messages of {@code aeron.chunk} bytes (the size of our
 * rendezvous DATA chunks) to a subscription whose handler copies every fragment to its place in a destination
 * buffer — the least any Aeron receiver does; the difference to our {@code Connection} is our protocol
 * (rendezvous, matching, headers, the caller hand-off).
 *
 * <p><b>Channel.</b> Two managers created from one config in one process share a media driver (the embedded one
 * for those settings, or the external one {@code aeron.dir} names, e.g. the host support's), so they talk
 * {@code aeron:ipc}; with {@code aeron.ipc=false} they talk UDP to {@code config.host()}. The baseline does the
 * same: on that driver (it takes a lease on the same embedded driver our managers of this process use, or
 * connects to {@code aeron.dir}), an {@code aeron:ipc} stream with our term length and MTU, or a UDP stream to an
 * ephemeral port of {@code config.host()} with our socket buffers and receiver window.
 *
 * <p><b>Ends.</b> Both ends are threads of this JVM (the caller's thread receives, a second thread sends; for
 * round trips the second thread echoes), each with our agents' idle strategy ({@code aeron.idle}) and its own
 * Aeron client: the same place our bench runs ours (two managers of this JVM). Every wait is bounded by the
 * timeout; when it passes the second thread is stopped and the call fails {@code TIMEOUT}.
 */
public final class AeronRawBaseline implements RawBaseline {
    private static final long JOIN_NANOS = TimeUnit.SECONDS.toNanos(5);

    /** Creates the baseline (nothing starts until a measurement). */
    public AeronRawBaseline() {
    }

    @Override
    public String describe(TransportConfig config) {
        Objects.requireNonNull(config, "config");
        AeronSettings s = AeronSettings.from(config);
        return "plain Aeron, " + (s.ipc ? "aeron:ipc" : "aeron:udp to " + config.host()) + " exclusive publication"
                + " -> subscription (copying each fragment out), " + s.chunk + "-byte Aeron messages, on "
                + (s.externalDir() != null ? "the driver in " + s.externalDir() : "this JVM's embedded driver")
                + ", sender and receiver threads of this JVM (idle " + s.idle + ")";
    }

    @Override
    public Throughput throughput(TransportConfig config, long messageBytes, long warmupMessages, long messages,
            Duration timeout) {
        Objects.requireNonNull(config, "config");
        Objects.requireNonNull(timeout, "timeout");
        if (messageBytes < 1 || warmupMessages < 0 || messages < 1) {
            throw new IllegalArgumentException("messageBytes = " + messageBytes + ", warmupMessages = "
                    + warmupMessages + ", messages = " + messages + ": need messageBytes >= 1, warmup >= 0, messages >= 1");
        }
        AeronSettings s = AeronSettings.from(config);
        long deadline = System.nanoTime() + timeout.toNanos();
        try (Session session = Session.open(s);
             Stream stream = session.stream(config.host(), deadline);
             OffHeapBuffer src = OffHeapBuffer.allocate(messageBytes);
             OffHeapBuffer dst = OffHeapBuffer.allocate(messageBytes)) {
            UnsafeApi.setMemory(src.address(), messageBytes, (byte) 0x2A);
            UnsafeApi.setMemory(dst.address(), messageBytes, (byte) 0);
            long total = Math.multiplyExact(messageBytes, warmupMessages + messages);
            long warmBytes = messageBytes * warmupMessages;
            // The clock starts at the earlier of: the sender starting the first timed message, the receiver
            // finishing the warm-up. A sender running ahead (the term buffer holds many small messages) is thus
            // timed from its first timed offer, never from a receiver that finds the rest already written.
            AtomicLong senderStart = new AtomicLong();
            Worker sender = Worker.start("aeron-raw-sender", () -> {
                UnsafeBuffer view = new UnsafeBuffer(0, 0);
                IdleStrategy idle = s.newIdleStrategy();
                for (long i = 0; i < warmupMessages + messages; i++) {
                    if (i == warmupMessages) {
                        senderStart.set(System.nanoTime());
                    }
                    offerMessage(stream.publication, view, idle, src, messageBytes, s, deadline, session.stop);
                }
            });
            try {
                long[] received = {0};
                long[] warmDone = {warmBytes == 0 ? System.nanoTime() : 0};
                FragmentHandler copy = (buffer, offset, length, header) -> {
                    long at = received[0] % messageBytes;
                    UnsafeApi.copyMemory(buffer.byteArray(), buffer.addressOffset() + offset, null, dst.address() + at,
                            Math.min(length, messageBytes - at));
                    received[0] += length;
                    if (warmDone[0] == 0 && received[0] >= warmBytes) {
                        warmDone[0] = System.nanoTime();
                    }
                };
                IdleStrategy idle = s.newIdleStrategy();
                while (received[0] < total) {
                    idle.idle(stream.subscription.poll(copy, 64));
                    if (System.nanoTime() - deadline > 0 || sender.failure.get() != null) {
                        throw failed(sender, timeout, "throughput: " + received[0] + " of " + total + " B received");
                    }
                }
                long t1 = System.nanoTime();
                sender.join(deadline);
                long t0 = Math.min(warmDone[0], senderStart.get());
                return new Throughput(describe(config), messageBytes, messages, Math.max(1, t1 - t0));
            } finally {
                session.stop.set(true);
                sender.joinQuietly();
            }
        }
    }

    @Override
    public Latency latency(TransportConfig config, long messageBytes, int warmupSamples, int samples,
            Duration timeout) {
        Objects.requireNonNull(config, "config");
        Objects.requireNonNull(timeout, "timeout");
        if (messageBytes < 1 || warmupSamples < 0 || samples < 1) {
            throw new IllegalArgumentException("messageBytes = " + messageBytes + ", warmupSamples = " + warmupSamples
                    + ", samples = " + samples + ": need messageBytes >= 1, warmup >= 0, samples >= 1");
        }
        AeronSettings s = AeronSettings.from(config);
        long deadline = System.nanoTime() + timeout.toNanos();
        try (Session session = Session.open(s);
             Stream ping = session.stream(config.host(), deadline);
             Stream pong = session.stream(config.host(), deadline);
             OffHeapBuffer out = OffHeapBuffer.allocate(messageBytes);
             OffHeapBuffer echoBuffer = OffHeapBuffer.allocate(messageBytes);
             OffHeapBuffer in = OffHeapBuffer.allocate(messageBytes)) {
            UnsafeApi.setMemory(out.address(), messageBytes, (byte) 0x2A);
            int rounds = warmupSamples + samples;
            Worker echo = Worker.start("aeron-raw-echo", () -> {
                long[] got = {0};
                FragmentHandler copy = (buffer, offset, length, header) -> {
                    UnsafeApi.copyMemory(buffer.byteArray(), buffer.addressOffset() + offset, null,
                            echoBuffer.address() + got[0], Math.min(length, messageBytes - got[0]));
                    got[0] += length;
                };
                IdleStrategy idle = s.newIdleStrategy();
                UnsafeBuffer view = new UnsafeBuffer(0, 0);
                IdleStrategy offerIdle = s.newIdleStrategy();
                for (int r = 0; r < rounds; r++) {
                    got[0] = 0;
                    while (got[0] < messageBytes) {
                        idle.idle(ping.subscription.poll(copy, 64));
                        if (session.stop.get() || System.nanoTime() - deadline > 0) {
                            return;
                        }
                    }
                    offerMessage(pong.publication, view, offerIdle, echoBuffer, messageBytes, s, deadline,
                            session.stop);
                }
            });
            try {
                long[] got = {0};
                FragmentHandler copy = (buffer, offset, length, header) -> {
                    UnsafeApi.copyMemory(buffer.byteArray(), buffer.addressOffset() + offset, null,
                            in.address() + got[0], Math.min(length, messageBytes - got[0]));
                    got[0] += length;
                };
                IdleStrategy idle = s.newIdleStrategy();
                UnsafeBuffer view = new UnsafeBuffer(0, 0);
                IdleStrategy offerIdle = s.newIdleStrategy();
                long[] rtt = new long[samples];
                for (int r = 0; r < rounds; r++) {
                    long t0 = System.nanoTime();
                    offerMessage(ping.publication, view, offerIdle, out, messageBytes, s, deadline, session.stop);
                    got[0] = 0;
                    idle.reset();
                    while (got[0] < messageBytes) {
                        idle.idle(pong.subscription.poll(copy, 64));
                        if (System.nanoTime() - deadline > 0 || echo.failure.get() != null) {
                            throw failed(echo, timeout, "round trip " + r + ": " + got[0] + " of " + messageBytes
                                    + " B back");
                        }
                    }
                    if (r >= warmupSamples) {
                        rtt[r - warmupSamples] = Math.max(1, System.nanoTime() - t0);
                    }
                }
                echo.join(deadline);
                return new Latency(describe(config), messageBytes, rtt);
            } finally {
                session.stop.set(true);
                echo.joinQuietly();
            }
        }
    }

    /** Offers one message as Aeron messages of at most {@code aeron.chunk} bytes, back-pressure bounded. */
    private static void offerMessage(ExclusivePublication pub, UnsafeBuffer view, IdleStrategy idle, OffHeapBuffer src,
            long messageBytes, AeronSettings s, long deadline, AtomicBoolean stop) {
        for (long pos = 0; pos < messageBytes; pos += s.chunk) {
            int n = (int) Math.min(s.chunk, messageBytes - pos);
            view.wrap(src.address() + pos, n);
            long r;
            while ((r = pub.offer(view, 0, n)) < 0) {
                if (r == Publication.CLOSED || r == Publication.MAX_POSITION_EXCEEDED) {
                    throw new TransportException(ErrorCode.NETWORK, "aeron raw baseline: offer on " + pub.channel()
                            + " failed: " + Publication.errorString(r));
                }
                if (stop.get()) {
                    throw new TransportException(ErrorCode.CANCELLED, "aeron raw baseline: stopped");
                }
                if (System.nanoTime() - deadline > 0) {
                    throw new TransportException(ErrorCode.TIMEOUT, "aeron raw baseline: offer on " + pub.channel()
                            + " back-pressured (" + Publication.errorString(r) + ") past the deadline");
                }
                idle.idle();
            }
            idle.reset();
        }
    }

    /** The code of a worker thread's failure: its own when it is ours (a deadline stays TIMEOUT), else NETWORK. */
    private static ErrorCode codeOf(Throwable f) {
        return f instanceof dev.kvtransfer.api.KvTransferException k ? k.code() : ErrorCode.NETWORK;
    }

    /** The error for a wait that ended: the other thread's failure, else the deadline. */
    private static TransportException failed(Worker other, Duration timeout, String what) {
        Throwable f = other.failure.get();
        if (f != null) {
            return new TransportException(codeOf(f), "aeron raw baseline: " + other.thread.getName()
                    + " failed: " + f, f);
        }
        return new TransportException(ErrorCode.TIMEOUT, "aeron raw baseline: " + what + " after "
                + timeout.toMillis() + " ms");
    }

    /** A driver lease (or the external driver) and an Aeron client on it, closed together. */
    private static final class Session implements AutoCloseable {
        final EmbeddedDriver.Lease lease;
        final Aeron client;
        final AeronSettings settings;
        final AtomicBoolean stop = new AtomicBoolean();

        private Session(EmbeddedDriver.Lease lease, Aeron client, AeronSettings settings) {
            this.lease = lease;
            this.client = client;
            this.settings = settings;
        }

        static Session open(AeronSettings s) {
            EmbeddedDriver.Lease lease = s.externalDir() == null ? EmbeddedDriver.acquire(s) : null;
            try {
                String dir = lease != null ? lease.directory() : s.externalDir();
                Aeron client = Aeron.connect(new Aeron.Context().aeronDirectoryName(dir)
                        .clientName("kvtransfer-raw-baseline")
                        .driverTimeoutMs(TimeUnit.NANOSECONDS.toMillis(s.clientTimeoutNs)));
                return new Session(lease, client, s);
            } catch (RuntimeException e) {
                CloseHelper.quietClose(lease);
                throw new TransportException(ErrorCode.NETWORK, "aeron raw baseline: cannot connect to the media"
                        + " driver: " + e, e);
            }
        }

        /** A connected publication → subscription pair on our channel kind. */
        Stream stream(String host, long deadline) {
            AeronSettings s = settings;
            Subscription sub = null;
            ExclusivePublication pub = null;
            try {
                if (s.ipc) {
                    int id = ThreadLocalRandom.current().nextInt(0x1000_0000, Integer.MAX_VALUE);
                    sub = client.addSubscription(AeronSettings.IPC_CHANNEL, id);
                    pub = client.addExclusivePublication(AeronSettings.IPC_CHANNEL + "?mtu=" + s.mtu + "|term-length="
                            + s.termLength + "|sparse=true", id);
                } else {
                    sub = client.addSubscription("aeron:udp?endpoint=" + host + ":0|so-rcvbuf=" + s.socketBuffer
                            + "|rcv-wnd=" + s.receiverWindow(), AeronSettings.STREAM_ID);
                    int port = boundPort(sub, deadline);
                    pub = client.addExclusivePublication("aeron:udp?endpoint=" + host + ":" + port + "|mtu=" + s.mtu
                            + "|term-length=" + s.termLength + "|so-sndbuf=" + s.socketBuffer + "|sparse=true",
                            AeronSettings.STREAM_ID);
                }
                IdleStrategy idle = s.newIdleStrategy();
                while (!pub.isConnected() || !sub.isConnected()) {
                    if (System.nanoTime() - deadline > 0) {
                        throw new TransportException(ErrorCode.TIMEOUT, "aeron raw baseline: " + pub.channel()
                                + " not connected to its subscription before the deadline");
                    }
                    idle.idle();
                }
                return new Stream(pub, sub);
            } catch (RuntimeException e) {
                CloseHelper.quietClose(pub);
                CloseHelper.quietClose(sub);
                throw e;
            }
        }

        private static int boundPort(Subscription sub, long deadline) {
            while (System.nanoTime() - deadline < 0) {
                List<String> bound = sub.localSocketAddresses();
                if (!bound.isEmpty()) {
                    String a = bound.get(0);
                    return Integer.parseInt(a.substring(a.lastIndexOf(':') + 1));
                }
                Thread.onSpinWait();
            }
            throw new TransportException(ErrorCode.TIMEOUT, "aeron raw baseline: " + sub.channel()
                    + " bound no port before the deadline");
        }

        @Override
        public void close() {
            stop.set(true);
            CloseHelper.quietClose(client);
            CloseHelper.quietClose(lease);
        }
    }

    /** One publication and the subscription it reaches. */
    private record Stream(ExclusivePublication publication, Subscription subscription) implements AutoCloseable {
        @Override
        public void close() {
            CloseHelper.quietClose(publication);
            CloseHelper.quietClose(subscription);
        }
    }

    /** The second end: a thread whose failure the caller sees. */
    private static final class Worker {
        final Thread thread;
        final AtomicReference<Throwable> failure = new AtomicReference<>();

        private Worker(Thread thread) {
            this.thread = thread;
        }

        static Worker start(String name, Runnable body) {
            Worker[] w = new Worker[1];
            Thread t = new Thread(() -> {
                try {
                    body.run();
                } catch (Throwable e) {
                    w[0].failure.set(e);
                }
            }, name);
            t.setDaemon(true);
            w[0] = new Worker(t);
            t.start();
            return w[0];
        }

        void join(long deadline) {
            try {
                long wait = Math.max(1, Math.min(JOIN_NANOS, deadline - System.nanoTime()));
                thread.join(TimeUnit.NANOSECONDS.toMillis(wait) + 1);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                throw new TransportException(ErrorCode.CANCELLED, "aeron raw baseline: interrupted");
            }
            Throwable f = failure.get();
            if (f != null) {
                throw new TransportException(codeOf(f), "aeron raw baseline: " + thread.getName()
                        + " failed: " + f, f);
            }
            if (thread.isAlive()) {
                throw new TransportException(ErrorCode.TIMEOUT, "aeron raw baseline: " + thread.getName()
                        + " did not finish in time");
            }
        }

        void joinQuietly() {
            try {
                thread.join(TimeUnit.NANOSECONDS.toMillis(JOIN_NANOS));
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }
    }

    @Override
    public String toString() {
        return "AeronRawBaseline";
    }
}
