package dev.kvtransfer.connector;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.KvTransferException;
import dev.kvtransfer.api.layout.BlockDistribution;
import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.core.CacheTransceiver;
import dev.kvtransfer.core.RequestState;
import dev.kvtransfer.core.TransferRequest;
import dev.kvtransfer.core.TransferStatus;

import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.OptionalInt;
import java.util.Set;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;

/**
 * The worker side of the connector (vLLM's {@code KVConnectorBase_V1} in the {@code WORKER} role): one per rank,
 * over that rank's {@link CacheTransceiver}, called by the rank's model worker.
 *
 * <p>A step: {@link #bindConnectorMetadata} (the scheduler's metadata; saves of the step are handed to the
 * transceiver layer by layer at once, so the decode side's requests are matched while the prefill runs),
 * {@link #startLoadKv()}, then the forward pass — before layer {@code l}'s attention {@link #waitForLayerLoad}, after
 * it {@link #saveKvLayer} — then {@link #waitForSave}, {@link #getFinished()} (which every rank of the instance calls
 * once per step: it agrees with the other ranks over the transceiver's status groups), and
 * {@link #getBlockIdsWithLoadErrors()}. Layers are this rank's local layers ({@code 0 ..} its PP stage's layer count).
 *
 * <p>Block ids are the engine's; this class never frees them. Every wait is bounded: layer loads by
 * {@link ConnectorConfig#layerLoadTimeout()}, saves by the caller's timeout, status agreement and transfers by the
 * transceiver's {@code kvTransferTimeout}. Errors name the request.
 *
 * <p>Thread-safe: the bookkeeping is synchronized and every wait happens outside the lock, so e.g.
 * {@link #getBlockIdsWithLoadErrors()} may be called from another thread while the worker waits for a layer; the step
 * methods are meant to be called in step order by the rank's worker thread.
 */
public final class WorkerConnector {
    private final CacheTransceiver transceiver;
    private final int rank;
    /** This rank's row of the block tables (its index among the connector's members). */
    private final int member;
    private final ConnectorConfig config;
    private final int localLayers;

    /** Saves in flight by context request id (= engine id). */
    private final Map<Long, TransferRequest> sends = new HashMap<>();
    /** Loads in flight by context request id. */
    private final Map<Long, Load> loads = new HashMap<>();
    /** Ends not coming from the transceiver's status (a submit it refused), reported at the next getFinished. */
    private final List<FinishedTransfer> localSent = new ArrayList<>();
    private final List<FinishedTransfer> localReceived = new ArrayList<>();
    private final Set<Integer> errorBlocks = new LinkedHashSet<>();

    private ConnectorMetadata bound;
    private final List<TransferRequest> stepSaves = new ArrayList<>();
    private final List<Load> stepLoads = new ArrayList<>();
    private boolean loadsStarted;
    private boolean shutDown;

    private record Load(long engineId, TransferRequest request, int[] loadedBlocks, int firstLoadedBlock,
                        boolean async) {
    }

    /**
     * A worker connector.
     *
     * @param transceiver this rank's transceiver (the caller's: not closed here)
     * @param rank        this rank's index in its instance (a member of the config: with attention DP, a rank of
     *                    the config's DP group)
     * @param config      the connector settings (the instance's, or its DP rank's)
     */
    public WorkerConnector(CacheTransceiver transceiver, int rank, ConnectorConfig config) {
        this.transceiver = Objects.requireNonNull(transceiver, "transceiver");
        this.config = Objects.requireNonNull(config, "config");
        CacheState state = transceiver.state().cacheState();
        if (transceiver.state().commState().selfIndex() != rank) {
            throw new IllegalArgumentException("rank " + rank + " but the transceiver is rank "
                    + transceiver.state().commState().selfIndex());
        }
        this.member = config.memberIndex(rank);
        if (member < 0) {
            throw new IllegalArgumentException("rank " + rank + " is not a member " + config.members()
                    + " of the connector (DP rank " + config.dpRank() + ")");
        }
        if (!state.attentionDpEnabled() && state.worldSize() != config.ranks()) {
            throw new IllegalArgumentException("config of " + config.ranks() + " ranks for an instance of "
                    + state.worldSize());
        }
        if (state.attentionDpEnabled() && state.dpRank() != config.dpRank()) {
            throw new IllegalArgumentException("rank " + rank + " is of DP rank " + state.dpRank()
                    + ", the config serves DP rank " + config.dpRank());
        }
        this.rank = rank;
        this.localLayers = state.layerCount(state.ppRank(rank));
    }

    /** @return this rank */
    public int rank() {
        return rank;
    }

    /** @return this rank's local layer count (the layers {@link #saveKvLayer} / {@link #waitForLayerLoad} take) */
    public int localLayers() {
        return localLayers;
    }

    /**
     * Binds a step's metadata (vLLM's {@code bind_connector_metadata}): cancels the aborted transfers, hands the
     * step's saves to the transceiver layer by layer ({@link CacheTransceiver#respondAndSendLayerWise}; nothing moves
     * before {@link #saveKvLayer} marks a layer), and prepares the loads for {@link #startLoadKv()}. A save or load
     * the transceiver refuses (e.g. its id already in flight on this rank) is reported failed at the next
     * {@link #getFinished()}.
     *
     * @param meta the step's metadata
     */
    public void bindConnectorMetadata(ConnectorMetadata meta) {
        Objects.requireNonNull(meta, "meta");
        if (!meta.preempted().isEmpty()) {
            handlePreemptions(meta.preempted());
        }
        bind(meta);
    }

    private synchronized void bind(ConnectorMetadata meta) {
        open();
        if (bound != null) {
            finishStep();
        }
        bound = meta;
        for (Long id : meta.cancels()) {
            TransferRequest s = sends.get(id);
            if (s != null) {
                transceiver.cancelRequest(s);
            }
            for (Load l : loads.values()) {
                if (l.engineId == id) {
                    transceiver.cancelRequest(l.request);
                }
            }
        }
        for (ConnectorMetadata.SaveSpec s : meta.saves()) {
            if (!config.role().saves()) {
                throw new IllegalStateException("request " + s.requestId() + ": role " + config.role()
                        + " does not save");
            }
            TransferRequest r = TransferRequest.context(s.requestId(), s.promptTokens(),
                    s.blocks().rankView(member), s.blockHashes()).withLastBlockKey(s.lastBlockKey());
            try {
                transceiver.respondAndSendLayerWise(r);
                sends.put(s.requestId(), r);
                stepSaves.add(r);
            } catch (IllegalArgumentException | IllegalStateException e) {
                localSent.add(refused(s.requestId(), s.requestId(), "saving", e));
            }
        }
        for (ConnectorMetadata.LoadSpec l : meta.loads()) {
            if (!config.role().loads()) {
                throw new IllegalStateException("request " + l.requestId() + ": role " + config.role()
                        + " does not load");
            }
            int[] blocks = l.blocks().rankView(member);
            TransferRequest r = TransferRequest.generation(l.params(), l.promptTokens(), blocks, l.reusedBlocks(),
                    l.reusedHashes()).withLastBlockKey(l.lastBlockKey());
            int[] loaded = loadedBlocks(l, blocks);
            int first = loaded.length == 0 ? -1 : globalBlock(transceiver.state().cacheState(),
                    blocks.length - loaded.length, totalBlocks(l));
            stepLoads.add(new Load(l.requestId(), r, loaded, first, l.async()));
        }
        loadsStarted = false;
    }

    /** This rank's blocks that a load writes (the reused prefix excluded). */
    private int[] loadedBlocks(ConnectorMetadata.LoadSpec l, int[] blocks) {
        if (l.reusedBlocks() == 0) {
            return blocks.clone();
        }
        CacheState self = transceiver.state().cacheState();
        int total = totalBlocks(l);
        List<Integer> out = new ArrayList<>();
        for (int i = 0; i < blocks.length; i++) {
            int global = globalBlock(self, i, total);
            if (global >= l.reusedBlocks()) {
                out.add(blocks[i]);
            }
        }
        return out.stream().mapToInt(Integer::intValue).toArray();
    }

    private static int totalBlocks(ConnectorMetadata.LoadSpec l) {
        return BlockDistribution.blocksFor(l.promptTokens(), l.params().contextState().cacheState().tokensPerBlock());
    }

    /** The global index of this rank's i-th block of a request (contiguous CP distribution). */
    private int globalBlock(CacheState self, int i, int totalBlocks) {
        return BlockDistribution.firstGlobalBlock(totalBlocks, self.contextParallelism(), self.cpRank(rank)) + i;
    }

    /** Drops the step's bookkeeping (the transfers stay in flight). */
    public synchronized void clearConnectorMetadata() {
        finishStep();
    }

    private void finishStep() {
        if (!loadsStarted) {
            startLoads();
        }
        bound = null;
        stepSaves.clear();
        stepLoads.clear();
    }

    /**
     * Starts the step's loads (vLLM's {@code start_load_kv}): every load asks its context ranks now and writes into
     * the engine's blocks as the data arrives (layer by layer when the context side saves layer by layer).
     */
    public synchronized void startLoadKv() {
        if (bound == null) {
            throw new IllegalStateException("rank " + rank + ": startLoadKv before bindConnectorMetadata");
        }
        if (!loadsStarted) {
            startLoads();
        }
    }

    private void startLoads() {
        loadsStarted = true;
        for (Load l : stepLoads) {
            long ctxId = l.request.requestId();
            try {
                transceiver.requestAndReceiveAsync(l.request);
                loads.put(ctxId, l);
            } catch (IllegalArgumentException | IllegalStateException e) {
                FinishedTransfer f = refused(l.engineId, ctxId, "loading", e);
                localReceived.add(new FinishedTransfer(f.requestId(), f.contextRequestId(), f.state(), 0, 0,
                        f.duration(), f.error(), asList(l.loadedBlocks), l.firstLoadedBlock));
                errorBlocks.addAll(asList(l.loadedBlocks));
            }
        }
    }

    private static FinishedTransfer refused(long engineId, long ctxId, String what, RuntimeException e) {
        KvTransferException k = new KvTransferException(ErrorCode.INTERNAL, ctxId, "request " + engineId + ": "
                + what + " refused by the transceiver: " + e.getMessage(), e);
        return new FinishedTransfer(engineId, ctxId, RequestState.TRANS_ERROR, 0, 0, java.util.Optional.empty(), k);
    }

    /**
     * Waits until local layer {@code localLayer} of every layer-by-layer load of this step has arrived (vLLM's
     * {@code wait_for_layer_load}); asynchronous loads are not waited for (their end comes through
     * {@link #getFinished()}). A load that fails returns here at once: its blocks are reported by
     * {@link #getBlockIdsWithLoadErrors()} and its end by {@link #getFinished()}.
     *
     * @param localLayer the rank-local layer about to be computed
     * @throws KvTransferException {@code TIMEOUT} naming the request when the layer did not arrive within
     *                             {@link ConnectorConfig#layerLoadTimeout()} (the load stays in flight)
     */
    public void waitForLayerLoad(int localLayer) {
        checkLayer(localLayer);
        List<Load> waitFor;
        synchronized (this) {
            if (!loadsStarted && bound != null) {
                startLoads();
            }
            waitFor = new ArrayList<>();
            for (Load l : stepLoads) {
                if (!l.async && loads.get(l.request.requestId()) == l) {
                    waitFor.add(l);
                }
            }
        }
        long deadline = System.nanoTime() + config.layerLoadTimeout().toNanos();
        for (Load l : waitFor) {
            boolean arrived;
            try {
                arrived = l.request.awaitLayer(localLayer, Duration.ofNanos(Math.max(0, deadline - System.nanoTime())));
            } catch (KvTransferException failed) {
                continue; // the load ended in failure: reported by getFinished / getBlockIdsWithLoadErrors
            }
            if (!arrived && !l.request.isDone()) {
                throw new KvTransferException(ErrorCode.TIMEOUT, l.request.requestId(), "request " + l.engineId
                        + " (context request " + l.request.requestId() + "), rank " + rank + ": layer " + localLayer
                        + " did not arrive within " + config.layerLoadTimeout().toMillis() + " ms", null);
            }
        }
    }

    /**
     * Local layer {@code localLayer} of this step's saved requests is computed (vLLM's {@code save_kv_layer}): the
     * transceiver moves it at once, while the engine computes the next layer.
     *
     * @param localLayer the rank-local layer just computed
     */
    public void saveKvLayer(int localLayer) {
        checkLayer(localLayer);
        List<TransferRequest> s;
        synchronized (this) {
            s = List.copyOf(stepSaves);
        }
        for (TransferRequest r : s) {
            r.layerReady(localLayer);
        }
    }

    /**
     * The step's forward pass is over (vLLM's {@code wait_for_save}): every layer of this step's saves is marked
     * ready (an engine that never called {@link #saveKvLayer} hands the whole request over here), then waits up to
     * {@code timeout} for those saves to end. {@code Duration.ZERO} does not wait: the blocks stay the connector's
     * until {@link #getFinished()} reports them (the usual, asynchronous way).
     *
     * @param timeout how long to wait for the step's saves to end
     * @return whether every save of the step ended (completed or failed) within the timeout
     */
    public boolean waitForSave(Duration timeout) {
        Objects.requireNonNull(timeout, "timeout");
        List<TransferRequest> s;
        synchronized (this) {
            s = List.copyOf(stepSaves);
        }
        for (TransferRequest r : s) {
            for (int l = 0; l < localLayers; l++) {
                r.layerReady(l);
            }
        }
        return awaitEnd(s, timeout);
    }

    /**
     * The transfers that ended on this rank and on every member of its status groups (vLLM's {@code get_finished}):
     * saves whose blocks the engine may free (once the scheduler saw them on every rank) and loads whose blocks hold
     * the prompt KV (or failed). Every rank of the instance calls it once per step: it runs the transceiver's
     * non-blocking status rounds ({@code checkContextTransferStatus} / {@code checkGenTransferStatus} with
     * {@code atLeast = 0}), which the group's members meet in.
     *
     * @return this rank's output for the scheduler
     */
    public WorkerOutput getFinished() {
        synchronized (this) {
            if (bound != null && !loadsStarted) {
                startLoads();
            }
        }
        TransferStatus ctx = config.role().saves() ? transceiver.checkContextTransferStatus(OptionalInt.of(0))
                : TransferStatus.EMPTY;
        TransferStatus gen = config.role().loads() ? transceiver.checkGenTransferStatus(OptionalInt.of(0))
                : TransferStatus.EMPTY;
        List<FinishedTransfer> sent = new ArrayList<>();
        List<FinishedTransfer> received = new ArrayList<>();
        Set<Integer> invalid = new LinkedHashSet<>();
        synchronized (this) {
            sent.addAll(localSent);
            localSent.clear();
            for (FinishedTransfer f : localReceived) {
                received.add(f);
            }
            localReceived.clear();
            for (Long id : concat(ctx)) {
                TransferRequest r = sends.remove(id);
                if (r != null) {
                    sent.add(finished(id, r));
                }
            }
            for (Long id : concat(gen)) {
                Load l = loads.remove(id);
                if (l == null) {
                    continue;
                }
                FinishedTransfer f = finished(l.engineId, l.request);
                if (!f.ok()) {
                    f = new FinishedTransfer(f.requestId(), f.contextRequestId(), f.state(), f.bytes(), f.messages(),
                            f.duration(), f.error(), asList(l.loadedBlocks), l.firstLoadedBlock);
                    invalid.addAll(asList(l.loadedBlocks));
                    errorBlocks.addAll(asList(l.loadedBlocks));
                }
                received.add(f);
            }
        }
        return new WorkerOutput(rank, sent, received, invalid);
    }

    private static List<Long> concat(TransferStatus s) {
        List<Long> out = new ArrayList<>(s.completed());
        out.addAll(s.failed());
        return out;
    }

    private static FinishedTransfer finished(long engineId, TransferRequest r) {
        KvTransferException error = r.error().orElse(null);
        RequestState st = r.state();
        if (error == null && st != RequestState.CONTEXT_COMPLETE && st != RequestState.GENERATION_TRANS_COMPLETE) {
            error = new KvTransferException(st == RequestState.CANCELLED ? ErrorCode.CANCELLED : ErrorCode.INTERNAL,
                    r.requestId(), "request " + engineId + " ended " + st, null);
        }
        return new FinishedTransfer(engineId, r.requestId(), st, r.kvCacheSize(), r.messageCount(),
                r.transferDuration(), error);
    }

    private static List<Integer> asList(int[] a) {
        List<Integer> out = new ArrayList<>(a.length);
        for (int v : a) {
            out.add(v);
        }
        return out;
    }

    /**
     * This rank's blocks whose load failed since the last call (vLLM's {@code get_block_ids_with_load_errors}): the
     * blocks a failed or cancelled load was to write (a reused prefix is not among them). Their content is
     * undefined; the engine recomputes or fails the request.
     *
     * @return the block ids (the set is the caller's)
     */
    public synchronized Set<Integer> getBlockIdsWithLoadErrors() {
        Set<Integer> out = new LinkedHashSet<>(errorBlocks);
        errorBlocks.clear();
        return out;
    }

    /**
     * The engine preempted requests and will overwrite their blocks (vLLM's {@code handle_preemptions}, called
     * before the step's forward pass; {@link #bindConnectorMetadata} calls it for the metadata's
     * {@link ConnectorMetadata#preempted()}). Each transfer of this rank for them is cancelled if it has not started
     * moving data, and this waits (up to {@link ConnectorConfig#layerLoadTimeout()} in all) until each has ended, so
     * that nothing reads or writes the blocks once it returns true. Their ends are still reported by
     * {@link #getFinished()} (the scheduler keeps them from the engine).
     *
     * @param requestIds the preempted requests (engine ids)
     * @return whether every transfer of them on this rank has ended (false: some still use the blocks)
     */
    public boolean handlePreemptions(Set<Long> requestIds) {
        Objects.requireNonNull(requestIds, "requestIds");
        List<TransferRequest> mine = new ArrayList<>();
        synchronized (this) {
            open();
            for (Long id : requestIds) {
                TransferRequest s = sends.get(id);
                if (s != null) {
                    mine.add(s);
                }
                for (Load l : loads.values()) {
                    if (l.engineId == id) {
                        mine.add(l.request);
                    }
                }
                stepSaves.removeIf(r -> r.requestId() == id);
                stepLoads.removeIf(l -> l.engineId == id);
            }
        }
        for (TransferRequest r : mine) {
            transceiver.cancelRequest(r);
        }
        return awaitEnd(mine, config.layerLoadTimeout());
    }

    /**
     * Cancels this rank's part of one transfer only (e.g. the rank found its blocks of the request unusable): the
     * other ranks' parts go on, and the peers this rank's part serves or is served by are refused {@code CANCELLED}.
     * As every cancel, it works before data moves. A load cancelled so fails on this rank only: with context
     * parallelism the other CP ranks' blocks stay valid ({@link LoadFailure#validBlocks()}).
     *
     * @param requestId the engine's request id
     * @return whether a transfer of this rank was cancelled
     */
    public boolean cancelOnThisRank(long requestId) {
        TransferRequest target = null;
        synchronized (this) {
            open();
            target = sends.get(requestId);
            for (Load l : loads.values()) {
                if (l.engineId == requestId) {
                    target = l.request;
                }
            }
            if (target == null) {
                for (Load l : stepLoads) {
                    if (l.engineId == requestId) {
                        target = l.request;
                    }
                }
            }
        }
        return target != null && transceiver.cancelRequest(target);
    }

    /** @return whether a save of this rank has not been reported ended (data still to send or being sent) */
    public synchronized boolean hasPendingPushWork() {
        return !sends.isEmpty();
    }

    /**
     * How many worker reports make a transfer ended (vLLM's {@code get_finished_count}).
     *
     * @return the connector's members
     */
    public int getFinishedCount() {
        return config.ranks();
    }

    /**
     * Shuts this rank's side down (vLLM's {@code shutdown}): cancels every transfer of this rank that has not
     * started moving data and waits up to {@code timeout} for all of them to end. Later step calls fail. The
     * transceiver is the caller's (not closed here); transfers still moving end within its {@code kvTransferTimeout}.
     *
     * @param timeout how long to wait for the transfers to end
     * @return whether every transfer of this rank ended
     */
    public boolean shutdown(Duration timeout) {
        Objects.requireNonNull(timeout, "timeout");
        List<TransferRequest> all = new ArrayList<>();
        synchronized (this) {
            if (shutDown) {
                return sends.values().stream().allMatch(TransferRequest::isDone)
                        && loads.values().stream().allMatch(l -> l.request.isDone());
            }
            shutDown = true;
            all.addAll(sends.values());
            loads.values().forEach(l -> all.add(l.request));
            bound = null;
            stepSaves.clear();
            stepLoads.clear();
        }
        for (TransferRequest r : all) {
            transceiver.cancelRequest(r);
        }
        return awaitEnd(all, timeout);
    }

    /** Waits for the requests to end, bounded (a layer not marked ready is never sent: no wrong data moves). */
    private static boolean awaitEnd(List<TransferRequest> requests, Duration timeout) {
        long deadline = System.nanoTime() + timeout.toNanos();
        for (TransferRequest r : requests) {
            long left = deadline - System.nanoTime();
            if (r.isDone()) {
                continue;
            }
            if (left <= 0) {
                return false;
            }
            try {
                r.completion().toCompletableFuture().get(left, TimeUnit.NANOSECONDS);
            } catch (TimeoutException e) {
                return false;
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                return false;
            } catch (ExecutionException e) {
                // completion() never completes exceptionally.
            }
        }
        return true;
    }

    private void open() {
        if (shutDown) {
            throw new IllegalStateException("rank " + rank + ": the worker connector is shut down");
        }
    }

    /** @return saves of this rank not yet reported ended */
    public synchronized int savesInFlight() {
        return sends.size();
    }

    /** @return loads of this rank not yet reported ended */
    public synchronized int loadsInFlight() {
        return loads.size();
    }

    private void checkLayer(int localLayer) {
        if (localLayer < 0 || localLayer >= localLayers) {
            throw new IllegalArgumentException("rank " + rank + ": local layer " + localLayer + " outside [0, "
                    + localLayers + ")");
        }
    }

    @Override
    public synchronized String toString() {
        return "WorkerConnector{rank " + rank + " " + config.role() + ", saves " + sends.keySet() + ", loads "
                + loads.keySet() + "}";
    }
}
