package dev.kvtransfer.core.transfer;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.KvTransferException;
import dev.kvtransfer.api.format.Support;
import dev.kvtransfer.api.layout.BlockDistribution;
import dev.kvtransfer.api.layout.RankMapping;
import dev.kvtransfer.api.layout.TargetRanks;
import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.memory.MemoryKind;
import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.api.model.RequestInfo;
import dev.kvtransfer.api.transport.Connection;
import dev.kvtransfer.api.transport.Tags;
import dev.kvtransfer.api.transport.TransportClosedException;
import dev.kvtransfer.api.wire.MalformedMessageException;
import dev.kvtransfer.core.journal.TransferJournal;
import dev.kvtransfer.core.timing.EpochClock;
import dev.kvtransfer.core.timing.TransferTiming;

import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.RejectedExecutionException;
import java.util.concurrent.ThreadPoolExecutor;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * The context side of one rank (TensorRT-LLM's {@code CacheSender}): one responder thread accepts request
 * infos from generation ranks, and {@code sendConcurrency} sender threads send ready signals and format.
 *
 * <p>A request is dispatched as soon as it is locally ready ({@link #respond}) <em>and</em> every expected
 * counterpart ({@code targetRanks(peer, self, selfIndex).size()}) has asked, in whatever order they arrive:
 * no request waits behind another (no head-of-line blocking). Infos that arrive before the engine made the
 * request ready are kept (at most {@code maxPendingRequests} requests tracked) until {@code kvTransferTimeout}
 * after the first one; a ready request whose counterparts do not all ask within {@code kvTransferTimeout}
 * fails with {@code TIMEOUT}. Either way the counterparts that did ask get a refusal, never silence.
 *
 * <p>Threads start lazily, on the first {@link #respond}: a generation-only rank runs none.
 */
public final class CacheSender implements AutoCloseable {
    /** Largest RequestInfo accepted, in bytes; a larger announced size is dropped as MALFORMED. */
    public static final long MAX_INFO_BYTES = 1 << 20;
    /** How often the idle responder wakes up to expire old requests and notice close. */
    static final Duration POLL = Duration.ofMillis(50);

    private final TransferEnv env;
    private final Object lock = new Object();
    private final Map<Long, Pending> pending = new HashMap<>();
    private final AtomicInteger senderThreads = new AtomicInteger();
    private Thread responder;
    private ThreadPoolExecutor senders;
    private MemoryBuffer readyOne;
    private volatile boolean closing;

    /**
     * Creates the sender; starts nothing yet.
     *
     * @param env the rank's shared parts
     */
    public CacheSender(TransferEnv env) {
        this.env = Objects.requireNonNull(env, "env");
    }

    /** What one counterpart asked. */
    private record Asked(Connection conn, RequestInfo info) {
    }

    /** A refusal to send outside the lock. */
    private record Refusal(Connection conn, int tag, ErrorCode code, String reason, long requestId) {
    }

    /** One request known to this rank: locally ready, asked for, or both. */
    private static final class Pending {
        final long requestId;
        TransferHandle local;
        TransferTiming timing;
        long deadlineNanos;
        CacheState peerCache;
        TargetRanks targets;
        Asked[] asked;
        int askedCount;
        final List<Asked> askedUnknownLayout = new ArrayList<>(0);
        ErrorCode refusalCode;
        String refusalReason;
        boolean dispatched;

        Pending(long requestId, long deadlineNanos) {
            this.requestId = requestId;
            this.deadlineNanos = deadlineNanos;
        }

        List<Asked> allAsked() {
            List<Asked> out = new ArrayList<>(askedUnknownLayout);
            if (asked != null) {
                for (Asked a : asked) {
                    if (a != null) {
                        out.add(a);
                    }
                }
            }
            return out;
        }
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
        Runnable dispatch = null;
        KvTransferException failNow = null;
        synchronized (lock) {
            Pending p = pending.get(h.requestId());
            long deadline = now + env.config().kvTransferTimeout().toNanos();
            if (p == null) {
                if (pending.size() >= env.config().maxPendingRequests()) {
                    failNow = new KvTransferException(ErrorCode.INTERNAL, h.requestId(), "too many pending requests ("
                            + pending.size() + "): raise " + "kvtransfer.maxPendingRequests", null);
                } else {
                    p = new Pending(h.requestId(), deadline);
                    pending.put(h.requestId(), p);
                }
            } else if (p.local != null) {
                failNow = new KvTransferException(ErrorCode.INTERNAL, h.requestId(),
                        "request is already being sent by this rank", null);
                p = null;
            }
            if (p != null) {
                p.local = h;
                p.deadlineNanos = deadline;
                p.timing = new TransferTiming(h.requestId(), now);
                if (p.refusalCode != null) {
                    failNow = new KvTransferException(p.refusalCode, h.requestId(), p.refusalReason, null);
                } else {
                    dispatch = maybeDispatch(p);
                }
            }
        }
        if (failNow != null) {
            h.fail(failNow);
        }
        if (dispatch != null) {
            submit(dispatch, h);
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
        List<Refusal> refusals = new ArrayList<>();
        synchronized (lock) {
            Pending p = pending.get(h.requestId());
            if (p == null || p.local != h || p.dispatched || p.refusalCode != null || h.done().isDone()) {
                return false;
            }
            p.refusalCode = ErrorCode.CANCELLED;
            p.refusalReason = "cancelled by the context side";
            for (Asked a : p.allAsked()) {
                refusals.add(new Refusal(a.conn, a.info.dataTag(), p.refusalCode, p.refusalReason, p.requestId));
            }
        }
        h.fail(new KvTransferException(ErrorCode.CANCELLED, h.requestId(), "cancelled before its ready signal", null));
        sendRefusals(refusals);
        return true;
    }

    private void startThreads() {
        synchronized (lock) {
            if (responder != null || closing) {
                return;
            }
            readyOne = env.buffers().allocate(1, MemoryKind.HOST);
            readyOne.asByteBuffer().put(0, (byte) 1);
            int n = env.config().sendConcurrency();
            senders = new ThreadPoolExecutor(n, n, 0, TimeUnit.MILLISECONDS, new LinkedBlockingQueue<>(), r -> {
                Thread t = new Thread(r, env.threadPrefix() + "-send-" + senderThreads.getAndIncrement());
                t.setDaemon(true);
                return t;
            });
            responder = new Thread(this::respondLoop, env.threadPrefix() + "-responder");
            responder.setDaemon(true);
            responder.start();
        }
    }

    // ---------------------------------------------------------------- responder

    private void respondLoop() {
        MemoryBuffer control = null;
        MemoryBuffer info = null;
        try {
            control = env.buffers().allocate(16, MemoryKind.HOST);
            info = env.buffers().allocate(MAX_INFO_BYTES, MemoryKind.HOST);
            while (!closing) {
                try {
                    expire();
                    Connection conn;
                    try {
                        conn = env.connections().recvConnect(Tags.ID_TAG, control, 0, 8, POLL);
                    } catch (TransportClosedException e) {
                        if (!closing) {
                            env.metrics().error(new KvTransferException(ErrorCode.NETWORK, KvTransferException.NO_REQUEST,
                                    "responder of rank " + env.selfIndex() + " stops: transport closed", e));
                        }
                        break;
                    } catch (KvTransferException e) {
                        if (e.code() != ErrorCode.TIMEOUT) {
                            env.metrics().error(e);
                        }
                        continue;
                    }
                    long id = control.asByteBuffer().getLong(0);
                    if (id == Tags.TERMINATION) {
                        continue;
                    }
                    if (id != Tags.REQUEST_SEND) {
                        env.metrics().error(new KvTransferException(ErrorCode.MALFORMED, "rank " + env.selfIndex()
                                + ": unknown id message " + id + " from " + conn.peer() + " (dropped)"));
                        continue;
                    }
                    readInfo(conn, control, info);
                } catch (RuntimeException e) {
                    // One bad message or bug must never stop the responder: report and serve the next one.
                    env.metrics().error(e instanceof KvTransferException ? e
                            : new KvTransferException(ErrorCode.INTERNAL, KvTransferException.NO_REQUEST,
                            "responder of rank " + env.selfIndex() + ": " + e, e));
                }
            }
        } finally {
            if (control != null) {
                control.close();
            }
            if (info != null) {
                info.close();
            }
        }
    }

    private void readInfo(Connection conn, MemoryBuffer control, MemoryBuffer infoBuf) {
        Duration t = env.controlTimeout();
        conn.recv(Tags.INFO_SIZE_TAG, control, 8, 8, t);
        long size = control.asByteBuffer().getLong(8);
        if (size <= 0 || size > MAX_INFO_BYTES) {
            // The info itself is left unread: a peer that announces this is not speaking our protocol.
            env.metrics().error(new MalformedMessageException(0, "rank " + env.selfIndex() + ": request info of "
                    + size + " bytes announced by " + conn.peer() + " (limit " + MAX_INFO_BYTES + "); dropped"));
            return;
        }
        conn.recv(Tags.INFO_TAG, infoBuf, 0, size, t);
        byte[] bytes = new byte[(int) size];
        infoBuf.asByteBuffer().get(0, bytes);
        RequestInfo info;
        try {
            info = RequestInfo.fromBytes(bytes);
        } catch (MalformedMessageException e) {
            env.metrics().error(new KvTransferException(ErrorCode.MALFORMED, KvTransferException.NO_REQUEST,
                    "rank " + env.selfIndex() + ": bad request info from " + conn.peer() + ": " + e.getMessage(), e));
            return;
        }
        onInfo(conn, info);
    }

    private void onInfo(Connection conn, RequestInfo info) {
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
        List<Refusal> refusals = new ArrayList<>();
        TransferHandle failLocal = null;
        KvTransferException failure = null;
        Runnable dispatch = null;
        TransferHandle dispatched = null;
        synchronized (lock) {
            Pending p = pending.get(id);
            if (p == null) {
                if (pending.size() >= env.config().maxPendingRequests()) {
                    refusals.add(new Refusal(conn, info.dataTag(), ErrorCode.INTERNAL, "context rank "
                            + env.selfIndex() + " tracks too many pending requests (" + pending.size() + ")", id));
                    support = null;
                } else {
                    p = new Pending(id, System.nanoTime() + env.config().kvTransferTimeout().toNanos());
                    pending.put(id, p);
                }
            }
            if (p == null) {
                // refused above
            } else if (!support.supported()) {
                boolean first = p.refusalCode == null && !p.dispatched;
                if (first) {
                    p.refusalCode = ErrorCode.UNSUPPORTED_LAYOUT;
                    p.refusalReason = "unsupported layout: " + support.reason();
                    for (Asked a : p.allAsked()) {
                        refusals.add(new Refusal(a.conn, a.info.dataTag(), p.refusalCode, p.refusalReason, id));
                    }
                    if (p.local != null) {
                        failLocal = p.local;
                        failure = new KvTransferException(ErrorCode.UNSUPPORTED_LAYOUT, id, "generation rank "
                                + requester + " at " + conn.peer() + ": " + p.refusalReason, null);
                    }
                }
                refusals.add(new Refusal(conn, info.dataTag(), ErrorCode.UNSUPPORTED_LAYOUT,
                        "unsupported layout: " + support.reason(), id));
            } else if (p.refusalCode != null) {
                refusals.add(new Refusal(conn, info.dataTag(), p.refusalCode, p.refusalReason, id));
            } else if (p.dispatched) {
                refusals.add(new Refusal(conn, info.dataTag(), ErrorCode.MALFORMED, "request " + id
                        + " was already served to all its counterparts", id));
            } else {
                if (p.targets == null) {
                    p.peerCache = peer;
                    p.targets = targets;
                    p.asked = new Asked[targets.size()];
                }
                if (!p.peerCache.equals(peer)) {
                    refusals.add(new Refusal(conn, info.dataTag(), ErrorCode.MALFORMED, "generation ranks of request "
                            + id + " disagree on their layout: " + p.peerCache + " vs " + peer, id));
                } else if (p.asked[position] != null) {
                    refusals.add(new Refusal(conn, info.dataTag(), ErrorCode.MALFORMED, "generation rank "
                            + requester + " asked twice for request " + id, id));
                } else {
                    p.asked[position] = new Asked(conn, info);
                    p.askedCount++;
                    dispatch = maybeDispatch(p);
                    dispatched = p.local;
                }
            }
        }
        if (failLocal != null) {
            failLocal.fail(failure);
        }
        sendRefusals(refusals);
        if (dispatch != null) {
            submit(dispatch, dispatched);
        }
    }

    /** Under the lock: dispatches when locally ready and every counterpart asked. */
    private Runnable maybeDispatch(Pending p) {
        if (p.local == null || p.targets == null || p.dispatched || p.refusalCode != null
                || p.askedCount < p.targets.size()) {
            return null;
        }
        p.dispatched = true;
        pending.remove(p.requestId);
        p.timing.requestInfo(System.nanoTime());
        return new DispatchTask(p);
    }

    /** A dispatched request waiting for a sender thread; recognisable when a shutdown drops it. */
    private final class DispatchTask implements Runnable {
        final Pending p;

        DispatchTask(Pending p) {
            this.p = p;
        }

        @Override
        public void run() {
            sendRequest(p);
        }
    }

    private void submit(Runnable task, TransferHandle h) {
        try {
            senders.execute(task);
        } catch (RejectedExecutionException e) {
            if (h != null) {
                h.fail(new KvTransferException(ErrorCode.CANCELLED, h.requestId(), "the transceiver is closing", e));
            }
        }
    }

    private void expire() {
        long now = System.nanoTime();
        List<Refusal> refusals = new ArrayList<>();
        List<TransferHandle> failed = new ArrayList<>();
        List<KvTransferException> errors = new ArrayList<>();
        synchronized (lock) {
            for (Iterator<Pending> it = pending.values().iterator(); it.hasNext(); ) {
                Pending p = it.next();
                if (now - p.deadlineNanos < 0) {
                    continue;
                }
                it.remove();
                if (p.refusalCode != null) {
                    continue;
                }
                long ms = env.config().kvTransferTimeout().toMillis();
                String reason;
                if (p.local == null) {
                    reason = "context rank " + env.selfIndex() + ": the request was not made ready within " + ms
                            + " ms of being asked for";
                } else {
                    reason = "context rank " + env.selfIndex() + ": " + p.askedCount + " of "
                            + (p.targets == null ? "its" : Integer.toString(p.targets.size()))
                            + " counterparts asked within " + ms + " ms";
                    failed.add(p.local);
                    errors.add(new KvTransferException(ErrorCode.TIMEOUT, p.requestId, reason, null));
                }
                for (Asked a : p.allAsked()) {
                    refusals.add(new Refusal(a.conn, a.info.dataTag(), ErrorCode.TIMEOUT, reason, p.requestId));
                }
            }
        }
        for (int i = 0; i < failed.size(); i++) {
            failed.get(i).fail(errors.get(i));
        }
        sendRefusals(refusals);
    }

    private void sendRefusals(List<Refusal> refusals) {
        for (Refusal r : refusals) {
            try {
                Signals.sendRefusal(env.buffers(), r.conn, r.tag, r.code, r.reason, env.controlTimeout());
                env.journal().readySignalSent(r.requestId, -1, false);
            } catch (RuntimeException e) {
                env.metrics().error(new KvTransferException(codeOf(e), r.requestId, "could not tell "
                        + r.conn.peer() + " that the request was refused (" + r.reason + "): " + e.getMessage(), e));
            }
        }
    }

    private static ErrorCode codeOf(Throwable e) {
        return e instanceof KvTransferException k ? k.code() : ErrorCode.INTERNAL;
    }

    // ---------------------------------------------------------------- sender threads

    private void sendRequest(Pending p) {
        TransferHandle h = p.local;
        long id = p.requestId;
        int n = p.targets.size();
        Connection[] conns = new Connection[n];
        int[] tags = new int[n];
        for (int i = 0; i < n; i++) {
            conns[i] = p.asked[i].conn;
            tags[i] = p.asked[i].info.dataTag();
        }
        long chunk = p.asked[0].info.chunkBytes();
        DefaultTransferSession session = null;
        // The transfer starts when a sender thread takes the request (every counterpart has asked).
        h.started(EpochClock.nowNanos());
        try {
            if (closing) {
                throw new KvTransferException(ErrorCode.CANCELLED, id, "the transceiver is closing", null);
            }
            int totalBlocks = BlockDistribution.blocksFor(h.promptLength(), env.selfCache().tokensPerBlock());
            for (Asked a : p.asked) {
                if (a.info.indexFromEnd() + 1 != totalBlocks) {
                    throw new KvTransferException(ErrorCode.MALFORMED, id, "generation rank "
                            + a.info.requesterState().selfIndex() + " asked for " + (a.info.indexFromEnd() + 1)
                            + " blocks but the context request has " + totalBlocks + " (prompt "
                            + h.promptLength() + " tokens)", null);
                }
            }
            session = DefaultTransferSession.builder(id, true).states(env.selfState(), p.peerCache, p.targets)
                    .blocks(h.blockIds(), totalBlocks).connections(conns, tags, chunk)
                    .resources(env.pool(), env.buffers(), env.peerExecutor()).deadline(p.deadlineNanos, p.timing)
                    .journal(env.journal()).build();
            for (int i = 0; i < n; i++) {
                try {
                    conns[i].send(tags[i], readyOne, 0, 1, session.remaining("sending the ready signal"));
                    env.journal().readySignalSent(id, p.targets.peerRanks().get(i), true);
                } catch (KvTransferException e) {
                    throw new KvTransferException(e.code(), id, "ready signal to generation rank "
                            + p.targets.peerRanks().get(i) + " (" + conns[i].peer() + ") failed: " + e.getMessage(), e);
                }
            }
            p.timing.preparation(System.nanoTime());
            if (env.formatter().needSendCache(env.selfCache(), env.selfIndex(), p.peerCache)) {
                env.formatter().format(session);
            }
            p.timing.postprocess(System.nanoTime());
            long bytes = session.movedBytes();
            session.close();
            if (h.succeed(bytes, EpochClock.nowNanos())) {
                env.metrics().outcome(true, true, bytes);
                if (env.timing() != null) {
                    env.timing().submit(true, p.timing);
                }
            }
        } catch (RuntimeException e) {
            KvTransferException k = TransferErrors.forRequest(e, id, "sending");
            if (k.code() == ErrorCode.MALFORMED && session == null) {
                // Nothing was signalled yet: tell every counterpart why, so none waits for its deadline.
                List<Refusal> refusals = new ArrayList<>();
                for (int i = 0; i < n; i++) {
                    refusals.add(new Refusal(conns[i], tags[i], k.code(), k.getMessage(), id));
                }
                sendRefusals(refusals);
            } else if (k.code() == ErrorCode.CANCELLED && session == null) {
                List<Refusal> refusals = new ArrayList<>();
                for (int i = 0; i < n; i++) {
                    refusals.add(new Refusal(conns[i], tags[i], k.code(), "context side closing", id));
                }
                sendRefusals(refusals);
            }
            if (h.fail(k)) {
                env.metrics().outcome(true, false, session == null ? 0 : session.movedBytes());
            }
        } finally {
            if (session != null) {
                session.close();
            }
        }
    }

    // ---------------------------------------------------------------- lifecycle

    /**
     * Stops accepting requests, refuses every pending one ({@code CANCELLED}) and interrupts the threads;
     * does not wait.
     */
    public void shutdown() {
        List<Refusal> refusals = new ArrayList<>();
        List<TransferHandle> locals = new ArrayList<>();
        synchronized (lock) {
            if (closing) {
                return;
            }
            closing = true;
            for (Pending p : pending.values()) {
                if (p.refusalCode == null) {
                    for (Asked a : p.allAsked()) {
                        refusals.add(new Refusal(a.conn, a.info.dataTag(), ErrorCode.CANCELLED,
                                "context rank " + env.selfIndex() + " is closing", p.requestId));
                    }
                }
                if (p.local != null) {
                    locals.add(p.local);
                }
            }
            pending.clear();
        }
        for (TransferHandle h : locals) {
            h.fail(new KvTransferException(ErrorCode.CANCELLED, h.requestId(), "the transceiver closed", null));
        }
        sendRefusals(refusals);
        if (senders != null) {
            // Dispatched requests no sender thread has taken yet end here, their counterparts told.
            List<Refusal> dropped = new ArrayList<>();
            for (Runnable r : senders.shutdownNow()) {
                if (r instanceof DispatchTask d) {
                    for (Asked a : d.p.allAsked()) {
                        dropped.add(new Refusal(a.conn, a.info.dataTag(), ErrorCode.CANCELLED,
                                "context rank " + env.selfIndex() + " is closing", d.p.requestId));
                    }
                    d.p.local.fail(new KvTransferException(ErrorCode.CANCELLED, d.p.requestId,
                            "the transceiver closed before a sender thread took the request", null));
                }
            }
            sendRefusals(dropped);
        }
    }

    /**
     * Waits for the responder and sender threads to end, then frees the control buffer.
     *
     * @param timeout how long to wait
     * @return true when every thread ended
     */
    public boolean awaitTermination(Duration timeout) {
        long deadline = System.nanoTime() + timeout.toNanos();
        Thread r;
        ThreadPoolExecutor s;
        synchronized (lock) {
            r = responder;
            s = senders;
        }
        if (r == null) {
            return true;
        }
        try {
            r.join(Math.max(1, TimeUnit.NANOSECONDS.toMillis(deadline - System.nanoTime())));
            boolean ok = !r.isAlive()
                    && s.awaitTermination(Math.max(0, deadline - System.nanoTime()), TimeUnit.NANOSECONDS);
            if (ok) {
                synchronized (lock) {
                    if (readyOne != null) {
                        readyOne.close();
                        readyOne = null;
                    }
                }
            }
            return ok;
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            return false;
        }
    }

    @Override
    public void close() {
        shutdown();
        awaitTermination(Duration.ofSeconds(5));
    }

    /** @return the number of requests tracked but not dispatched (tests and diagnostics) */
    public int pendingCount() {
        synchronized (lock) {
            return pending.size();
        }
    }

}
