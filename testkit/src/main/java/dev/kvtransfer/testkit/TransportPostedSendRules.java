package dev.kvtransfer.testkit;

import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.transport.Connection;
import dev.kvtransfer.api.transport.ConnectionManager;
import org.junit.jupiter.api.Test;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Future;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * SPEC.md §1 rules of the posted send ({@link Connection#sendAsync}), an optional operation: a transport whose
 * {@code sendAsync} returns {@code true} is held to every clause; one that returns {@code false} (the default) is
 * checked to send nothing, never call the callback, and still send with {@code send} — never skipped. Every wait
 * is bounded ({@link #POSTED_BOUND}); every payload is checked byte by byte.
 */
public abstract class TransportPostedSendRules extends TransportPostedReceiveRules {
    /**
     * A transport that does not post sends: {@code sendAsync} returns false, sends nothing (the next message of
     * the tag is the one a blocking send sends) and never calls the callback.
     */
    private void assertNothingSentAndSendWorks(Connection ab, Connection ba, int tag) {
        MemoryBuffer src = buffer(4096);
        MemoryBuffer dst = buffer(4096);
        Outcome never = new Outcome();
        fill(src, 0, 4096, tag + 1);
        assertThat(ab.sendAsync(tag, src, 0, 4096, Duration.ofSeconds(5), never)).isFalse();
        fill(src, 0, 4096, tag);
        ab.send(tag, src, 0, 4096);
        ba.recv(tag, dst, 0, 4096, Duration.ofSeconds(30));
        verify(dst, 0, 4096, tag);
        assertThat(never.calls()).as("calls of a callback that was not posted").isZero();
    }

    @Test
    public void optional_spec1_34_postedSendDeliversExactBytesOnce() throws Exception {
        ConnectionManager a = newManager();
        ConnectionManager b = newManager();
        Connection ab = a.connection(b.localAddress());
        Connection ba = b.connection(a.localAddress());
        MemoryBuffer one = buffer(8);
        MemoryBuffer probe = buffer(8);
        fill(one, 0, 8, 8400);
        Outcome first = new Outcome();
        if (!ab.sendAsync(8400, one, 0, 8, Duration.ofSeconds(30), first)) {
            assertNothingSentAndSendWorks(ab, ba, 8401);
            return;
        }
        ba.recv(8400, probe, 0, 8, Duration.ofSeconds(30));
        verify(probe, 0, 8, 8400);
        awaitEnded(List.of(first));
        assertThat(first.failure()).isNull();
        int seed = 0;
        for (long size : sizes()) {
            for (boolean receiveFirst : new boolean[] {true, false}) {
                int tag = 8410 + seed;
                long s = 84_000 + seed++;
                MemoryBuffer src = buffer(size + 3);
                MemoryBuffer dst = buffer(size + 5);
                fill(src, 3, size, s);
                Outcome o = new Outcome();
                ExecutorService receiver = threads(1);
                Future<?> received;
                if (receiveFirst) {
                    received = receiver.submit(() -> ba.recv(tag, dst, 5, size, Duration.ofSeconds(60)));
                    assertThat(ab.sendAsync(tag, src, 3, size, Duration.ofSeconds(60), o)).isTrue();
                } else {
                    // Posted before anybody receives: above the eager limit it completes once the receive comes.
                    assertThat(ab.sendAsync(tag, src, 3, size, Duration.ofSeconds(60), o)).isTrue();
                    received = receiver.submit(() -> ba.recv(tag, dst, 5, size, Duration.ofSeconds(60)));
                }
                get(received);
                awaitEnded(List.of(o));
                assertThat(o.failure()).as("outcome of %s B, receive first: %s", size, receiveFirst).isNull();
                verify(dst, 5, size, s);
                // Exactly once: a later posted send on the same tag ends after it, and it was not called again.
                Outcome fence = new Outcome();
                assertThat(ab.sendAsync(tag, one, 0, 8, Duration.ofSeconds(30), fence)).isTrue();
                ba.recv(tag, probe, 0, 8, Duration.ofSeconds(30));
                verify(probe, 0, 8, 8400);
                awaitEnded(List.of(fence));
                assertThat(fence.failure()).isNull();
                assertThat(o.calls()).as("calls of the callback of %s B", size).isEqualTo(1);
                assertThat(fence.calls()).isEqualTo(1);
            }
        }
        assertThat(first.calls()).isEqualTo(1);
    }

    @Test
    public void optional_spec1_35_postedAndBlockingSendsDeliverInPostingOrder() throws Exception {
        ConnectionManager a = newManager();
        ConnectionManager b = newManager();
        Connection ab = a.connection(b.localAddress());
        Connection ba = b.connection(a.localAddress());
        int n = 120;
        long small = 1024;
        long large = Math.min(96 * 1024, largestMessage());
        long[] at = new long[n + 1];
        for (int i = 0; i < n; i++) {
            at[i + 1] = at[i] + (i % 2 == 0 ? small : large);
        }
        MemoryBuffer src = buffer(at[n]);
        MemoryBuffer dst = buffer(at[n]);
        for (int i = 0; i < n; i++) {
            fill(src, at[i], at[i + 1] - at[i], 85_000 + i);
        }
        Outcome probe = new Outcome();
        if (!ab.sendAsync(8500, src, at[0], at[1], Duration.ofSeconds(60), probe)) {
            assertNothingSentAndSendWorks(ab, ba, 8501);
            return;
        }
        // Message i carries seed i and its own size: a message out of order fails the receive or its bytes.
        ExecutorService receiver = threads(1);
        Future<?> received = receiver.submit(() -> {
            for (int i = 0; i < n; i++) {
                ba.recv(8500, dst, at[i], at[i + 1] - at[i], Duration.ofSeconds(60));
            }
        });
        List<Outcome> posted = new ArrayList<>();
        posted.add(probe);
        int blocking = 0;
        for (int i = 1; i < n; i++) {
            if (i % 3 == 0) {
                ab.send(8500, src, at[i], at[i + 1] - at[i], Duration.ofSeconds(60));
                blocking++;
            } else {
                Outcome o = new Outcome();
                assertThat(ab.sendAsync(8500, src, at[i], at[i + 1] - at[i], Duration.ofSeconds(60), o)).isTrue();
                posted.add(o);
            }
        }
        get(received);
        awaitEnded(posted);
        for (Outcome o : posted) {
            assertThat(o.failure()).isNull();
            assertThat(o.calls()).isEqualTo(1);
        }
        for (int i = 0; i < n; i++) {
            verify(dst, at[i], at[i + 1] - at[i], 85_000 + i);
        }
        assertThat(blocking).as("blocking sends interleaved").isPositive();
    }
}
