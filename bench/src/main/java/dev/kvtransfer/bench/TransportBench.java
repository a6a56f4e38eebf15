package dev.kvtransfer.bench;

import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.memory.MemoryKind;
import dev.kvtransfer.api.transport.Connection;
import dev.kvtransfer.api.transport.ConnectionManager;
import dev.kvtransfer.api.transport.Tags;
import dev.kvtransfer.api.transport.TransportConfig;
import dev.kvtransfer.api.transport.TransportProvider;
import dev.kvtransfer.core.memory.HostBufferManager;
import dev.kvtransfer.core.pattern.KvPattern;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.time.Duration;
import java.util.Map;
import java.util.Objects;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;

/**
 * Transport level: two endpoints of one provider in this JVM ({@code create} twice from the same settings), a
 * {@link Connection} each way, messages of one size. Throughput: a sender thread sends {@code warmup + messages}
 * messages back to back while this thread receives them (one posted receive at a time, as a rank's receive loop
 * does); the last {@code messages} are timed. Latency: round trips (send, the peer's thread receives it whole and
 * sends it back, receive), one in flight. Heap: bytes allocated by all threads during the timed throughput part,
 * per message. {@code --verify}: every message of both parts is checked word by word against its
 * {@link KvPattern} source (see {@link #run}).
 */
final class TransportBench implements AutoCloseable {
    private static final int HELLO = TransportPeer.HELLO;
    private static final int DATA = TransportPeer.DATA;
    private static final int PING = TransportPeer.PING;
    private static final int PONG = TransportPeer.PONG;

    private final TransportProvider provider;
    private final HostBufferManager memory = new HostBufferManager();
    private final ConnectionManager a;
    private final ConnectionManager b;
    private final Connection ab;
    private final Connection ba;
    /** With {@code --peer process}: the child JVM holding the far end (then {@code b} and {@code ba} are null). */
    private final PeerProcess child;
    private final ExecutorService peer = Executors.newSingleThreadExecutor(r -> {
        Thread t = new Thread(r, "bench-transport-peer");
        t.setDaemon(true);
        return t;
    });

    /** Two endpoints of this JVM. */
    TransportBench(TransportProvider provider, TransportConfig base, Duration timeout) {
        this.provider = Objects.requireNonNull(provider, "provider");
        this.child = null;
        ConnectionManager first = null;
        ConnectionManager second = null;
        try {
            first = provider.create(base.toBuilder().name("bench-a").build());
            second = provider.create(base.toBuilder().name("bench-b").build());
            this.a = first;
            this.b = second;
            this.ab = a.connection(b.localAddress());
            MemoryBuffer hello = memory.allocate(8, MemoryKind.HOST);
            MemoryBuffer in = memory.allocate(8, MemoryKind.HOST);
            try {
                Future<?> sent = peer.submit(() -> ab.send(HELLO, hello, 0, 8, timeout));
                Connection c = b.recvConnect(HELLO, in, 0, 8, timeout);
                await(sent, timeout, "hello from bench-a to bench-b");
                this.ba = c;
            } finally {
                hello.close();
                in.close();
            }
        } catch (RuntimeException e) {
            peer.shutdownNow();
            closeQuietly(second);
            closeQuietly(first);
            memory.close();
            throw e;
        }
    }

    /** One endpoint here, the other in a child JVM ({@link TransportPeer}) started with this JVM's flags. */
    TransportBench(TransportProvider provider, TransportConfig base, Map<String, String> properties,
            Duration timeout) {
        this.provider = Objects.requireNonNull(provider, "provider");
        this.b = null;
        this.ba = null;
        ConnectionManager first = null;
        PeerProcess p = null;
        try {
            p = PeerProcess.start(provider.name(), properties, timeout);
            first = provider.create(base.toBuilder().name("bench-a").build());
            this.a = first;
            this.ab = a.connection(p.address);
            MemoryBuffer hello = memory.allocate(8, MemoryKind.HOST);
            try {
                ab.send(HELLO, hello, 0, 8, timeout);
            } finally {
                hello.close();
            }
            this.child = p;
        } catch (RuntimeException e) {
            peer.shutdownNow();
            closeQuietly(first);
            if (p != null) {
                p.close(Duration.ofSeconds(5));
            }
            memory.close();
            throw e;
        }
    }

    /** @return what runs, in words */
    String describe() {
        return "kvtransfer " + provider.name() + " Connection send/recv between "
                + (child == null ? "two endpoints of this JVM" : "this JVM and a child JVM (--peer process)");
    }

    /**
     * Throughput and latency for one message size. With {@code verify}, messages alternate between two sources
     * filled with different {@link KvPattern} seeds (so a receive that delivered nothing new cannot pass), and
     * every message received is checked word by word right after it arrived: in the throughput part inside the
     * timed loop (the row's note says so), in the latency part after the round trip's sample was taken.
     */
    Measurement run(long size, long warmup, long messages, int warmupSamples, int samples, boolean verify, int repeat,
            Duration timeout) {
        MemoryBuffer[] src = {memory.allocate(size, MemoryKind.HOST), memory.allocate(size, MemoryKind.HOST)};
        MemoryBuffer dst = memory.allocate(size, MemoryKind.HOST);
        MemoryBuffer echo = memory.allocate(size, MemoryKind.HOST);
        try {
            long[] seed = {size * 1_000_003L + repeat * 2L, size * 1_000_003L + repeat * 2L + 1};
            fill(src[0], seed[0]);
            fill(src[1], seed[1]);
            long verified = 0;
            long mismatches = 0;
            String firstMismatch = "";
            // Throughput.
            // The clock starts at the earlier of: the sender starting the first timed message, this thread
            // finishing the warm-up (a sender running ahead is timed from its first timed send).
            java.util.concurrent.atomic.AtomicLong senderStart = new java.util.concurrent.atomic.AtomicLong(
                    Long.MAX_VALUE);
            Future<?> sender = null;
            Connection in = ba;
            if (child != null) {
                command(TransportPeer.OP_SOURCE, size, warmup + messages, seed[0], warmup, timeout);
                in = ab;
            } else {
                sender = peer.submit(() -> {
                    for (long i = 0; i < warmup + messages; i++) {
                        if (i == warmup) {
                            senderStart.set(System.nanoTime());
                        }
                        ab.send(DATA, src[(int) (i & 1)], 0, size, timeout);
                    }
                });
            }
            HeapMeter heap = new HeapMeter();
            long t0 = 0;
            if (warmup == 0) {
                heap.start();
                t0 = System.nanoTime();
            }
            for (long i = 0; i < warmup + messages; i++) {
                in.recv(DATA, dst, 0, size, timeout);
                if (verify) {
                    long bad = mismatches(dst, seed[(int) (i & 1)]);
                    verified += words(size);
                    mismatches += bad;
                    if (bad > 0 && firstMismatch.isEmpty()) {
                        firstMismatch = "message " + i + " of " + size + " B: " + bad + " words differ";
                    }
                }
                if (i == warmup - 1) {
                    heap.start();
                    t0 = System.nanoTime();
                }
            }
            long t1 = System.nanoTime();
            long allocated = heap.stop();
            if (child != null) {
                // The peer's nanoTime: CLOCK_MONOTONIC, the same clock in every process of this host.
                senderStart.set(done(timeout, "sending " + (warmup + messages) + " messages of " + size + " B"));
            } else {
                await(sender, timeout, "sending " + (warmup + messages) + " messages of " + size + " B");
            }
            t0 = Math.min(t0, senderStart.get());
            // Latency.
            Future<?> echoer = null;
            if (child != null) {
                command(TransportPeer.OP_ECHO, size, warmupSamples + samples, 0, 0, timeout);
            } else {
                echoer = peer.submit(() -> {
                    for (int i = 0; i < warmupSamples + samples; i++) {
                        ba.recv(PING, echo, 0, size, timeout);
                        ba.send(PONG, echo, 0, size, timeout);
                    }
                });
            }
            Latencies lat = new Latencies();
            for (int i = 0; i < warmupSamples + samples; i++) {
                long s = System.nanoTime();
                ab.send(PING, src[i & 1], 0, size, timeout);
                ab.recv(PONG, dst, 0, size, timeout);
                if (i >= warmupSamples) {
                    lat.record(System.nanoTime() - s);
                }
                if (verify) {
                    long bad = mismatches(dst, seed[i & 1]);
                    verified += words(size);
                    mismatches += bad;
                    if (bad > 0 && firstMismatch.isEmpty()) {
                        firstMismatch = "round trip " + i + " of " + size + " B: " + bad + " words differ";
                    }
                }
            }
            if (child != null) {
                done(timeout, "echoing " + (warmupSamples + samples) + " messages of " + size + " B");
            } else {
                await(echoer, timeout, "echoing " + (warmupSamples + samples) + " messages of " + size + " B");
            }
            Latencies.Percentiles p = lat.percentiles();
            String note = verify ? "--verify: throughput timed with the receiver's check of every message" : "";
            if (child != null) {
                note = (note.isEmpty() ? "" : note + "; ") + "heap: this JVM (the receiving end) only";
            }
            if (!firstMismatch.isEmpty()) {
                note += "; first mismatch: " + firstMismatch;
            }
            return new Measurement("transport", provider.name(), "ours", describe(), "-", "-", size, 0, 1, repeat,
                    messages, messages * size, Math.max(1, t1 - t0), p.p50Us(), p.p99Us(), p.p999Us(), p.maxUs(),
                    allocated < 0 ? Double.NaN : allocated / (double) messages, verified, mismatches, 0, note);
        } finally {
            src[0].close();
            src[1].close();
            dst.close();
            echo.close();
        }
    }

    /** Sends the child a command over the measured connection (untimed). */
    private void command(long op, long size, long count, long seed, long warmup, Duration timeout) {
        try (MemoryBuffer c = memory.allocate(TransportPeer.CMD_BYTES, MemoryKind.HOST)) {
            ByteBuffer bb = c.asByteBuffer().order(ByteOrder.LITTLE_ENDIAN);
            bb.putLong(0, op).putLong(8, size).putLong(16, count).putLong(24, seed).putLong(32, warmup);
            ab.send(TransportPeer.CMD, c, 0, TransportPeer.CMD_BYTES, timeout);
        }
    }

    /**
     * Waits for the child's DONE after a command; a child that died says why.
     *
     * @return the child's {@code System.nanoTime()} when it started the first timed message (SOURCE), else 0
     */
    private long done(Duration timeout, String what) {
        try (MemoryBuffer d = memory.allocate(8, MemoryKind.HOST)) {
            ab.recv(TransportPeer.DONE, d, 0, 8, timeout);
            return d.asByteBuffer().order(ByteOrder.LITTLE_ENDIAN).getLong(0);
        } catch (RuntimeException e) {
            throw new IllegalStateException(what + " in the peer JVM: " + e + child.exitSummary(), e);
        }
    }

    /** @return the 8-byte words (and tail bytes) a buffer of {@code size} holds, as {@link #check} counts them */
    static long words(long size) {
        return size / 8 + size % 8;
    }

    private static long mismatches(MemoryBuffer b, long seed) {
        return check(b, seed)[1];
    }

    /** Writes {@code KvPattern.value(seed, 0, 0, 0, i, 0)} into 8-byte word {@code i} (the tail: its low bytes). */
    static void fill(MemoryBuffer b, long seed) {
        ByteBuffer bb = b.asByteBuffer().order(ByteOrder.LITTLE_ENDIAN);
        long words = b.size() / 8;
        for (long i = 0; i < words; i++) {
            bb.putLong((int) (i * 8), KvPattern.value(seed, 0, 0, 0, i, 0));
        }
        long w = KvPattern.value(seed, 0, 0, 0, words, 0);
        for (long i = words * 8; i < b.size(); i++) {
            bb.put((int) i, (byte) (w >>> (8 * (i - words * 8))));
        }
    }

    /** @return {checked words (and tail bytes), mismatches} */
    static long[] check(MemoryBuffer b, long seed) {
        ByteBuffer bb = b.asByteBuffer().order(ByteOrder.LITTLE_ENDIAN);
        long words = b.size() / 8;
        long bad = 0;
        for (long i = 0; i < words; i++) {
            if (bb.getLong((int) (i * 8)) != KvPattern.value(seed, 0, 0, 0, i, 0)) {
                bad++;
            }
        }
        long w = KvPattern.value(seed, 0, 0, 0, words, 0);
        long tail = b.size() - words * 8;
        for (long i = 0; i < tail; i++) {
            if (bb.get((int) (words * 8 + i)) != (byte) (w >>> (8 * i))) {
                bad++;
            }
        }
        return new long[] {words + tail, bad};
    }

    private static void await(Future<?> f, Duration timeout, String what) {
        try {
            f.get(timeout.toNanos() + TimeUnit.SECONDS.toNanos(5), TimeUnit.NANOSECONDS);
        } catch (TimeoutException e) {
            f.cancel(true);
            throw new IllegalStateException(what + ": not done within " + timeout.toSeconds() + " s", e);
        } catch (ExecutionException e) {
            Throwable c = e.getCause();
            if (c instanceof RuntimeException r) {
                throw r;
            }
            throw new IllegalStateException(what + " failed: " + c, c);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IllegalStateException(what + ": interrupted", e);
        }
    }

    private static void closeQuietly(ConnectionManager m) {
        if (m != null) {
            try {
                m.close();
            } catch (RuntimeException e) {
                System.err.println("kvtransfer bench: closing " + m.localAddress() + ": " + e);
            }
        }
    }

    @Override
    public void close() {
        if (child != null) {
            try {
                command(TransportPeer.OP_QUIT, 0, 0, 0, 0, Duration.ofSeconds(5));
            } catch (RuntimeException e) {
                // it may be gone already: close() below stops it either way
            }
            child.close(Duration.ofSeconds(10));
        }
        peer.shutdownNow();
        try {
            peer.awaitTermination(10, TimeUnit.SECONDS);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
        closeQuietly(a);
        closeQuietly(b);
        memory.close();
    }
}
