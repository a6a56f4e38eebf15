package dev.kvtransfer.aeron;

import dev.kvtransfer.api.transport.RecvCompletion;
import dev.kvtransfer.api.transport.TransportException;

import java.lang.invoke.MethodHandles;
import java.lang.invoke.VarHandle;
import java.util.concurrent.locks.LockSupport;

/**
 * One blocking operation of a caller thread, handed to the manager's agent through its command queue: a receive
 * from one peer, a receive from any peer, or a large send waiting for its clear-to-send. The agent owns it from
 * the moment it takes it off the queue until it completes, fails or acknowledges a cancel; the caller only reads
 * {@link #state} and parks — or, polling ({@code aeron.callerPollMicros}), runs the agent's duty cycle itself and
 * may complete its own op there (then as the agent). Each thread reuses one op (no allocation per message) unless the op went through a
 * cancel, whose queue entry may still be pending: such an op is abandoned.
 *
 * <p>Cancel protocol (a caller's deadline passed): if the agent has not taken the op yet, the caller moves it
 * {@code QUEUED → CANCELLED} itself and the agent drops it when it sees it; otherwise the caller sets
 * {@link #cancelRequested} and enqueues the op once more, and waits until the agent acknowledges
 * ({@code CANCELLED}) or completed it meanwhile ({@code DONE}): after that the agent never touches the op's memory.
 *
 * <p>A posted receive ({@link dev.kvtransfer.api.transport.Connection#recvAsync}) is an op with a {@link #done}
 * callback and no waiter: a fresh op per post, never reused, never cancelled by a caller. Whoever runs the duty
 * cycle ends it (completes, fails, or expires it at its {@link #deadlineNs}, see {@link TransportAgent}) and calls
 * the callback once, after the op reached its final state.
 */
final class Op {
    static final int RECV = 1;
    static final int RECV_ANY = 2;
    static final int AWAIT_CTS = 3;

    static final int QUEUED = 0;
    static final int POSTED = 1;
    static final int RECEIVING = 2;
    static final int DONE = 3;
    static final int FAILED = 4;
    static final int CANCELLED = 5;

    private static final VarHandle STATE;

    static {
        try {
            STATE = MethodHandles.lookup().findVarHandle(Op.class, "state", int.class);
        } catch (ReflectiveOperationException e) {
            throw new ExceptionInInitializerError(e);
        }
    }

    int kind;
    int tag;
    long address;
    long length;
    long seq;
    Thread waiter;
    /** The peer: set by the caller (RECV, AWAIT_CTS) or by the agent when a RECV_ANY matches. */
    volatile Peer peer;
    volatile int state;
    volatile TransportException failure;
    /** Set by the caller before it enqueues the op a second time to withdraw it. */
    volatile boolean cancelRequested;
    /** True once this op went through a cancel: it is never reused. */
    boolean abandoned;
    /** A posted receive's callback (null for a blocking op); cleared when called. */
    RecvCompletion done;
    /** A posted receive's deadline ({@code System.nanoTime()}). */
    long deadlineNs;
    /** Where a throwing callback is reported. */
    ErrorReporter reporter;

    // Agent only.
    long received;
    /** The image whose fragments are being copied into this op's memory, or null. */
    ImageState assembling;

    /** Prepares the op for one use by the current thread. */
    Op reset(int kind, Peer peer, int tag, long address, long length) {
        this.kind = kind;
        this.peer = peer;
        this.tag = tag;
        this.address = address;
        this.length = length;
        this.seq = 0;
        this.waiter = Thread.currentThread();
        this.failure = null;
        this.cancelRequested = false;
        this.received = 0;
        this.assembling = null;
        STATE.setRelease(this, QUEUED);
        return this;
    }

    boolean casState(int expect, int update) {
        return STATE.compareAndSet(this, expect, update);
    }

    boolean isFinal() {
        int s = state;
        return s == DONE || s == FAILED || s == CANCELLED;
    }

    /** A posted receive: {@code done} once its state is final; nothing waits for it. */
    static Op posted(Peer peer, int tag, long address, long length, long deadlineNs, RecvCompletion done,
                     ErrorReporter reporter) {
        Op op = new Op();
        op.kind = RECV;
        op.peer = peer;
        op.tag = tag;
        op.address = address;
        op.length = length;
        op.deadlineNs = deadlineNs;
        op.done = done;
        op.reporter = reporter;
        op.abandoned = true; // never reused
        STATE.setRelease(op, QUEUED);
        return op;
    }

    /** Agent: the op completed; wakes its caller (unless the caller completed it itself, polling). */
    void complete() {
        if (done != null) {
            if (!isFinal()) {
                finish(DONE, null);
            }
            return;
        }
        state = DONE;
        wakeWaiter();
    }

    /** Ends a posted receive: the final state first, then its callback, once. */
    private void finish(int st, TransportException e) {
        RecvCompletion d = done;
        done = null;
        failure = e;
        state = st;
        try {
            d.completed(e);
        } catch (RuntimeException | Error t) {
            if (reporter != null) {
                reporter.report(t);
            }
        }
    }

    private void wakeWaiter() {
        Thread w = waiter;
        if (w != Thread.currentThread()) {
            LockSupport.unpark(w);
        }
    }

    /** Agent: the op failed; wakes its caller. No effect on an op that already ended. */
    void fail(TransportException e) {
        if (isFinal()) {
            return;
        }
        if (done != null) {
            finish(FAILED, e);
            return;
        }
        failure = e;
        state = FAILED;
        wakeWaiter();
    }

    /** Agent: acknowledges a cancel (or drops an op cancelled while queued). */
    void cancelled() {
        if (done != null) {
            throw new IllegalStateException("a posted receive is never cancelled by a caller; it expires");
        }
        if (!isFinal()) {
            state = CANCELLED;
        }
        wakeWaiter();
    }
}
