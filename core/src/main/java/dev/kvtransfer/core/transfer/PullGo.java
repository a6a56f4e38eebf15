package dev.kvtransfer.core.transfer;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.KvTransferException;
import dev.kvtransfer.api.transport.Connection;
import dev.kvtransfer.core.protocol.PushNoticeFlyweight;

import java.time.Duration;
import java.util.Set;
import java.util.function.BiConsumer;

/**
 * A signalled pull whose generation ranks asked to be told nothing before their receive started
 * ({@code RequestInfo.FLAG_PULL_GO}): its move waits for each such rank's go ({@link PushNoticeFlyweight#TYPE_GO}
 * on the data tag) with no thread, in receives posted on the transport ({@link Connection#recvAsync}), and goes to
 * a sender thread only when every go came. A sender thread then never waits for a receiver that is not receiving:
 * without the go, a context rank's threads could both wait for requests whose generation side had no request thread
 * free, while the requests on those threads waited for this rank (core README, pulls and threads).
 *
 * <p>Exactly once: the request goes on (every go arrived) or fails (a receive's TIMEOUT, PEER_LOST or close,
 * something else than a go, the transceiver closing). The lease goes back (to the control pool) when no receive can touch it any more.
 * A transport that does not post receives gets the blocking wait on the sender thread ({@link #awaitBlocking}).
 */
final class PullGo {
    /** Stray messages a request's go receives may take before the go (duplicated request infos) before it fails. */
    static final int MAX_SKIPPED = 4;
    private final ContextSend send;
    private final ContextSend.Signalled s;
    /** Told once: the request and null (every go came), or the failure. */
    private final BiConsumer<ContextSend.Signalled, KvTransferException> onEnd;
    private final Set<PullGo> waiting;
    /** The gos' landing place, one notice per counterpart; back to the pool once no receive can touch it. */
    private final ControlBuffers.Lease lease;
    private int expected;
    private int arrived;
    /** Stray messages taken where a go was due (a duplicated request info: SPEC 4.12), per request. */
    private int skipped;
    /** Receives not ended, plus the poster's own token while it posts. */
    private int outstanding = 1;
    /** Whether every receive ended normally (the lease may then be reused). */
    private boolean clean = true;
    private boolean over;

    private PullGo(ContextSend send, ContextSend.Signalled s,
                   BiConsumer<ContextSend.Signalled, KvTransferException> onEnd, Set<PullGo> waiting,
                   ControlBuffers.Lease lease) {
        this.send = send;
        this.s = s;
        this.onEnd = onEnd;
        this.waiting = waiting;
        this.lease = lease;
    }

    /**
     * Posts the receives of a signalled pull's go messages.
     *
     * @param onEnd   told once, on a transport thread: null when every go arrived, else why the request fails
     * @param waiting the requests waiting for their go (a shutdown drops them); this one is in it until it ends
     * @return false when the transport does not post receives (nothing posted: wait with {@link #awaitBlocking})
     */
    static boolean post(ContextSend send, ContextSend.Signalled s, ControlBuffers control,
                        BiConsumer<ContextSend.Signalled, KvTransferException> onEnd, Set<PullGo> waiting) {
        int n = s.go.length;
        PullGo w = new PullGo(send, s, onEnd, waiting, control.acquire((long) n * PushNoticeFlyweight.LENGTH));
        for (boolean g : s.go) {
            w.expected += g ? 1 : 0;
        }
        waiting.add(w);
        boolean first = true;
        for (int i = 0; i < n; i++) {
            if (!s.go[i]) {
                continue;
            }
            synchronized (w) {
                if (w.over) {
                    break;
                }
                w.outstanding++;
            }
            int ii = i;
            Connection c = s.d.asked().get(i).conn();
            int tag = s.d.asked().get(i).info().dataTag();
            try {
                Duration left = s.session.remaining("waiting for the go of generation rank " + rank(s, i));
                boolean posted = w.postOne(ii, left);
                if (!posted && first) {
                    waiting.remove(w);
                    w.lease.reusable(); // nothing was posted
                    w.lease.close();
                    return false;
                }
                if (!posted) {
                    // A transport that posted the first but not this one: wait for it here, then as if posted.
                    c.recv(tag, w.lease.buffer(), (long) i * PushNoticeFlyweight.LENGTH,
                            PushNoticeFlyweight.LENGTH, left);
                    w.ended(i, null);
                }
            } catch (KvTransferException e) {
                w.ended(i, e);
            } catch (RuntimeException e) {
                w.ended(i, new KvTransferException(ErrorCode.INTERNAL, s.d.requestId(),
                        "posting the receive of the go failed: " + e, e));
            }
            first = false;
        }
        w.ended(-1, null); // the poster's token
        return true;
    }

    private boolean postOne(int i, Duration left) {
        return s.d.asked().get(i).conn().recvAsync(s.d.asked().get(i).info().dataTag(), lease.buffer(),
                (long) i * PushNoticeFlyweight.LENGTH, PushNoticeFlyweight.LENGTH, left, f -> ended(i, f));
    }

    /**
     * Waits on this (sender) thread for every go of a signalled pull, over a transport that does not post
     * receives.
     *
     * @throws KvTransferException when one did not come by the deadline, or something else came
     */
    static void awaitBlocking(ContextSend.Signalled s, ControlBuffers control) {
        try (ControlBuffers.Lease m = control.acquire(PushNoticeFlyweight.LENGTH)) {
            for (int i = 0; i < s.go.length; i++) {
                if (!s.go[i]) {
                    continue;
                }
                for (int skipped = 0; ; skipped++) {
                    try {
                        s.d.asked().get(i).conn().recv(s.d.asked().get(i).info().dataTag(), m.buffer(), 0,
                                PushNoticeFlyweight.LENGTH, s.session.remaining("waiting for the go of generation rank "
                                        + rank(s, i)));
                        break;
                    } catch (KvTransferException e) {
                        if (e.code() != ErrorCode.MALFORMED || skipped >= MAX_SKIPPED) {
                            throw noGo(s, i, e);
                        }
                    }
                }
                check(s, i, m, 0);
            }
            m.reusable();
        }
    }

    /** Ends the wait of a request the transceiver no longer serves (a shutdown): it fails, its peers are told. */
    void drop(String why) {
        synchronized (this) {
            if (over) {
                return;
            }
            over = true;
        }
        waiting.remove(this);
        send.drop(s, why);
    }

    /** A posted receive ended (a transport thread), or the poster's token ({@code i < 0}). */
    private void ended(int i, KvTransferException failure) {
        KvTransferException fail = null;
        boolean go = false;
        boolean release;
        int repost = -1;
        synchronized (this) {
            outstanding--;
            clean &= failure == null;
            if (!over && i >= 0) {
                if (failure != null && failure.code() == ErrorCode.MALFORMED && skipped < MAX_SKIPPED) {
                    // Not the go's size: a stray message on the tag (a duplicated request info the intake ignored,
                    // SPEC 4.12), taken by this receive. Wait for the go again.
                    skipped++;
                    outstanding++;
                    repost = i;
                } else if (failure != null) {
                    fail = noGo(s, i, failure);
                } else {
                    try {
                        check(s, i, lease, i * PushNoticeFlyweight.LENGTH);
                        go = ++arrived == expected;
                    } catch (KvTransferException e) {
                        fail = e;
                    }
                }
                over = fail != null || go;
            }
            release = outstanding == 0;
            if (release && clean) {
                lease.reusable();
            }
        }
        if (repost >= 0) {
            KvTransferException again = null;
            try {
                if (!postOne(repost, s.session.remaining("waiting for the go of generation rank "
                        + rank(s, repost)))) {
                    again = new KvTransferException(ErrorCode.INTERNAL, s.d.requestId(), "the transport no longer "
                            + "posts the receive of the go", null);
                }
            } catch (KvTransferException e) {
                again = e;
            } catch (RuntimeException e) {
                again = new KvTransferException(ErrorCode.INTERNAL, s.d.requestId(), "posting the receive of the go "
                        + "failed: " + e, e);
            }
            if (again != null) {
                ended(repost, again.code() == ErrorCode.MALFORMED ? new KvTransferException(ErrorCode.INTERNAL,
                        s.d.requestId(), again.getMessage(), again) : again);
            }
            return;
        }
        if (fail != null || go) {
            waiting.remove(this);
            onEnd.accept(s, fail);
        }
        if (release) {
            lease.close();
        }
    }

    private static void check(ContextSend.Signalled s, int i, ControlBuffers.Lease m, int at) {
        int type = new PushNoticeFlyweight().wrap(m.bytes(), at).type();
        if (type != PushNoticeFlyweight.TYPE_GO) {
            throw new KvTransferException(ErrorCode.MALFORMED, s.d.requestId(), "generation rank " + rank(s, i)
                    + " sent a notice of type " + type + " where its go (" + PushNoticeFlyweight.TYPE_GO
                    + ") was due", null);
        }
    }

    private static KvTransferException noGo(ContextSend.Signalled s, int i, KvTransferException e) {
        return new KvTransferException(e.code(), s.d.requestId(), "no go from generation rank " + rank(s, i)
                + " before the pull: " + e.getMessage(), e);
    }

    private static int rank(ContextSend.Signalled s, int i) {
        return s.d.targets().peerRanks().get(i);
    }
}
