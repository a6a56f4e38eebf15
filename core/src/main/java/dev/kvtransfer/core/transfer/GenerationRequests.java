package dev.kvtransfer.core.transfer;

import dev.kvtransfer.api.ErrorCode;

import java.util.ArrayList;
import java.util.IdentityHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;

/**
 * The life of a request on a generation rank as a state machine with no thread, transport or clock of its own.
 * Events go in with the time they happen; answers come out as return values and {@link Failure}s for the driver
 * ({@link CacheReceiver}, {@link GenerationHandshake}) to carry out:
 *
 * <pre>
 *   QUEUED --begin--> ASKING --ready x n--> RECEIVING --end--> ENDED
 *     |  \--cancel / close / taken past its deadline--> ENDED (failed)
 *   ASKING --disagreeing ready--> failed (ENDED at end; a refusal, a lost peer or a deadline fail it through the
 *            request thread's own bounded waits, or through its posted receives' outcomes, {@link PostedReady})
 * </pre>
 *
 * A request can be cancelled only while {@code QUEUED} (before any info left); once asking it ends by its own
 * outcome. The ready signals of its counterparts must agree on push or pull and on layer by layer. Every request
 * that entered ends exactly once.
 *
 * <p>Not thread-safe on its own: the driver calls it under one lock.
 *
 * @param <L> the local request (opaque here)
 */
final class GenerationRequests<L> {
    /** The phases of a request. */
    enum Phase { QUEUED, ASKING, RECEIVING, ENDED }

    /** How a ready signal was taken. */
    enum ReadyOutcome {
        /** More counterparts are still to answer. */
        WAIT,
        /** Every counterpart answered and agreed: receive. */
        ALL_READY,
        /** The request failed (a {@link Failure} says why). */
        FAILED
    }

    /** The local request fails. */
    record Failure<L>(L local, long requestId, ErrorCode code, String reason) {
    }

    private static final class Entry<L> {
        final L local;
        final long requestId;
        final long deadlineNanos;
        Phase phase = Phase.QUEUED;
        int counterparts;
        int readies;
        boolean push;
        boolean layered;
        boolean failed;

        Entry(L local, long requestId, long deadlineNanos) {
            this.local = local;
            this.requestId = requestId;
            this.deadlineNanos = deadlineNanos;
        }
    }

    private final Map<L, Entry<L>> entries = new IdentityHashMap<>();
    /** {@link #entries}' size after the last change, for readers outside the driver's lock. */
    private volatile int tracked;
    private boolean closed;

    /**
     * A request is queued for its request thread.
     *
     * @param local         the local request
     * @param requestId     its id
     * @param deadlineNanos when it must have ended
     * @return a failure when it cannot be queued (closed, or already queued), else null
     */
    Failure<L> submit(L local, long requestId, long deadlineNanos) {
        Objects.requireNonNull(local, "local");
        if (closed) {
            return new Failure<>(local, requestId, ErrorCode.CANCELLED, "the transceiver is closed");
        }
        if (entries.containsKey(local)) {
            return new Failure<>(local, requestId, ErrorCode.INTERNAL, "request " + requestId
                    + " is already being received");
        }
        entries.put(local, new Entry<>(local, requestId, deadlineNanos));
        tracked = entries.size();
        return null;
    }

    /**
     * The request thread takes the request: it may send its infos.
     *
     * @param local the request
     * @param now   {@code System.nanoTime()}
     * @return a failure (closing, or its deadline passed), or null to go on; call only when {@link #queued}
     */
    Failure<L> begin(L local, long now) {
        Entry<L> e = entries.get(local);
        if (e == null || e.phase != Phase.QUEUED) {
            throw new IllegalStateException("request is not queued: " + local);
        }
        if (closed) {
            return fail(e, ErrorCode.CANCELLED, "the transceiver is closing");
        }
        if (now - e.deadlineNanos >= 0) {
            return fail(e, ErrorCode.TIMEOUT, "deadline passed before the request was sent");
        }
        e.phase = Phase.ASKING;
        return null;
    }

    /**
     * The request's counterparts are known: that many ready signals are awaited (none: nothing moves).
     *
     * @param local        the request
     * @param counterparts how many
     */
    void expect(L local, int counterparts) {
        Entry<L> e = entries.get(local);
        if (e != null && e.phase == Phase.ASKING) {
            e.counterparts = counterparts;
            if (counterparts == 0) {
                e.phase = Phase.RECEIVING;
            }
        }
    }

    /** @return whether the request thread may still take this request ({@code QUEUED} and not ended) */
    boolean queued(L local) {
        Entry<L> e = entries.get(local);
        return e != null && e.phase == Phase.QUEUED;
    }

    /**
     * A counterpart's accepted ready signal arrived (authenticated). A refused one is not given here: its reason,
     * read from the wire, fails the request.
     *
     * @param local   the request
     * @param push    whether it pushes
     * @param layered whether layer by layer
     * @param out     receives a failure when one happens
     * @return how the signal was taken
     */
    ReadyOutcome ready(L local, boolean push, boolean layered, List<Failure<L>> out) {
        Entry<L> e = entries.get(local);
        if (e == null || e.phase != Phase.ASKING || e.failed) {
            return ReadyOutcome.FAILED;
        }
        if (e.readies == 0) {
            e.push = push;
            e.layered = layered;
        } else if (e.push != push || e.layered != layered) {
            out.add(failAndKeep(e, ErrorCode.MALFORMED, "context ranks of request " + e.requestId
                    + " disagree on push/pull or layer by layer"));
            return ReadyOutcome.FAILED;
        }
        if (++e.readies == e.counterparts) {
            e.phase = Phase.RECEIVING;
            return ReadyOutcome.ALL_READY;
        }
        return ReadyOutcome.WAIT;
    }

    /**
     * The engine cancels: possible while queued only.
     *
     * @param local the request
     * @return the failure to carry out, or null when it cannot be cancelled (unknown, asking or ended)
     */
    Failure<L> cancel(L local) {
        Entry<L> e = entries.get(local);
        if (e == null || e.phase != Phase.QUEUED) {
            return null;
        }
        return fail(e, ErrorCode.CANCELLED, "cancelled by the generation side before its request was sent");
    }

    /**
     * The rank closes: queued requests fail {@code CANCELLED}; later submits are refused.
     *
     * @param out receives the failures
     */
    void close(List<Failure<L>> out) {
        closed = true;
        for (Entry<L> e : new ArrayList<>(entries.values())) {
            if (e.phase == Phase.QUEUED) {
                out.add(fail(e, ErrorCode.CANCELLED, "the transceiver closed before the request was sent"));
            }
        }
    }

    /**
     * The request thread is done with a request, whatever the outcome: it leaves.
     *
     * @param local the request
     * @return true when it was still tracked (false: it had ended already)
     */
    boolean end(L local) {
        Entry<L> e = entries.remove(local);
        tracked = entries.size();
        if (e == null) {
            return false;
        }
        e.phase = Phase.ENDED;
        return true;
    }

    /** @return the phase of a request, {@link Phase#ENDED} when unknown */
    Phase phase(L local) {
        Entry<L> e = entries.get(local);
        return e == null ? Phase.ENDED : e.phase;
    }

    /** @return requests tracked */
    int size() {
        return entries.size();
    }

    /** @return requests tracked, as of the last change: readable without the driver's lock (load heuristics) */
    int trackedNow() {
        return tracked;
    }

    /** @return the tracked requests (a copy) */
    List<L> tracked() {
        return new ArrayList<>(entries.keySet());
    }

    private Failure<L> fail(Entry<L> e, ErrorCode code, String reason) {
        entries.remove(e.local);
        tracked = entries.size();
        e.phase = Phase.ENDED;
        return new Failure<>(e.local, e.requestId, code, reason);
    }

    private Failure<L> failAndKeep(Entry<L> e, ErrorCode code, String reason) {
        // The thread still holds the request (its tag, its grants): it ends it with end().
        e.failed = true;
        return new Failure<>(e.local, e.requestId, code, reason);
    }
}
