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

import java.nio.ByteBuffer;
import java.time.Duration;
import java.util.ArrayList;
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
    /** Longest the idle responder waits in one poll before it expires old requests and checks for close. */
    static final Duration POLL = Duration.ofMillis(50);
    /** Threads reading request infos (each connection's infos are read in order by one of them at a time). */
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
    // A primitive-keyed map (no boxed id, no node per request; its iterators are reused): used under lock only.
    private final org.agrona.collections.Long2ObjectHashMap<Pending> pending =
            new org.agrona.collections.Long2ObjectHashMap<>();
    private final AtomicInteger senderThreads = new AtomicInteger();
    /** Requests being sent right now, on sender threads or inline on info readers (at most sendConcurrency inline). */
    private final AtomicInteger busySenders = new AtomicInteger();
    /** The responder's thread once it runs ({@link #serveInline} serves only eager sends on it). */
    private volatile Thread responderThread;
    /** {@code kvtransfer.responderInfoWaitMicros}, or null when the responder never reads infos. */
    private final Duration responderInfoWait;
    /** Info readers serving a request inline right now (0 or 1, {@link #serveInline}). */
    private final AtomicInteger inlineReaders = new AtomicInteger();
    private org.agrona.concurrent.AgentRunner responder;
    private ThreadPoolExecutor senders;
    private ThreadPoolExecutor infoReaders;
    private final Map<Connection, InfoQueue> infoQueues = new java.util.concurrent.ConcurrentHashMap<>();
    /** The infos of the last dispatched requests (guarded by {@link #lock}): late duplicates are recognised. */
    private final Map<Long, RequestInfo[]> dispatchedRecently = new java.util.LinkedHashMap<>(256, 0.75f, false) {
        @Override
        protected boolean removeEldestEntry(Map.Entry<Long, RequestInfo[]> e) {
            return size() > 1024;
        }
    };
    private volatile boolean closing;

    /**
     * Creates the sender; starts nothing yet.
     *
     * @param env the rank's shared parts
     */
    public CacheSender(TransferEnv env) {
        this.env = Objects.requireNonNull(env, "env");
        this.control = new ControlBuffers(env.buffers());
        int wait = env.config().responderInfoWaitMicros();
        this.responderInfoWait = wait == 0 ? null : Duration.ofNanos(TimeUnit.MICROSECONDS.toNanos(wait));
    }

    /** What one counterpart asked. */
    private record Asked(Connection conn, RequestInfo info) {
    }

    /** A refusal to send outside the lock. */
    private record Refusal(Connection conn, RequestInfo info, ErrorCode code, String reason, long requestId) {
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
        /** When the first counterpart's info arrived (TensorRT-LLM's kTimeRequestInfo: the session's creation). */
        long firstInfoNanos;

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
                refusals.add(new Refusal(a.conn, a.info, p.refusalCode, p.refusalReason, p.requestId));
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
            int n = env.config().sendConcurrency();
            senders = new ThreadPoolExecutor(n, n, 0, TimeUnit.MILLISECONDS, new LinkedBlockingQueue<>(), r -> {
                Thread t = new Thread(r, env.threadPrefix() + "-send-" + senderThreads.getAndIncrement());
                t.setDaemon(true);
                return t;
            });
            AtomicInteger readers = new AtomicInteger();
            infoReaders = new ThreadPoolExecutor(INFO_READERS, INFO_READERS, 0, TimeUnit.MILLISECONDS,
                    new LinkedBlockingQueue<>(), r -> {
                Thread t = new Thread(r, env.threadPrefix() + "-info-" + readers.getAndIncrement());
                t.setDaemon(true);
                return t;
            });
            // The responder is an Agrona agent: its work is one poll of the transport (which waits, bounded, in
            // the transport's own wakeup), its errors go to the metrics' error path and counter.
            responder = new org.agrona.concurrent.AgentRunner(new org.agrona.concurrent.NoOpIdleStrategy(),
                    e -> {
                        if (e instanceof org.agrona.concurrent.AgentTerminationException) {
                            return; // the agent's own, orderly stop (close, or the transport closed)
                        }
                        env.metrics().error(e instanceof KvTransferException ? e
                                : new KvTransferException(ErrorCode.INTERNAL, KvTransferException.NO_REQUEST,
                                "responder of rank " + env.selfIndex() + ": " + e, e));
                    }, null, new Responder());
            org.agrona.concurrent.AgentRunner.startOnThread(responder, r -> {
                Thread t = new Thread(r, env.threadPrefix() + "-responder");
                t.setDaemon(true);
                return t;
            });
        }
    }

    // ---------------------------------------------------------------- responder

    /** The responder agent: accepts request headers and hands each connection's infos to an info reader. */
    private final class Responder implements org.agrona.concurrent.Agent {
        private MemoryBuffer header;

        @Override
        public void onStart() {
            header = env.buffers().allocate(CacheReceiver.HEADER_BYTES, MemoryKind.HOST);
            responderThread = Thread.currentThread();
        }

        @Override
        public int doWork() {
            if (closing) {
                throw new org.agrona.concurrent.AgentTerminationException();
            }
            expire();
            Connection conn;
            try {
                conn = env.connections().pollConnect(Tags.ID_TAG, header, 0, CacheReceiver.HEADER_BYTES, POLL);
            } catch (TransportClosedException e) {
                if (!closing) {
                    env.metrics().error(new KvTransferException(ErrorCode.NETWORK, KvTransferException.NO_REQUEST,
                            "responder of rank " + env.selfIndex() + " stops: transport closed", e));
                }
                throw new org.agrona.concurrent.AgentTerminationException();
            } catch (KvTransferException e) {
                // A malformed header (wrong length) from some peer: counted, and the next one is served.
                env.metrics().error(e);
                return 1;
            }
            if (conn == null) {
                return 0;
            }
            ByteBuffer h = header.asByteBuffer();
            long kind = h.getLong(0);
            long size = h.getLong(8);
            long id = h.getLong(16);
            if (kind == Tags.TERMINATION) {
                return 1;
            }
            int mac = env.auth().macBytes();
            if (kind != Tags.REQUEST_SEND) {
                env.metrics().error(new KvTransferException(ErrorCode.MALFORMED, "rank " + env.selfIndex()
                        + ": unknown request kind " + kind + " from " + Texts.peer(conn.peer()) + " (dropped)"));
                return 1;
            }
            if (size <= mac || size > MAX_INFO_BYTES + mac) {
                // The info itself is left unread: a peer that announces this is not speaking our protocol.
                env.metrics().error(new KvTransferException(ErrorCode.MALFORMED, id, "rank " + env.selfIndex()
                        + ": request info of " + size + " bytes announced by " + Texts.peer(conn.peer())
                        + " (limit " + MAX_INFO_BYTES + "); dropped", null));
                return 1;
            }
            enqueueInfo(conn, id, (int) size);
            return 1;
        }

        @Override
        public void onClose() {
            if (header != null) {
                header.close();
            }
        }

        @Override
        public String roleName() {
            return env.threadPrefix() + "-responder";
        }
    }

    /** The headers of one connection whose infos are still to read, read in order by one reader at a time. */
    private static final class InfoQueue {
        /** (request id, info bytes) of each header whose info is still to read, oldest first. */
        final LongPairQueue pending = new LongPairQueue();
        /** Request ids of the last headers accepted: a duplicated header (a network artifact) is ignored. */
        final long[] recent = new long[64];
        int recentNext;
        /** Requests whose info arrived in place of an earlier request's lost one, before their own header. */
        final long[] adopted = new long[16];
        int adoptedNext;
        boolean reading;
        /** Headers of this connection whose info the responder leaves to a reader after one came late. */
        int responderSkips;

        /** Takes over a later request's queued header whose info arrived in place of a lost one. */
        void adopt(long id) {
            if (!pending.removeFirstValue(id)) {
                adopted[adoptedNext] = id;
                adoptedNext = (adoptedNext + 1) % adopted.length;
            }
        }

        boolean wasAdopted(long id) {
            for (int i = 0; i < adopted.length; i++) {
                if (adopted[i] == id && id != 0) {
                    adopted[i] = 0;
                    return true;
                }
            }
            return false;
        }

        boolean seenRecently(long id) {
            for (long r : recent) {
                if (r == id && id != 0) {
                    return true;
                }
            }
            return false;
        }

        void remember(long id) {
            recent[recentNext] = id;
            recentNext = (recentNext + 1) % recent.length;
        }
    }

    /** On the responder: queues an accepted header's info read, reading it here when {@link #readOnResponder} can. */
    private void enqueueInfo(Connection conn, long id, int size) {
        InfoQueue q = infoQueues.computeIfAbsent(conn, c -> new InfoQueue());
        boolean start;
        synchronized (q) {
            if (q.wasAdopted(id)) {
                // Its info already arrived (read in place of an earlier request's lost info) and was served.
                q.remember(id);
                return;
            }
            if (q.seenRecently(id)) {
                env.metrics().error(new KvTransferException(ErrorCode.MALFORMED, id, "rank " + env.selfIndex()
                        + ": duplicate request header for request " + id + " from " + Texts.peer(conn.peer())
                        + " (ignored)", null));
                return;
            }
            if (q.pending.size() >= MAX_QUEUED_PER_CONNECTION) {
                env.metrics().error(new KvTransferException(ErrorCode.MALFORMED, id, "rank " + env.selfIndex()
                        + ": " + Texts.peer(conn.peer()) + " has " + q.pending.size() + " request infos unread; "
                        + "request " + id + " dropped", null));
                return;
            }
            q.pending.add(id, size);
            q.remember(id);
            start = !q.reading;
            q.reading = true;
        }
        if (start) {
            if (readOnResponder(conn, q)) {
                return;
            }
            try {
                infoReaders.execute(() -> drain(conn, q));
            } catch (RejectedExecutionException e) {
                synchronized (q) {
                    q.reading = false;
                    q.pending.clear();
                }
            }
        }
    }

    /**
     * Reads the info of a header the responder just accepted on the responder's own thread (one hand-off to an info
     * reader and one wake-up fewer on a request's path) when it arrives within
     * {@code kvtransfer.responderInfoWaitMicros} (200 µs; 0 = never) and no request is being sent or waits for a
     * sender thread: the queue of this connection was idle, so the header is its only entry and no reader runs for
     * it. When the info is late (a slow or hostile requester) the read goes to an info reader as before — the
     * transport keeps the late message for that later receive — and the connection's next
     * {@link #RESPONDER_SKIPS_AFTER_LATE} headers go to a reader directly, so a slow or hostile requester costs the
     * responder at most that wait once per 64 of its headers (and none while its headers queue behind a reader).
     * The info is decoded, authenticated and dispatched here; {@link #serveInline} serves it here only when its
     * data goes in eager sends, which never wait for the peer.
     *
     * @return true when the info was read (served, queued for a sender, or refused) here; false to hand the
     *         connection to an info reader
     */
    private boolean readOnResponder(Connection conn, InfoQueue q) {
        long id;
        long size;
        // Only while nothing else is being served: with requests in flight the responder keeps to accepting headers
        // (serving here then delayed every other connection's, and cost requests/s over UCX at 64 in flight).
        if (responderInfoWait == null || busySenders.get() > 0 || inlineReaders.get() > 0
                || !senders.getQueue().isEmpty()) {
            return false;
        }
        synchronized (q) {
            if (q.pending.size() != 1 || closing) {
                return false;
            }
            if (q.responderSkips > 0) {
                q.responderSkips--;
                return false;
            }
            id = q.pending.firstA();
            size = q.pending.firstB();
            q.pending.removeFirst();
        }
        boolean late = readReporting(conn, q, id, size, responderInfoWait) == Read.LATE;
        synchronized (q) {
            if (late) {
                // Nothing was consumed: the header goes back (its queue is empty), and this connection's next
                // headers go straight to a reader: its infos come later than the wait.
                q.pending.add(id, size);
                q.responderSkips = RESPONDER_SKIPS_AFTER_LATE;
                return false;
            }
            // Only this thread queues headers, so none arrived meanwhile: the connection is idle again.
            q.reading = false;
        }
        return true;
    }

    /** How {@link #readReporting} ended. */
    private enum Read { DONE, LATE, CLOSED }

    /** {@link #readInfo}, its failures reported to the metrics (the transport closing ends it quietly). */
    private Read readReporting(Connection conn, InfoQueue q, long id, long size, Duration firstWait) {
        try {
            return readInfo(conn, q, id, (int) size, firstWait) ? Read.DONE : Read.LATE;
        } catch (TransportClosedException e) {
            return Read.CLOSED;
        } catch (RuntimeException e) {
            env.metrics().error(e instanceof KvTransferException ? e
                    : new KvTransferException(ErrorCode.INTERNAL, id, "reading request info from "
                    + Texts.peer(conn.peer()) + ": " + e, e));
            return Read.DONE;
        }
    }

    /** Reads one connection's announced infos in order; a requester that never sends one delays only itself. */
    private void drain(Connection conn, InfoQueue q) {
        while (true) {
            long nextId;
            long nextSize;
            synchronized (q) {
                if (q.pending.isEmpty() || closing) {
                    q.reading = false;
                    q.pending.clear();
                    return;
                }
                nextId = q.pending.firstA();
                nextSize = q.pending.firstB();
                q.pending.removeFirst();
            }
            if (readReporting(conn, q, nextId, nextSize, null) == Read.CLOSED) {
                return;
            }
        }
    }

    /**
     * Reads, authenticates and dispatches one announced info.
     *
     * @param firstWait when not null, how long to wait for the info before giving up with nothing consumed
     * @return false only when {@code firstWait} passed before the info arrived
     */
    private boolean readInfo(Connection conn, InfoQueue q, long headerId, int size, Duration firstWait) {
        ControlAuth auth = env.auth();
        int mac = auth.macBytes();
        RequestInfo info = null;
        MalformedMessageException malformed = null;
        boolean macOk = false;
        try (ControlBuffers.Lease lease = control.acquire(size)) {
            MemoryBuffer buf = lease.buffer();
            long deadline = System.nanoTime() + env.controlTimeout().toNanos();
            for (int attempt = 0; ; attempt++) {
                try {
                    if (attempt == 0 && firstWait != null) {
                        conn.recv(Tags.INFO_TAG, buf, 0, size, firstWait);
                    } else {
                        conn.recv(Tags.INFO_TAG, buf, 0, size, Waits.left(deadline - System.nanoTime()));
                    }
                    break;
                } catch (KvTransferException e) {
                    if (attempt == 0 && firstWait != null && e.code() == ErrorCode.TIMEOUT) {
                        return false;
                    }
                    // A message of another length is consumed by the transport: a stale or duplicated info. The
                    // header's own info is the next one; try again (a few times, within the deadline).
                    if (e.code() != ErrorCode.MALFORMED || attempt >= 2 || deadline - System.nanoTime() <= 0) {
                        throw e;
                    }
                    env.metrics().error(new KvTransferException(ErrorCode.MALFORMED, headerId, "rank "
                            + env.selfIndex() + ": skipped a request info of another length from "
                            + Texts.peer(conn.peer()) + ": " + e.getMessage(), e));
                }
            }
            // Decoded and authenticated where it was received (no copy of the message or of its MAC); the lease
            // is reusable once the receive completed, whatever the bytes were.
            ByteBuffer bb = lease.bytes();
            try {
                info = RequestInfo.fromBytes(bb, 0, size - mac);
                macOk = auth.infoMacValid(bb, 0, size - mac, CacheReceiver.utf8(env.connections().localAddress()),
                        size - mac);
            } catch (MalformedMessageException e) {
                malformed = e;
            }
            lease.reusable();
        } catch (KvTransferException e) {
            throw new KvTransferException(e.code(), headerId, "rank " + env.selfIndex() + ": the info of request "
                    + headerId + " announced by " + Texts.peer(conn.peer()) + " did not arrive: " + e.getMessage(), e);
        }
        if (malformed != null) {
            throw new KvTransferException(ErrorCode.MALFORMED, headerId, "rank " + env.selfIndex()
                    + ": bad request info from " + Texts.peer(conn.peer()) + ": " + malformed.getMessage(), malformed);
        }
        if (info.requestId() != headerId) {
            // Infos arrive in the order their headers were sent: the announced request's info was lost and this
            // is a later request's. Report the lost one and serve this one under its own id (its header, queued
            // or still to come, is taken over), so one lost message costs one request, not every later one.
            env.metrics().error(new KvTransferException(ErrorCode.MALFORMED, headerId, "rank " + env.selfIndex()
                    + ": " + Texts.peer(conn.peer()) + " announced request " + headerId + " but its info never came "
                    + "(the next info is request " + info.requestId() + "'s); request " + headerId + " dropped",
                    null));
            synchronized (q) {
                q.adopt(info.requestId());
            }
            headerId = info.requestId();
        }
        String refused = authenticate(conn, info, macOk);
        if (refused == REPLAYED) {
            // A duplicate of an info already served (a replay, or the network duplicated it): the genuine asker
            // is being served, so nothing is sent back.
            throw unauthorized(headerId, conn, "request info replayed (its nonce was already used); dropped");
        }
        if (refused != null) {
            KvTransferException e = unauthorized(headerId, conn, refused);
            // The asker learns only that it was refused and why in general terms; nothing of the request moves.
            sendRefusals(List.of(new Refusal(conn, info, ErrorCode.UNAUTHORIZED, "refused: " + refused,
                    headerId)));
            throw e;
        }
        onInfo(conn, info, q);
        return true;
    }

    /** @return null when the info is authentic, fresh, from the session it claims and holds the token */
    private String authenticate(Connection conn, RequestInfo info, boolean macOk) {
        ControlAuth auth = env.auth();
        if (!auth.enabled()) {
            return null;
        }
        if (!macOk) {
            return "request info failed authentication (forged, altered, meant for another rank, or a different "
                    + "deployment secret: set kvtransfer.authSecretFile to the same file on every rank)";
        }
        // Identity is the transport session's: the requester must be who the connection says it is.
        var addresses = info.requesterState().commState().addresses();
        int self = info.requesterState().selfIndex();
        if (self < 0 || self >= addresses.size() || !addresses.get(self).equals(conn.peer())) {
            return "the request info claims generation rank address "
                    + (self >= 0 && self < addresses.size() ? Texts.peer(addresses.get(self)) : "?")
                    + " but the connection is from " + Texts.peer(conn.peer());
        }
        String stale = auth.checkFresh(info);
        if (stale != null) {
            return stale.startsWith("nonce already used") ? REPLAYED : stale;
        }
        if (!auth.tokenValid(info.requestId(), info)) {
            return "wrong request token: the asker does not hold this request's ContextPhaseParams (build them "
                    + "with CacheTransceiver.contextPhaseParams)";
        }
        return null;
    }

    /** {@link #authenticate}'s answer for a replayed info: dropped without a word. */
    private static final String REPLAYED = new String("replayed");

    private KvTransferException unauthorized(long id, Connection conn, String why) {
        KvTransferException e = new KvTransferException(ErrorCode.UNAUTHORIZED, id, "rank " + env.selfIndex() + ": "
                + Texts.peer(conn.peer()) + ": " + why, null);
        return e;
    }

    private void onInfo(Connection conn, RequestInfo info, InfoQueue q) {
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
            RequestInfo[] served = p == null ? dispatchedRecently.get(id) : null;
            if (served != null) {
                boolean duplicate = false;
                for (RequestInfo s : served) {
                    duplicate |= info.equals(s);
                }
                if (duplicate) {
                    env.metrics().error(new KvTransferException(ErrorCode.MALFORMED, id, "duplicate request info "
                            + "from generation rank " + requester + " after dispatch (ignored)", null));
                } else {
                    refusals.add(new Refusal(conn, info, ErrorCode.MALFORMED, "request " + id
                            + " was already served to all its counterparts", id));
                }
                support = null;
                p = null;
            } else if (p == null) {
                if (pending.size() >= env.config().maxPendingRequests()) {
                    refusals.add(new Refusal(conn, info, ErrorCode.INTERNAL, "context rank "
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
                        refusals.add(new Refusal(a.conn, a.info, p.refusalCode, p.refusalReason, id));
                    }
                    if (p.local != null) {
                        failLocal = p.local;
                        failure = new KvTransferException(ErrorCode.UNSUPPORTED_LAYOUT, id, "generation rank "
                                + requester + " at " + conn.peer() + ": " + p.refusalReason, null);
                    }
                }
                refusals.add(new Refusal(conn, info, ErrorCode.UNSUPPORTED_LAYOUT,
                        "unsupported layout: " + support.reason(), id));
            } else if (p.refusalCode != null) {
                refusals.add(new Refusal(conn, info, p.refusalCode, p.refusalReason, id));
            } else if (p.dispatched) {
                refusals.add(new Refusal(conn, info, ErrorCode.MALFORMED, "request " + id
                        + " was already served to all its counterparts", id));
            } else {
                if (p.targets == null) {
                    p.peerCache = peer;
                    p.targets = targets;
                    p.asked = new Asked[targets.size()];
                }
                if (!p.peerCache.equals(peer)) {
                    refusals.add(new Refusal(conn, info, ErrorCode.MALFORMED, "generation ranks of request "
                            + id + " disagree on their layout: " + p.peerCache + " vs " + peer, id));
                } else if (p.asked[position] != null && p.asked[position].info.equals(info)) {
                    // The same info twice (the network duplicated it): already counted, nothing to answer.
                    env.metrics().error(new KvTransferException(ErrorCode.MALFORMED, id, "duplicate request info "
                            + "from generation rank " + requester + " (ignored)", null));
                } else if (p.asked[position] != null) {
                    refusals.add(new Refusal(conn, info, ErrorCode.MALFORMED, "generation rank "
                            + requester + " asked twice for request " + id, id));
                } else {
                    p.asked[position] = new Asked(conn, info);
                    if (p.askedCount++ == 0) {
                        p.firstInfoNanos = System.nanoTime();
                    }
                    dispatch = maybeDispatch(p);
                    dispatched = p.local;
                }
            }
        }
        if (failLocal != null) {
            failLocal.fail(failure);
        }
        sendRefusals(refusals);
        if (dispatch != null && !serveInline((DispatchTask) dispatch, q)) {
            submit(dispatch, dispatched);
        }
    }

    /**
     * Serves a dispatched request on this info reader's thread instead of handing it to a sender thread (one
     * hand-off and one wake-up fewer on a small request's path) when that cannot delay anything: the request is
     * small ({@link #INLINE_SEND_BYTES} of this rank's blocks at most) and not layer by layer (which would wait here
     * for the engine), no further info of this connection is queued behind it, no dispatched request waits for a
     * sender thread, no other reader is serving one inline (so one of the {@link #INFO_READERS} always reads), and
     * fewer than {@code sendConcurrency} requests are being sent (this one then counts as one of them). Otherwise
     * the caller submits it as before. Infos of this connection that arrive meanwhile wait for the send (as they
     * wait for any info of their connection being read): the same requester, a request of at most
     * {@link #INLINE_SEND_BYTES}.
     *
     * @return true when it was served here
     */
    private boolean serveInline(DispatchTask d, InfoQueue q) {
        TransferHandle h = d.p.local;
        if (closing || h.layerWise() || !senders.getQueue().isEmpty()) {
            return false;
        }
        // Every block of the prompt (this rank's share may be smaller): no copy of the block ids.
        long bytes = (long) BlockDistribution.blocksFor(h.promptLength(), env.selfCache().tokensPerBlock())
                * env.cache().layout().blockBytes();
        if (bytes > INLINE_SEND_BYTES) {
            return false;
        }
        // On the responder only eager sends (they never wait for the peer): every connection's headers wait for it.
        if (Thread.currentThread() == responderThread && bytes > Connection.EAGER_LIMIT) {
            return false;
        }
        synchronized (q) {
            if (!q.pending.isEmpty()) {
                return false;
            }
        }
        // One reader at most serves inline: the other keeps reading every other connection's infos, so a
        // counterpart that stalls its receive cannot hold up other counterparts' requests.
        if (!inlineReaders.compareAndSet(0, 1)) {
            return false;
        }
        int limit = env.config().sendConcurrency();
        while (true) {
            int busy = busySenders.get();
            if (busy >= limit) {
                inlineReaders.set(0);
                return false;
            }
            if (busySenders.compareAndSet(busy, busy + 1)) {
                break;
            }
        }
        try {
            env.metrics().inlineSend();
            sendRequest(d.p);
        } finally {
            busySenders.decrementAndGet();
            inlineReaders.set(0);
        }
        return true;
    }

    /** Under the lock: dispatches when locally ready and every counterpart asked. */
    private Runnable maybeDispatch(Pending p) {
        if (p.local == null || p.targets == null || p.dispatched || p.refusalCode != null
                || p.askedCount < p.targets.size()) {
            return null;
        }
        p.dispatched = true;
        pending.remove(p.requestId);
        RequestInfo[] infos = new RequestInfo[p.asked.length];
        for (int i = 0; i < infos.length; i++) {
            infos[i] = p.asked[i].info;
        }
        dispatchedRecently.put(p.requestId, infos);
        p.timing.requestInfo(p.firstInfoNanos != 0 ? p.firstInfoNanos : System.nanoTime());
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
            busySenders.incrementAndGet();
            try {
                sendRequest(p);
            } finally {
                busySenders.decrementAndGet();
            }
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
        // Called on every responder tick: nothing is allocated unless something expired (the lists are made then),
        // and the pending map is walked only when it holds something.
        List<Refusal> refusals = null;
        List<TransferHandle> failed = null;
        List<KvTransferException> errors = null;
        synchronized (lock) {
            if (pending.isEmpty()) {
                return;
            }
            for (Iterator<Pending> it = pending.values().iterator(); it.hasNext(); ) {
                Pending p = it.next();
                if (now - p.deadlineNanos < 0) {
                    continue;
                }
                it.remove();
                if (p.refusalCode != null) {
                    continue;
                }
                if (refusals == null) {
                    refusals = new ArrayList<>();
                    failed = new ArrayList<>();
                    errors = new ArrayList<>();
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
                    refusals.add(new Refusal(a.conn, a.info, ErrorCode.TIMEOUT, reason, p.requestId));
                }
            }
        }
        if (refusals == null) {
            return;
        }
        for (int i = 0; i < failed.size(); i++) {
            failed.get(i).fail(errors.get(i));
        }
        sendRefusals(refusals);
    }

    private void sendRefusals(List<Refusal> refusals) {
        for (Refusal r : refusals) {
            try {
                sendReady(r.conn, r.info, false, null, env.controlTimeout());
                Signals.sendReason(env.buffers(), r.conn, r.info.dataTag(), r.code, r.reason, env.controlTimeout());
                env.journal().readySignalSent(r.requestId, -1, false);
            } catch (RuntimeException e) {
                env.metrics().error(new KvTransferException(codeOf(e), r.requestId, "could not tell "
                        + Texts.peer(r.conn.peer()) + " that the request was refused (" + r.reason + "): "
                        + e.getMessage(), e));
            }
        }
    }

    /**
     * Sends a ready signal on the request's data tag: status, this rank's block count and ids (zeros for a
     * refusal), and with authentication the MAC binding it to the request's nonce and both ends.
     */
    private void sendReady(Connection conn, RequestInfo info, boolean ok, int[] ids, Duration timeout) {
        sendReady(conn, info, ok, ids, timeout, false, false);
    }

    private void sendReady(Connection conn, RequestInfo info, boolean ok, int[] ids, Duration timeout, boolean push,
                           boolean layered) {
        CacheState self = env.selfCache();
        int n = BlockDistribution.count(info.indexFromEnd() + 1, self.contextParallelism(),
                self.cpRank(env.selfIndex()));
        ControlAuth auth = env.auth();
        int mac = auth.macBytes();
        int len = CacheReceiver.readyBytes(n, mac);
        try (ControlBuffers.Lease lease = control.acquire(len)) {
            MemoryBuffer buf = lease.buffer();
            ByteBuffer bb = lease.bytes();
            bb.put(0, !ok ? CacheReceiver.READY_REFUSED : (byte) ((push ? CacheReceiver.READY_PUSH
                    : CacheReceiver.READY_PULL) | (layered ? CacheReceiver.READY_LAYERS : 0)));
            bb.putInt(4, n);
            bb.putInt(8, env.cache().blocksPerRegion());
            for (int i = 0; i < n; i++) {
                bb.putInt(CacheReceiver.READY_HEADER + 4 * i, ok && ids != null && i < ids.length ? ids[i] : 0);
            }
            if (mac > 0) {
                auth.readyMacInto(bb, len - mac, info, CacheReceiver.utf8(env.connections().localAddress()),
                        CacheReceiver.utf8(conn.peer()));
            }
            conn.send(info.dataTag(), buf, 0, len, timeout);
            lease.reusable();
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
            int reused = checkReuse(p, h, totalBlocks);
            boolean checksums = p.asked[0].info.partChecksums();
            boolean coalesce = p.asked[0].info.coalesce();
            int[][] peerIds = new int[n][];
            int[] peerBpr = new int[n];
            for (int i = 0; i < n; i++) {
                peerIds[i] = p.asked[i].info.blockIds();
                peerBpr[i] = p.asked[i].info.blocksPerRegion();
                if (p.asked[i].info.partChecksums() != checksums) {
                    throw new KvTransferException(ErrorCode.MALFORMED, id, "generation ranks of request " + id
                            + " disagree on part checksums", null);
                }
                if (p.asked[i].info.coalesce() != coalesce) {
                    throw new KvTransferException(ErrorCode.MALFORMED, id, "generation ranks of request " + id
                            + " disagree on coalescing (" + dev.kvtransfer.core.TransceiverConfig.P_COALESCE + ")", null);
                }
            }
            boolean push = p.asked[0].info.push() && canPush();
            dev.kvtransfer.api.format.PeerPool[] pools = null;
            if (push) {
                pools = new dev.kvtransfer.api.format.PeerPool[n];
                for (int i = 0; i < n; i++) {
                    RequestInfo ai = p.asked[i].info;
                    if (!ai.push()) {
                        throw new KvTransferException(ErrorCode.MALFORMED, id, "generation ranks of request " + id
                                + " disagree on push and pull", null);
                    }
                    pools[i] = new dev.kvtransfer.api.format.PeerPool(p.peerCache, ai.requesterState().selfIndex(),
                            ai.blockIds(), ai.blocksPerRegion(), ai.grants());
                }
            }
            boolean layered = h.layerWise() && env.formatter().capabilities().contains(
                    push ? dev.kvtransfer.api.format.FormatterCapability.PUSH
                            : dev.kvtransfer.api.format.FormatterCapability.LAYER_RANGES);
            session = DefaultTransferSession.builder(id, true).states(env.selfState(), p.peerCache, p.targets)
                    .blocks(h.blockIds(), totalBlocks).connections(conns, tags, chunk)
                    .resources(env.pool(), env.buffers(), env.peerExecutor()).deadline(p.deadlineNanos, p.timing)
                    .journal(env.journal()).reusedBlocks(reused)
                    // Without coalescing both sides plan without the peer's ids: one message per block.
                    .peerBlockIds(push || coalesce ? peerIds : null).peerBlocksPerRegion(peerBpr)
                    .checksums(checksums).push(pools).controlBuffers(control)
                    .transportCapabilities(env.connections().capabilities()).build();
            for (int i = 0; i < n; i++) {
                try {
                    sendReady(conns[i], p.asked[i].info, true, h.blockIds(),
                            session.remaining("sending the ready signal"), push, layered);
                    env.journal().readySignalSent(id, p.targets.peerRanks().get(i), true);
                } catch (KvTransferException e) {
                    throw new KvTransferException(e.code(), id, "ready signal to generation rank "
                            + p.targets.peerRanks().get(i) + " (" + Texts.peer(conns[i].peer()) + ") failed: "
                            + e.getMessage(), e);
                }
            }
            p.timing.preparation(System.nanoTime());
            if (env.formatter().needSendCache(env.selfCache(), env.selfIndex(), p.peerCache)) {
                move(h, session, push, layered);
            }
            p.timing.postprocess(System.nanoTime());
            long bytes = session.movedBytes();
            int messages = session.messageCount();
            long[] perPeer = session.peerBytesAfterClose(); // the session moves nothing more: no copy
            List<Integer> peers = session.targets().peerRanks();
            session.close();
            h.recordMessages(messages, session.isPush());
            long end = EpochClock.nowNanos();
            h.succeed(bytes, end, () -> {
                env.metrics().outcome(true, true, bytes);
                env.metrics().messages(true, messages);
                env.metrics().completed(true, end - h.startedEpochNanos(end), peers, perPeer);
                if (env.timing() != null) {
                    env.timing().submit(true, p.timing);
                }
            });
        } catch (RuntimeException e) {
            KvTransferException k = TransferErrors.forRequest(e, id, "sending");
            if ((k.code() == ErrorCode.MALFORMED || k.code() == ErrorCode.UNSUPPORTED_LAYOUT) && session == null) {
                // Nothing was signalled yet: tell every counterpart why, so none waits for its deadline.
                List<Refusal> refusals = new ArrayList<>();
                for (int i = 0; i < n; i++) {
                    refusals.add(new Refusal(conns[i], p.asked[i].info, k.code(), k.getMessage(), id));
                }
                sendRefusals(refusals);
            } else if (k.code() == ErrorCode.CANCELLED && session == null) {
                List<Refusal> refusals = new ArrayList<>();
                for (int i = 0; i < n; i++) {
                    refusals.add(new Refusal(conns[i], p.asked[i].info, k.code(), "context side closing", id));
                }
                sendRefusals(refusals);
            }
            if (session != null && session.isPush()) {
                abortPush(session, k);
            }
            long moved = session == null ? 0 : session.movedBytes();
            h.fail(k, () -> env.metrics().outcome(true, false, moved));
        } finally {
            if (session != null) {
                session.close();
            }
        }
    }

    /** @return whether this rank can write one-sided: the formatter pushes (the transport then needs the capability) */
    private boolean canPush() {
        return env.formatter().capabilities().contains(dev.kvtransfer.api.format.FormatterCapability.PUSH);
    }

    /**
     * Moves this rank's share: pull (format) or push (one-sided writes, then each peer's done notice with what was
     * written), the whole request at once or layer by layer as the engine marks layers ready.
     */
    private void move(TransferHandle h, DefaultTransferSession session, boolean push, boolean layered) {
        if (session.reusedBlocks() == session.totalBlocks()) {
            return; // the generation side holds every block already: nothing moves (both sides know it)
        }
        CacheState self = env.selfCache();
        int pp = self.ppRank(env.selfIndex());
        int first = self.firstLayer(pp);
        int count = self.layerCount(pp);
        long deadline = session.deadlineNanos();
        if (!layered && h.layerWise() && !h.awaitLayersReady(count, deadline)) {
            // The formatter moves whole requests only: wait for the last layer, then move all of them.
            throw layersNotReady(h, count);
        }
        PushTrace.at("ctx", h.requestId(), "move", layered ? 1 : 0);
        if (!layered) {
            if (push) {
                env.formatter().push(session, first, count);
                PushTrace.at("ctx", h.requestId(), "pushed-all", -1);
            } else {
                env.formatter().format(session);
            }
        } else {
            TargetRanks t = session.targets();
            for (int l = 0; l < count; l++) {
                if (!h.awaitLayersReady(l + 1, deadline)) {
                    throw layersNotReady(h, l + 1);
                }
                int g = first + l;
                PushTrace.at("ctx", h.requestId(), "ready-seen", l);
                if (push) {
                    env.formatter().push(session, g, 1);
                    PushTrace.at("ctx", h.requestId(), "pushed", l);
                    for (int k = 0; k < t.size(); k++) {
                        if (holds(session.peerCacheState(), t.peerRanks().get(k), g)) {
                            session.sendLayerWritten(k, g);
                        }
                    }
                } else {
                    env.formatter().format(session, g, 1);
                }
            }
        }
        if (push) {
            PushTrace.at("ctx", h.requestId(), "before-done", -1);
            for (int k = 0; k < session.targets().size(); k++) {
                session.sendPushDone(k);
            }
            PushTrace.at("ctx", h.requestId(), "done-sent", -1);
        } else {
            session.sendChecksums();
        }
    }

    private KvTransferException layersNotReady(TransferHandle h, int needed) {
        return new KvTransferException(ErrorCode.TIMEOUT, h.requestId(), "context rank " + env.selfIndex() + ": "
                + h.layersReady() + " of " + needed + " layers were marked ready before the deadline", null);
    }

    /** @return whether a rank of a state holds a global layer */
    static boolean holds(CacheState s, int rank, int globalLayer) {
        int pp = s.ppRank(rank);
        int a0 = s.firstLayer(pp);
        return globalLayer >= a0 && globalLayer < a0 + s.layerCount(pp);
    }

    /** Tells every push peer that this rank failed, so none waits for its deadline. */
    private void abortPush(DefaultTransferSession session, KvTransferException k) {
        for (int i = 0; i < session.targets().size(); i++) {
            try {
                session.sendNotice(i, PushNotice.ABORT, 0, k.code().ordinal());
            } catch (RuntimeException e) {
                env.metrics().error(new KvTransferException(TransferErrors.codeOf(e), session.requestId(),
                        "could not tell generation rank " + session.targets().peerRanks().get(i) + " that the push "
                        + "failed: " + e.getMessage(), e));
            }
        }
    }

    /**
     * Prefix reuse: every counterpart names the same reused prefix, and each reused block's hash is this
     * request's hash of that block; a disagreement is refused naming the first differing block, never moved.
     *
     * @return the reused block count
     */
    private int checkReuse(Pending p, TransferHandle h, int totalBlocks) {
        RequestInfo first = p.asked[0].info;
        int reused = first.reusedBlocks();
        long[] theirs = first.reusedBlockHashes();
        for (Asked a : p.asked) {
            if (a.info.reusedBlocks() != reused || !java.util.Arrays.equals(a.info.reusedBlockHashes(), theirs)) {
                throw new KvTransferException(ErrorCode.MALFORMED, p.requestId, "generation ranks of request "
                        + p.requestId + " disagree on the reused prefix: " + reused + " vs " + a.info.reusedBlocks()
                        + " blocks", null);
            }
        }
        if (reused == 0) {
            return 0;
        }
        long[] ours = h.blockHashes();
        if (ours.length == 0) {
            throw new KvTransferException(ErrorCode.UNSUPPORTED_LAYOUT, p.requestId, "the generation side reuses "
                    + reused + " blocks but this context request carries no block hashes to check them against "
                    + "(create it with TransferRequest.context(id, prompt, blocks, blockHashes))", null);
        }
        if (ours.length < totalBlocks) {
            throw new KvTransferException(ErrorCode.INTERNAL, p.requestId, "the context request has " + ours.length
                    + " block hashes for " + totalBlocks + " blocks", null);
        }
        for (int b = 0; b < reused; b++) {
            if (ours[b] != theirs[b]) {
                throw new KvTransferException(ErrorCode.UNSUPPORTED_LAYOUT, p.requestId, "prefix mismatch at block "
                        + b + " of " + totalBlocks + ": the generation side's reused block hash is "
                        + Long.toHexString(theirs[b]) + ", the context side's is " + Long.toHexString(ours[b])
                        + " (the two sides' prefix caches disagree; nothing was sent)", null);
            }
        }
        return reused;
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
                        refusals.add(new Refusal(a.conn, a.info, ErrorCode.CANCELLED,
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
        if (infoReaders != null) {
            infoReaders.shutdownNow();
        }
        if (senders != null) {
            // Dispatched requests no sender thread has taken yet end here, their counterparts told.
            List<Refusal> dropped = new ArrayList<>();
            for (Runnable r : senders.shutdownNow()) {
                if (r instanceof DispatchTask d) {
                    for (Asked a : d.p.allAsked()) {
                        dropped.add(new Refusal(a.conn, a.info, ErrorCode.CANCELLED,
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
        org.agrona.concurrent.AgentRunner r;
        ThreadPoolExecutor s;
        ThreadPoolExecutor ir;
        synchronized (lock) {
            r = responder;
            s = senders;
            ir = infoReaders;
        }
        if (r == null) {
            return true;
        }
        try {
            Thread t = r.thread();
            if (t != null) {
                t.join(Math.max(1, TimeUnit.NANOSECONDS.toMillis(deadline - System.nanoTime())));
            }
            boolean ok = (t == null || !t.isAlive())
                    && s.awaitTermination(Math.max(0, deadline - System.nanoTime()), TimeUnit.NANOSECONDS)
                    && ir.awaitTermination(Math.max(0, deadline - System.nanoTime()), TimeUnit.NANOSECONDS);
            if (ok) {
                r.close();
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
        releaseControlBuffers();
    }

    /** Frees the reused control buffers (after the threads stopped; a buffer still out is freed when returned). */
    public void releaseControlBuffers() {
        control.close();
    }

    /** @return the number of requests tracked but not dispatched (tests and diagnostics) */
    public int pendingCount() {
        synchronized (lock) {
            return pending.size();
        }
    }

}
