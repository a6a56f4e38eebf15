package dev.kvtransfer.testkit;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.transport.Connection;
import dev.kvtransfer.api.transport.ConnectionManager;
import dev.kvtransfer.api.transport.TransportCapability;
import dev.kvtransfer.api.transport.TransportClosedException;
import dev.kvtransfer.api.transport.TransportException;
import org.awaitility.Awaitility;
import org.junit.jupiter.api.Test;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Future;
import java.util.concurrent.ThreadLocalRandom;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/**
 * SPEC.md §1 rules of the posted receive ({@link Connection#recvAsync}), an optional operation: a transport whose
 * {@code recvAsync} returns {@code true} is held to every clause; one that returns {@code false} (the default) is
 * checked to post nothing, never call the callback, and still receive with {@code recv} — never skipped. Every
 * wait is bounded ({@link #POSTED_BOUND}); every payload is checked byte by byte.
 */
public abstract class TransportPostedReceiveRules extends TransportLifecycleRules {
    /** How long a posted receive's callback gets to come once its outcome is due. */
    protected static final Duration POSTED_BOUND = Duration.ofSeconds(30);

    /** A callback, of a posted receive or a posted send, that counts its calls and keeps the first outcome. */
    protected static final class Outcome extends PostedOutcome {
    }

    /** Waits, bounded by {@link #POSTED_BOUND}, until every callback was called. */
    protected static void awaitEnded(List<Outcome> outcomes) {
        Awaitility.await().pollInterval(Duration.ofMillis(2)).atMost(POSTED_BOUND)
                .until(() -> outcomes.stream().allMatch(Outcome::ended));
    }

    private static void awaitEnded(Outcome o) {
        awaitEnded(List.of(o));
    }

    /**
     * A transport that does not post: {@code recvAsync} returns false, posts nothing (a message sent next goes to a
     * blocking receive, exactly) and never calls the callback.
     */
    private void assertNotPostedAndRecvWorks(Connection ab, Connection ba, int tag) {
        MemoryBuffer src = buffer(4096);
        MemoryBuffer dst = buffer(4096);
        Outcome never = new Outcome();
        assertThat(ba.recvAsync(tag, dst, 0, 4096, Duration.ofSeconds(5), never)).isFalse();
        fill(src, 0, 4096, tag);
        ab.send(tag, src, 0, 4096);
        ba.recv(tag, dst, 0, 4096, Duration.ofSeconds(30));
        verify(dst, 0, 4096, tag);
        assertThat(never.calls()).as("calls of a callback that was not posted").isZero();
    }

    @Test
    public void optional_spec1_28_postedReceiveDeliversExactBytesOnce() {
        ConnectionManager a = newManager();
        ConnectionManager b = newManager();
        Connection ab = a.connection(b.localAddress());
        Connection ba = b.connection(a.localAddress());
        MemoryBuffer probe = buffer(8);
        Outcome first = new Outcome();
        if (!ba.recvAsync(7800, probe, 0, 8, Duration.ofSeconds(30), first)) {
            assertNotPostedAndRecvWorks(ab, ba, 7801);
            return;
        }
        MemoryBuffer one = buffer(8);
        fill(one, 0, 8, 7800);
        ab.send(7800, one, 0, 8);
        awaitEnded(first);
        assertThat(first.failure()).isNull();
        verify(probe, 0, 8, 7800);
        int seed = 0;
        for (long size : sizes()) {
            for (boolean postedFirst : new boolean[] {true, false}) {
                int tag = 7810 + seed;
                long s = 78_000 + seed++;
                MemoryBuffer src = buffer(size + 3);
                MemoryBuffer dst = buffer(size + 5);
                fill(src, 3, size, s);
                Outcome o = new Outcome();
                ExecutorService sender = threads(1);
                Future<?> sent;
                if (postedFirst) {
                    assertThat(ba.recvAsync(tag, dst, 5, size, Duration.ofSeconds(60), o)).isTrue();
                    sent = sender.submit(() -> ab.send(tag, src, 3, size, Duration.ofSeconds(60)));
                } else {
                    // The message is sent (or, above the eager limit, announced) before the receive is posted.
                    sent = sender.submit(() -> ab.send(tag, src, 3, size, Duration.ofSeconds(60)));
                    if (size <= EAGER_BYTES) {
                        getQuietly(sent);
                    }
                    assertThat(ba.recvAsync(tag, dst, 5, size, Duration.ofSeconds(60), o)).isTrue();
                }
                getQuietly(sent);
                awaitEnded(o);
                assertThat(o.failure()).as("outcome of %s B, posted first: %s", size, postedFirst).isNull();
                verify(dst, 5, size, s);
                // Exactly once: a later posted receive on the same tag ends after it, and it was not called again.
                Outcome fence = new Outcome();
                assertThat(ba.recvAsync(tag, probe, 0, 8, Duration.ofSeconds(30), fence)).isTrue();
                ab.send(tag, one, 0, 8);
                awaitEnded(fence);
                assertThat(fence.failure()).isNull();
                assertThat(o.calls()).as("calls of the callback of %s B", size).isEqualTo(1);
                assertThat(fence.calls()).isEqualTo(1);
            }
        }
        assertThat(first.calls()).isEqualTo(1);
    }

    @Test
    public void optional_spec1_29_postedReceiveTimeoutConsumesNothing() {
        ConnectionManager a = newManager();
        ConnectionManager b = newManager();
        Connection ab = a.connection(b.localAddress());
        Connection ba = b.connection(a.localAddress());
        MemoryBuffer dst = buffer(4096);
        Duration deadline = Duration.ofMillis(200);
        Outcome late = new Outcome();
        long t0 = System.nanoTime();
        if (!ba.recvAsync(7900, dst, 0, 4096, deadline, late)) {
            assertNotPostedAndRecvWorks(ab, ba, 7901);
            return;
        }
        awaitEnded(late);
        long took = System.nanoTime() - t0;
        assertThat(late.failure()).as("outcome of a posted receive with nothing to receive").isNotNull()
                .satisfies(e -> assertThat(e.code()).isEqualTo(ErrorCode.TIMEOUT));
        assertThat(Duration.ofNanos(took)).as("not before its deadline").isGreaterThanOrEqualTo(deadline.minusMillis(5));
        // Nothing was consumed: the message sent after the deadline goes to the next receive, posted or blocking.
        MemoryBuffer src = buffer(4096);
        fill(src, 0, 4096, 79);
        ab.send(7900, src, 0, 4096);
        Outcome next = new Outcome();
        assertThat(ba.recvAsync(7900, dst, 0, 4096, Duration.ofSeconds(30), next)).isTrue();
        awaitEnded(next);
        assertThat(next.failure()).isNull();
        verify(dst, 0, 4096, 79);
        fill(src, 0, 4096, 80);
        Outcome expired = new Outcome();
        assertThat(ba.recvAsync(7902, dst, 0, 4096, Duration.ofMillis(1), expired)).isTrue();
        awaitEnded(expired);
        assertThat(expired.failure()).isNotNull().satisfies(e -> assertThat(e.code()).isEqualTo(ErrorCode.TIMEOUT));
        ab.send(7902, src, 0, 4096);
        ba.recv(7902, dst, 0, 4096, Duration.ofSeconds(30));
        verify(dst, 0, 4096, 80);
        assertThat(late.calls()).isEqualTo(1);
        assertThat(next.calls()).isEqualTo(1);
        assertThat(expired.calls()).isEqualTo(1);
    }

    @Test
    public void optional_spec1_30_postedAndBlockingReceivesTakeMessagesInPostingOrder() throws Exception {
        ConnectionManager a = newManager();
        ConnectionManager b = newManager();
        Connection ab = a.connection(b.localAddress());
        Connection ba = b.connection(a.localAddress());
        int n = 300;
        int size = 1024;
        MemoryBuffer dst = buffer((long) n * size);
        Outcome probe = new Outcome();
        if (!ba.recvAsync(8000, dst, 0, size, Duration.ofSeconds(30), probe)) {
            assertNotPostedAndRecvWorks(ab, ba, 8001);
            return;
        }
        MemoryBuffer src = buffer((long) n * size);
        for (int i = 0; i < n; i++) {
            fill(src, (long) i * size, size, 80_000 + i);
        }
        ExecutorService sender = threads(1);
        // Message i carries seed i; the first went to the probe, posted before anything was sent.
        Future<?> sent = sender.submit(() -> {
            for (int i = 0; i < n; i++) {
                ab.send(8000, src, (long) i * size, size, Duration.ofSeconds(60));
            }
        });
        List<Outcome> posted = new ArrayList<>();
        posted.add(probe);
        ThreadLocalRandom rnd = ThreadLocalRandom.current();
        int blocking = 0;
        for (int i = 1; i < n; i++) {
            if (rnd.nextInt(3) == 0) {
                ba.recv(8000, dst, (long) i * size, size, Duration.ofSeconds(60));
                blocking++;
            } else {
                Outcome o = new Outcome();
                assertThat(ba.recvAsync(8000, dst, (long) i * size, size, Duration.ofSeconds(60), o)).isTrue();
                posted.add(o);
            }
        }
        get(sent);
        awaitEnded(posted);
        for (Outcome o : posted) {
            assertThat(o.failure()).isNull();
            assertThat(o.calls()).isEqualTo(1);
        }
        for (int i = 0; i < n; i++) {
            verify(dst, (long) i * size, size, 80_000 + i);
        }
        assertThat(blocking).as("blocking receives interleaved").isPositive();
    }

    @Test
    public void optional_spec1_31_closeFailsEveryPendingPostedReceive() {
        ConnectionManager a = newManager();
        ConnectionManager b = newManager();
        Connection ab = a.connection(b.localAddress());
        Connection ba = b.connection(a.localAddress());
        MemoryBuffer dst = buffer(64 * 64);
        List<Outcome> outcomes = new ArrayList<>();
        Outcome probe = new Outcome();
        if (!ba.recvAsync(8100, dst, 0, 64, Duration.ofSeconds(60), probe)) {
            assertNotPostedAndRecvWorks(ab, ba, 8101);
            b.close();
            assertThatThrownBy(() -> ba.recv(8101, dst, 0, 64, Duration.ofSeconds(1)))
                    .isInstanceOf(TransportClosedException.class);
            return;
        }
        outcomes.add(probe);
        for (int i = 1; i < 64; i++) {
            Outcome o = new Outcome();
            assertThat(ba.recvAsync(8100 + (i % 8), dst, 64L * i, 64, Duration.ofSeconds(60), o)).isTrue();
            outcomes.add(o);
        }
        b.close();
        awaitEnded(outcomes);
        for (Outcome o : outcomes) {
            assertThat(o.failure()).isInstanceOf(TransportClosedException.class);
            assertThat(o.calls()).isEqualTo(1);
        }
        // After close nothing is posted: the call itself throws.
        Outcome after = new Outcome();
        assertThatThrownBy(() -> ba.recvAsync(8100, dst, 0, 64, Duration.ofSeconds(1), after))
                .isInstanceOf(TransportClosedException.class);
        assertThat(after.calls()).isZero();
        assertThat(a.isRunning()).isTrue();
    }

    @Test
    public void optional_spec1_32_peerLossFailsAPostedReceive() {
        ConnectionManager a = newManager();
        ConnectionManager b = newManager();
        Connection ab = a.connection(b.localAddress());
        Connection ba = b.connection(a.localAddress());
        MemoryBuffer dst = buffer(8);
        // The pair has exchanged a message first: the loss is of a peer that was known.
        MemoryBuffer src = buffer(8);
        fill(src, 0, 8, 82);
        ab.send(8200, src, 0, 8);
        ba.recv(8200, dst, 0, 8, Duration.ofSeconds(30));
        verify(dst, 0, 8, 82);
        boolean detects = provider().capabilities().contains(TransportCapability.PEER_FAILURE_DETECTION);
        Duration deadline = detects ? peerLossBound().multipliedBy(3) : Duration.ofMillis(500);
        Outcome o = new Outcome();
        if (!ba.recvAsync(8201, dst, 0, 8, deadline, o)) {
            a.close();
            // Without posted receives the blocking one still ends by peer loss or its deadline.
            assertThatThrownBy(() -> ba.recv(8201, dst, 0, 8, Duration.ofMillis(500)))
                    .isInstanceOfSatisfying(TransportException.class,
                            e -> assertThat(e.code()).isIn(ErrorCode.TIMEOUT, ErrorCode.PEER_LOST));
            assertThat(o.calls()).isZero();
            return;
        }
        a.close();
        awaitEnded(o);
        assertThat(o.failure()).as("outcome of a posted receive from a peer that closed: %s", o.failure()).isNotNull()
                .satisfies(e -> assertThat(e.code()).isIn(detects ? List.of(ErrorCode.PEER_LOST)
                        : List.of(ErrorCode.TIMEOUT, ErrorCode.PEER_LOST)));
        assertThat(o.calls()).isEqualTo(1);
        assertThat(b.isRunning()).isTrue();
    }

    private static void getQuietly(Future<?> f) {
        try {
            get(f);
        } catch (Exception e) {
            throw new AssertionError("send failed: " + e, e);
        }
    }
}
