package dev.kvtransfer.core;

import dev.kvtransfer.api.ErrorHandler;
import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.KvTransferException;
import dev.kvtransfer.api.cache.KvCacheView;
import dev.kvtransfer.api.format.CacheFormatter;
import dev.kvtransfer.api.format.TransferBufferPool;
import dev.kvtransfer.api.memory.BufferManager;
import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.api.model.CommState;
import dev.kvtransfer.api.model.ContextPhaseParams;
import dev.kvtransfer.api.model.TransceiverState;
import dev.kvtransfer.api.sync.GroupComm;
import dev.kvtransfer.api.transport.ConnectionManager;
import dev.kvtransfer.core.journal.TransferJournal;
import dev.kvtransfer.core.memory.LiveResources;
import dev.kvtransfer.core.sync.StatusAgreement;
import dev.kvtransfer.core.timing.GenTransferSummary;
import dev.kvtransfer.core.timing.TimingCsvWriter;
import dev.kvtransfer.core.transfer.CacheReceiver;
import dev.kvtransfer.core.transfer.CacheSender;
import dev.kvtransfer.core.transfer.ControlAuth;
import dev.kvtransfer.core.transfer.TransferEnv;
import dev.kvtransfer.core.transfer.TransferMetrics;
import io.micrometer.core.instrument.MeterRegistry;
import io.micrometer.core.instrument.simple.SimpleMeterRegistry;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.time.Duration;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Deque;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.OptionalInt;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.SynchronousQueue;
import java.util.concurrent.ThreadPoolExecutor;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * The façade a serving engine calls on each rank (TensorRT-LLM's {@code CacheTransceiver}): context ranks
 * {@link #respondAndSendAsync}, generation ranks {@link #requestAndReceiveAsync}, both poll
 * {@link #checkContextTransferStatus} / {@link #checkGenTransferStatus}, which agree over the status
 * {@link GroupComm} which requests the whole group finished.
 *
 * <p>Ownership: the connection manager, formatter, pool, buffer manager and group are the caller's; the
 * transceiver owns its threads, its control buffers and whatever is registered with {@link #closeWith}.
 * {@link #close()} ends every pending request ({@code CANCELLED}), stops the threads (bounded wait), then
 * closes the registered resources. Thread-safe; status checks of one rank are serialized.
 */
public final class CacheTransceiver implements AutoCloseable {
    private static final Logger LOG = LoggerFactory.getLogger(CacheTransceiver.class);
    private static final Duration CLOSE_WAIT = Duration.ofSeconds(5);
    /** How long close waits for posted receives' control leases (they end when the transport closed). */
    private static final Duration POSTED_LEASE_WAIT = Duration.ofSeconds(2);

    private final TransceiverConfig config;
    private final TransceiverState selfState;
    private final GroupComm contextGroup;
    private final GroupComm generationGroup;
    private final TransferMetrics metrics;
    private final TimingCsvWriter timing;
    /** The generation summary file and its bandwidth all-gather: only with a timing directory, as upstream. */
    private final GenTransferSummary summary;
    private final KvCacheView cache;
    private final ThreadPoolExecutor peerExecutor;
    private final CacheSender sender;
    private final CacheReceiver receiver;
    private final Object statusLock = new Object();
    private final Object checkLock = new Object();
    /** Reused by {@link #check} under {@link #checkLock}: this rank's pending ids, completed ones, failed ones. */
    private final ArrayList<Long> checkPending = new ArrayList<>();
    private final ArrayList<Long> checkCompleted = new ArrayList<>();
    private final ArrayList<Long> checkFailed = new ArrayList<>();
    private final ArrayList<TransferRequest> checkCompletedRequests = new ArrayList<>();
    private final Map<Long, Tracked> contextRequests = new LinkedHashMap<>();
    private final Map<Long, Tracked> generationRequests = new LinkedHashMap<>();
    private final Deque<AutoCloseable> owned = new ArrayDeque<>();
    private final TransferJournal journal;
    private final ControlAuth auth;
    private volatile boolean closed;
    private final java.util.concurrent.atomic.AtomicBoolean closedOnce = new java.util.concurrent.atomic.AtomicBoolean();

    private record Tracked(TransferRequest request, long submittedNanos) {
    }

    /**
     * Creates a transceiver. {@link RankAssembly} builds every part from a {@link TransceiverConfig}; this
     * constructor is for callers who bring their own parts.
     *
     * @param config          settings
     * @param cacheState      this rank's cache state
     * @param selfIndex       this rank's index in its instance
     * @param commState       every rank's address in this instance (gathered before construction)
     * @param connections     this rank's transport endpoint
     * @param formatter       the cache formatter over this rank's KV pool
     * @param cache           this rank's KV pool (the one the formatter was created over)
     * @param pool            the staging pool the formatter was created with
     * @param buffers         allocates control buffers and copies
     * @param contextGroup    agrees on context completion: the TP group of this PP stage (attention DP: the DP
     *                        group of the stage)
     * @param generationGroup agrees on generation completion: the whole instance (attention DP: the DP group
     *                        across every PP stage), so no stage starts decoding while another still receives
     * @param errorHandler    receives background errors (after they are logged and counted)
     * @param meters          where meters are registered
     * @param journal         where transfer events go ({@link TransferJournal#NOOP} for none; the caller's, or
     *                        register it with {@link #closeWith})
     * @param instanceName    the instance's name, for thread names ({@code "ctx"}, {@code "gen"})
     */
    public CacheTransceiver(TransceiverConfig config, CacheState cacheState, int selfIndex, CommState commState,
                            ConnectionManager connections, CacheFormatter formatter, KvCacheView cache,
                            TransferBufferPool pool, BufferManager buffers, GroupComm contextGroup,
                            GroupComm generationGroup,
                            ErrorHandler errorHandler, MeterRegistry meters, TransferJournal journal,
                            String instanceName) {
        this(config, cacheState, selfIndex, commState, connections, formatter, cache, pool, buffers, contextGroup,
                generationGroup, errorHandler, meters, journal, instanceName, null);
    }

    /**
     * Creates a transceiver whose request tokens come from an issuing key the ranks of its instance share (see
     * {@link #contextPhaseParams}); the other constructor's tokens verify on this rank only.
     *
     * @param tokenIssuingKey the context instance's token key (at least 16 bytes; never handed to a generation
     *                        instance), or null for a random key of this rank's own
     * @see #CacheTransceiver(TransceiverConfig, CacheState, int, CommState, ConnectionManager, CacheFormatter,
     *      KvCacheView, TransferBufferPool, BufferManager, GroupComm, GroupComm, ErrorHandler, MeterRegistry,
     *      TransferJournal, String)
     */
    public CacheTransceiver(TransceiverConfig config, CacheState cacheState, int selfIndex, CommState commState,
                            ConnectionManager connections, CacheFormatter formatter, KvCacheView cache,
                            TransferBufferPool pool, BufferManager buffers, GroupComm contextGroup,
                            GroupComm generationGroup, ErrorHandler errorHandler, MeterRegistry meters,
                            TransferJournal journal, String instanceName, byte[] tokenIssuingKey) {
        this.journal = Objects.requireNonNull(journal, "journal");
        this.config = Objects.requireNonNull(config, "config");
        Objects.requireNonNull(cacheState, "cacheState");
        Objects.requireNonNull(commState, "commState");
        Objects.requireNonNull(connections, "connections");
        Objects.requireNonNull(formatter, "formatter");
        this.formatterCapabilities = java.util.Set.copyOf(formatter.capabilities());
        this.cache = Objects.requireNonNull(cache, "cache");
        Objects.requireNonNull(pool, "pool");
        Objects.requireNonNull(buffers, "buffers");
        this.contextGroup = Objects.requireNonNull(contextGroup, "contextGroup");
        this.generationGroup = Objects.requireNonNull(generationGroup, "generationGroup");
        Objects.requireNonNull(instanceName, "instanceName");
        Objects.requireNonNull(errorHandler, "errorHandler");
        Objects.requireNonNull(meters, "meters");
        if (selfIndex < 0 || selfIndex >= cacheState.worldSize()) {
            throw new IllegalArgumentException("selfIndex = " + selfIndex + ": outside [0, " + cacheState.worldSize()
                    + ")");
        }
        if (commState.selfIndex() != -1 && commState.selfIndex() != selfIndex) {
            throw new IllegalArgumentException("commState.selfIndex = " + commState.selfIndex() + " but selfIndex = "
                    + selfIndex);
        }
        if (!commState.addresses().get(selfIndex).equals(connections.localAddress())) {
            throw new IllegalArgumentException("commState address of rank " + selfIndex + " is '"
                    + commState.addresses().get(selfIndex) + "' but the connection manager listens at '"
                    + connections.localAddress() + "'");
        }
        this.selfState = new TransceiverState(cacheState, commState.withSelfIndex(selfIndex));
        String rank = "rank-" + selfIndex;
        this.metrics = new TransferMetrics(meters, instanceName, rank, errorHandler);
        if (pool instanceof dev.kvtransfer.core.buffer.DefaultTransferBufferPool d) {
            metrics.stagingPool(d);
            d.onWait(metrics::stagingWait);
        }
        this.timing = config.timingDir().map(d -> new TimingCsvWriter(d, selfIndex, metrics::error)).orElse(null);
        this.summary = config.timingDir().map(d -> new GenTransferSummary(d, instanceName, selfIndex,
                metrics::error)).orElse(null);
        String prefix = "kvt-" + instanceName + "-" + commState.transport() + "-" + rank;
        if (config.parallelReceive()) {
            AtomicInteger n = new AtomicInteger();
            peerExecutor = new ThreadPoolExecutor(0, 64, 10, TimeUnit.SECONDS, new SynchronousQueue<>(), r -> {
                Thread t = new Thread(r, prefix + "-peer-" + n.getAndIncrement());
                t.setDaemon(true);
                return t;
            });
        } else {
            peerExecutor = null;
        }
        this.auth = ControlAuth.of(config.authSecret(), tokenIssuingKey);
        TransferEnv env = new TransferEnv(config, selfState, connections, formatter, cache, pool, buffers, metrics,
                timing, peerExecutor, prefix, journal, auth);
        this.sender = new CacheSender(env);
        this.receiver = new CacheReceiver(env);
        metrics.inFlight(this, CacheTransceiver::pendingContextRequests, CacheTransceiver::pendingGenerationRequests);
        LiveResources.count(3, 1);
    }

    /**
     * Registers a resource the transceiver closes (last registered first) after its threads stopped; used by
     * factories that create the pool for it.
     *
     * @param resource the resource
     * @return this transceiver
     */
    public CacheTransceiver closeWith(AutoCloseable resource) {
        Objects.requireNonNull(resource, "resource");
        synchronized (owned) {
            owned.push(resource);
        }
        return this;
    }

    private final java.util.Set<dev.kvtransfer.api.format.FormatterCapability> formatterCapabilities;

    /** @return the config */
    public TransceiverConfig config() {
        return config;
    }

    /**
     * @return what this rank's formatter can do beyond whole requests ({@code LAYER_RANGES}: layer-wise sends;
     *         {@code PUSH}: one-sided writes, when the transport has them)
     */
    public java.util.Set<dev.kvtransfer.api.format.FormatterCapability> formatterCapabilities() {
        return formatterCapabilities;
    }

    /**
     * What the context side hands the generation side for a request this rank serves: the request id, this
     * rank's state and, with authentication on, the request's token. The token comes from the instance's issuing
     * key (the same on every rank built with it, e.g. every rank of a {@code LocalInstance}), not from the
     * deployment secret: another instance of the deployment cannot compute it, only present one it was handed.
     *
     * @param requestId      the context request id
     * @param firstGenTokens tokens generated by prefill (may be empty)
     * @return the params
     */
    public ContextPhaseParams contextPhaseParams(long requestId, long[] firstGenTokens) {
        return contextPhaseParams(requestId, firstGenTokens, new long[0]);
    }

    /**
     * As {@link #contextPhaseParams(long, long[])}, with the draft tokens the context phase produced for
     * speculative decoding. Their encoding carries a checksum of the tokens, so the generation side decodes
     * exactly these tokens or refuses the params ({@code MALFORMED}). With authentication on, the request token is
     * issued for that checksum: a requester whose params carry other tokens (replaced and re-checksummed on the
     * way) is refused {@code UNAUTHORIZED} before a byte moves, naming both checksums.
     *
     * @param requestId      the context request id
     * @param firstGenTokens tokens generated by prefill (may be empty)
     * @param draftTokens    draft tokens (may be empty)
     * @return the params
     */
    public ContextPhaseParams contextPhaseParams(long requestId, long[] firstGenTokens, long[] draftTokens) {
        // The token is issued for these tokens: a requester that received others is refused (see ControlAuth).
        return new ContextPhaseParams(requestId, firstGenTokens, selfState,
                auth.token(requestId, ContextPhaseParams.tokensChecksum(firstGenTokens, draftTokens)), draftTokens);
    }

    /** @return this rank's cache and comm state (selfIndex set): what goes into {@code ContextPhaseParams} */
    public TransceiverState state() {
        return selfState;
    }

    /**
     * Context side: the request's prefill is done; send its cache to whichever generation ranks ask for it.
     * Returns at once; the request moves to {@code CONTEXT_COMPLETE}, {@code TRANS_ERROR} or {@code CANCELLED}.
     *
     * @param request a context request
     * @throws IllegalArgumentException for a generation request, or an id already in flight on this rank
     * @throws IllegalStateException    when the request was already submitted or the transceiver is closed
     */
    public void respondAndSendAsync(TransferRequest request) {
        Objects.requireNonNull(request, "request");
        if (!request.isContext()) {
            throw new IllegalArgumentException("request " + request.requestId() + " is a generation request");
        }
        track(contextRequests, request);
        journalRequest(request, TransferJournal.Role.CONTEXT);
        sender.respond(request.handle());
    }

    /**
     * Context side, layer by layer (TensorRT-LLM's {@code respondAndSendLayerWise}, Mooncake's {@code save_kv_layer}):
     * call it when the request's prefill starts; then, after each layer's forward pass, call
     * {@link TransferRequest#layerReady(int)} with the rank-local layer. Each layer moves as soon as it is ready
     * and every counterpart asked (pushed straight into the generation pool in push mode, sent in pull mode), so
     * the transfer hides behind the rest of the prefill. A formatter that cannot move layer ranges moves the
     * whole request after the last layer.
     *
     * @param request a context request
     */
    public void respondAndSendLayerWise(TransferRequest request) {
        Objects.requireNonNull(request, "request");
        request.handle().markLayerWise();
        respondAndSendAsync(request);
    }

    /**
     * Generation side: ask the context instance named by the request's {@code ContextPhaseParams} for the
     * cache and write it into the request's blocks. Returns at once.
     *
     * @param request a generation request
     * @throws IllegalArgumentException for a context request, or an id already in flight on this rank
     * @throws IllegalStateException    when the request was already submitted or the transceiver is closed
     */
    public void requestAndReceiveAsync(TransferRequest request) {
        Objects.requireNonNull(request, "request");
        if (request.isContext()) {
            throw new IllegalArgumentException("request " + request.requestId() + " is a context request");
        }
        track(generationRequests, request);
        journalRequest(request, TransferJournal.Role.GENERATION);
        receiver.receive(request.handle());
    }

    /**
     * Generation side, blocking (TensorRT-LLM's {@code requestAndReceiveSync}): {@link #requestAndReceiveAsync} and
     * wait for the request to end, at most {@code kvTransferTimeout} plus {@code senderFutureTimeout} (the receive
     * itself ends by then: every wait of it is bounded by {@code kvTransferTimeout}).
     *
     * @param request a generation request
     * @throws KvTransferException the request's own error (its id and code) when it failed, was cancelled or
     *                             timed out; {@code TIMEOUT} naming the request if it did not end in time
     */
    public void requestAndReceiveSync(TransferRequest request) {
        requestAndReceiveAsync(request);
        long waitMs = config.kvTransferTimeout().toMillis() + config.senderFutureTimeout().toMillis();
        try {
            request.handle().done().get(waitMs, java.util.concurrent.TimeUnit.MILLISECONDS);
        } catch (java.util.concurrent.TimeoutException e) {
            throw new KvTransferException(ErrorCode.TIMEOUT, request.requestId(), "requestAndReceiveSync: the "
                    + "request did not end within " + waitMs + " ms", e);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new KvTransferException(ErrorCode.CANCELLED, request.requestId(), "requestAndReceiveSync: "
                    + "interrupted while waiting", e);
        } catch (java.util.concurrent.ExecutionException e) {
            // Failed requests complete their future normally and carry the error; this is the unexpected path.
            throw new KvTransferException(ErrorCode.INTERNAL, request.requestId(), "requestAndReceiveSync: "
                    + e.getCause(), e.getCause());
        }
        if (request.state() != RequestState.GENERATION_TRANS_COMPLETE) {
            throw request.error().orElseGet(() -> new KvTransferException(request.state()
                    == RequestState.CANCELLED ? ErrorCode.CANCELLED : ErrorCode.INTERNAL, request.requestId(),
                    "requestAndReceiveSync: the request ended " + request.state(), null));
        }
    }

    /**
     * Generation side (TensorRT-LLM's {@code checkGenTransferComplete}): whether every generation request
     * submitted on this rank has ended here, successfully or not, whether or not a status check reported it yet.
     * Local to this rank: no collective.
     *
     * @return true when no generation request of this rank is still moving
     */
    public boolean checkGenTransferComplete() {
        synchronized (statusLock) {
            for (Tracked t : generationRequests.values()) {
                if (!t.request().handle().done().isDone()) {
                    return false;
                }
            }
            return true;
        }
    }

    /**
     * Records the request's acceptance now and its outcome when it ends (whichever path ends it: transfer, error,
     * cancel, timeout or close). One callback per request; nothing per block or part.
     */
    private void journalRequest(TransferRequest request, TransferJournal.Role role) {
        if (!journal.enabled()) {
            return;
        }
        long id = request.requestId();
        journal.requestAccepted(role, id, request.promptLength(), request.blockIds().length);
        request.handle().done().whenComplete((v, e) -> {
            RequestState s = request.state();
            if (s == RequestState.CONTEXT_COMPLETE || s == RequestState.GENERATION_TRANS_COMPLETE) {
                journal.completed(role, id, request.kvCacheSize());
            } else {
                KvTransferException err = request.error().orElse(null);
                journal.ended(role, id, err == null ? (s == RequestState.CANCELLED ? ErrorCode.CANCELLED
                        : ErrorCode.INTERNAL) : err.code(), err == null ? s.toString() : err.getMessage());
            }
        });
    }

    private void track(Map<Long, Tracked> map, TransferRequest request) {
        if (closed) {
            throw new IllegalStateException("the transceiver is closed");
        }
        synchronized (statusLock) {
            if (map.containsKey(request.requestId())) {
                throw new IllegalArgumentException("request " + request.requestId() + " is already in flight on "
                        + "this rank");
            }
            if (!request.markSubmitted()) {
                throw new IllegalStateException("request " + request.requestId() + " was already submitted");
            }
            map.put(request.requestId(), new Tracked(request, System.nanoTime()));
        }
    }

    /**
     * Cancels a request, if it is still early enough: on the context side before its ready signal went out
     * (every counterpart is refused with {@code CANCELLED}); on the generation side before its request infos
     * went out. Later, the transfer runs to its end and this returns false.
     *
     * @param request the request
     * @return whether it was cancelled
     */
    public boolean cancelRequest(TransferRequest request) {
        Objects.requireNonNull(request, "request");
        return request.isContext() ? sender.cancel(request.handle()) : receiver.cancel(request.handle());
    }

    /**
     * Context side status (TensorRT-LLM's {@code checkContextTransferStatus}), agreed over the context group (the
     * TP group of this PP stage; with attention DP the DP group of the stage).
     *
     * <p>Every member contributes the requests it has finished (and whether each succeeded). A request is
     * reported only when <em>every</em> member finished it; it is reported failed when any member failed it.
     * {@code atLeast} says how many to wait for: selected by the upstream rule (finished everywhere first, then
     * the oldest pending ones; every pending one when empty), each waited for at most
     * {@code senderFutureTimeout} locally, then the group gathers again. Every member must call with the same
     * {@code atLeast}: {@code 0} costs one collective round, anything else two. Requests past
     * {@code kvTransferTimeout} (plus that wait) without an outcome fail with {@code TIMEOUT} locally, so no
     * request is pending forever.
     *
     * @param atLeast the minimum number of requests to wait for, or empty to wait for all
     * @return the completed and failed request ids, each reported once
     * @throws KvTransferException {@code TIMEOUT} when the group does not gather within kvTransferTimeout
     */
    public TransferStatus checkContextTransferStatus(OptionalInt atLeast) {
        return checkContextTransferStatus(atLeast, false);
    }

    /**
     * {@link #checkContextTransferStatus(OptionalInt)} with TensorRT-LLM's {@code markComplete}: with it, every
     * request reported completed is marked complete ({@link TransferRequest#isMarkedComplete()}, upstream's move
     * to {@code DISAGG_CONTEXT_COMPLETE}) and released: when this rank's cache is the reference
     * {@link dev.kvtransfer.core.cache.PagedKvCache} and holds exactly the request's blocks under its id, they go
     * back to the pool. That happens only once the whole context group finished the request, so no rank frees
     * blocks a transfer still reads. Without it (the default, as upstream) the engine releases them itself.
     * Failed requests are reported, never released.
     *
     * @param atLeast      the minimum number of requests to wait for, or empty to wait for all
     * @param markComplete whether to mark and release the completed requests
     * @return the completed and failed request ids, each reported once
     */
    public TransferStatus checkContextTransferStatus(OptionalInt atLeast, boolean markComplete) {
        return check(contextRequests, contextGroup, true, atLeast, markComplete);
    }

    /**
     * Generation side status (TensorRT-LLM's {@code checkGenTransferStatus}), agreed over the generation group:
     * the whole generation instance (with attention DP the DP group across every PP stage), so a PP stage never
     * starts decoding a request whose other stages are still receiving. Otherwise as
     * {@link #checkContextTransferStatus}, with the generation selection rule for whom to wait for (ids finished
     * on most members first, then the oldest).
     *
     * <p>With a timing directory ({@code kvtransfer.timingDir}) the completed requests' times and sizes are then
     * all-gathered over the same group (TensorRT-LLM's {@code updateKVCacheTransferBW}, one round, only when some
     * request succeeded everywhere), merged by request id (earliest start, latest end, summed bytes) into
     * {@link TransferRequest#instanceTransferDuration()} / {@link TransferRequest#instanceKvCacheSize()}, and
     * appended to {@code <instance>_<rank>_gen_transfer_summary.csv}.
     *
     * @param atLeast the minimum number of requests to wait for, or empty to wait for all
     * @return the completed and failed request ids, each reported once
     */
    public TransferStatus checkGenTransferStatus(OptionalInt atLeast) {
        return check(generationRequests, generationGroup, false, atLeast, false);
    }

    /** Encodes this rank's finished requests as (id, 1 = succeeded / 0 = failed) pairs. */
    private long[] finishedPairs(Map<Long, Tracked> map, List<Long> pendingOut) {
        synchronized (statusLock) {
            long[] out = new long[2 * map.size()];
            int n = 0;
            for (Tracked t : map.values()) {
                if (pendingOut != null) {
                    pendingOut.add(t.request.requestId());
                }
                if (t.request.isDone()) {
                    out[n++] = t.request.requestId();
                    out[n++] = succeeded(t.request) ? 1 : 0;
                }
            }
            return java.util.Arrays.copyOf(out, n);
        }
    }

    private static boolean succeeded(TransferRequest r) {
        RequestState s = r.state();
        return s == RequestState.CONTEXT_COMPLETE || s == RequestState.GENERATION_TRANS_COMPLETE;
    }

    private List<long[]> gather(GroupComm group, long[] pairs) {
        return group.size() == 1 ? List.of(pairs) : group.allgather(pairs, config.kvTransferTimeout());
    }

    private static List<long[]> idsOnly(List<long[]> gatheredPairs) {
        List<long[]> out = new ArrayList<>(gatheredPairs.size());
        for (long[] p : gatheredPairs) {
            long[] ids = new long[p.length / 2];
            for (int i = 0; i < ids.length; i++) {
                ids[i] = p[2 * i];
            }
            out.add(ids);
        }
        return out;
    }

    private TransferStatus check(Map<Long, Tracked> map, GroupComm group, boolean context, OptionalInt atLeast,
                                 boolean markComplete) {
        Objects.requireNonNull(atLeast, "atLeast");
        synchronized (checkLock) {
            List<Long> pending = checkPending;
            pending.clear();
            List<long[]> gathered = gather(group, finishedPairs(map, pending));
            boolean wait = atLeast.isEmpty() || atLeast.getAsInt() > 0;
            if (wait) {
                // "Block all" selects every pending id whatever the members finished: no ids to extract.
                List<Long> selected = atLeast.isEmpty() ? pending : context
                        ? StatusAgreement.selectContext(pending, idsOnly(gathered), atLeast)
                        : StatusAgreement.selectGeneration(pending, idsOnly(gathered), atLeast);
                long overdueNanos = config.kvTransferTimeout().plus(config.senderFutureTimeout()).toNanos();
                for (Long id : selected) {
                    Tracked t;
                    synchronized (statusLock) {
                        t = map.get(id);
                    }
                    if (t == null) {
                        continue;
                    }
                    TransferRequest r = t.request;
                    awaitBounded(r);
                    if (!r.isDone() && System.nanoTime() - t.submittedNanos > overdueNanos) {
                        // The transfer's own deadlines should have ended it; never let a request stay forever.
                        r.handle().fail(new KvTransferException(ErrorCode.TIMEOUT, id, "no outcome within "
                                + config.kvTransferTimeout().toMillis() + " ms", null));
                    }
                }
                // Second round: what the waits finished, agreed by the whole group.
                gathered = gather(group, finishedPairs(map, null));
            }
            StatusAgreement.Outcome agreed = StatusAgreement.agree(gathered);
            List<Long> completed = checkCompleted;
            List<Long> failed = checkFailed;
            List<TransferRequest> done = checkCompletedRequests;
            completed.clear();
            failed.clear();
            done.clear();
            synchronized (statusLock) {
                for (Long id : pending) {
                    Boolean ok = agreed.outcome(id);
                    if (ok == null || !map.containsKey(id)) {
                        continue;
                    }
                    Tracked t = map.remove(id);
                    (ok ? completed : failed).add(id);
                    if (ok) {
                        done.add(t.request);
                    }
                }
            }
            if (markComplete) {
                release(done);
            }
            if (!context && summary != null && agreed.anySucceeded()) {
                updateTransferBandwidth(group, done);
            }
            done.clear();
            // The record copies both lists (an empty one into the shared empty list), so reusing them is safe.
            TransferStatus status = completed.isEmpty() && failed.isEmpty() ? TransferStatus.EMPTY
                    : new TransferStatus(completed, failed);
            pending.clear();
            completed.clear();
            failed.clear();
            return status;
        }
    }

    private void release(List<TransferRequest> done) {
        for (TransferRequest r : done) {
            r.markComplete();
            if (cache instanceof dev.kvtransfer.core.cache.PagedKvCache p) {
                p.freeIfHeld(r.requestId(), r.blockIds());
            }
        }
    }

    /**
     * TensorRT-LLM's {@code updateKVCacheTransferBW}: every member contributes (id, start, end, bytes) of the
     * requests it reports completed, and each gets the group's merge. Every member calls it in the same check (the
     * condition is the agreed outcome, the same everywhere); a member with nothing completed contributes nothing.
     */
    private void updateTransferBandwidth(GroupComm group, List<TransferRequest> done) {
        long[] mine = new long[GenTransferSummary.FIELDS * done.size()];
        int n = 0;
        for (TransferRequest r : done) {
            mine[n++] = r.requestId();
            mine[n++] = r.startNanos();
            mine[n++] = r.endNanos();
            mine[n++] = r.kvCacheSize();
        }
        List<long[]> gathered;
        try {
            gathered = gather(group, mine);
        } catch (KvTransferException e) {
            // The group is broken (a member did not come); the status stays valid, the summary holds local values.
            metrics.error(e);
            gathered = List.of(mine);
        }
        Map<Long, long[]> merged = GenTransferSummary.merge(gathered);
        long[] rows = new long[3 * done.size()];
        n = 0;
        for (TransferRequest r : done) {
            long[] m = merged.get(r.requestId());
            long nanos = GenTransferSummary.nanos(m);
            r.instanceTotals(m[2], nanos);
            rows[n++] = r.requestId();
            rows[n++] = nanos;
            rows[n++] = m[2];
        }
        summary.write(rows);
    }

    private void awaitBounded(TransferRequest r) {
        try {
            r.handle().done().get(config.senderFutureTimeout().toNanos(), TimeUnit.NANOSECONDS);
        } catch (TimeoutException e) {
            // Stays pending: a later check picks it up.
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        } catch (ExecutionException e) {
            // done() never completes exceptionally; the request's own error says what happened.
        }
    }

    /**
     * @return context-side requests tracked by the responder and not yet dispatched (asked for, locally ready
     *         or both): a diagnostic, e.g. to see that a generation rank's infos arrived
     */
    public int contextRequestsAwaitingDispatch() {
        return sender.pendingCount();
    }

    /** @return data tags held by this rank's generation requests (a diagnostic: 0 once every request ended) */
    public int generationTagsInUse() {
        return receiver.tagsInUse();
    }

    /** @return context requests submitted and not yet reported by a status check */
    public int pendingContextRequests() {
        synchronized (statusLock) {
            return contextRequests.size();
        }
    }

    /** @return generation requests submitted and not yet reported by a status check */
    public int pendingGenerationRequests() {
        synchronized (statusLock) {
            return generationRequests.size();
        }
    }

    /**
     * Starts closing without waiting: no new requests, pending ones end {@code CANCELLED} (counterparts that
     * asked are told), threads are interrupted. Closing the connection manager afterwards wakes threads
     * blocked in the transport; {@link #close()} then waits for them.
     */
    public void shutdown() {
        closed = true;
        sender.shutdown();
        receiver.shutdown();
        if (peerExecutor != null) {
            peerExecutor.shutdownNow();
        }
    }

    /**
     * Waits for every thread of this transceiver to end.
     *
     * @param timeout how long
     * @return true when they all ended
     */
    public boolean awaitTermination(Duration timeout) {
        long deadline = System.nanoTime() + timeout.toNanos();
        boolean ok = sender.awaitTermination(timeout);
        ok &= receiver.awaitTermination(Duration.ofNanos(Math.max(0, deadline - System.nanoTime())));
        if (peerExecutor != null) {
            try {
                ok &= peerExecutor.awaitTermination(Math.max(0, deadline - System.nanoTime()), TimeUnit.NANOSECONDS);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                ok = false;
            }
        }
        return ok;
    }

    /**
     * Shuts down, waits (at most a few seconds) for the threads, flushes the timing files and closes the
     * resources registered with {@link #closeWith}. Idempotent.
     *
     * @throws IllegalStateException when a thread would not stop (resources are then left open) or a registered
     *                               resource failed to close
     */
    @Override
    public void close() {
        if (closedOnce.compareAndSet(false, true)) {
            LiveResources.count(3, -1);
        }
        shutdown();
        boolean stopped = awaitTermination(CLOSE_WAIT);
        if (timing != null) {
            timing.closeAndWait(CLOSE_WAIT);
        }
        if (summary != null) {
            summary.close();
        }
        if (!stopped) {
            throw new IllegalStateException("transceiver of rank " + selfState.selfIndex() + ": threads still "
                    + "running after " + CLOSE_WAIT.toSeconds() + " s; close its connection manager to wake them");
        }
        // The threads are done with them: free the reused control buffers before the buffer manager closes. Posted
        // receives (ready signals, infos) give theirs back on the transport's thread once it closed (LocalInstance
        // closes it first): wait for them, so none is still being freed while the buffer manager counts.
        sender.awaitControlLeases(POSTED_LEASE_WAIT);
        receiver.awaitControlLeases(POSTED_LEASE_WAIT);
        sender.releaseControlBuffers();
        receiver.releaseControlBuffers();
        RuntimeException failure = null;
        synchronized (owned) {
            while (!owned.isEmpty()) {
                AutoCloseable c = owned.pop();
                try {
                    c.close();
                } catch (Exception e) {
                    LOG.error("closing {} failed", c, e);
                    if (failure == null) {
                        failure = e instanceof RuntimeException re ? re : new IllegalStateException(e);
                    } else {
                        failure.addSuppressed(e);
                    }
                }
            }
        }
        if (failure != null) {
            throw failure;
        }
    }

    /** @return the executor of per-peer actions when parallel receive is on (tests) */
    ExecutorService peerExecutor() {
        return peerExecutor;
    }
}
