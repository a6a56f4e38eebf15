package dev.kvtransfer.connector.example;

import dev.kvtransfer.api.KvTransferException;
import dev.kvtransfer.api.layout.BlockDistribution;
import dev.kvtransfer.api.memory.BufferManager;
import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.api.model.ContextPhaseParams;
import dev.kvtransfer.connector.BlockTable;
import dev.kvtransfer.connector.ConnectorConfig;
import dev.kvtransfer.connector.ConnectorMetadata;
import dev.kvtransfer.connector.ConnectorRequest;
import dev.kvtransfer.connector.ConnectorUpdate;
import dev.kvtransfer.connector.FinishResult;
import dev.kvtransfer.connector.FinishedTransfer;
import dev.kvtransfer.connector.KvRole;
import dev.kvtransfer.connector.MatchResult;
import dev.kvtransfer.connector.SchedulerConnector;
import dev.kvtransfer.connector.WorkerConnector;
import dev.kvtransfer.connector.WorkerOutput;
import dev.kvtransfer.core.cache.PagedKvCache;
import dev.kvtransfer.core.local.LocalInstance;
import dev.kvtransfer.core.pattern.KvPattern;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import java.util.function.IntFunction;

/**
 * A toy serving engine driving the connector the way vLLM's scheduler and model runner drive a
 * {@code KVConnectorBase_V1}: one scheduler loop (its own thread) and one worker thread per rank of a
 * {@link LocalInstance}. It is the runnable example of the connector README.
 *
 * <p>Prefill engine: admits a request, allocates its blocks (filled with a "poison" pattern, so a layer sent before
 * it was computed would fail verification), then "computes" it layer by layer — copying the layer from a scratch pool
 * that holds the request's {@link KvPattern} — calling {@code saveKvLayer} after each layer. After the step
 * {@code requestFinished} says whether the blocks stay the connector's; they are freed when
 * {@code finishedSending} names the request.
 *
 * <p>Decode engine: admits a request with the prefill's params, asks {@code getNumNewMatchedTokens} with the prefix
 * its own prefix cache holds (those blocks it fills itself, as a prefix-cache hit would hold them), allocates, and
 * loads — asynchronously, or layer by layer inside the step ({@code waitForLayerLoad} before each layer). When
 * {@code finishedRecving} names the request, every element of every block is verified with {@link KvPattern}, or, for
 * a failed load, the blocks reported by {@code getBlockIdsWithLoadErrors} are recorded; then the blocks are freed.
 */
final class MiniEngine implements AutoCloseable {
    /** Request id offset of the poison pattern. */
    static final long POISON = 1L << 40;
    private static final Duration RANK_STEP_BOUND = Duration.ofSeconds(60);

    /** What the proxy (the router between the two instances) hears from the prefill engine. */
    interface Listener {
        /** @param requestId admitted; {@code params} could go to the decode side now (transfer overlaps prefill) */
        default void admitted(long requestId, ContextPhaseParams params) {
        }

        /** @param requestId prefill done; {@code result} from requestFinished */
        default void prefilled(long requestId, FinishResult result) {
        }

        /** @param requestId its blocks were freed (transfer over, or not held) */
        default void freed(long requestId) {
        }
    }

    /** One request as the engine sees it. */
    record Job(ConnectorRequest request, int cachedTokens, boolean abortAfterPrefill) {
    }

    private final String name;
    private final boolean prefill;
    private final LocalInstance instance;
    private final SchedulerConnector scheduler;
    private final WorkerConnector[] workers;
    private final PagedKvCache[] scratch;
    private final ExecutorService rankThreads;
    private final Thread loop;
    private final Listener listener;
    private final BlockingQueue<Job> inbox = new LinkedBlockingQueue<>();
    private final Map<Long, int[][]> held = new LinkedHashMap<>();
    private final List<Long> abortNextStep = new ArrayList<>();
    private volatile boolean stopped;

    /** Outcomes, for the test. */
    final Set<Long> verified = ConcurrentHashMap.newKeySet();
    final Set<Long> freed = ConcurrentHashMap.newKeySet();
    final Set<Long> delayedFree = ConcurrentHashMap.newKeySet();
    final Map<Long, KvTransferException> failedLoads = new ConcurrentHashMap<>();
    final Map<Long, KvTransferException> failedSends = new ConcurrentHashMap<>();
    final Map<Long, int[][]> blocksOf = new ConcurrentHashMap<>();
    final Map<Long, Map<Integer, FinishedTransfer>> transfers = new ConcurrentHashMap<>();
    final Map<Integer, Set<Integer>> errorBlocks = new ConcurrentHashMap<>();
    final Map<Long, Integer> matchedTokens = new ConcurrentHashMap<>();
    volatile Throwable failure;
    volatile long steps;

    MiniEngine(String name, LocalInstance instance, ConnectorConfig config, Listener listener) {
        this.name = name;
        this.instance = instance;
        this.prefill = config.role() == KvRole.PRODUCER;
        this.listener = listener;
        this.scheduler = new SchedulerConnector(config, prefill
                ? (id, tokens) -> instance.transceiver(0).contextPhaseParams(id, tokens) : null);
        int n = instance.ranks();
        this.workers = new WorkerConnector[n];
        this.scratch = new PagedKvCache[n];
        for (int r = 0; r < n; r++) {
            workers[r] = new WorkerConnector(instance.transceiver(r), r, config);
            if (prefill) {
                // The "model": the values prefill computes for each request (KvPattern), copied in layer by layer.
                scratch[r] = PagedKvCache.of(instance.bufferManager(r), instance.cacheState(r), r,
                        instance.cache(r).freeBlocks());
            }
        }
        this.rankThreads = Executors.newFixedThreadPool(n, runnable -> {
            Thread t = new Thread(runnable, name + "-worker");
            t.setDaemon(true);
            return t;
        });
        this.loop = new Thread(this::run, name + "-scheduler");
        this.loop.setDaemon(true);
        this.loop.start();
    }

    SchedulerConnector scheduler() {
        return scheduler;
    }

    WorkerConnector worker(int rank) {
        return workers[rank];
    }

    void submit(Job job) {
        inbox.add(job);
    }

    private void run() {
        try {
            while (!stopped) {
                if (!step()) {
                    Job next = inbox.poll(2, TimeUnit.MILLISECONDS); // idle: wait for work, bounded
                    if (next != null) {
                        inbox.add(next);
                    }
                }
            }
        } catch (Throwable t) {
            failure = t;
        }
    }

    /** One engine step; returns whether anything happened. */
    private boolean step() throws Exception {
        steps++;
        // --- scheduler: admit, match, allocate ---
        List<Job> admitted = new ArrayList<>();
        for (Job j; (j = inbox.poll()) != null; ) {
            admit(j);
            admitted.add(j);
        }
        for (Long id : abortNextStep) {
            scheduler.abort(id);
        }
        abortNextStep.clear();
        ConnectorMetadata meta = scheduler.buildConnectorMeta();
        List<Job> compute = prefill ? admitted : List.of();

        // --- workers: the forward pass on every rank at once ---
        List<Future<WorkerOutput>> futures = new ArrayList<>();
        for (int r = 0; r < workers.length; r++) {
            int rank = r;
            futures.add(rankThreads.submit(() -> forward(rank, meta, compute)));
        }
        List<WorkerOutput> outputs = new ArrayList<>();
        for (Future<WorkerOutput> f : futures) {
            outputs.add(f.get(RANK_STEP_BOUND.toMillis(), TimeUnit.MILLISECONDS));
        }

        // --- scheduler: what ended, what finished ---
        ConnectorUpdate update = scheduler.updateConnectorOutput(outputs);
        for (WorkerOutput o : outputs) {
            for (FinishedTransfer f : o.sent()) {
                transfers.computeIfAbsent(f.requestId(), k -> new ConcurrentHashMap<>()).put(o.rank(), f);
            }
            for (FinishedTransfer f : o.received()) {
                transfers.computeIfAbsent(f.requestId(), k -> new ConcurrentHashMap<>()).put(o.rank(), f);
            }
        }
        for (Job j : compute) {
            long id = j.request().requestId();
            FinishResult fr = scheduler.requestFinished(id);
            if (fr.delayFree()) {
                delayedFree.add(id);
            } else {
                free(id);
            }
            listener.prefilled(id, fr);
            if (j.abortAfterPrefill()) {
                abortNextStep.add(id); // the client went away after its prefill: the engine aborts the request
            }
        }
        update.failedSends().forEach(failedSends::put);
        for (Long id : update.finishedSending()) {
            free(id);
        }
        update.failedLoads().forEach(failedLoads::put);
        for (Long id : update.finishedRecving()) {
            if (!update.failedLoads().containsKey(id)) {
                int[][] b = held.get(id);
                for (int r = 0; r < workers.length; r++) {
                    KvPattern.verify(instance.cache(r), b[r], instance.cacheState(r), r, patternId(id),
                            totalBlocks(id)).assertOk();
                }
                verified.add(id);
            }
            // The "decode" is over at once; the connector holds nothing any more.
            FinishResult fr = scheduler.requestFinished(id);
            if (fr.delayFree()) {
                throw new IllegalStateException("request " + id + ": connector holds a finished load");
            }
            free(id);
        }
        return !admitted.isEmpty() || !update.finishedSending().isEmpty() || !update.finishedRecving().isEmpty();
    }

    private final Map<Long, Integer> totals = new ConcurrentHashMap<>();
    /** Engine id -> the id the KV was computed under (the context request id: KvPattern's request). */
    private final Map<Long, Long> patternIds = new ConcurrentHashMap<>();

    private long patternId(long id) {
        return patternIds.get(id);
    }

    private int totalBlocks(long id) {
        return totals.get(id);
    }

    private void admit(Job j) {
        ConnectorRequest q = j.request();
        long id = q.requestId();
        MatchResult m = scheduler.getNumNewMatchedTokens(q, j.cachedTokens());
        matchedTokens.put(id, m.numTokens());
        int t = instance.cacheState().tokensPerBlock();
        int total = BlockDistribution.blocksFor(q.promptTokens(), t);
        totals.put(id, total);
        long pid = q.kvTransferParams().map(ContextPhaseParams::requestId).orElse(id);
        patternIds.put(id, pid);
        int[][] blocks = new int[workers.length][];
        for (int r = 0; r < workers.length; r++) {
            PagedKvCache cache = instance.cache(r);
            CacheState s = instance.cacheState(r);
            blocks[r] = cache.allocate(id, total);
            // Whatever was in these blocks before: never what the request should end up with.
            KvPattern.fill(cache, blocks[r], s, r, id + POISON, total);
            if (prefill) {
                KvPattern.fill(scratch[r], scratch[r].allocate(id, total), s, r, pid, total);
            } else if (j.cachedTokens() > 0) {
                // The local prefix cache already holds these blocks of the prompt.
                KvPattern.fill(cache, blocks[r], s, r, pid, total, 0, j.cachedTokens() / t);
            }
        }
        held.put(id, blocks);
        blocksOf.put(id, blocks);
        scheduler.updateStateAfterAlloc(q, BlockTable.perRank(blocks), m.numTokens());
        if (prefill) {
            listener.admitted(id, scheduler.contextPhaseParams(id));
        }
    }

    /** One rank's part of a step, in vLLM's model-runner order. */
    private WorkerOutput forward(int rank, ConnectorMetadata meta, List<Job> compute) {
        WorkerConnector w = workers[rank];
        w.bindConnectorMetadata(meta);
        w.startLoadKv();
        long layerBytes = instance.cache(rank).layout().layerBytes();
        BufferManager bm = instance.bufferManager(rank);
        for (int l = 0; l < w.localLayers(); l++) {
            w.waitForLayerLoad(l);
            for (Job j : compute) {
                // "Compute" layer l of the request: its values appear in the engine's blocks only now.
                long id = j.request().requestId();
                int[] dst = held.get(id)[rank];
                int[] src = scratch[rank].blocksOf(id);
                for (int b = 0; b < dst.length; b++) {
                    bm.copy(scratch[rank].block(src[b]), l * layerBytes, instance.cache(rank).block(dst[b]),
                            l * layerBytes, layerBytes);
                }
            }
            w.saveKvLayer(l);
        }
        w.waitForSave(Duration.ZERO);
        for (Job j : compute) {
            scratch[rank].free(j.request().requestId());
        }
        WorkerOutput out = w.getFinished();
        errorBlocks.computeIfAbsent(rank, k -> ConcurrentHashMap.newKeySet()).addAll(w.getBlockIdsWithLoadErrors());
        w.clearConnectorMetadata();
        return out;
    }

    private void free(long id) {
        int[][] b = held.remove(id);
        if (b == null) {
            throw new IllegalStateException(name + ": request " + id + " freed twice");
        }
        for (int r = 0; r < workers.length; r++) {
            instance.cache(r).free(id);
        }
        freed.add(id);
        listener.freed(id);
    }

    /** @return blocks still held by the engine (not freed) */
    int heldRequests() {
        return held.size();
    }

    /** Runs a function of every rank (a diagnostic). */
    <T> List<T> perRank(IntFunction<T> f) {
        List<T> out = new ArrayList<>();
        for (int r = 0; r < workers.length; r++) {
            out.add(f.apply(r));
        }
        return out;
    }

    @Override
    public void close() throws InterruptedException {
        stopped = true;
        loop.join(RANK_STEP_BOUND.toMillis());
        rankThreads.shutdownNow();
        rankThreads.awaitTermination(10, TimeUnit.SECONDS);
        for (PagedKvCache c : scratch) {
            if (c != null) {
                c.close();
            }
        }
    }

    @Override
    public String toString() {
        return name + " " + scheduler + " " + Arrays.toString(workers);
    }
}
