package dev.kvtransfer.testkit.loopback;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.transport.RecvCompletion;
import dev.kvtransfer.api.transport.TransportClosedException;
import dev.kvtransfer.api.transport.TransportException;

import java.util.concurrent.locks.Condition;

/** A receive waiting at a {@link LoopbackConnectionManager}. State changes under the manager's lock. */
final class PostedReceive {
    static final int WAITING = 0;
    static final int CLAIMED = 1;
    static final int DONE = 2;
    static final int FAILED = 3;
    /** Marker: the matched receive was failed (length mismatch), the message is consumed. */
    static final PostedReceive CONSUMED = new PostedReceive(null, 0, 0, 0, null);

    final String from;
    final int tag;
    final long dst;
    final long length;
    final Condition cond;
    int state = WAITING;
    String sender;
    ErrorCode failCode;
    String failure;
    boolean closed;
    /** A posted receive's callback ({@code recvAsync}), else null: called once, off the lock. */
    RecvCompletion done;
    /** A posted receive's deadline task. */
    java.util.concurrent.Future<?> timer;

    PostedReceive(String from, int tag, long dst, long length, Condition cond) {
        this.from = from;
        this.tag = tag;
        this.dst = dst;
        this.length = length;
        this.cond = cond;
    }

    /** @return how a posted receive ended: null when done, else its failure */
    TransportException outcome() {
        if (state == DONE) {
            return null;
        }
        return closed ? new TransportClosedException(failure) : new TransportException(failCode, failure);
    }

    void fail(ErrorCode code, String why, boolean byClose) {
        state = FAILED;
        failCode = code;
        failure = why;
        closed = byClose;
        cond.signalAll();
    }
}
