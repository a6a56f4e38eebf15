package dev.kvtransfer.testkit;

import dev.kvtransfer.api.transport.RecvCompletion;
import dev.kvtransfer.api.transport.SendCompletion;
import dev.kvtransfer.api.transport.TransportException;
import org.awaitility.Awaitility;

import java.time.Duration;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * The callback of a posted receive or send ({@code Connection.recvAsync} / {@code sendAsync}) for tests: counts its
 * calls and keeps the first outcome, so a test can assert it ended exactly once and how.
 */
public class PostedOutcome implements RecvCompletion, SendCompletion {
    private final AtomicInteger calls = new AtomicInteger();
    private volatile TransportException failure;
    private volatile boolean ended;

    @Override
    public void sent(TransportException f) {
        completed(f);
    }

    @Override
    public void completed(TransportException f) {
        if (calls.getAndIncrement() == 0) {
            failure = f;
            ended = true;
        }
    }

    /** @return whether it was called */
    public boolean ended() {
        return ended;
    }

    /** @return how many times it was called */
    public int calls() {
        return calls.get();
    }

    /** @return the failure it was first called with (null: done) */
    public TransportException failure() {
        return failure;
    }

    /**
     * Waits until it was called.
     *
     * @param bound the longest wait
     * @return this
     */
    public PostedOutcome awaitEnded(Duration bound) {
        Awaitility.await("the posted operation's outcome").pollInterval(Duration.ofMillis(2)).atMost(bound)
                .until(this::ended);
        return this;
    }
}
