package dev.kvtransfer.examples.tcp;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.transport.TransportException;
import org.junit.jupiter.api.Test;

import java.nio.ByteBuffer;
import java.nio.channels.Pipe;
import java.time.Duration;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;
import static org.awaitility.Awaitility.await;

/** The matcher's hand-over between a receive's deadline and the I/O thread, driven step by step. */
class ReceiveMatcherTest {
    private static final int TAG = 7;
    private static final int LENGTH = 4096;

    @Test
    void aReceiveWhoseDeadlineEndsAfterItsLastBytesWereReadLeavesTheMessageToTheNextReceive() throws Exception {
        ReceiveMatcher m = new ReceiveMatcher("t", "tcp://local", () -> false);
        ReceiveMatcher.Peer p = m.peer("tcp://peer");
        ByteBuffer first = ByteBuffer.allocateDirect(LENGTH);
        long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(1500);
        CompletableFuture<Void> gaveUp = CompletableFuture.runAsync(() ->
                m.recv(p, "tcp://peer", TAG, new ByteBuffer[] {first}, LENGTH, deadline, 1500));
        await().atMost(Duration.ofSeconds(10)).pollInterval(Duration.ofMillis(1)).ignoreExceptions()
                .until(() -> !p.posted.get(TAG).isEmpty());
        // The I/O thread: the header arrives while the receive waits, and the whole payload is read into it.
        boolean[] staged = new boolean[1];
        ReceiveMatcher.Posted claimed = m.claim(p, TAG, LENGTH, staged);
        assertThat(claimed).as("claimed by the waiting receive, not staged").isNotNull();
        Pipe pipe = Pipe.open();
        pipe.sink().write(pattern());
        assertThat(m.readInto(claimed, pipe.source())).isEqualTo(LENGTH);
        // Its deadline ends before the I/O thread says the frame is finished.
        assertThat(gaveUp).failsWithin(Duration.ofSeconds(10)).withThrowableThat().havingRootCause()
                .isInstanceOfSatisfying(TransportException.class, e -> assertThat(e.code()).isEqualTo(ErrorCode.TIMEOUT));
        m.finish(p, TAG, LENGTH, claimed, null);
        // The message was not lost with the receive that gave up: the next one gets it, every byte.
        ByteBuffer next = ByteBuffer.allocateDirect(LENGTH);
        m.recv(p, "tcp://peer", TAG, new ByteBuffer[] {next}, LENGTH, System.nanoTime() + TimeUnit.SECONDS.toNanos(5),
                5000);
        assertThat(next.flip()).isEqualTo(pattern());
        // And nothing more: the peer's stream holds no second message.
        ByteBuffer none = ByteBuffer.allocateDirect(LENGTH);
        assertThatThrownBy(() -> m.recv(p, "tcp://peer", TAG, new ByteBuffer[] {none}, LENGTH,
                System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(50), 50))
                .isInstanceOfSatisfying(TransportException.class, e -> assertThat(e.code()).isEqualTo(ErrorCode.TIMEOUT));
        pipe.sink().close();
        pipe.source().close();
    }

    private static ByteBuffer pattern() {
        ByteBuffer b = ByteBuffer.allocate(LENGTH);
        for (int i = 0; i < LENGTH; i++) {
            b.put((byte) (i * 31 + 7));
        }
        return b.flip();
    }
}
