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
    private static final int HELLO = Tags.FIRST_DATA_TAG + 11;
    private static final int DATA = Tags.FIRST_DATA_TAG + 12;
    private static final int PING = Tags.FIRST_DATA_TAG + 13;
    private static final int PONG = Tags.FIRST_DATA_TAG + 14;

    private final TransportProvider provider;
    private final HostBufferManager memory = new HostBufferManager();
    private final ConnectionManager a;
    private final ConnectionManager b;
    private final Connection ab;
    private final Connection ba;
    private final ExecutorService peer = Executors.newSingleThreadExecutor(r -> {
        Thread t = new Thread(r, "bench-transport-peer");
        t.setDaemon(true);
        return t;
    });

    TransportBench(TransportProvider provider, TransportConfig base, Duration timeout) {
        this.provider = Objects.requireNonNull(provider, "provider");
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

    /** @return what runs, in words */
    String describe() {
        return "kvtransfer " + provider.name() + " Connection send/recv between two endpoints of this JVM";
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
            Future<?> sender = peer.submit(() -> {
                for (long i = 0; i < warmup + messages; i++) {
                    ab.send(DATA, src[(int) (i & 1)], 0, size, timeout);
                }
            });
            HeapMeter heap = new HeapMeter();
            long t0 = 0;
            if (warmup == 0) {
                heap.start();
                t0 = System.nanoTime();
            }
            for (long i = 0; i < warmup + messages; i++) {
                ba.recv(DATA, dst, 0, size, timeout);
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
            await(sender, timeout, "sending " + (warmup + messages) + " messages of " + size + " B");
            // Latency.
            Future<?> echoer = peer.submit(() -> {
                for (int i = 0; i < warmupSamples + samples; i++) {
                    ba.recv(PING, echo, 0, size, timeout);
                    ba.send(PONG, echo, 0, size, timeout);
                }
            });
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
            await(echoer, timeout, "echoing " + (warmupSamples + samples) + " messages of " + size + " B");
            Latencies.Percentiles p = lat.percentiles();
            String note = verify ? "--verify: throughput timed with the receiver's check of every message" : "";
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
