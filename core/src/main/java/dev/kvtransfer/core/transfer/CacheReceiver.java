package dev.kvtransfer.core.transfer;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.KvTransferException;
import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.api.model.CommState;
import dev.kvtransfer.api.model.ContextPhaseParams;
import dev.kvtransfer.core.timing.EpochClock;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.RejectedExecutionException;
import java.util.concurrent.ThreadPoolExecutor;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * The generation side of one rank (TensorRT-LLM's {@code CacheReceiver}). Each context instance (its
 * {@link CommState}) gets its own pool of {@code requestThreadsPerPeerInstance} request threads, so one slow or
 * dead context instance never delays requests to another, and a stuck request delays at most one thread.
 *
 * <p>Per request: connect to the counterparts ({@code formatter.counterparts}), send each the id / size / info
 * messages (the three atomically per connection), wait for every ready signal on the request's own data tag
 * (any refusal fails the request with the responder's code and reason; nothing is written), then
 * {@code formatter.unformat}. Everything waits at most until {@code kvTransferTimeout} after the async call. When
 * the transport posts receives ({@code Connection.recvAsync}) the ready signals are awaited with no thread
 * ({@link PostedReady}): the request thread goes back to its pool after the infos, and the data phase comes back to
 * the pool when every signal arrived, so requests waiting for a prefill cost no thread.
 *
 * <p>Cancel: possible until the request's infos are sent; refused after.
 */
public final class CacheReceiver implements AutoCloseable {

    private final TransferEnv env;
    private final DataTags tags;
    private final Map<CommState, ThreadPoolExecutor> workers = new ConcurrentHashMap<>();
    /** Guarded by {@link #lifecycle}. */
    private final GenerationRequests<TransferHandle> requests = new GenerationRequests<>();
    private final AtomicInteger instanceCount = new AtomicInteger();
    private final Object lifecycle = new Object();
    private volatile boolean closing;
    /** Reused HOST buffers of the handshakes (request header, info and ready signals). */
    private final ControlBuffers control;
    private final PushReceive push;
    private final GenerationHandshake handshake;
    /** Requests waiting for posted ready signals, with no thread ({@link PostedReady}); ended by close. */
    private final java.util.Set<PostedReady> posted = ConcurrentHashMap.newKeySet();

    /**
     * Creates the receiver; threads start per context instance on first use.
     *
     * @param env the rank's shared parts
     */
    public CacheReceiver(TransferEnv env) {
        this.env = Objects.requireNonNull(env, "env");
        this.control = new ControlBuffers(env.buffers());
        // With authentication on, data tags start at a random point: another process cannot guess the next one.
        this.tags = new DataTags(env.auth().enabled() ? env.auth().randomInt() : 0);
        this.push = new PushReceive(env);
        this.handshake = new GenerationHandshake(env, control, push, this);
    }

    /**
     * Queues a request's receive.
     *
     * @param h the request (with its context phase params)
     */
    public void receive(TransferHandle h) {
        ContextPhaseParams params = Objects.requireNonNull(h.contextPhaseParams(), "contextPhaseParams");
        long now = System.nanoTime();
        GenerationJob job = new GenerationJob(h, now, now + env.config().kvTransferTimeout().toNanos());
        CommState ctx = params.contextState().commState();
        synchronized (lifecycle) {
            GenerationRequests.Failure<TransferHandle> refused = requests.submit(h, h.requestId(), job.deadlineNanos);
            if (refused != null) {
                fail(refused);
                return;
            }
            ThreadPoolExecutor known = workers.get(ctx); // no lambda capture when the pool exists
            ThreadPoolExecutor pool = known != null ? known : workers.computeIfAbsent(ctx, this::newPool);
            try {
                pool.execute(() -> run(job));
            } catch (RejectedExecutionException e) {
                requests.end(h);
                h.fail(new KvTransferException(ErrorCode.CANCELLED, h.requestId(), "the transceiver is closing", e));
            }
        }
    }

    private ThreadPoolExecutor newPool(CommState ctx) {
        int n = env.config().requestThreadsPerPeerInstance();
        String prefix = env.threadPrefix() + "-recv-" + instanceCount.getAndIncrement() + "-";
        AtomicInteger count = new AtomicInteger();
        ThreadPoolExecutor pool = new ThreadPoolExecutor(n, n, 30, TimeUnit.SECONDS,
                new SpinThenParkQueue(SpinThenParkQueue.spinNanos(env),
                        () -> requests.trackedNow() <= SpinThenParkQueue.LIGHT_LOAD), r -> {
            Thread t = new Thread(r, prefix + count.getAndIncrement());
            t.setDaemon(true);
            return t;
        });
        // Idle instances cost no threads.
        pool.allowCoreThreadTimeOut(true);
        return pool;
    }

    /**
     * Cancels a request whose infos have not been sent yet.
     *
     * @param h the request
     * @return true if cancelled; false when unknown, already asking or ended
     */
    public boolean cancel(TransferHandle h) {
        GenerationRequests.Failure<TransferHandle> cancelled;
        synchronized (lifecycle) {
            cancelled = requests.cancel(h);
        }
        if (cancelled == null) {
            return false;
        }
        fail(cancelled);
        return true;
    }

    private static void fail(GenerationRequests.Failure<TransferHandle> f) {
        f.local().fail(new KvTransferException(f.code(), f.requestId(), f.reason(), null));
    }

    /** The handshake knows the request's counterparts: that many ready signals are awaited. */
    void expect(TransferHandle h, int counterparts) {
        synchronized (lifecycle) {
            requests.expect(h, counterparts);
        }
    }

    /**
     * An authenticated, accepted ready signal: the counterparts must agree on push or pull and on layer by layer.
     *
     * @throws KvTransferException MALFORMED when this one disagrees with an earlier one
     */
    void readyArrived(GenerationJob job, boolean push, boolean layered) {
        List<GenerationRequests.Failure<TransferHandle>> out = new ArrayList<>(0);
        synchronized (lifecycle) {
            requests.ready(job.handle, push, layered, out);
        }
        if (!out.isEmpty()) {
            GenerationRequests.Failure<TransferHandle> f = out.get(0);
            throw new KvTransferException(f.code(), f.requestId(), f.reason(), null);
        }
        job.push = push;
        job.layered = layered;
    }

    private void run(GenerationJob job) {
        TransferHandle h = job.handle;
        GenerationRequests.Failure<TransferHandle> late;
        synchronized (lifecycle) {
            if (!requests.queued(h)) {
                return; // cancelled, or ended by close, while it waited for this thread
            }
            late = requests.begin(h, System.nanoTime());
        }
        if (late != null) {
            fail(late);
            return;
        }
        int tag = -1;
        DefaultTransferSession session;
        try {
            tag = tags.acquire();
            session = handshake.handshake(job, tag, env.config().postedReady());
        } catch (RuntimeException e) {
            complete(job, tag, null, e);
            return;
        }
        if (!job.posted) {
            complete(job, tag, session, null); // else PostedReady carries it on when the signals arrive
        }
    }

    /** The data phase of a request whose posted ready signals all arrived (its context instance's pool). */
    void receivePosted(GenerationJob job, int tag, GenerationHandshake hs, GenerationHandshake.Asking a) {
        DefaultTransferSession session;
        try {
            session = hs.session(a);
        } catch (RuntimeException e) {
            complete(job, tag, null, e);
            return;
        }
        complete(job, tag, session, null);
    }

    /**
     * Receives the data (when there is a session) and ends the request, success or not: grants revoked, state
     * machine told, tag released.
     *
     * @param early a failure before the data phase, or null
     */
    private void complete(GenerationJob job, int tag, DefaultTransferSession session, RuntimeException early) {
        TransferHandle h = job.handle;
        try {
            if (early != null) {
                throw early;
            }
            if (session != null) {
                try {
                    if (job.goPeers != null && !job.push) {
                        for (int peer : job.goPeers) {
                            session.sendNotice(peer, dev.kvtransfer.core.protocol.PushNoticeFlyweight.TYPE_GO, 0, 0);
                        }
                    }
                    receive(job, session);
                } finally {
                    session.close();
                }
                job.timing.postprocess(System.nanoTime());
            }
            markAllLayers(job);
            long bytes = session == null ? 0 : job.push ? job.pushedBytes : session.movedBytes();
            int messages = session == null ? 0 : job.push ? job.pushedEntries : session.messageCount();
            List<Integer> peers = session == null ? List.of() : session.targets().peerRanks();
            long[] perPeer = session == null ? new long[0]
                    : job.push && job.pushedPeerBytes != null ? job.pushedPeerBytes : session.peerBytes();
            // A push receiver moved nothing itself: the writer's passes are the context's to count.
            dev.kvtransfer.core.CopyLedger ledger = session == null ? dev.kvtransfer.core.CopyLedger.NONE
                    : job.push ? new dev.kvtransfer.core.CopyLedger(bytes, 0, 0, bytes,
                            env.config().partChecksums() ? bytes : 0) : session.copyLedger();
            h.recordMessages(messages, job.push);
            h.recordLedger(ledger);
            long end = EpochClock.nowNanos();
            h.succeed(bytes, end, () -> {
                env.metrics().outcome(false, true, bytes);
                env.metrics().messages(false, messages);
                env.metrics().ledger(false, ledger);
                env.metrics().completed(false, end - h.startedEpochNanos(end), peers, perPeer);
                if (env.timing() != null) {
                    env.timing().submit(false, job.timing);
                }
            });
        } catch (RuntimeException e) {
            long moved = session == null ? 0 : session.movedBytes();
            // Quiescence before the failure shows: once the request reads as ended, no writer reaches its blocks.
            push.revokeGrants(job);
            h.fail(TransferErrors.forRequest(e, h.requestId(), "receiving"),
                    () -> env.metrics().outcome(false, false, moved));
        } finally {
            endRequest(job);
            if (tag >= 0) {
                tags.release(tag);
            }
        }
    }

    /** Quiescence, then the end: once the grants are revoked no context rank can write into the blocks. */
    private void endRequest(GenerationJob job) {
        push.revokeGrants(job);
        synchronized (lifecycle) {
            requests.end(job.handle);
        }
    }

    /** A posted request failed before its data phase; its tag comes back when its receives ended. */
    void failPosted(GenerationJob job, KvTransferException e) {
        try {
            push.revokeGrants(job);
            job.handle.fail(TransferErrors.forRequest(e, job.handle.requestId(), "receiving"),
                    () -> env.metrics().outcome(false, false, 0));
        } finally {
            endRequest(job);
        }
    }

    /** Runs a posted request's next step on its context instance's pool; false when it takes no work (closing). */
    boolean dataPhase(GenerationJob job, Runnable step) {
        ThreadPoolExecutor pool = workers.get(job.handle.contextPhaseParams().contextState().commState());
        try {
            pool.execute(step);
            return true;
        } catch (RejectedExecutionException e) {
            return false;
        }
    }

    void register(PostedReady w) {
        posted.add(w);
    }

    void unregister(PostedReady w) {
        posted.remove(w);
    }

    void releaseTag(int tag) {
        tags.release(tag);
    }

    /** Pull: the formatter receives (whole, or layer by layer); push: wait for the writers' done notices. */
    private void receive(GenerationJob job, DefaultTransferSession session) {
        if (session.reusedBlocks() == session.totalBlocks()
                && session.selfState().cacheState().recurrentState() == null) {
            // Every block was reused: nothing moves (the context side skips it too). A hybrid model's recurrent
            // states are not blocks: they move whatever the reuse.
            return;
        }
        if (job.push) {
            push.awaitPush(job, session);
            return;
        }
        if (job.layered) {
            CacheState self = env.selfCache();
            int pp = self.ppRank(env.selfIndex());
            int first = self.firstLayer(pp);
            for (int l = 0; l < self.layerCount(pp); l++) {
                env.formatter().unformat(session, first + l, 1);
                job.handle.layerArrived(l);
            }
        } else {
            env.formatter().unformat(session);
        }
        // No byte is accepted as a completed transfer before its end-to-end checksum matched.
        session.verifyChecksums();
    }

    private void markAllLayers(GenerationJob job) {
        CacheState self = env.selfCache();
        int layers = self.layerCount(self.ppRank(env.selfIndex()));
        for (int l = 0; l < layers; l++) {
            job.handle.layerArrived(l);
        }
    }

    /** Stops accepting requests, cancels queued ones and interrupts the request threads; does not wait. */
    public void shutdown() {
        List<ThreadPoolExecutor> pools;
        List<GenerationRequests.Failure<TransferHandle>> queued = new ArrayList<>();
        synchronized (lifecycle) {
            if (closing) {
                return;
            }
            closing = true;
            pools = new ArrayList<>(workers.values());
            requests.close(queued);
        }
        for (GenerationRequests.Failure<TransferHandle> f : queued) {
            fail(f);
        }
        for (ThreadPoolExecutor p : pools) {
            p.shutdownNow();
        }
        for (PostedReady w : new ArrayList<>(posted)) {
            w.abort(); // no thread waits for them: they end here, their receives when the transport closes
        }
    }

    /**
     * Waits for the request threads to end.
     *
     * @param timeout how long
     * @return true when all ended
     */
    public boolean awaitTermination(Duration timeout) {
        long deadline = System.nanoTime() + timeout.toNanos();
        try {
            for (ThreadPoolExecutor p : workers.values()) {
                if (!p.awaitTermination(Math.max(0, deadline - System.nanoTime()), TimeUnit.NANOSECONDS)) {
                    return false;
                }
            }
            return true;
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            return false;
        }
    }

    @Override
    public void close() {
        shutdown();
        awaitTermination(Duration.ofSeconds(5));
        awaitControlLeases(Duration.ofSeconds(5));
        releaseControlBuffers();
    }

    /** Waits (bounded) until every control lease came back: posted receives' end once the transport closed. */
    public boolean awaitControlLeases(Duration timeout) {
        return control.awaitReturned(timeout);
    }

    /** Frees the reused control buffers (after the threads stopped; a buffer still out is freed when returned). */
    public void releaseControlBuffers() {
        control.close();
    }

    /** @return data tags held by in-flight requests (tests and diagnostics) */
    public int tagsInUse() {
        return tags.inUse();
    }
}
