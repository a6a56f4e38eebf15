package dev.kvtransfer.core.transfer;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.KvTransferException;
import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.memory.MemoryKind;
import dev.kvtransfer.api.model.RequestInfo;
import dev.kvtransfer.api.transport.Connection;
import dev.kvtransfer.api.transport.Tags;
import dev.kvtransfer.api.transport.TransportClosedException;
import dev.kvtransfer.api.wire.MalformedMessageException;
import dev.kvtransfer.core.protocol.RequestHeaderFlyweight;
import dev.kvtransfer.core.transfer.ContextRequests.Refusal;

import java.nio.ByteBuffer;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.RejectedExecutionException;
import java.util.concurrent.TimeUnit;

/**
 * The context rank's intake of requests: the responder agent accepts request headers
 * ({@link RequestHeaderFlyweight}) from every connection with non-blocking polls, and each header's info is read
 * on the request's own data tag, which the header names, so a lost, late or duplicated info concerns its request
 * alone. Where the transport posts receives ({@link Connection#recvAsync}) the info's receive is posted when its
 * header is taken and no thread waits for it: its completion hands it to an info thread, which decodes,
 * authenticates (MAC, requester identity, freshness, token) and hands it to {@link CacheSender#onInfo}. Where the
 * transport does not post, the responder reads it when it comes at once, else one of the info readers does; a
 * reader that finds one late moves on to the connection's other headers. Per connection it drops duplicated
 * headers and bounds the queued (or posted) ones.
 */
final class InfoIntake {
    /** Largest RequestInfo accepted, in bytes; a larger announced size is dropped as MALFORMED. */
    static final long MAX_INFO_BYTES = CacheSender.MAX_INFO_BYTES;
    /** How often the responder's tick runs (deadlines, parked connections): its polls themselves never wait. */
    static final long TICK_NANOS = TimeUnit.MILLISECONDS.toNanos(1);
    /** Most request headers queued per connection before that connection's further requests are dropped. */
    static final int MAX_QUEUED_PER_CONNECTION = CacheSender.MAX_QUEUED_PER_CONNECTION;
    /** Headers of a connection read the usual way after one of its infos came late to the responder. */
    static final int RESPONDER_SKIPS_AFTER_LATE = CacheSender.RESPONDER_SKIPS_AFTER_LATE;
    /** Longest an info reader waits for one info before it parks the connection and serves others. */
    static final Duration READER_INFO_WAIT = Duration.ofMillis(2);
    /** A parked connection's later reads wait this long: a retry costs a reader next to nothing. */
    static final Duration RETRY_INFO_WAIT = Duration.ofNanos(100_000);
    /** How often a parked connection is tried again; also the responder's poll slice while one is parked. */
    static final Duration PARKED_RETRY = Duration.ofMillis(5);

    private final TransferEnv env;
    private final ControlBuffers control;
    private final CacheSender owner;
    private final ContextSend send;
    /** {@code kvtransfer.responderInfoWaitMicros}, or null when the responder never reads infos. */
    private final Duration responderInfoWait;
    private final Map<Connection, InfoQueue> infoQueues = new java.util.concurrent.ConcurrentHashMap<>();
    /** Connections parked with a late info ({@link #drain}). */
    private final java.util.concurrent.atomic.AtomicInteger parkedCount =
            new java.util.concurrent.atomic.AtomicInteger();
    private volatile ExecutorService infoReaders;
    /** The responder's thread once it runs. */
    private volatile Thread responderThread;
    /** The responder (set by {@link #responder}), for its idle strategy. */
    private Responder agent;

    InfoIntake(TransferEnv env, ControlBuffers control, CacheSender owner, ContextSend send) {
        this.env = env;
        this.control = control;
        this.owner = owner;
        this.send = send;
        int wait = env.config().responderInfoWaitMicros();
        if (wait == dev.kvtransfer.core.TransceiverConfig.RESPONDER_INFO_WAIT_TRANSPORT) {
            // Not set: the transport knows whether reading on the responder pays (UCX: it does not).
            wait = Math.max(0, Math.min(100_000, env.connections().preferredResponderInfoWaitMicros()));
        }
        this.responderInfoWait = wait == 0 ? null : Duration.ofNanos(TimeUnit.MICROSECONDS.toNanos(wait));
    }

    /** @return the responder agent (run once, by the owner's agent runner) */
    org.agrona.concurrent.Agent responder(ExecutorService readers) {
        this.infoReaders = readers;
        this.agent = new Responder();
        return agent;
    }

    /** @return the responder's idle strategy (one, for the runner of {@link #responder}) */
    org.agrona.concurrent.IdleStrategy idleStrategy() {
        return new ResponderIdle();
    }

    /** @return whether the calling thread is the responder's */
    boolean onResponder() {
        return Thread.currentThread() == responderThread;
    }

    // ---------------------------------------------------------------- responder

    /** The responder agent: accepts request headers and hands each connection's infos to an info reader. */
    final class Responder implements org.agrona.concurrent.Agent {
        private MemoryBuffer header;
        private final RequestHeaderFlyweight headerFly = new RequestHeaderFlyweight();

        @Override
        public void onStart() {
            header = env.buffers().allocate(RequestHeaderFlyweight.LENGTH, MemoryKind.HOST);
            headerFly.wrap(header.asByteBuffer(), 0); // once: every header lands in the same memory
            responderThread = Thread.currentThread();
        }

        /** When the next tick (deadlines, parked connections) is due. */
        private long nextTick;
        /** A header the idle strategy's wait took ({@link #await}), in {@link #header}: the next cycle serves it. */
        private Connection taken;

        /**
         * The idle strategy's wait, on the responder's thread between duty cycles: the transport's own wait for the
         * next header, so an idle responder wakes when one arrives. A header taken here is served by the next
         * {@link #doWork}; a closed transport or a bad header is left to that cycle's poll and its reports.
         */
        void await(long nanos) {
            if (taken != null || owner.isClosing()) {
                return;
            }
            try {
                taken = env.connections().pollConnect(Tags.ID_TAG, header, 0, RequestHeaderFlyweight.LENGTH,
                        Duration.ofNanos(nanos));
            } catch (TransportClosedException e) {
                return; // the next cycle's poll sees it too and stops the agent
            } catch (KvTransferException e) {
                env.metrics().error(e); // a malformed header (wrong length): counted, the next one is served
            }
        }

        /**
         * One duty cycle: never blocks. Serves the infos whose posted receives ended, runs the tick when due and
         * polls for one request header without waiting; the runner's idle strategy does the waiting.
         *
         * @return how much was done (0: nothing, the idle strategy backs off)
         */
        @Override
        public int doWork() {
            if (owner.isClosing()) {
                throw new org.agrona.concurrent.AgentTerminationException();
            }
            int work = 0;
            long now = System.nanoTime();
            if (now - nextTick >= 0) {
                nextTick = now + TICK_NANOS;
                owner.expire();
                retryParked();
            }
            Connection conn = taken;
            taken = null;
            try {
                if (conn == null) {
                    conn = env.connections().pollConnect(Tags.ID_TAG, header, 0, RequestHeaderFlyweight.LENGTH,
                            Duration.ZERO);
                }
            } catch (TransportClosedException e) {
                if (!owner.isClosing()) {
                    env.metrics().error(new KvTransferException(ErrorCode.NETWORK, KvTransferException.NO_REQUEST,
                            "responder of rank " + env.selfIndex() + " stops: transport closed", e));
                }
                throw new org.agrona.concurrent.AgentTerminationException();
            } catch (KvTransferException e) {
                // A malformed header (wrong length) from some peer: counted, and the next one is served.
                env.metrics().error(e);
                return work + 1;
            }
            if (conn == null) {
                return work;
            }
            RequestHeaderFlyweight h = headerFly;
            if (h.kind() == RequestHeaderFlyweight.KIND_TERMINATION) {
                return work + 1;
            }
            int mac = env.auth().macBytes();
            if (!h.isValidRequestSend(mac, MAX_INFO_BYTES)) {
                // A bad kind or length: the info itself is left unread, a peer that announces it does not speak
                // this protocol. The message is built only here: a valid header allocates nothing.
                try {
                    h.checkRequestSend(mac, MAX_INFO_BYTES, "rank " + env.selfIndex() + ", from "
                            + Texts.peer(conn.peer()));
                } catch (KvTransferException e) {
                    env.metrics().error(e);
                }
                return work + 1;
            }
            enqueueInfo(conn, h.requestId(), (int) h.infoLength(), h.infoTag());
            return work + 1;
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

    /**
     * The responder's idle strategy: it waits in the transport for the next header ({@link Responder#await},
     * {@link #WAIT_NANOS}), which ends as soon as one arrives, and never spins: every idle step is followed by a duty
     * cycle, whose zero-wait poll is a round trip to the transport's progress thread on Aeron and UCX. An idle
     * responder thus wakes at once for a header and otherwise costs a few polls a second; its duty cycle itself
     * never waits.
     */
    final class ResponderIdle implements org.agrona.concurrent.IdleStrategy {
        /**
         * The transport wait for the next header: also the longest a tick or a close may wait. 5 ms cost an idle
         * Aeron pair about 6 % of a core more than 50 ms (200 polls a second, each through the transport's agent).
         */
        static final long WAIT_NANOS = 50_000_000;

        @Override
        public void idle(int workCount) {
            if (workCount <= 0) {
                idle();
            }
        }

        @Override
        public void idle() {
            // A parked connection (readers only) is retried on the tick: wait no longer than its retry period.
            agent.await(parkedCount.get() > 0 ? PARKED_RETRY.toNanos() : WAIT_NANOS);
        }

        @Override
        public void reset() {
            // No state.
        }
    }

    /** The headers of one connection whose infos are still to read, by one reader at a time. */
    static final class InfoQueue {
        /** (request id, {@link #frame info tag and bytes}) of each header whose info is still to read. */
        final LongPairQueue pending = new LongPairQueue();
        /** Request ids of the last headers accepted: a duplicated header (a network artifact) is ignored. */
        final long[] recent = new long[64];
        int recentNext;
        boolean reading;
        /** Headers of this connection whose info the responder leaves to a reader after one came late. */
        int responderSkips;
        /** Every queued header's info is late: no reader holds this connection; the responder's tick retries it. */
        boolean parked;
        /** Per request whose info was found late, when that was first seen. */
        final org.agrona.collections.Long2LongHashMap lateSince = new org.agrona.collections.Long2LongHashMap(0);
        /** When a parked connection is tried again. */
        long retryAt;
        /** Whether this connection's infos are read with posted receives: unknown until its first header. */
        byte mode = MODE_UNKNOWN;
        /** Posted info receives of this connection that have not been served yet. */
        int posted;

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

    private static final byte MODE_UNKNOWN = 0;
    private static final byte MODE_POSTED = 1;
    private static final byte MODE_READERS = 2;

    /** @return a header's info tag and length packed as one queue value */
    static long frame(int tag, int size) {
        return ((long) tag << 32) | (size & 0xffff_ffffL);
    }

    /**
     * On the responder: an accepted header's info is received with a posted receive where the connection's transport
     * posts ({@link #postInfo}), else queued for the info readers (read here when {@link #readOnResponder} can).
     */
    void enqueueInfo(Connection conn, long id, int size, int tag) {
        InfoQueue q = infoQueues.computeIfAbsent(conn, c -> new InfoQueue());
        boolean start;
        synchronized (q) {
            if (q.seenRecently(id)) {
                env.metrics().error(new KvTransferException(ErrorCode.MALFORMED, id, "rank " + env.selfIndex()
                        + ": duplicate request header for request " + id + " from " + Texts.peer(conn.peer())
                        + " (ignored)", null));
                return;
            }
            if (q.pending.size() + q.posted >= MAX_QUEUED_PER_CONNECTION) {
                env.metrics().error(new KvTransferException(ErrorCode.MALFORMED, id, "rank " + env.selfIndex()
                        + ": " + Texts.peer(conn.peer()) + " has " + (q.pending.size() + q.posted)
                        + " request infos unread; request " + id + " dropped", null));
                return;
            }
            q.remember(id);
            if (q.mode != MODE_READERS) {
                q.posted++;
            }
        }
        if (q.mode != MODE_READERS && postInfo(conn, q, id, size, tag)) {
            return;
        }
        synchronized (q) {
            q.pending.add(id, frame(tag, size));
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
     * Posts the receive of a header's info ({@link Connection#recvAsync}) with the control timeout as its deadline:
     * no thread waits for it. Its completion ({@link PostedInfo}) hands it to an info thread, which serves it as a
     * reader would ({@link #serve}); one that did not arrive in time is dropped with {@code TIMEOUT}, as a reader
     * drops it.
     *
     * @return true when posted (or the transport closed); false when the transport does not post: the connection
     *         then goes to the info readers from now on ({@code q.posted} was given back)
     */
    private boolean postInfo(Connection conn, InfoQueue q, long id, int size, int tag) {
        ControlBuffers.Lease lease = control.acquire(size);
        PostedInfo p = new PostedInfo(conn, q, id, tag, size, lease);
        boolean posted;
        try {
            posted = conn.recvAsync(tag, lease.buffer(), 0, size, env.controlTimeout(), p);
        } catch (RuntimeException e) {
            lease.close();
            synchronized (q) {
                q.posted--;
            }
            if (!(e instanceof TransportClosedException)) {
                env.metrics().error(e instanceof KvTransferException ? e : new KvTransferException(ErrorCode.INTERNAL,
                        id, "posting the receive of request " + id + "'s info from " + Texts.peer(conn.peer()) + ": "
                        + e, e));
            }
            return true;
        }
        if (!posted) {
            lease.reusable();
            lease.close();
            synchronized (q) {
                q.posted--;
                q.mode = MODE_READERS;
            }
            return false;
        }
        synchronized (q) {
            q.mode = MODE_POSTED;
        }
        return true;
    }

    /**
     * One info's posted receive. Its completion (a transport thread, which must not block) hands it to an info
     * thread, which serves it as a reader would ({@link #servePosted}): decode, authenticate, {@link CacheSender#onInfo}
     * (which may send ready signals and refusals, or serve a small request whole). No thread waits for it.
     */
    final class PostedInfo implements dev.kvtransfer.api.transport.RecvCompletion, Runnable {
        final Connection conn;
        final InfoQueue q;
        final long id;
        final int tag;
        final int size;
        final ControlBuffers.Lease lease;
        dev.kvtransfer.api.transport.TransportException failure;

        PostedInfo(Connection conn, InfoQueue q, long id, int tag, int size, ControlBuffers.Lease lease) {
            this.conn = conn;
            this.q = q;
            this.id = id;
            this.tag = tag;
            this.size = size;
            this.lease = lease;
        }

        @Override
        public void completed(dev.kvtransfer.api.transport.TransportException f) {
            failure = f;
            try {
                infoReaders.execute(this); // the executor's queue publishes the bytes and the failure
            } catch (RejectedExecutionException closing) {
                drop();
            }
        }

        @Override
        public void run() {
            synchronized (q) {
                q.posted--;
            }
            servePosted(this);
        }

        /** The transceiver closed before it was served: the lease goes back, nothing is served. */
        void drop() {
            lease.close();
        }
    }

    private void servePosted(PostedInfo p) {
        if (p.failure != null) {
            p.lease.close();
            if (p.failure instanceof TransportClosedException || owner.isClosing()) {
                return;
            }
            env.metrics().error(p.failure.code() == ErrorCode.TIMEOUT ? lateInfo(p.id, p.conn)
                    : new KvTransferException(p.failure.code(), p.id, "rank " + env.selfIndex() + ": the info of "
                    + "request " + p.id + " announced by " + Texts.peer(p.conn.peer()) + " did not arrive: "
                    + p.failure.getMessage(), p.failure));
            return;
        }
        if (owner.isClosing()) {
            p.lease.reusable();
            p.lease.close();
            return;
        }
        try {
            serve(p.conn, p.q, p.id, p.tag, p.size, p.lease);
        } catch (RuntimeException e) {
            env.metrics().error(e instanceof KvTransferException ? e
                    : new KvTransferException(ErrorCode.INTERNAL, p.id, "serving request info from "
                    + Texts.peer(p.conn.peer()) + ": " + e, e));
        }
    }

    /** @return the error of an info still missing after the control timeout (its header is dropped) */
    private KvTransferException lateInfo(long id, Connection conn) {
        return new KvTransferException(ErrorCode.TIMEOUT, id, "rank " + env.selfIndex() + ": the info of request "
                + id + " announced by " + Texts.peer(conn.peer()) + " did not arrive within "
                + env.controlTimeout().toMillis() + " ms; dropped", null);
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
        long frame;
        // Only while nothing else is being served: with requests in flight the responder keeps to accepting headers
        // (serving here then delayed every other connection's, and cost requests/s over UCX at 64 in flight).
        if (responderInfoWait == null || !owner.idle()) {
            return false;
        }
        synchronized (q) {
            if (q.pending.size() != 1 || owner.isClosing()) {
                return false;
            }
            if (q.responderSkips > 0) {
                q.responderSkips--;
                return false;
            }
            id = q.pending.firstA();
            frame = q.pending.firstB();
            q.pending.removeFirst();
        }
        boolean late = readReporting(conn, q, id, frame, responderInfoWait) == Read.LATE;
        synchronized (q) {
            if (late) {
                // Nothing was consumed: the header goes back (its queue is empty), and this connection's next
                // headers go straight to a reader: its infos come later than the wait.
                q.pending.add(id, frame);
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
    private Read readReporting(Connection conn, InfoQueue q, long id, long frame, Duration firstWait) {
        try {
            return readInfo(conn, q, id, (int) (frame >>> 32), (int) frame, firstWait) ? Read.DONE : Read.LATE;
        } catch (TransportClosedException e) {
            return Read.CLOSED;
        } catch (RuntimeException e) {
            env.metrics().error(e instanceof KvTransferException ? e
                    : new KvTransferException(ErrorCode.INTERNAL, id, "reading request info from "
                    + Texts.peer(conn.peer()) + ": " + e, e));
            return Read.DONE;
        }
    }

    /**
     * Reads one connection's announced infos. Each read waits at most {@link #READER_INFO_WAIT} (a retry of an info
     * already found late {@link #RETRY_INFO_WAIT}): a late info's header goes to the back of the queue and the
     * reader tries the next one, since each info travels on its own request's tag and none waits for another. When
     * every queued info was late in one pass the connection is parked and the reader moves on, so a requester that
     * sends headers without infos holds no reader; the responder's tick retries parked connections every
     * {@link #PARKED_RETRY}. A header whose info is still missing after the control timeout is dropped,
     * {@code TIMEOUT} naming the request and the peer; the connection's other requests are not held up by it.
     */
    private void drain(Connection conn, InfoQueue q) {
        int lateInARow = 0;
        while (true) {
            long nextId;
            long nextFrame;
            Duration wait;
            synchronized (q) {
                if (q.pending.isEmpty() || owner.isClosing()) {
                    q.reading = false;
                    q.lateSince.clear();
                    q.pending.clear();
                    return;
                }
                if (lateInARow >= q.pending.size()) {
                    q.reading = false;
                    q.retryAt = System.nanoTime() + PARKED_RETRY.toNanos();
                    if (!q.parked) {
                        q.parked = true;
                        parkedCount.incrementAndGet();
                    }
                    return;
                }
                nextId = q.pending.firstA();
                nextFrame = q.pending.firstB();
                q.pending.removeFirst();
                wait = q.lateSince.containsKey(nextId) ? RETRY_INFO_WAIT : READER_INFO_WAIT;
            }
            Read r = readReporting(conn, q, nextId, nextFrame, wait);
            if (r == Read.CLOSED) {
                return;
            }
            long now = System.nanoTime();
            synchronized (q) {
                if (r != Read.LATE) {
                    q.lateSince.remove(nextId);
                    lateInARow = 0;
                    continue;
                }
                long since = q.lateSince.get(nextId);
                if (since == 0) {
                    q.lateSince.put(nextId, now);
                    since = now;
                }
                if (now - since < env.controlTimeout().toNanos()) {
                    q.pending.add(nextId, nextFrame);
                    lateInARow++;
                    continue;
                }
                q.lateSince.remove(nextId);
            }
            env.metrics().error(lateInfo(nextId, conn));
        }
    }

    /** On the responder's tick: parked connections whose retry time came get a reader again. */
    void retryParked() {
        if (parkedCount.get() == 0) {
            return;
        }
        long now = System.nanoTime();
        for (Map.Entry<Connection, InfoQueue> e : infoQueues.entrySet()) {
            InfoQueue q = e.getValue();
            boolean start = false;
            synchronized (q) {
                if (q.parked && now - q.retryAt >= 0) {
                    q.parked = false;
                    parkedCount.decrementAndGet();
                    if (!q.reading) {
                        q.reading = true;
                        start = true;
                    }
                }
            }
            if (start) {
                Connection conn = e.getKey();
                try {
                    infoReaders.execute(() -> drain(conn, q));
                } catch (RejectedExecutionException closing) {
                    synchronized (q) {
                        q.reading = false;
                        q.pending.clear();
                    }
                }
            }
        }
    }

    /**
     * Reads, authenticates and dispatches one announced info, from the tag its header named.
     *
     * @param wait how long to wait for the info before giving up with nothing consumed
     * @return false only when {@code wait} passed before the info arrived
     */
    private boolean readInfo(Connection conn, InfoQueue q, long headerId, int tag, int size, Duration wait) {
        ControlBuffers.Lease lease = control.acquire(size);
        try {
            conn.recv(tag, lease.buffer(), 0, size, wait);
        } catch (KvTransferException e) {
            lease.close();
            if (e.code() == ErrorCode.TIMEOUT) {
                return false;
            }
            throw new KvTransferException(e.code(), headerId, "rank " + env.selfIndex() + ": the info of request "
                    + headerId + " announced by " + Texts.peer(conn.peer()) + " did not arrive: " + e.getMessage(), e);
        } catch (RuntimeException e) {
            lease.close();
            throw e;
        }
        serve(conn, q, headerId, tag, size, lease);
        return true;
    }

    /**
     * Decodes, authenticates and dispatches one received info (an info reader's or, for a posted receive, the
     * responder's); gives the lease back.
     */
    private void serve(Connection conn, InfoQueue q, long headerId, int tag, int size, ControlBuffers.Lease lease) {
        ControlAuth auth = env.auth();
        int mac = auth.macBytes();
        RequestInfo info = null;
        MalformedMessageException malformed = null;
        boolean macOk = false;
        try (lease) {
            // Decoded and authenticated where it was received (no copy of the message or of its MAC); the lease
            // is reusable once the receive completed, whatever the bytes were.
            ByteBuffer bb = lease.bytes();
            try {
                info = RequestInfo.fromBytes(bb, 0, size - mac);
                macOk = auth.infoMacValid(bb, 0, size - mac, Texts.utf8(env.connections().localAddress()),
                        size - mac);
            } catch (MalformedMessageException e) {
                malformed = e;
            }
            lease.reusable();
        }
        if (malformed != null) {
            throw new KvTransferException(ErrorCode.MALFORMED, headerId, "rank " + env.selfIndex()
                    + ": bad request info from " + Texts.peer(conn.peer()) + ": " + malformed.getMessage(), malformed);
        }
        if (info.requestId() != headerId || info.dataTag() != tag) {
            // Only a peer that does not speak this protocol sends another request's info on a request's tag.
            throw new KvTransferException(ErrorCode.MALFORMED, headerId, "rank " + env.selfIndex() + ": "
                    + Texts.peer(conn.peer()) + " announced request " + headerId + " on tag " + tag + " but sent the"
                    + " info of request " + info.requestId() + " (data tag " + info.dataTag() + "); dropped", null);
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
            send.sendRefusals(List.of(new Refusal<>(conn, info, ErrorCode.UNAUTHORIZED, "refused: " + refused,
                    headerId)));
            throw e;
        }
        owner.onInfo(conn, info, q);
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
        return auth.checkToken(info);
    }

    /** {@link #authenticate}'s answer for a replayed info: dropped without a word. */
    private static final String REPLAYED = new String("replayed");

    private KvTransferException unauthorized(long id, Connection conn, String why) {
        KvTransferException e = new KvTransferException(ErrorCode.UNAUTHORIZED, id, "rank " + env.selfIndex() + ": "
                + Texts.peer(conn.peer()) + ": " + why, null);
        return e;
    }
}
