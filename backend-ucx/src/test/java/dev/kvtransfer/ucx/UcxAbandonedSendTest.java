package dev.kvtransfer.ucx;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.transport.Connection;
import dev.kvtransfer.api.transport.TransportException;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;

import static dev.kvtransfer.ucx.UcxTestSupport.buffer;
import static dev.kvtransfer.ucx.UcxTestSupport.fill;
import static dev.kvtransfer.ucx.UcxTestSupport.verify;
import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;
import static org.awaitility.Awaitility.await;

/**
 * A send nobody receives ({@link AbandonedSends}): it times out, the receiver discards it, and the same
 * connection objects keep moving messages of that tag, of other tags and in both directions, byte-exact; nothing
 * of the exchange is left behind. In shared-memory and in net (TCP) mode.
 */
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class UcxAbandonedSendTest {
    private static final int BIG = 4 << 20;
    private final List<UcxConnectionManager> managers = new ArrayList<>();
    private final List<MemoryBuffer> buffers = new ArrayList<>();
    private final List<Throwable> errors = new CopyOnWriteArrayList<>();
    private final ExecutorService pool = Executors.newCachedThreadPool(r -> {
        Thread t = new Thread(r, "ucx-abandoned-test");
        t.setDaemon(true);
        return t;
    });

    @AfterEach
    void tearDown() throws Exception {
        pool.shutdownNow();
        for (UcxConnectionManager m : managers) {
            m.close();
        }
        for (MemoryBuffer b : buffers) {
            b.close();
        }
        assertThat(pool.awaitTermination(30, TimeUnit.SECONDS)).isTrue();
    }

    private UcxConnectionManager manager(String name, String mode) {
        UcxConnectionManager m = UcxTestSupport.manager(name, mode, errors);
        managers.add(m);
        return m;
    }

    private MemoryBuffer buf(long bytes) {
        MemoryBuffer b = buffer(bytes);
        buffers.add(b);
        return b;
    }

    /** Sends on one thread while this one receives; both verified. */
    private void move(Connection out, Connection in, int tag, int length, long seed) throws Exception {
        MemoryBuffer src = buf(length);
        MemoryBuffer dst = buf(length);
        fill(src, 0, length, seed);
        Future<?> f = pool.submit(() -> out.send(tag, src, 0, length, Duration.ofSeconds(20)));
        in.recv(tag, dst, 0, length, Duration.ofSeconds(20));
        f.get(20, TimeUnit.SECONDS);
        verify(dst, 0, length, seed);
    }

    private static void awaitQuiet(UcxConnectionManager m) {
        // discarded, fallbacks, outgoing, incoming, discard receives, posted, sends in flight
        await("no exchange, receive or send left on " + m).atMost(Duration.ofSeconds(10))
                .pollInterval(Duration.ofMillis(20)).until(() -> {
                    long[] s = m.abandonedStateForTest();
                    return s[2] == 0 && s[3] == 0 && s[4] == 0 && s[5] == 0 && s[6] == 0;
                });
    }

    @ParameterizedTest
    @ValueSource(strings = {"shm", "net"})
    void aSendNobodyReceivesTimesOutAndTheNextMessagesOnTheSamePairMove(String mode) throws Exception {
        UcxConnectionManager a = manager("ab-a-" + mode, mode);
        UcxConnectionManager b = manager("ab-b-" + mode, mode);
        Connection ab = a.connection(b.localAddress());
        Connection ba = b.connection(a.localAddress());
        move(ab, ba, 100, 256, 1);
        move(ba, ab, 101, 256, 2);
        int tag = 5000;
        // An eager message of the tag that nobody takes, then a rendezvous-sized one nobody takes either.
        MemoryBuffer small = buf(64);
        fill(small, 0, 64, 3);
        ab.send(tag, small, 0, 64);
        MemoryBuffer big = buf(BIG);
        fill(big, 0, BIG, 4);
        long t0 = System.nanoTime();
        assertThatThrownBy(() -> ab.send(tag, big, 0, BIG, Duration.ofMillis(300)))
                .isInstanceOfSatisfying(TransportException.class,
                        e -> assertThat(e.code()).as(e.getMessage()).isEqualTo(ErrorCode.TIMEOUT));
        long took = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - t0);
        // The receiver took it into its scratch: the send ended well before the fallback (half the 5 s grace).
        assertThat(took).isBetween(295L, 2_400L);
        // The buffer is the caller's again: new content, same tag, same connection objects. The receiver gets the
        // new message: the abandoned one and the untaken one before it are gone.
        fill(big, 0, BIG, 5);
        MemoryBuffer in = buf(BIG);
        Future<?> f = pool.submit(() -> ab.send(tag, big, 0, BIG, Duration.ofSeconds(20)));
        ba.recv(tag, in, 0, BIG, Duration.ofSeconds(20));
        f.get(20, TimeUnit.SECONDS);
        verify(in, 0, BIG, 5);
        // Small and large messages on the tag, on other tags, and back.
        move(ab, ba, tag, 64, 6);
        move(ab, ba, tag, BIG, 7);
        move(ab, ba, 5001, BIG, 8);
        move(ba, ab, tag, BIG, 9);
        move(ba, ab, 5002, 64, 10);
        assertThat(a.connection(b.localAddress())).isSameAs(ab);
        assertThat(b.connection(a.localAddress())).isSameAs(ba);
        awaitQuiet(a);
        awaitQuiet(b);
        assertThat(b.abandonedStateForTest()[0]).as("messages b discarded for a").isEqualTo(2);
        assertThat(a.abandonedStateForTest()[1]).as("exchanges that closed the connection").isZero();
        assertThat(errors).isEmpty();
        assertThat(a.errorCount() + b.errorCount()).isZero();
    }

    @ParameterizedTest
    @ValueSource(strings = {"shm", "net"})
    void aPostedSendNobodyReceivesEndsTimeoutOnceAndThePairKeepsMoving(String mode) throws Exception {
        UcxConnectionManager a = manager("ap-a-" + mode, mode);
        UcxConnectionManager b = manager("ap-b-" + mode, mode);
        Connection ab = a.connection(b.localAddress());
        Connection ba = b.connection(a.localAddress());
        move(ab, ba, 100, 256, 1);
        int tag = 5100;
        MemoryBuffer big = buf(BIG);
        fill(big, 0, BIG, 21);
        List<TransportException> outcomes = new CopyOnWriteArrayList<>();
        java.util.concurrent.atomic.AtomicInteger calls = new java.util.concurrent.atomic.AtomicInteger();
        long t0 = System.nanoTime();
        assertThat(ab.sendAsync(tag, big, 0, BIG, Duration.ofMillis(300), f -> {
            calls.incrementAndGet();
            if (f != null) {
                outcomes.add(f);
            }
        })).isTrue();
        await("the posted send's outcome").atMost(Duration.ofSeconds(10)).pollInterval(Duration.ofMillis(5))
                .until(() -> calls.get() > 0);
        long took = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - t0);
        assertThat(took).as("not before its deadline").isGreaterThanOrEqualTo(295L);
        assertThat(outcomes).singleElement().satisfies(e -> assertThat(e.code()).as(e.getMessage())
                .isEqualTo(ErrorCode.TIMEOUT));
        // The buffer is the caller's again; the receiver discarded the abandoned message: the next one of the
        // tag, posted too, is what a receive gets.
        fill(big, 0, BIG, 22);
        MemoryBuffer in = buf(BIG);
        List<TransportException> second = new CopyOnWriteArrayList<>();
        java.util.concurrent.atomic.AtomicInteger secondCalls = new java.util.concurrent.atomic.AtomicInteger();
        assertThat(ab.sendAsync(tag, big, 0, BIG, Duration.ofSeconds(20), f -> {
            secondCalls.incrementAndGet();
            if (f != null) {
                second.add(f);
            }
        })).isTrue();
        ba.recv(tag, in, 0, BIG, Duration.ofSeconds(20));
        verify(in, 0, BIG, 22);
        await("the second posted send's outcome").atMost(Duration.ofSeconds(10)).until(() -> secondCalls.get() > 0);
        assertThat(second).isEmpty();
        move(ab, ba, tag, BIG, 23);
        move(ba, ab, tag, 64, 24);
        assertThat(calls.get()).isEqualTo(1);
        assertThat(secondCalls.get()).isEqualTo(1);
        awaitQuiet(a);
        awaitQuiet(b);
        assertThat(b.abandonedStateForTest()[0]).as("messages b discarded for a").isEqualTo(1);
        assertThat(a.abandonedStateForTest()[1]).as("exchanges that closed the connection").isZero();
        assertThat(errors).isEmpty();
    }

    @Test
    void aSendOfTheTagWhileTheDiscardRunsIsHeldAndGoesAfterIt() throws Exception {
        UcxConnectionManager a = manager("ab3-a", "shm");
        UcxConnectionManager b = manager("ab3-b", "shm");
        Connection ab = a.connection(b.localAddress());
        Connection ba = b.connection(a.localAddress());
        move(ab, ba, 100, 256, 1);
        b.withholdDiscardEndedForTest();
        int tag = 7000;
        MemoryBuffer big = buf(BIG);
        fill(big, 0, BIG, 40);
        assertThatThrownBy(() -> ab.send(tag, big, 0, BIG, Duration.ofMillis(300)))
                .isInstanceOfSatisfying(TransportException.class,
                        e -> assertThat(e.code()).isEqualTo(ErrorCode.TIMEOUT));
        // The exchange is not over (b keeps its answer): the next send of the tag waits, other tags move.
        fill(big, 0, BIG, 41);
        Future<?> held = pool.submit(() -> ab.send(tag, big, 0, BIG, Duration.ofSeconds(20)));
        move(ab, ba, tag + 1, BIG, 42);
        await("the held send stays held").during(Duration.ofMillis(300)).atMost(Duration.ofSeconds(2))
                .until(() -> !held.isDone());
        long[] sa = a.abandonedStateForTest();
        assertThat(sa[2]).as("exchanges in progress at a").isEqualTo(1);
        assertThat(sa[5] + sa[6]).as("operations posted at a: the held send is not").isZero();
        assertThat(b.releaseDiscardEndedForTest()).isEqualTo(1);
        MemoryBuffer in = buf(BIG);
        ba.recv(tag, in, 0, BIG, Duration.ofSeconds(20));
        held.get(20, TimeUnit.SECONDS);
        verify(in, 0, BIG, 41);
        awaitQuiet(a);
        awaitQuiet(b);
        assertThat(b.abandonedStateForTest()[0]).isEqualTo(1);
        assertThat(a.abandonedStateForTest()[1]).isZero();
        assertThat(errors).isEmpty();
    }

    @Test
    void abandonedSendsOnSeveralTagsAtOnceEachEndAndEveryTagMovesAfterwards() throws Exception {
        UcxConnectionManager a = manager("ab2-a", "shm");
        UcxConnectionManager b = manager("ab2-b", "shm");
        Connection ab = a.connection(b.localAddress());
        Connection ba = b.connection(a.localAddress());
        move(ab, ba, 100, 256, 1);
        int tags = 4;
        List<Future<ErrorCode>> fs = new ArrayList<>();
        for (int i = 0; i < tags; i++) {
            int tag = 6000 + i;
            long ms = 200 + 50L * i;
            MemoryBuffer src = buf(BIG);
            fill(src, 0, BIG, 20 + i);
            fs.add(pool.submit(() -> {
                try {
                    ab.send(tag, src, 0, BIG, Duration.ofMillis(ms));
                    return null;
                } catch (TransportException e) {
                    return e.code();
                }
            }));
        }
        for (Future<ErrorCode> f : fs) {
            assertThat(f.get(20, TimeUnit.SECONDS)).isEqualTo(ErrorCode.TIMEOUT);
        }
        for (int i = 0; i < tags; i++) {
            move(ab, ba, 6000 + i, BIG, 30 + i);
        }
        awaitQuiet(a);
        awaitQuiet(b);
        assertThat(b.abandonedStateForTest()[0]).isEqualTo(tags);
        assertThat(a.abandonedStateForTest()[1]).isZero();
        assertThat(errors).isEmpty();
    }
}
