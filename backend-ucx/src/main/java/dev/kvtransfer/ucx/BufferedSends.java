package dev.kvtransfer.ucx;

import org.openucx.jucx.UcxUtils;

import java.lang.reflect.Field;
import java.nio.ByteBuffer;
import java.util.concurrent.ArrayBlockingQueue;

/**
 * Small sends that do not make their caller wait: a send of at most {@code ucx.bufferedSendBytes} on an
 * established connection copies the payload into one of {@code ucx.bufferedSendSlots} pre-sized slots and
 * returns at once (the caller's buffer is free again, which is all a send promises); the progress agent posts
 * the slot in queue order, so order per (connection, tag) is kept, and the slot comes back when UCX is done with
 * it. That saves the caller's hand-off back from the agent on every control message — one of the two context
 * switches a blocking send costs. UCX completes such sends locally (eager) anyway; a later failure of the
 * connection shows up in the caller's next call and in the error handler. With no slot free the send takes the
 * blocking path. No allocation per send: slots and their ops are made once (lazily, up to the bound).
 */
final class BufferedSends {
    private static final sun.misc.Unsafe UNSAFE = unsafe();

    private final ArrayBlockingQueue<UcxOp> free;
    private final int slotBytes;
    private final int maxSlots;
    private final TagMatcher matcher;
    private final UcxErrors errors;
    private int made;

    BufferedSends(TagMatcher matcher, UcxErrors errors, int slotBytes, int maxSlots) {
        this.matcher = matcher;
        this.errors = errors;
        this.slotBytes = slotBytes;
        this.maxSlots = maxSlots;
        this.free = new ArrayBlockingQueue<>(Math.max(1, maxSlots));
    }

    int slotBytes() {
        return slotBytes;
    }

    /** @return a free slot's op, or null when all are in use */
    UcxOp take() {
        UcxOp op = free.poll();
        if (op != null) {
            return op;
        }
        synchronized (this) {
            if (made >= maxSlots) {
                return null;
            }
            made++;
        }
        op = new UcxOp(matcher);
        op.slot = ByteBuffer.allocateDirect(slotBytes);
        op.slotAddress = UcxUtils.getAddress(op.slot);
        op.pool = this;
        return op;
    }

    /** Copies a payload into the op's slot. */
    static void copy(long srcAddress, UcxOp op, long length) {
        UNSAFE.copyMemory(srcAddress, op.slotAddress, length);
    }

    /** Gives a finished slot back (once UCX no longer holds it). */
    void release(UcxOp op) {
        UcxFailure f = op.failure;
        if (f != null && !f.closed() && f.code() != dev.kvtransfer.api.ErrorCode.PEER_LOST) {
            errors.report("buffered-send", f.toException("buffered " + op.describe()));
        }
        free.offer(op);
    }

    private static sun.misc.Unsafe unsafe() {
        try {
            Field f = sun.misc.Unsafe.class.getDeclaredField("theUnsafe");
            f.setAccessible(true);
            return (sun.misc.Unsafe) f.get(null);
        } catch (ReflectiveOperationException e) {
            throw new ExceptionInInitializerError("the UCX backend needs sun.misc.Unsafe (module jdk.unsupported): "
                    + e);
        }
    }
}
