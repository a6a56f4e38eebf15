package dev.kvtransfer.core.transfer;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.KvTransferException;
import dev.kvtransfer.api.format.Support;
import dev.kvtransfer.api.layout.RankMapping;
import dev.kvtransfer.api.layout.TargetRanks;
import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.api.model.RequestInfo;
import dev.kvtransfer.api.transport.Connection;
import dev.kvtransfer.api.transport.Tags;
import dev.kvtransfer.core.journal.TransferJournal;
import dev.kvtransfer.core.timing.EpochClock;
import dev.kvtransfer.core.transfer.ContextRequests.Dispatch;
import dev.kvtransfer.core.transfer.ContextRequests.Failure;
import dev.kvtransfer.core.transfer.ContextRequests.Outbox;
import dev.kvtransfer.core.transfer.ContextRequests.Refusal;
import dev.kvtransfer.core.transfer.ContextRequests.Report;

import java.time.Duration;
import java.util.List;
import java.util.Objects;

/**
 * The context side of one rank (TensorRT-LLM's {@code CacheSender}): the driver of {@link ContextRequests}. It feeds
 * the state machine its events — the engine's {@link #respond} and {@link #cancel}, the infos {@link InfoIntake}
 * reads and authenticates, the responder's deadline ticks — under one lock, and carries out what comes back outside
 * it: failures, refusals, reports, and dispatched requests. {@link ContextSend} sends a dispatched request's ready
 * signals on the dispatching thread at once and moves its bytes on one of {@code sendConcurrency} sender threads, or
 * serves it whole inline on the thread that read the last info when that cannot delay anything
 * ({@link ContextDispatch}).
 *
 * <p>Threads start lazily, on the first {@link #respond}: a generation-only rank runs none.
 */
public final class CacheSender implements AutoCloseable {
    /** Largest RequestInfo accepted, in bytes; a larger announced size is dropped as MALFORMED. */
    public static final long MAX_INFO_BYTES = 1 << 20;
    /**
     * Info threads: where the transport posts receives they serve the infos whose receives completed (no thread
     * waits for one); where it does not, they read them (each connection's in order, by one of them at a time).
     */
    static final int INFO_READERS = 2;
    /** Most request headers queued per connection before that connection's further requests are dropped. */
    static final int MAX_QUEUED_PER_CONNECTION = 1024;
    /** Most bytes of this rank's blocks a request may hold to be served on the info reader's thread. */
    static final long INLINE_SEND_BYTES = 256 << 10;
    /** Headers of a connection read the usual way after one of its infos came late to the responder. */
    static final int RESPONDER_SKIPS_AFTER_LATE = 63;

    private final TransferEnv env;
    /** Reused HOST buffers of request infos and ready signals. */
    private final ControlBuffers control;
    private final Object lock = new Object();
    /** Guarded by {@link #lock}, as is {@link #outbox}. */
    private final ContextRequests<Connection, TransferHandle> requests;
    private final Outbox<Connection, TransferHandle> outbox = new Outbox<>();
    private final ContextSend send;
    private final InfoIntake intake;
    /** Where dispatched requests are served, and the responder, info and sender threads. */
    private final ContextDispatch dispatch;
    private volatile boolean closing;

    /**
     * Creates the sender; starts nothing yet.
     *
     * @param env the rank's shared parts
     */
    public CacheSender(TransferEnv env) {
        this.env = Objects.requireNonNull(env, "env");
        this.control = new ControlBuffers(env.buffers());
        this.requests = new ContextRequests<>(env.selfIndex(), env.config().maxPendingRequests(),
                env.config().kvTransferTimeout().toNanos());
        this.send = new ContextSend(env, control, this::isClosing);
        this.intake = new InfoIntake(env, control, this, send);
        this.dispatch = new ContextDispatch(env, send);
    }

    /**
     * Registers a locally ready request (its prefill is done, its blocks hold the cache).
     *
     * @param h the request
     */
    public void respond(TransferHandle h) {
        Objects.requireNonNull(h, "request");
        long now = System.nanoTime();
        if (closing) {
            h.fail(new KvTransferException(ErrorCode.CANCELLED, h.requestId(), "the transceiver is closed", null));
            return;
        }
        if (env.ownsNoLayer()) {
            // No generation rank maps to a rank without layers: there is nothing to send and no one to wait for.
            h.started(EpochClock.nowNanos());
            h.succeed(0, EpochClock.nowNanos());
            return;
        }
        startThreads();
        List<Dispatch<Connection, TransferHandle>> dispatches;
        synchronized (lock) {
            requests.localReady(h.requestId(), h, now, outbox);
            dispatches = carryOut();
        }
        flushEffects();
        for (Dispatch<Connection, TransferHandle> d : dispatches) {
            dispatch.submit(d);
        }
    }

    /**
     * Cancels a request that has not been dispatched: every counterpart that asked (or asks later, until the
     * request's deadline) gets a refusal with {@code CANCELLED}.
     *
     * @param h the request
     * @return true if it was cancelled; false if unknown here, already dispatched (the transfer completes) or
     *         already ended
     */
    public boolean cancel(TransferHandle h) {
        boolean cancelled;
        synchronized (lock) {
            cancelled = !h.done().isDone() && requests.cancel(h.requestId(), h, outbox);
            carryOut();
        }
        flushEffects();
        return cancelled;
    }

    /**
     * Carries out the outbox after an event: failures and reports at once, refusals after (they send), the
     * dispatches returned for the caller to serve. Called under the lock; the sends it makes are bounded by the
     * control timeout, as they were when refusals were sent outside it.
     */
    private List<Dispatch<Connection, TransferHandle>> carryOut() {
        if (outbox.isEmpty()) {
            return List.of();
        }
        List<Failure<TransferHandle>> failures = List.copyOf(outbox.failures);
        List<Refusal<Connection>> refusals = List.copyOf(outbox.refusals);
        List<Report> reports = List.copyOf(outbox.reports);
        List<Dispatch<Connection, TransferHandle>> dispatches = List.copyOf(outbox.dispatches);
        outbox.clear();
        for (Report r : reports) {
            env.metrics().error(new KvTransferException(r.code(), r.requestId(), r.message(), null));
        }
        if (!failures.isEmpty() || !refusals.isEmpty()) {
            // Sends and completions leave the lock: a refusal waits on the transport, a completion runs callbacks.
            pendingEffects.add(new Effects(failures, refusals));
        }
        return dispatches;
    }

    /** Failures and refusals to carry out once the lock is released ({@link #flushEffects}). */
    private record Effects(List<Failure<TransferHandle>> failures, List<Refusal<Connection>> refusals) {
    }

    private final java.util.concurrent.ConcurrentLinkedQueue<Effects> pendingEffects =
            new java.util.concurrent.ConcurrentLinkedQueue<>();

    /** Carries out the failures and refusals queued by {@link #carryOut}; called after every locked section. */
    private void flushEffects() {
        Effects e;
        while ((e = pendingEffects.poll()) != null) {
            for (Failure<TransferHandle> f : e.failures()) {
                f.local().fail(new KvTransferException(f.code(), f.requestId(), f.reason(), null));
            }
            send.sendRefusals(e.refusals());
        }
    }

    private void startThreads() {
        synchronized (lock) {
            if (!dispatch.started() && !closing) {
                dispatch.start(intake, () -> requests.pendingNow() <= SpinThenParkQueue.LIGHT_LOAD);
            }
        }
    }

    /** @return whether {@link #shutdown} began */
    boolean isClosing() {
        return closing;
    }

    /** @return whether nothing is being sent or waits for a sender thread (the responder may then read infos) */
    boolean idle() {
        return dispatch.idle();
    }

    /** On the responder's tick: requests past their deadline end. */
    void expire() {
        synchronized (lock) {
            requests.tick(System.nanoTime(), outbox);
            carryOut();
        }
        flushEffects();
    }

    /**
     * An authenticated info from a counterpart (on the thread that read it): its layout is checked and it goes to
     * the state machine; a request it completes is served inline or on a sender thread ({@link ContextDispatch}).
     */
    void onInfo(Connection conn, RequestInfo info, InfoIntake.InfoQueue q) {
        long id = info.requestId();
        if (info.dataTag() < Tags.FIRST_DATA_TAG) {
            env.metrics().error(new KvTransferException(ErrorCode.MALFORMED, id, "request info from " + conn.peer()
                    + " carries data tag " + info.dataTag() + " below " + Tags.FIRST_DATA_TAG + "; dropped", null));
            return;
        }
        CacheState self = env.selfCache();
        CacheState peer = info.requesterState().cacheState();
        int requester = info.requesterState().selfIndex();
        env.journal().peerContact(TransferJournal.Role.CONTEXT, id, info.requesterState());
        env.journal().requestInfoReceived(id, requester);
        Support support;
        try {
            support = env.formatter().inquireSupport(self, peer);
        } catch (RuntimeException e) {
            support = Support.no("the formatter could not check the layouts: " + e);
        }
        TargetRanks targets = null;
        int position = -1;
        if (support.supported()) {
            try {
                targets = RankMapping.targetRanks(peer, self, env.selfIndex());
                position = targets.peerRanks().indexOf(requester);
                if (position < 0) {
                    support = Support.no("generation rank " + requester + " is not a counterpart of context rank "
                            + env.selfIndex() + " (its counterparts: " + targets.peerRanks() + ")");
                }
            } catch (IllegalArgumentException e) {
                support = Support.no(e.getMessage());
            }
        }
        List<Dispatch<Connection, TransferHandle>> dispatches;
        synchronized (lock) {
            requests.info(conn, info, support, targets, position, System.nanoTime(), outbox);
            dispatches = carryOut();
        }
        flushEffects();
        for (Dispatch<Connection, TransferHandle> d : dispatches) {
            if (!dispatch.serveInline(d, q, intake.onResponder(), closing)) {
                dispatch.submit(d);
            }
        }
    }

    // ---------------------------------------------------------------- lifecycle

    /**
     * Stops accepting requests, refuses every pending one ({@code CANCELLED}) and interrupts the threads;
     * does not wait.
     */
    public void shutdown() {
        synchronized (lock) {
            if (closing) {
                return;
            }
            closing = true;
            requests.close(outbox);
            carryOut();
        }
        flushEffects();
        dispatch.shutdown();
    }

    /**
     * Waits for the responder and sender threads to end, then frees the control buffer.
     *
     * @param timeout how long to wait
     * @return true when every thread ended
     */
    public boolean awaitTermination(Duration timeout) {
        return dispatch.awaitTermination(System.nanoTime() + timeout.toNanos());
    }

    @Override
    public void close() {
        shutdown();
        awaitTermination(Duration.ofSeconds(5));
        releaseControlBuffers();
    }

    /** Waits (bounded) until every control lease came back: posted info receives' end once the transport closed. */
    public boolean awaitControlLeases(Duration timeout) {
        return control.awaitReturned(timeout);
    }

    /** Frees the reused control buffers (after the threads stopped; a buffer still out is freed when returned). */
    public void releaseControlBuffers() {
        control.close();
    }

    /** @return the number of requests tracked but not dispatched (tests and diagnostics) */
    public int pendingCount() {
        synchronized (lock) {
            return requests.pendingCount();
        }
    }

    /** @return whether a rank of a state holds a global layer */
    static boolean holds(CacheState s, int rank, int globalLayer) {
        return ContextSend.holds(s, rank, globalLayer);
    }
}
