package dev.kvtransfer.testkit.loopback;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.memory.MemoryKind;
import dev.kvtransfer.api.transport.Connection;
import dev.kvtransfer.api.transport.ConnectionManager;
import dev.kvtransfer.api.transport.TransportClosedException;
import dev.kvtransfer.api.transport.TransportConfig;
import dev.kvtransfer.api.transport.TransportException;
import dev.kvtransfer.core.memory.HostBufferManager;
import dev.kvtransfer.core.memory.MemoryAccess;
import org.awaitility.Awaitility;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReference;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/**
 * The loopback transport's rendezvous for sends over {@link Connection#EAGER_LIMIT}: a receive takes the message
 * straight from the waiting sender's buffer (one copy), the sender goes eager after its bounded wait (never a
 * deadlock), order holds across both kinds, and close, interrupt and length mismatch end a waiting send the way the
 * contract says. Whether a message travelled by rendezvous or eagerly is told apart without clocks: a rendezvous
 * receive sees bytes the sender changed while it waited, an eager one sees the bytes of the moment it was copied.
 */
class LoopbackRendezvousTest {
    private static final long LARGE = (1 << 20) + 13;
    private static final Duration LONG = Duration.ofSeconds(30);

    private final HostBufferManager mm = new HostBufferManager();
    private final List<ConnectionManager> managers = new ArrayList<>();
    private final List<MemoryBuffer> buffers = new ArrayList<>();
    private final List<Thread> threads = new ArrayList<>();

    @AfterEach
    void tearDown() throws InterruptedException {
        managers.forEach(ConnectionManager::close);
        for (Thread t : threads) {
            t.join(TimeUnit.SECONDS.toMillis(30));
            assertThat(t.isAlive()).as("%s ended", t.getName()).isFalse();
        }
        buffers.forEach(MemoryBuffer::close);
        mm.close();
    }

    /** A manager whose large sends wait {@code waitMicros} for their receive. */
    private ConnectionManager manager(String fabric, long waitMicros) {
        ConnectionManager m = new LoopbackTransportProvider().create(TransportConfig.builder().name("rv")
                .defaultTimeout(LONG).property(LoopbackTransportProvider.FABRIC_PROPERTY, fabric)
                .property(LoopbackTransportProvider.RENDEZVOUS_WAIT_US_PROPERTY, Long.toString(waitMicros))
                .build());
        managers.add(m);
        return m;
    }

    private MemoryBuffer buffer(long n) {
        MemoryBuffer b = mm.allocate(n, MemoryKind.HOST);
        buffers.add(b);
        return b;
    }

    private static void fill(MemoryBuffer b, long length, long seed) {
        for (long i = 0; i < length; i++) {
            MemoryAccess.putByte(b.address() + i, (byte) (seed * 31 + i * 7 + (i >>> 9)));
        }
    }

    private static void verify(MemoryBuffer b, long length, long seed) {
        for (long i = 0; i < length; i++) {
            byte want = (byte) (seed * 31 + i * 7 + (i >>> 9));
            if (MemoryAccess.getByte(b.address() + i) != want) {
                throw new AssertionError("byte " + i + " of " + length + " (seed " + seed + "): "
                        + MemoryAccess.getByte(b.address() + i) + ", expected " + want);
            }
        }
    }

    /** Starts a send on its own thread; the future ends with the send. */
    private CompletableFuture<Void> sendAsync(Connection c, int tag, MemoryBuffer src, long length,
                                              AtomicReference<Thread> thread) {
        CompletableFuture<Void> f = new CompletableFuture<>();
        Thread t = new Thread(() -> {
            try {
                c.send(tag, src, 0, length, LONG);
                f.complete(null);
            } catch (Throwable e) {
                f.completeExceptionally(e);
            }
        }, "rv-sender-" + threads.size());
        threads.add(t);
        thread.set(t);
        t.start();
        return f;
    }

    /** Waits until the thread blocks in its call; fails at once if that call has already ended. */
    private static void awaitWaiting(Thread t, CompletableFuture<?> call) {
        Awaitility.await().atMost(LONG).until(() -> call.isDone() || t.getState() == Thread.State.TIMED_WAITING
                || t.getState() == Thread.State.WAITING);
        assertThat(call).as("%s's call still waits", t.getName()).isNotDone();
    }

    private static Throwable failure(CompletableFuture<Void> f) throws InterruptedException {
        try {
            f.get(30, TimeUnit.SECONDS);
            return null;
        } catch (ExecutionException e) {
            return e.getCause();
        } catch (java.util.concurrent.TimeoutException e) {
            throw new AssertionError("the send did not end", e);
        }
    }

    @Test
    void aLargeSendWaitsAndTheReceiveCopiesStraightFromTheSendersBuffer() throws Exception {
        ConnectionManager a = manager("rv-place", 60_000_000);
        ConnectionManager b = manager("rv-place", 60_000_000);
        MemoryBuffer src = buffer(LARGE);
        fill(src, LARGE, 1);
        AtomicReference<Thread> t = new AtomicReference<>();
        CompletableFuture<Void> send = sendAsync(a.connection(b.localAddress()), 77, src, LARGE, t);
        awaitWaiting(t.get(), send); // no receive yet: a rendezvous send waits
        // Changed while the sender waits: only a receive copying from the sender's buffer sees these bytes.
        fill(src, LARGE, 2);
        MemoryBuffer dst = buffer(LARGE + 64);
        b.connection(a.localAddress()).recv(77, dst, 64, LARGE, LONG);
        assertThat(failure(send)).isNull();
        MemoryBuffer view = dst.slice(64, LARGE);
        verify(view, LARGE, 2);
    }

    @Test
    void aReceivePostedFirstGetsTheLargeSendInOneCopy() throws Exception {
        ConnectionManager a = manager("rv-posted", 60_000_000);
        ConnectionManager b = manager("rv-posted", 60_000_000);
        MemoryBuffer src = buffer(LARGE);
        MemoryBuffer dst = buffer(LARGE);
        fill(src, LARGE, 3);
        CompletableFuture<Void> recv = new CompletableFuture<>();
        Thread r = new Thread(() -> {
            try {
                b.connection(a.localAddress()).recv(78, dst, 0, LARGE, LONG);
                recv.complete(null);
            } catch (Throwable e) {
                recv.completeExceptionally(e);
            }
        }, "rv-receiver");
        threads.add(r);
        r.start();
        awaitWaiting(r, recv);
        a.connection(b.localAddress()).send(78, src, 0, LARGE, LONG); // finds the receive: returns once copied
        fill(src, LARGE, 4); // after the send returned: must not matter
        assertThat(failure(recv)).isNull();
        verify(dst, LARGE, 3);
    }

    @Test
    void withoutAReceiveTheSendGoesEagerAfterItsWaitAndKeepsItsBytes() {
        ConnectionManager a = manager("rv-eager", 1_000); // 1 ms
        ConnectionManager b = manager("rv-eager", 1_000);
        MemoryBuffer src = buffer(LARGE);
        fill(src, LARGE, 5);
        // Same thread, no receive posted: a sender that waited for it forever would hang here.
        a.connection(b.localAddress()).send(79, src, 0, LARGE, LONG);
        fill(src, LARGE, 6); // reused after the send returned: the eager copy keeps the old bytes
        MemoryBuffer dst = buffer(LARGE);
        b.connection(a.localAddress()).recv(79, dst, 0, LARGE, LONG);
        verify(dst, LARGE, 5);
    }

    @Test
    void aSendWhoseDeadlineIsShorterThanTheWaitGoesEagerWithinItsDeadline() {
        ConnectionManager a = manager("rv-deadline", 60_000_000);
        ConnectionManager b = manager("rv-deadline", 60_000_000);
        MemoryBuffer src = buffer(LARGE);
        fill(src, LARGE, 7);
        a.connection(b.localAddress()).send(80, src, 0, LARGE, Duration.ZERO);
        a.connection(b.localAddress()).send(80, src, 0, LARGE, Duration.ofMillis(1));
        fill(src, LARGE, 8);
        MemoryBuffer dst = buffer(LARGE);
        Connection ba = b.connection(a.localAddress());
        ba.recv(80, dst, 0, LARGE, LONG);
        verify(dst, LARGE, 7);
        ba.recv(80, dst, 0, LARGE, LONG);
        verify(dst, LARGE, 7);
    }

    @Test
    void aWaitOfZeroMakesEverySendEager() {
        ConnectionManager a = manager("rv-zero", 0);
        ConnectionManager b = manager("rv-zero", 0);
        MemoryBuffer src = buffer(LARGE);
        fill(src, LARGE, 9);
        a.connection(b.localAddress()).send(81, src, 0, LARGE); // default deadline 30 s, no receive: returns
        fill(src, LARGE, 10);
        MemoryBuffer dst = buffer(LARGE);
        b.connection(a.localAddress()).recv(81, dst, 0, LARGE, LONG);
        verify(dst, LARGE, 9);
    }

    @Test
    void eagerFallbacksAndSmallMessagesKeepTheirOrderOnOneTag() {
        ConnectionManager a = manager("rv-order", 200); // 0.2 ms: every large send below falls back
        ConnectionManager b = manager("rv-order", 200);
        Connection ab = a.connection(b.localAddress());
        int n = 12;
        long[] sizes = new long[n];
        for (int i = 0; i < n; i++) {
            sizes[i] = i % 3 == 0 ? 100 : i % 3 == 1 ? Connection.EAGER_LIMIT + 1 + i : 300_000 + i;
            MemoryBuffer src = buffer(sizes[i]);
            fill(src, sizes[i], 100 + i);
            ab.send(82, src, 0, sizes[i], LONG);
        }
        Connection ba = b.connection(a.localAddress());
        for (int i = 0; i < n; i++) {
            MemoryBuffer dst = buffer(sizes[i]);
            ba.recv(82, dst, 0, sizes[i], LONG);
            verify(dst, sizes[i], 100 + i);
        }
    }

    @Test
    void concurrentLargeSendersToOneReceiverAreEachDeliveredInOrder() throws Exception {
        int senders = 3;
        int perSender = 8;
        long size = 300_000 + 17;
        ConnectionManager receiver = manager("rv-many", 60_000_000);
        List<ConnectionManager> from = new ArrayList<>();
        List<CompletableFuture<Void>> done = startSenders(receiver, from, senders, "rv-many", 60_000_000, 83, perSender,
                size);
        MemoryBuffer dst = buffer(size);
        // Interleaved, in the reverse order of the senders: each (sender, tag) stream arrives in order.
        for (int i = 0; i < perSender; i++) {
            for (int s = senders - 1; s >= 0; s--) {
                receiver.connection(from.get(s).localAddress()).recv(83, dst, 0, size, LONG);
                verify(dst, size, s * 1000L + i);
            }
        }
        for (CompletableFuture<Void> f : done) {
            assertThat(failure(f)).isNull();
        }
        // Any sender through recvConnect as well.
        Connection c0 = from.get(0).connection(receiver.localAddress());
        MemoryBuffer src = buffer(size);
        fill(src, size, 4242);
        AtomicReference<Thread> t = new AtomicReference<>();
        CompletableFuture<Void> send = sendAsync(c0, 84, src, size, t);
        awaitWaiting(t.get(), send);
        Connection got = receiver.recvConnect(84, dst, 0, size);
        assertThat(got.peer()).isEqualTo(from.get(0).localAddress());
        verify(dst, size, 4242);
        assertThat(failure(send)).isNull();
    }

    @Test
    void sendersFallingBackWhileReceivesArriveDeliverEveryMessageIntactAndInOrder() throws Exception {
        // A wait of 50 us against a receiver that works between its receives: sends fall back to eager, are taken
        // during their fallback copy, or are taken while they wait, in every interleaving the threads produce.
        int senders = 2;
        int perSender = 60;
        long size = 256 * 1024 + 8;
        ConnectionManager receiver = manager("rv-race", 50);
        List<ConnectionManager> from = new ArrayList<>();
        List<CompletableFuture<Void>> done = startSenders(receiver, from, senders, "rv-race", 50, 89, perSender, size);
        MemoryBuffer dst = buffer(size);
        for (int i = 0; i < perSender; i++) {
            for (int s = 0; s < senders; s++) {
                receiver.connection(from.get(s).localAddress()).recv(89, dst, 0, size, LONG);
                verify(dst, size, s * 1000L + i); // the receiver's work between receives: a full check
            }
        }
        for (CompletableFuture<Void> f : done) {
            assertThat(failure(f)).isNull();
        }
    }

    @Test
    void aLengthMismatchFailsTheReceiveAndCompletesTheWaitingSend() throws Exception {
        ConnectionManager a = manager("rv-mismatch", 60_000_000);
        ConnectionManager b = manager("rv-mismatch", 60_000_000);
        MemoryBuffer src = buffer(LARGE);
        AtomicReference<Thread> t = new AtomicReference<>();
        CompletableFuture<Void> send = sendAsync(a.connection(b.localAddress()), 85, src, LARGE, t);
        awaitWaiting(t.get(), send);
        MemoryBuffer dst = buffer(LARGE);
        assertThatThrownBy(() -> b.connection(a.localAddress()).recv(85, dst, 0, LARGE - 1, LONG))
                .isInstanceOfSatisfying(TransportException.class, e -> assertThat(e.code())
                        .isEqualTo(ErrorCode.MALFORMED));
        assertThat(failure(send)).isNull();
    }

    @Test
    void closingTheSenderFailsItsWaitingSendAndWithdrawsTheMessage() throws Exception {
        ConnectionManager a = manager("rv-close-sender", 60_000_000);
        ConnectionManager b = manager("rv-close-sender", 60_000_000);
        MemoryBuffer src = buffer(LARGE);
        AtomicReference<Thread> t = new AtomicReference<>();
        CompletableFuture<Void> send = sendAsync(a.connection(b.localAddress()), 86, src, LARGE, t);
        awaitWaiting(t.get(), send);
        a.close();
        assertThat(failure(send)).isInstanceOf(TransportClosedException.class);
        // Withdrawn: nothing to receive from the closed sender.
        MemoryBuffer dst = buffer(LARGE);
        assertThatThrownBy(() -> b.connection(a.localAddress()).recv(86, dst, 0, LARGE, LONG))
                .isInstanceOfSatisfying(TransportException.class, e -> assertThat(e.code())
                        .isEqualTo(ErrorCode.PEER_LOST));
    }

    @Test
    void closingTheReceiverFailsAWaitingSendWithPeerLost() throws Exception {
        ConnectionManager a = manager("rv-close-receiver", 60_000_000);
        ConnectionManager b = manager("rv-close-receiver", 60_000_000);
        MemoryBuffer src = buffer(LARGE);
        AtomicReference<Thread> t = new AtomicReference<>();
        CompletableFuture<Void> send = sendAsync(a.connection(b.localAddress()), 87, src, LARGE, t);
        awaitWaiting(t.get(), send);
        b.close();
        assertThat(failure(send)).isInstanceOfSatisfying(TransportException.class, e -> assertThat(e.code())
                .isEqualTo(ErrorCode.PEER_LOST));
    }

    @Test
    void anInterruptedWaitingSendEndsWithNetworkInterruptedAndKeepsTheFlag() throws Exception {
        ConnectionManager a = manager("rv-interrupt", 60_000_000);
        ConnectionManager b = manager("rv-interrupt", 60_000_000);
        MemoryBuffer src = buffer(LARGE);
        CompletableFuture<Boolean> flag = new CompletableFuture<>();
        CompletableFuture<Void> send = new CompletableFuture<>();
        Thread t = new Thread(() -> {
            try {
                a.connection(b.localAddress()).send(88, src, 0, LARGE, LONG);
                send.complete(null);
            } catch (Throwable e) {
                send.completeExceptionally(e);
            } finally {
                flag.complete(Thread.currentThread().isInterrupted());
            }
        }, "rv-interrupted");
        threads.add(t);
        t.start();
        awaitWaiting(t, send);
        t.interrupt();
        assertThat(failure(send)).isInstanceOfSatisfying(TransportException.class, e -> {
            assertThat(e.code()).isEqualTo(ErrorCode.NETWORK);
            assertThat(e).hasMessageContaining("interrupted");
        });
        assertThat(flag.get(30, TimeUnit.SECONDS)).isTrue();
        // The withdrawn message is not delivered; a later one is.
        MemoryBuffer small = buffer(16);
        fill(small, 16, 11);
        a.connection(b.localAddress()).send(88, small, 0, 16, LONG);
        MemoryBuffer dst = buffer(16);
        b.connection(a.localAddress()).recv(88, dst, 0, 16, LONG);
        verify(dst, 16, 11);
    }

    @Test
    void eagerBuffersAreReusedWithinTheirBoundAndFreedOnClose() {
        EagerPool pool = new EagerPool(1 << 20);
        long a = pool.take(300_000); // 512 KiB class
        pool.give(a, 300_000);
        assertThat(pool.retained()).isEqualTo(512 * 1024);
        assertThat(pool.take(400_000)).isEqualTo(a); // same class: the same buffer again
        assertThat(pool.retained()).isZero();
        long b = pool.take(700_000); // 1 MiB class
        long c = pool.take(700_000);
        pool.give(b, 700_000);
        pool.give(c, 700_000); // over the bound: freed, not kept
        pool.give(a, 300_000); // over the bound as well
        assertThat(pool.retained()).isEqualTo(1 << 20);
        long small = pool.take(100); // below the smallest class: a plain allocation, never kept
        pool.give(small, 100);
        assertThat(pool.retained()).isEqualTo(1 << 20);
        pool.close();
        assertThat(pool.retained()).isZero();
        long d = pool.take(5000);
        pool.give(d, 5000); // after close: freed at once
        assertThat(pool.retained()).isZero();
    }

    @Test
    void negativeWaitsAndPoolsAreRefused() {
        for (String key : List.of(LoopbackTransportProvider.RENDEZVOUS_WAIT_US_PROPERTY,
                LoopbackTransportProvider.EAGER_POOL_BYTES_PROPERTY)) {
            assertThatThrownBy(() -> new LoopbackTransportProvider().create(TransportConfig.builder()
                    .property(key, "-1").build())).isInstanceOf(IllegalArgumentException.class)
                    .hasMessageContaining(key);
        }
    }

    /**
     * Starts {@code senders} managers on {@code fabric} (added to {@code from}), each on its own thread sending
     * {@code perSender} messages of {@code size} bytes on {@code tag} to {@code receiver}, message {@code i} of
     * sender {@code s} filled with seed {@code s * 1000 + i}; the future of each ends with its last send.
     */
    private List<CompletableFuture<Void>> startSenders(ConnectionManager receiver, List<ConnectionManager> from,
                                                       int senders, String fabric, long waitMicros, int tag,
                                                       int perSender, long size) {
        List<CompletableFuture<Void>> done = new ArrayList<>();
        for (int s = 0; s < senders; s++) {
            ConnectionManager m = manager(fabric, waitMicros);
            from.add(m);
            Connection c = m.connection(receiver.localAddress());
            MemoryBuffer src = buffer(size);
            int id = s;
            CompletableFuture<Void> f = new CompletableFuture<>();
            Thread t = new Thread(() -> {
                try {
                    for (int i = 0; i < perSender; i++) {
                        fill(src, size, id * 1000L + i); // safe: the previous send has returned
                        c.send(tag, src, 0, size, LONG);
                    }
                    f.complete(null);
                } catch (Throwable e) {
                    f.completeExceptionally(e);
                }
            }, fabric + "-" + s);
            threads.add(t);
            done.add(f);
            t.start();
        }
        return done;
    }
}
