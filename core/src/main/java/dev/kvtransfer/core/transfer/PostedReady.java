package dev.kvtransfer.core.transfer;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.KvTransferException;
import dev.kvtransfer.api.transport.Connection;

import java.time.Duration;

/**
 * A generation request waiting for its ready signals with no thread: their receives are posted
 * ({@link Connection#recvAsync}) and each ends on a transport thread, here. Each signal is checked by the same code
 * as on the blocking path ({@link GenerationHandshake#accept}: MAC, refusal, agreement through the state machine).
 * When every counterpart's signal was accepted, the data phase (session, unformat or push wait) goes to the
 * context instance's request pool ({@link CacheReceiver#dataPhase}); a failure (a receive's TIMEOUT, PEER_LOST or
 * close, a bad MAC, a disagreement, a refusal, the transceiver closing) ends the request at once.
 *
 * <p>Exactly once: {@link #ended} (under this object's monitor) decides the outcome once — handed to the data
 * phase, or failed; the state machine ({@link GenerationRequests}) sees every event and the end as on the
 * blocking path. Resources are given back when nothing can touch them any more: the control lease (the ready
 * signals' memory) and, after a failure, the data tag once every posted receive (and a refusal's read) ended.
 *
 * <p>Lock order: this monitor, then the receiver's {@code lifecycle}; never the other way.
 */
final class PostedReady {
    private final CacheReceiver owner;
    private final GenerationHandshake handshake;
    private final GenerationHandshake.Asking a;
    private final int expected;
    /** Receives (and a refusal's read) not ended yet, plus the poster's own token while it posts. */
    private int outstanding = 1;
    private int arrived;
    private boolean ended;
    private boolean failed;
    private boolean released;

    private PostedReady(CacheReceiver owner, GenerationHandshake handshake, GenerationHandshake.Asking a) {
        this.owner = owner;
        this.handshake = handshake;
        this.a = a;
        this.expected = a.positions.length;
    }

    /**
     * Posts the ready signals' receives of a request whose infos were sent.
     *
     * @return false when the transport does not post (nothing posted: the caller waits the blocking way)
     */
    static boolean post(CacheReceiver owner, GenerationHandshake handshake, GenerationHandshake.Asking a) {
        PostedReady w = new PostedReady(owner, handshake, a);
        owner.register(w);
        for (int k = 0; k < w.expected; k++) {
            Connection c = a.conns[a.positions[k]];
            synchronized (w) {
                if (w.ended) {
                    break;
                }
                w.outstanding++;
            }
            int kk = k;
            boolean posted;
            try {
                long leftNanos = a.job.deadlineNanos - System.nanoTime();
                Duration left = leftNanos > 0 ? Waits.left(leftNanos)
                        : GenerationHandshake.remaining(a.job, "waiting for the ready signal of context rank "
                        + a.rank(k)); // throws TIMEOUT; the message is built only then
                posted = c.recvAsync(a.tag, a.lease.buffer(), a.readyAt[k], a.readyLength(k), left,
                        f -> w.receiveEnded(kk, f));
                if (!posted && k == 0) {
                    boolean aborted;
                    synchronized (w) {
                        aborted = w.ended; // closed while we posted: the request has ended already
                        if (aborted) {
                            w.outstanding--; // never posted; the token below gives the lease and tag back
                        } else {
                            w.outstanding = 0;
                            w.released = true; // the caller keeps the lease and the tag
                        }
                    }
                    if (!aborted) {
                        owner.unregister(w);
                        return false;
                    }
                    break;
                }
                if (!posted) {
                    // A transport that posted the first but not this one: wait for it here, then as if posted.
                    c.recv(a.tag, a.lease.buffer(), a.readyAt[k], a.readyLength(k), left);
                    w.receiveEnded(k, null);
                }
            } catch (KvTransferException e) {
                w.receiveEnded(k, e);
            } catch (RuntimeException e) {
                w.receiveEnded(k, new KvTransferException(ErrorCode.INTERNAL, a.job.handle.requestId(),
                        "posting the ready signal's receive failed: " + e, e));
            }
        }
        w.done(); // the poster's token
        return true;
    }

    /** A posted receive ended (a transport thread; or the poster's, for a receive that failed to post). */
    private void receiveEnded(int k, KvTransferException failure) {
        KvTransferException fail = null;
        boolean all = false;
        boolean refused = false;
        synchronized (this) {
            outstanding--;
            if (!ended) {
                if (failure != null) {
                    fail = GenerationHandshake.noReady(a, k, failure);
                } else {
                    try {
                        if (!handshake.accept(a, k)) {
                            refused = true;
                            outstanding++; // the refusal's read still uses the tag
                        } else if (++arrived == expected) {
                            all = true;
                            outstanding++; // the hand-off: nothing is released before it is decided
                        }
                    } catch (RuntimeException e) {
                        fail = e instanceof KvTransferException ke ? ke : new KvTransferException(ErrorCode.INTERNAL,
                                a.job.handle.requestId(), "checking a ready signal failed: " + e, e);
                    }
                }
                if (fail != null || refused || all) {
                    ended = true;
                    failed = !all;
                }
            }
        }
        if (all) {
            owner.unregister(this);
            if (!owner.dataPhase(a.job, () -> owner.receivePosted(a.job, a.tag, handshake, a))) {
                synchronized (this) {
                    failed = true; // the data phase will not release the tag: we do
                }
                failNow(new KvTransferException(ErrorCode.CANCELLED, a.job.handle.requestId(),
                        "the transceiver is closing", null));
            }
            done();
        } else if (refused) {
            int kk = k;
            Runnable read = () -> {
                try {
                    KvTransferException why;
                    try {
                        why = handshake.refusal(a, kk);
                    } catch (KvTransferException e) {
                        why = e;
                    } catch (RuntimeException e) {
                        why = new KvTransferException(ErrorCode.INTERNAL, a.job.handle.requestId(),
                                "reading a refusal failed: " + e, e);
                    }
                    owner.unregister(this);
                    owner.failPosted(a.job, why); // on the pool already
                } finally {
                    done(); // the tag and the lease come back whatever happened
                }
            };
            if (!owner.dataPhase(a.job, read)) {
                failNow(new KvTransferException(ErrorCode.CANCELLED, a.job.handle.requestId(),
                        "the transceiver is closing", null));
                done();
            }
        } else if (fail != null) {
            failNow(fail);
        }
        releaseIfIdle();
    }

    /** The transceiver closes: a request still waiting for its ready signals ends CANCELLED now. */
    void abort() {
        synchronized (this) {
            if (ended) {
                return;
            }
            ended = true;
            failed = true;
        }
        failNow(new KvTransferException(ErrorCode.CANCELLED, a.job.handle.requestId(), "the transceiver closed while"
                + " request " + a.job.handle.requestId() + " waited for its ready signals", null));
        releaseIfIdle();
    }

    /**
     * Fails the request. On the pool when it still takes work: the engine's completion callbacks then never run on a
     * transport thread (the blocking path runs them on a request thread too).
     */
    private void failNow(KvTransferException e) {
        owner.unregister(this);
        if (!owner.dataPhase(a.job, () -> owner.failPosted(a.job, e))) {
            owner.failPosted(a.job, e);
        }
    }

    private void done() {
        synchronized (this) {
            outstanding--;
        }
        releaseIfIdle();
    }

    /** Once no receive can touch them: the lease back (reusable when every signal came), the tag after a failure. */
    private void releaseIfIdle() {
        boolean ok;
        boolean releaseTag;
        synchronized (this) {
            if (released || outstanding > 0 || !ended) {
                return;
            }
            released = true;
            ok = !failed && arrived == expected;
            releaseTag = failed;
        }
        if (ok) {
            a.lease.reusable();
        }
        a.lease.close();
        if (releaseTag) {
            owner.releaseTag(a.tag);
        }
    }
}
