package dev.kvtransfer.ucx;

import dev.kvtransfer.api.memory.MemoryBuffer;
import org.openucx.jucx.UcxCallback;
import org.openucx.jucx.ucp.UcpRequest;

import java.util.concurrent.locks.LockSupport;

/**
 * One call of a caller thread: a send, a receive, a receive from any sender, or a batch of puts. It is
 * the command the progress agent runs to post it, the jucx callback UCX completes, and what the caller waits
 * on. Reused: each (caller thread, manager) keeps one ({@link #reusable()}), so a steady stream of calls
 * allocates no op; one that UCX may still call back is never reused.
 *
 * <p>Fields are written by the caller before the op is queued (the queue publishes them) and by the agent
 * afterwards; {@link #done} publishes the outcome back to the caller.
 */
final class UcxOp extends UcxCallback implements UcxCommand {
    static final int SEND = 0;
    static final int RECV = 1;
    static final int RECV_ANY = 2;
    static final int PUTS = 3;

    private final TagMatcher matcher;

    // ---- set by the caller per use ----
    /** Which use of this op a command refers to: a late cancel of an earlier call must not touch this one. */
    int generation;
    int kind;
    UcxConnection conn;
    int tag;
    MemoryBuffer buffer;
    long address;
    long length;
    int memType;
    /** pollConnect: a wait that ends with nothing matched gives null, not TIMEOUT. */
    boolean poll;
    /** pollConnect with a zero wait: look, do not post. */
    boolean pollOnce;
    /** PUTS: the batch and its validated targets (index = entry). */
    dev.kvtransfer.api.transport.WriteBatch batch;
    RmaWriter.Target[] targets;
    /** A vectored send or receive ({@link UcxConnection#sendvAsync}): its ranges' addresses and lengths, else null. */
    long[] iovAddresses;
    long[] iovLengths;
    /** A send its caller gave up on, being discarded by the receiver ({@link AbandonedSends}); agent thread. */
    boolean abandoned;
    /** The exchange that discards it. */
    Object discard;

    /** Buffered sends only: the slot the payload was copied into, and the pool it returns to. */
    java.nio.ByteBuffer slot;
    long slotAddress;
    BufferedSends pool;
    private boolean released;

    // ---- progress agent ----
    UcpRequest request;
    boolean posted;
    boolean probed;
    long probedLength;
    long probedSenderTag;
    UcxFailure cancelReason;
    /** UCX callbacks still expected for this op; reused only at zero. */
    int outstanding;
    /** Inside the jucx posting call: an outcome is held back until the call returned (see {@link #endPost}). */
    private boolean posting;
    /** Whether UCX called this op back since its last {@link #beginPost}. */
    boolean calledBack;
    private boolean held;
    private UcxFailure heldFailure;

    // ---- outcome ----
    volatile boolean done;
    /** A posted receive's or send's callback ({@link PostedReceives}), else null; called once, by {@link #complete}. */
    dev.kvtransfer.api.transport.RecvCompletion callback;
    /** A posted receive's deadline, cancelled when it completes. */
    java.util.concurrent.Future<?> deadlineTask;
    UcxErrors errors;
    UcxFailure failure;
    UcxConnection sender;
    Thread waiter;

    UcxOp(TagMatcher matcher) {
        this.matcher = matcher;
    }

    /** @return whether the op may carry another call: finished and no longer known to UCX */
    boolean reusable() {
        return done && outstanding == 0;
    }

    /** Prepares the op for a new call of the current thread. */
    void reset(int kind, UcxConnection conn, int tag, MemoryBuffer buffer, long address, long length, int memType) {
        this.generation++;
        this.kind = kind;
        this.conn = conn;
        this.tag = tag;
        this.buffer = buffer;
        this.address = address;
        this.length = length;
        this.memType = memType;
        this.poll = false;
        this.pollOnce = false;
        this.batch = null;
        this.targets = null;
        this.iovAddresses = null;
        this.iovLengths = null;
        this.abandoned = false;
        this.discard = null;
        this.request = null;
        this.posted = false;
        this.probed = false;
        this.probedLength = 0;
        this.probedSenderTag = 0;
        this.cancelReason = null;
        this.outstanding = 0;
        this.posting = false;
        this.calledBack = false;
        this.held = false;
        this.heldFailure = null;
        this.failure = null;
        this.sender = null;
        this.waiter = Thread.currentThread();
        this.released = false;
        this.done = false;
    }

    /**
     * Makes this op vectored: {@code iov[0]} the ranges' addresses, {@code iov[1]} their lengths (null: contiguous,
     * as it was); its length becomes their total.
     */
    UcxOp vector(long[][] iov) {
        if (iov != null) {
            iovAddresses = iov[0];
            iovLengths = iov[1];
            long total = 0;
            for (long n : iovLengths) {
                total += n;
            }
            length = total;
        }
        return this;
    }

    String describe() {
        return switch (kind) {
            case SEND -> "UCX send of " + length + " bytes on tag " + tag + " to " + conn.peer;
            case RECV -> "UCX receive of " + length + " bytes on tag " + tag + " from " + conn.peer;
            case PUTS -> "UCX one-sided write of " + length + " bytes to " + conn.peer;
            default -> "UCX recvConnect of " + length + " bytes on tag " + tag + " at " + matcher.localAddress();
        };
    }

    @Override
    public void run() {
        matcher.post(this);
    }

    @Override
    public void abort(UcxFailure f) {
        matcher.finish(this, f);
    }

    /**
     * Before a jucx call that takes this op as its callback. A callback may run inside the call; its outcome is
     * published only after the call returned, so the caller cannot reuse the op while the agent still holds it.
     */
    void beginPost() {
        outstanding++;
        calledBack = false;
        posting = true;
    }

    /** After the jucx call (returned or threw): publishes an outcome that arrived inside it. */
    void endPost() {
        posting = false;
        if (held) {
            held = false;
            complete(heldFailure);
        }
    }

    @Override
    public void onSuccess(UcpRequest r) {
        calledBack = true;
        outstanding--;
        try {
            matcher.onSuccess(this, r);
        } catch (RuntimeException e) {
            matcher.finish(this, new UcxFailure(dev.kvtransfer.api.ErrorCode.INTERNAL, "completion handling failed: "
                    + e, false, e));
        }
        releaseIfBuffered();
    }

    /** A buffered send's slot goes back once it is finished and UCX no longer holds it. */
    private void releaseIfBuffered() {
        if (pool != null && done && outstanding == 0 && !posting && !released) {
            released = true;
            pool.release(this);
        }
    }

    @Override
    public void onError(int status, String message) {
        calledBack = true;
        outstanding--;
        try {
            matcher.onError(this, status, message);
        } catch (RuntimeException e) {
            matcher.finish(this, new UcxFailure(dev.kvtransfer.api.ErrorCode.INTERNAL, "error handling failed: "
                    + e, false, e));
        }
        releaseIfBuffered();
    }

    /** Publishes the outcome (agent thread, or the closing thread after the agent ended) and wakes the caller. */
    void complete(UcxFailure f) {
        if (done) {
            return;
        }
        if (posting) {
            if (!held) {
                held = true;
                heldFailure = f;
            }
            return;
        }
        failure = f;
        done = true;
        if (callback != null) {
            completePosted(f);
            return;
        }
        if (pool != null) {
            releaseIfBuffered(); // nobody waits on a buffered send
            return;
        }
        LockSupport.unpark(waiter);
    }

    private void completePosted(UcxFailure f) {
        var d = callback;
        callback = null;
        if (deadlineTask != null) {
            deadlineTask.cancel(false);
        }
        try {
            d.completed(f == null ? null : f.toException(describe()));
        } catch (RuntimeException | Error e) {
            errors.report("posted " + (kind == SEND ? "send" : "receive") + " callback", e);
        }
    }

    /**
     * Waits for the outcome until a deadline; the caller's thread only.
     *
     * @param deadlineNanos {@link System#nanoTime()} deadline
     * @param spinNanos     how long to spin before parking
     * @return true when done; false at the deadline, or when interrupted (the flag stays set)
     */
    boolean await(long deadlineNanos, long spinNanos) {
        if (done) {
            return true;
        }
        if (spinNanos > 0) {
            long spinEnd = Math.min(deadlineNanos, System.nanoTime() + spinNanos);
            while (!done && System.nanoTime() - spinEnd < 0) {
                Thread.onSpinWait();
            }
        }
        while (!done) {
            long left = deadlineNanos - System.nanoTime();
            if (left <= 0 || Thread.currentThread().isInterrupted()) {
                return done;
            }
            LockSupport.parkNanos(this, left);
        }
        return true;
    }

    /** Like {@link #await} but an interrupt does not end the wait (it is kept for the caller). */
    boolean awaitUninterruptibly(long deadlineNanos) {
        boolean interrupted = Thread.interrupted();
        try {
            while (!done) {
                long left = deadlineNanos - System.nanoTime();
                if (left <= 0) {
                    return false;
                }
                LockSupport.parkNanos(this, left);
                if (Thread.interrupted()) {
                    interrupted = true;
                }
            }
            return true;
        } finally {
            if (interrupted) {
                Thread.currentThread().interrupt();
            }
        }
    }
}
