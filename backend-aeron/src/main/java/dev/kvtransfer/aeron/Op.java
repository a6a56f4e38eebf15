package dev.kvtransfer.aeron;

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

    /** Agent: the op completed; wakes its caller (unless the caller completed it itself, polling). */
    void complete() {
        state = DONE;
        wakeWaiter();
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
        failure = e;
        state = FAILED;
        wakeWaiter();
    }

    /** Agent: acknowledges a cancel (or drops an op cancelled while queued). */
    void cancelled() {
        if (!isFinal()) {
            state = CANCELLED;
        }
        wakeWaiter();
    }
}
