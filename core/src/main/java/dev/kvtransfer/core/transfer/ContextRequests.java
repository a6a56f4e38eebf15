package dev.kvtransfer.core.transfer;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.format.Support;
import dev.kvtransfer.api.layout.TargetRanks;
import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.api.model.RequestInfo;
import org.agrona.collections.Long2ObjectHashMap;

import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;
import java.util.Objects;

/**
 * The life of a request on a context rank until it is dispatched, refused or expired, as a state machine with no
 * thread, transport or clock of its own: events go in ({@link #localReady}, {@link #info}, {@link #cancel},
 * {@link #tick}, {@link #close}) with the time they happen, and what to do comes out in an {@link Outbox} that the
 * driver ({@link CacheSender}) carries out afterwards, outside its lock: refuse a counterpart, fail the local
 * request, report an error, or dispatch the request to be sent.
 *
 * <p>A request is dispatched once it is locally ready <em>and</em> every expected counterpart
 * ({@code targets.size()}) has asked, in any order. Infos that arrive before the engine made the request ready are
 * kept (at most {@code maxPending} requests tracked) until {@code timeoutNanos} after the first; a ready request
 * whose counterparts do not all ask by then fails with {@code TIMEOUT}. Either way every counterpart that asked gets
 * a refusal, never silence. After dispatch the last {@value #RECENT} requests' infos are remembered, so a late
 * duplicate is recognised (ignored) and a late different info is refused.
 *
 * <p>Not thread-safe: one thread at a time (the driver holds one lock around each call and the outbox).
 *
 * @param <C> the connection a counterpart asked on (opaque here)
 * @param <L> the local request (opaque here, named by its id)
 */
final class ContextRequests<C, L> {
    /** Dispatched requests whose infos are remembered for late duplicates. */
    static final int RECENT = 1024;

    private final int selfIndex;
    private final int maxPending;
    private final long timeoutNanos;
    private final Long2ObjectHashMap<Pending<C, L>> pending = new Long2ObjectHashMap<>();
    /** {@link #pending}'s size after the last change, for readers outside the driver's lock. */
    private volatile int pendingNow;
    /** The last {@value #RECENT} dispatched requests' infos; {@link #recentIds} is their order, oldest first. */
    private final Long2ObjectHashMap<RequestInfo[]> dispatchedRecently = new Long2ObjectHashMap<>(2 * RECENT, 0.65f);
    private final long[] recentIds = new long[RECENT];
    private int recentNext;
    private boolean closed;

    /**
     * @param selfIndex    this context rank, for reasons
     * @param maxPending   most requests tracked before dispatch
     * @param timeoutNanos how long a request waits for its counterparts or its local readiness
     */
    ContextRequests(int selfIndex, int maxPending, long timeoutNanos) {
        this.selfIndex = selfIndex;
        this.maxPending = maxPending;
        this.timeoutNanos = timeoutNanos;
    }

    /** What one counterpart asked. */
    record Asked<C>(C conn, RequestInfo info) {
    }

    /** A refusal to send to one counterpart. */
    record Refusal<C>(C conn, RequestInfo info, ErrorCode code, String reason, long requestId) {
    }

    /** The local request fails. */
    record Failure<L>(L local, long requestId, ErrorCode code, String reason) {
    }

    /** Something to count and log; nothing is sent. */
    record Report(long requestId, ErrorCode code, String message) {
    }

    /**
     * A request every counterpart asked for and the engine made ready: send it.
     *
     * @param asked          each counterpart's connection and info, in {@code targets} order
     * @param readyNanos     when the request became locally ready
     * @param firstInfoNanos when the first counterpart's info arrived
     */
    record Dispatch<C, L>(long requestId, L local, CacheState peerCache, TargetRanks targets, List<Asked<C>> asked,
                          long deadlineNanos, long readyNanos, long firstInfoNanos) {
    }

    /** What the driver must do after an event, in this order: fail, refuse, report, dispatch. Reused. */
    static final class Outbox<C, L> {
        final List<Failure<L>> failures = new ArrayList<>();
        final List<Refusal<C>> refusals = new ArrayList<>();
        final List<Report> reports = new ArrayList<>();
        final List<Dispatch<C, L>> dispatches = new ArrayList<>();

        boolean isEmpty() {
            return failures.isEmpty() && refusals.isEmpty() && reports.isEmpty() && dispatches.isEmpty();
        }

        void clear() {
            failures.clear();
            refusals.clear();
            reports.clear();
            dispatches.clear();
        }
    }

    private static final class Pending<C, L> {
        final long requestId;
        L local;
        long readyNanos;
        long deadlineNanos;
        CacheState peerCache;
        TargetRanks targets;
        Asked<C>[] asked;
        int askedCount;
        final List<Asked<C>> askedUnknownLayout = new ArrayList<>(0);
        ErrorCode refusalCode;
        String refusalReason;
        boolean dispatched;
        long firstInfoNanos;

        Pending(long requestId, long deadlineNanos) {
            this.requestId = requestId;
            this.deadlineNanos = deadlineNanos;
        }

        List<Asked<C>> allAsked() {
            List<Asked<C>> out = new ArrayList<>(askedUnknownLayout);
            if (asked != null) {
                for (Asked<C> a : asked) {
                    if (a != null) {
                        out.add(a);
                    }
                }
            }
            return out;
        }
    }

    /**
     * The engine made a request ready (its prefill is done).
     *
     * @param requestId the request
     * @param local     the local request
     * @param now       {@code System.nanoTime()} of the event
     * @param out       receives what to do
     */
    void localReady(long requestId, L local, long now, Outbox<C, L> out) {
        Objects.requireNonNull(local, "local");
        if (closed) {
            out.failures.add(new Failure<>(local, requestId, ErrorCode.CANCELLED, "the transceiver is closed"));
            return;
        }
        Pending<C, L> p = pending.get(requestId);
        long deadline = now + timeoutNanos;
        if (p == null) {
            if (pending.size() >= maxPending) {
                out.failures.add(new Failure<>(local, requestId, ErrorCode.INTERNAL, "too many pending requests ("
                        + pending.size() + "): raise kvtransfer.maxPendingRequests"));
                return;
            }
            p = new Pending<>(requestId, deadline);
            pending.put(requestId, p);
            pendingNow = pending.size();
        } else if (p.local != null) {
            out.failures.add(new Failure<>(local, requestId, ErrorCode.INTERNAL,
                    "request is already being sent by this rank"));
            return;
        }
        p.local = local;
        p.deadlineNanos = deadline;
        p.readyNanos = now;
        if (p.refusalCode != null) {
            out.failures.add(new Failure<>(local, requestId, p.refusalCode, p.refusalReason));
        } else {
            maybeDispatch(p, now, out);
        }
    }

    /**
     * The engine cancels a request. Possible until it is dispatched: every counterpart that asked (or asks later,
     * until the request's deadline) gets a refusal with {@code CANCELLED}.
     *
     * @param requestId the request
     * @param local     the local request (must be the one made ready)
     * @param out       receives what to do
     * @return true if it was cancelled
     */
    boolean cancel(long requestId, L local, Outbox<C, L> out) {
        Pending<C, L> p = pending.get(requestId);
        if (p == null || p.local != local || p.dispatched || p.refusalCode != null) {
            return false;
        }
        p.refusalCode = ErrorCode.CANCELLED;
        p.refusalReason = "cancelled by the context side";
        for (Asked<C> a : p.allAsked()) {
            out.refusals.add(new Refusal<>(a.conn, a.info, p.refusalCode, p.refusalReason, requestId));
        }
        out.failures.add(new Failure<>(local, requestId, ErrorCode.CANCELLED, "cancelled before its ready signal"));
        return true;
    }

    /**
     * A counterpart's authenticated request info arrived.
     *
     * @param conn     its connection
     * @param info     the info
     * @param support  whether this rank's formatter can serve the requester's layout (and why not)
     * @param targets  this rank's target ranks in the requester's instance (null when unsupported)
     * @param position the requester's index in {@code targets} (any when unsupported)
     * @param now      {@code System.nanoTime()} of the event
     * @param out      receives what to do
     */
    void info(C conn, RequestInfo info, Support support, TargetRanks targets, int position, long now,
              Outbox<C, L> out) {
        long id = info.requestId();
        int requester = info.requesterState().selfIndex();
        CacheState peer = info.requesterState().cacheState();
        if (closed) {
            out.refusals.add(new Refusal<>(conn, info, ErrorCode.CANCELLED, "context rank " + selfIndex
                    + " is closing", id));
            return;
        }
        Pending<C, L> p = pending.get(id);
        RequestInfo[] served = p == null ? dispatchedRecently.get(id) : null;
        if (served != null) {
            boolean duplicate = false;
            for (RequestInfo s : served) {
                duplicate |= info.equals(s);
            }
            if (duplicate) {
                out.reports.add(new Report(id, ErrorCode.MALFORMED, "duplicate request info from generation rank "
                        + requester + " after dispatch (ignored)"));
            } else {
                out.refusals.add(new Refusal<>(conn, info, ErrorCode.MALFORMED, "request " + id
                        + " was already served to all its counterparts", id));
            }
            return;
        }
        if (p == null) {
            if (pending.size() >= maxPending) {
                out.refusals.add(new Refusal<>(conn, info, ErrorCode.INTERNAL, "context rank " + selfIndex
                        + " tracks too many pending requests (" + pending.size() + ")", id));
                return;
            }
            p = new Pending<>(id, now + timeoutNanos);
            pending.put(id, p);
            pendingNow = pending.size();
        }
        if (!support.supported()) {
            if (p.refusalCode == null && !p.dispatched) {
                p.refusalCode = ErrorCode.UNSUPPORTED_LAYOUT;
                p.refusalReason = "unsupported layout: " + support.reason();
                for (Asked<C> a : p.allAsked()) {
                    out.refusals.add(new Refusal<>(a.conn, a.info, p.refusalCode, p.refusalReason, id));
                }
                if (p.local != null) {
                    out.failures.add(new Failure<>(p.local, id, ErrorCode.UNSUPPORTED_LAYOUT, "generation rank "
                            + requester + ": " + p.refusalReason));
                }
            }
            out.refusals.add(new Refusal<>(conn, info, ErrorCode.UNSUPPORTED_LAYOUT,
                    "unsupported layout: " + support.reason(), id));
        } else if (p.refusalCode != null) {
            out.refusals.add(new Refusal<>(conn, info, p.refusalCode, p.refusalReason, id));
        } else if (p.dispatched) {
            out.refusals.add(new Refusal<>(conn, info, ErrorCode.MALFORMED, "request " + id
                    + " was already served to all its counterparts", id));
        } else {
            if (p.targets == null) {
                p.peerCache = peer;
                p.targets = targets;
                @SuppressWarnings("unchecked")
                Asked<C>[] asked = new Asked[targets.size()];
                p.asked = asked;
            }
            if (!p.peerCache.equals(peer)) {
                out.refusals.add(new Refusal<>(conn, info, ErrorCode.MALFORMED, "generation ranks of request "
                        + id + " disagree on their layout: " + p.peerCache + " vs " + peer, id));
            } else if (p.asked[position] != null && p.asked[position].info.equals(info)) {
                // The same info twice (the network duplicated it): already counted, nothing to answer.
                out.reports.add(new Report(id, ErrorCode.MALFORMED, "duplicate request info from generation rank "
                        + requester + " (ignored)"));
            } else if (p.asked[position] != null) {
                out.refusals.add(new Refusal<>(conn, info, ErrorCode.MALFORMED, "generation rank "
                        + requester + " asked twice for request " + id, id));
            } else {
                p.asked[position] = new Asked<>(conn, info);
                if (p.askedCount++ == 0) {
                    p.firstInfoNanos = now;
                }
                maybeDispatch(p, now, out);
            }
        }
    }

    /**
     * Time passes: requests past their deadline end. A request never made ready ends quietly here (its askers are
     * refused with {@code TIMEOUT}); a ready one fails with {@code TIMEOUT} too.
     *
     * @param now {@code System.nanoTime()}
     * @param out receives what to do
     */
    void tick(long now, Outbox<C, L> out) {
        if (pending.isEmpty()) {
            return;
        }
        for (Iterator<Pending<C, L>> it = pending.values().iterator(); it.hasNext(); ) {
            Pending<C, L> p = it.next();
            if (now - p.deadlineNanos < 0) {
                continue;
            }
            it.remove();
            pendingNow = pending.size();
            if (p.refusalCode != null) {
                continue;
            }
            long ms = timeoutNanos / 1_000_000;
            String reason;
            if (p.local == null) {
                reason = "context rank " + selfIndex + ": the request was not made ready within " + ms
                        + " ms of being asked for";
            } else {
                reason = "context rank " + selfIndex + ": " + p.askedCount + " of "
                        + (p.targets == null ? "its" : Integer.toString(p.targets.size()))
                        + " counterparts asked within " + ms + " ms";
                out.failures.add(new Failure<>(p.local, p.requestId, ErrorCode.TIMEOUT, reason));
            }
            for (Asked<C> a : p.allAsked()) {
                out.refusals.add(new Refusal<>(a.conn, a.info, ErrorCode.TIMEOUT, reason, p.requestId));
            }
        }
    }

    /**
     * The rank closes: every tracked request ends {@code CANCELLED}, its askers told; later events are refused.
     *
     * @param out receives what to do
     */
    void close(Outbox<C, L> out) {
        if (closed) {
            return;
        }
        closed = true;
        for (Pending<C, L> p : pending.values()) {
            if (p.refusalCode == null) {
                for (Asked<C> a : p.allAsked()) {
                    out.refusals.add(new Refusal<>(a.conn, a.info, ErrorCode.CANCELLED,
                            "context rank " + selfIndex + " is closing", p.requestId));
                }
            }
            if (p.local != null) {
                out.failures.add(new Failure<>(p.local, p.requestId, ErrorCode.CANCELLED, "the transceiver closed"));
            }
        }
        pending.clear();
        pendingNow = 0;
    }

    /** @return requests tracked and not dispatched */
    int pendingCount() {
        return pending.size();
    }

    /** @return requests tracked and not dispatched, as of the last change: readable without the driver's lock */
    int pendingNow() {
        return pendingNow;
    }

    private void maybeDispatch(Pending<C, L> p, long now, Outbox<C, L> out) {
        if (p.local == null || p.targets == null || p.dispatched || p.refusalCode != null
                || p.askedCount < p.targets.size()) {
            return;
        }
        p.dispatched = true;
        pending.remove(p.requestId);
        pendingNow = pending.size();
        RequestInfo[] infos = new RequestInfo[p.asked.length];
        for (int i = 0; i < infos.length; i++) {
            infos[i] = p.asked[i].info;
        }
        remember(p.requestId, infos);
        out.dispatches.add(new Dispatch<>(p.requestId, p.local, p.peerCache, p.targets, List.of(p.asked),
                p.deadlineNanos, p.readyNanos, p.firstInfoNanos != 0 ? p.firstInfoNanos : now));
    }

    /** Remembers a dispatched request's infos, forgetting the oldest of {@value #RECENT}; no boxing, no entry. */
    private void remember(long requestId, RequestInfo[] infos) {
        if (dispatchedRecently.put(requestId, infos) != null) {
            return; // dispatched again under the same id: its place in the order stays
        }
        if (dispatchedRecently.size() > RECENT) {
            dispatchedRecently.remove(recentIds[recentNext]);
        }
        recentIds[recentNext] = requestId;
        recentNext = (recentNext + 1) % RECENT;
    }
}
