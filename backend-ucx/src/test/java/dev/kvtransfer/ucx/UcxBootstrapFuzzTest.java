package dev.kvtransfer.ucx;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.KvTransferException;
import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.transport.Connection;
import dev.kvtransfer.api.transport.TransportConfig;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.io.IOException;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.TreeMap;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;

import static dev.kvtransfer.ucx.UcxTestSupport.buffer;
import static dev.kvtransfer.ucx.UcxTestSupport.fill;
import static org.assertj.core.api.Assertions.assertThat;

/**
 * Random and crafted bytes at a manager's bootstrap port (loopback only, bounded in count and time) while a
 * genuine peer moves verified messages to it: truncated headers, huge and negative lengths, garbage, every
 * prefix and many bit flips of a valid hello, forged hellos claiming the genuine peer, replays, frames out of
 * order, handshakes abandoned half way. The process stays up, every genuine transfer completes verified, the
 * genuine connection never fails, hostile sessions leave no state (no connection, no session, no heap in
 * proportion to the lengths they claimed).
 */
@Timeout(value = 300, unit = TimeUnit.SECONDS)
class UcxBootstrapFuzzTest {
    private static final byte[] SECRET = "fuzzing secret of thirty-two b..".getBytes(StandardCharsets.US_ASCII);
    private static final int ROUNDS = Integer.getInteger("ucx.fuzz.rounds", 300);

    @Test
    void hostileBytesAtTheBootstrapPortLeaveTheProcessUpAndGenuineTransfersVerified() throws Exception {
        for (byte[] secret : new byte[][] {null, SECRET}) {
            fuzz(secret);
        }
    }

    @Test
    void inNetModeUcxsOwnTcpPortTakesRandomBytesToo() throws Exception {
        java.util.Set<String> before = UcxBootstrapTest.listeningSockets();
        try (UcxConnectionManager m = new UcxConnectionManager(TransportConfig.builder().name("fuzz-net")
                .property(UcxSettings.TRANSPORTS, "net").build());
             UcxConnectionManager peer = new UcxConnectionManager(TransportConfig.builder().name("fuzz-net-peer")
                     .property(UcxSettings.TRANSPORTS, "net").build())) {
            java.util.Set<String> ucxPorts = new java.util.HashSet<>(UcxBootstrapTest.listeningSockets());
            ucxPorts.removeAll(before);
            ucxPorts.remove(m.localAddress());
            ucxPorts.remove(peer.localAddress());
            assertThat(ucxPorts).as("UCX's TCP transport listens (net mode)").isNotEmpty();
            Random r = new Random(0x7C9);
            int n = 0;
            for (String a : ucxPorts) {
                for (int i = 0; i < 200; i++, n++) {
                    byte[] b = new byte[1 + r.nextInt(i % 3 == 0 ? 64 : 2048)];
                    r.nextBytes(b);
                    send(a, b, false);
                }
            }
            System.out.println("UCX tcp port fuzz (net mode): " + n + " random inputs at " + ucxPorts);
            assertThat(m.isRunning()).isTrue();
            UcxTestSupport.exchange(m, peer, 3200, 11);
        }
    }

    private void fuzz(byte[] secret) throws Exception {
        List<Throwable> targetErrors = Collections.synchronizedList(new ArrayList<>());
        List<Throwable> peerErrors = Collections.synchronizedList(new ArrayList<>());
        TransportConfig.Builder base = TransportConfig.builder().defaultTimeout(Duration.ofSeconds(30))
                .authSecret(secret).property(UcxSettings.HANDSHAKE_TIMEOUT, "400");
        Runtime rt = Runtime.getRuntime();
        System.gc();
        long heapBefore = rt.totalMemory() - rt.freeMemory();
        try (UcxConnectionManager target = new UcxConnectionManager(base.name("fuzz-target")
                .errorHandler(targetErrors::add).build());
             UcxConnectionManager peer = new UcxConnectionManager(base.name("fuzz-peer")
                     .errorHandler(peerErrors::add).build())) {
            Connection toTarget = peer.connection(target.localAddress());
            AtomicBoolean stop = new AtomicBoolean();
            AtomicLong verified = new AtomicLong();
            ExecutorService genuine = Executors.newFixedThreadPool(2);
            // Genuine traffic: eager and rendezvous messages, each with its index in front, the last one index -1.
            Future<?> sender = genuine.submit(() -> {
                MemoryBuffer m = buffer(1 << 20);
                for (long i = 0; ; i++) {
                    long size = i % 2 == 0 ? 4096 : 1 << 20;
                    boolean last = stop.get();
                    fill(m, 8, size - 8, 9000 + i);
                    m.asByteBuffer().putLong(0, last ? -1 : i);
                    toTarget.send(3000, m, 0, size);
                    if (last) {
                        return null;
                    }
                }
            });
            Future<?> receiver = genuine.submit(() -> {
                MemoryBuffer m = buffer(1 << 20);
                Connection fromPeer = target.connection(peer.localAddress());
                for (long i = 0; ; i++) {
                    long size = i % 2 == 0 ? 4096 : 1 << 20;
                    fromPeer.recv(3000, m, 0, size, Duration.ofSeconds(60));
                    long index = m.asByteBuffer().getLong(0);
                    UcxTestSupport.verify(m, 8, size - 8, 9000 + i);
                    if (index == -1) {
                        return null;
                    }
                    assertThat(index).isEqualTo(i);
                    verified.incrementAndGet();
                }
            });
            Map<String, Integer> tried = new TreeMap<>();
            long t0 = System.nanoTime();
            attack(target, peer, secret, tried);
            long attackMs = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - t0);
            stop.set(true);
            sender.get(60, TimeUnit.SECONDS);
            receiver.get(60, TimeUnit.SECONDS);
            genuine.shutdown();
            int total = tried.values().stream().mapToInt(Integer::intValue).sum();
            System.out.println("bootstrap fuzz (" + (secret == null ? "no secret" : "with secret") + "): " + total
                    + " hostile inputs in " + attackMs + " ms " + tried + "; " + verified.get()
                    + " genuine messages verified meanwhile; " + target.refusedHandshakes() + " handshakes refused, "
                    + target.errorCount() + " errors reported");
            assertThat(target.isRunning()).isTrue();
            assertThat(verified.get()).isGreaterThan(0);
            assertThat(peerErrors).as("the genuine peer saw no failure").isEmpty();
            assertThat(targetErrors).filteredOn(t -> t instanceof KvTransferException k
                    && k.code() == ErrorCode.PEER_LOST).as("the genuine connection never failed").isEmpty();
            assertThat(target.connectionsForTest()).extracting(Connection::peer)
                    .as("hostile hellos left no connection").containsExactly(peer.localAddress());
            org.awaitility.Awaitility.await().atMost(Duration.ofSeconds(10)).untilAsserted(() ->
                    assertThat(target.openControlSessions()).as("hostile sessions closed").isLessThanOrEqualTo(2));
            // The genuine pair still connects afresh after all that.
            UcxTestSupport.exchange(target, peer, 3100, 5);
        }
        System.gc();
        long heapAfter = rt.totalMemory() - rt.freeMemory();
        System.out.println("heap used before " + (heapBefore >> 20) + " MiB, after " + (heapAfter >> 20) + " MiB");
        // Lengths up to 4 GiB were claimed thousands of times: nothing may be sized from them.
        assertThat(heapAfter - heapBefore).isLessThan(256L << 20);
    }

    /** Sends every input of the corpus to the target, each on its own connection. */
    private void attack(UcxConnectionManager target, UcxConnectionManager peer, byte[] secret,
                        Map<String, Integer> tried) throws Exception {
        Random r = new Random(0xF022);
        String at = target.localAddress();
        String genuinePeer = peer.localAddress();
        ExecutorService pool = Executors.newFixedThreadPool(8);
        List<Future<?>> inflight = new ArrayList<>();
        for (int round = 0; round < ROUNDS; round++) {
            List<Map.Entry<String, byte[]>> inputs = new ArrayList<>();
            byte[] garbage = new byte[1 + r.nextInt(4096)];
            r.nextBytes(garbage);
            inputs.add(Map.entry("random bytes", garbage));
            inputs.add(Map.entry("truncated header", java.util.Arrays.copyOf(garbage, 1 + r.nextInt(3))));
            int[] lengths = {0, -1, Integer.MAX_VALUE, BootstrapFrames.MAX_FRAME + 1, 1 << 30, -2_000_000_000};
            int len = lengths[round % lengths.length];
            inputs.add(Map.entry("huge or negative length", frame(len, garbage, Math.min(64, garbage.length))));
            inputs.add(Map.entry("garbage frame", frame(garbage.length, garbage, garbage.length)));
            ByteBuffer hello = RawBootstrapClient.hello(RawBootstrapClient.plausibleHello("127.0.0.1:" + (1 + round),
                    at, 1000 + round), secret);
            byte[] h = toBytes(hello);
            inputs.add(Map.entry("hello prefix", frame(h.length, h, r.nextInt(h.length))));
            byte[] flipped = h.clone();
            for (int f = 0; f < 1 + r.nextInt(4); f++) {
                flipped[r.nextInt(flipped.length)] ^= (byte) (1 << r.nextInt(8));
            }
            inputs.add(Map.entry("hello bit flips", frame(flipped.length, flipped, flipped.length)));
            byte[] bigField = h.clone();
            // The address length field (after type, magic, version, instance, nonce, timestamp) claims 64 KiB.
            bigField[1 + 4 + 2 + 8 + 16 + 8] = (byte) 0xff;
            bigField[1 + 4 + 2 + 8 + 16 + 8 + 1] = (byte) 0xff;
            inputs.add(Map.entry("hello with a huge inner length", frame(bigField.length, bigField, bigField.length)));
            ByteBuffer forged = RawBootstrapClient.hello(RawBootstrapClient.plausibleHello(genuinePeer, at,
                    r.nextLong() | 1), secret);
            inputs.add(Map.entry("forged hello claiming the genuine peer", frame(forged.remaining(),
                    toBytes(forged), forged.remaining())));
            int t = 2 + r.nextInt(10);
            byte[] outOfOrder = new byte[1 + r.nextInt(64)];
            r.nextBytes(outOfOrder);
            outOfOrder[0] = (byte) t;
            inputs.add(Map.entry("frame out of order", frame(outOfOrder.length, outOfOrder, outOfOrder.length)));
            inputs.add(Map.entry("hello then garbage confirm", concat(frame(h.length, h, h.length),
                    frame(33, garbage, Math.min(33, garbage.length)))));
            if (round % 10 == 0) {
                inputs.add(Map.entry("hello then silence", frame(h.length, h, h.length)));
            }
            if (round % 20 == 0) {
                // A replay: the same valid hello twice (the first one is welcomed, the second refused with a secret).
                inputs.add(Map.entry("replayed hello", frame(h.length, h, h.length)));
            }
            for (Map.Entry<String, byte[]> in : inputs) {
                tried.merge(in.getKey(), 1, Integer::sum);
                boolean linger = in.getKey().equals("hello then silence");
                inflight.add(pool.submit(() -> send(at, in.getValue(), linger)));
            }
            if (inflight.size() > 64) {
                for (Future<?> f : inflight) {
                    f.get(30, TimeUnit.SECONDS);
                }
                inflight.clear();
            }
        }
        for (Future<?> f : inflight) {
            f.get(30, TimeUnit.SECONDS);
        }
        pool.shutdown();
    }

    private static byte[] toBytes(ByteBuffer b) {
        byte[] v = new byte[b.remaining()];
        b.duplicate().get(v);
        return v;
    }

    /** A frame header claiming {@code length} followed by the first {@code n} bytes of {@code body}. */
    private static byte[] frame(int length, byte[] body, int n) {
        ByteBuffer b = ByteBuffer.allocate(4 + n).order(ByteOrder.LITTLE_ENDIAN);
        b.putInt(length).put(body, 0, n);
        return b.array();
    }

    private static byte[] concat(byte[] a, byte[] b) {
        byte[] c = java.util.Arrays.copyOf(a, a.length + b.length);
        System.arraycopy(b, 0, c, a.length, b.length);
        return c;
    }

    private static Void send(String address, byte[] bytes, boolean linger) {
        try (Socket s = new Socket()) {
            s.connect((InetSocketAddress) UcxAddresses.parse(address), 5000);
            s.setSoTimeout(linger ? 600 : 20);
            s.getOutputStream().write(bytes);
            s.getOutputStream().flush();
            byte[] sink = new byte[1024];
            try {
                while (s.getInputStream().read(sink) >= 0) {
                    // Drain whatever the target answers until it closes or the timeout passes.
                }
            } catch (IOException e) {
                // Timeout or reset: fine.
            }
        } catch (IOException e) {
            // The target may reset a connection it refused: fine.
        }
        return null;
    }
}
