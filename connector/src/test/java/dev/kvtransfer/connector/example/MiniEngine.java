package dev.kvtransfer.connector.example;

import dev.kvtransfer.api.KvTransferException;
import dev.kvtransfer.api.layout.BlockDistribution;
import dev.kvtransfer.api.memory.BufferManager;
import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.api.model.ContextPhaseParams;
import dev.kvtransfer.connector.BlockTable;
import dev.kvtransfer.connector.ConnectorConfig;
import dev.kvtransfer.connector.ConnectorEvent;
import dev.kvtransfer.connector.ConnectorMetadata;
import dev.kvtransfer.connector.ConnectorRequest;
import dev.kvtransfer.connector.ConnectorUpdate;
import dev.kvtransfer.connector.FinishResult;
import dev.kvtransfer.connector.FinishedTransfer;
import dev.kvtransfer.connector.KvRole;
import dev.kvtransfer.connector.LoadFailure;
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
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;

/**
 * A toy serving engine driving the connector the way vLLM's scheduler and model runner drive a
 * {@code KVConnectorBase_V1}: one scheduler loop (its own thread) and one worker thread per rank it drives — every
 * rank of a {@link LocalInstance}, or, with attention DP, the ranks of its DP rank ({@link ConnectorConfig#members()};
 * one engine per DP rank, as vLLM runs one engine core per DP rank). It is the runnable example of the connector
 * README. The workers get the metadata only as bytes ({@link ConnectorMetadata#toBytes()}), as workers in other
 * processes would.
 *
 * <p>Prefill engine: admits a request and computes its prompt in chunks ({@link Job#chunkTokens()}, chunked
 * prefill; 0 = the whole prompt in one step). Each step allocates the blocks of the next chunk (filled with a
 * "poison" pattern, so a layer sent before it was computed would fail verification), calls
 * {@code updateStateAfterAlloc} with the request's blocks so far, then "computes" the chunk layer by layer — copying
 * the layer of the chunk's blocks from a scratch pool that holds the request's {@link KvPattern} — calling
 * {@code saveKvLayer} after each layer. After the last chunk {@code requestFinished} says whether the blocks stay the
 * connector's; they are freed when {@code finishedSending} names the request. A job may have one rank drop its share
 * of the save ({@link Job#dropShareOnRank()}: the rank found its blocks unusable), which makes the decode side's load
 * fail on the ranks that share served.
 *
 * <p>Decode engine: admits a request (asking again in later steps while the connector answers
 * {@link MatchResult#LATER}, i.e. until its params arrived), asks {@code getNumNewMatchedTokens} with the prefix its
 * own prefix cache holds (those blocks it fills itself, as a prefix-cache hit would hold them), allocates, and loads
 * — asynchronously, or layer by layer inside the step ({@code waitForLayerLoad} before each layer). When
 * {@code finishedRecving} names the request, every element of every block is verified with {@link KvPattern}. A
 * failed load follows the connector's policy: recompute — the valid prefix the connector reports is verified
 * element by element (it is kept), the rest is recomputed (the pattern written, as the model would) and the whole
 * request verified — or fail the request. Then the blocks are freed.
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

    /**
     * One request as the engine sees it.
     *
     * @param request           the request
     * @param cachedTokens      decode: prompt tokens the local prefix cache holds
     * @param abortAfterPrefill prefill: the client goes away after the prefill
     * @param chunkTokens       prefill: tokens per chunk (0: the whole prompt in one step)
     * @param dropShareOnRank   prefill: the instance rank that drops its share of the save (-1: none)
     */
    record Job(ConnectorRequest request, int cachedTokens, boolean abortAfterPrefill, int chunkTokens,
               int dropShareOnRank) {
        Job(ConnectorRequest request, int cachedTokens, boolean abortAfterPrefill) {
            this(request, cachedTokens, abortAfterPrefill, 0, -1);
        }
    }

    /** A prefill in progress: the prompt tokens computed so far. */
    private static final class Active {
        final Job job;
        int computed;
        int chunks;

        Active(Job job) {
            this.job = job;
        }
    }

    /** The part of a request one step computes: global blocks [from, to) of a chunk ending at {@code end}. */
    private record Chunk(Job job, int from, int to, boolean last) {
    }

    private final String name;
    private final boolean prefill;
    private final LocalInstance instance;
    private final ConnectorConfig config;
    /** Instance rank of each member (the block-table row). */
    private final int[] ranks;
    private final SchedulerConnector scheduler;
    private final WorkerConnector[] workers;
    private final PagedKvCache[] scratch;
    private final ExecutorService rankThreads;
    private final Thread loop;
    private final Listener listener;
    private final BlockingQueue<Job> inbox = new LinkedBlockingQueue<>();
    private final List<Job> waiting = new ArrayList<>();
    private final List<Active> active = new ArrayList<>();
    private final Map<Long, int[][]> held = new LinkedHashMap<>();
    private final List<Long> abortNextStep = new ArrayList<>();
    private volatile boolean stopped;

    /** Outcomes, for the test. */
    final Set<Long> verified = ConcurrentHashMap.newKeySet();
    final Set<Long> recomputed = ConcurrentHashMap.newKeySet();
    final Set<Long> failedRequests = ConcurrentHashMap.newKeySet();
    final Set<Long> freed = ConcurrentHashMap.newKeySet();
    final Set<Long> delayedFree = ConcurrentHashMap.newKeySet();
    final Set<Long> droppedShares = ConcurrentHashMap.newKeySet();
    final Map<Long, KvTransferException> failedLoads = new ConcurrentHashMap<>();
    final Map<Long, LoadFailure> loadFailures = new ConcurrentHashMap<>();
    final Map<Long, KvTransferException> failedSends = new ConcurrentHashMap<>();
    final Map<Long, int[][]> blocksOf = new ConcurrentHashMap<>();
    /** Per request, per instance rank, its end. */
    final Map<Long, Map<Integer, FinishedTransfer>> transfers = new ConcurrentHashMap<>();
    /** Per instance rank, what getBlockIdsWithLoadErrors returned. */
    final Map<Integer, Set<Integer>> errorBlocks = new ConcurrentHashMap<>();
    final Map<Long, Integer> matchedTokens = new ConcurrentHashMap<>();
    final Map<Long, Integer> laterAnswers = new ConcurrentHashMap<>();
    final Map<Long, Integer> chunksOf = new ConcurrentHashMap<>();
    /** Step in which a request's last chunk was computed, and step whose metadata carried its save. */
    final Map<Long, Long> lastChunkStep = new ConcurrentHashMap<>();
    final Map<Long, Long> saveStep = new ConcurrentHashMap<>();
    final List<ConnectorEvent> events = new CopyOnWriteArrayList<>();
    volatile Throwable failure;
    volatile long steps;

    MiniEngine(String name, LocalInstance instance, ConnectorConfig config, Listener listener) {
        this.name = name;
        this.instance = instance;
        this.config = config;
        this.prefill = config.role() == KvRole.PRODUCER;
        this.listener = listener;
        this.ranks = config.members().stream().mapToInt(Integer::intValue).toArray();
        int params = ranks[0];
        this.scheduler = new SchedulerConnector(config, prefill
                ? (id, tokens) -> instance.transceiver(params).contextPhaseParams(id, tokens) : null);
        int n = ranks.length;
        this.workers = new WorkerConnector[n];
        this.scratch = new PagedKvCache[n];
        for (int m = 0; m < n; m++) {
            int r = ranks[m];
            workers[m] = new WorkerConnector(instance.transceiver(r), r, config);
            if (prefill) {
                // The "model": the values prefill computes for each request (KvPattern), copied in layer by layer.
                scratch[m] = PagedKvCache.of(instance.bufferManager(r), instance.cacheState(r), r,
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

    /** @return the worker of member {@code m} */
    WorkerConnector worker(int m) {
        return workers[m];
    }

    int members() {
        return ranks.length;
    }

    void submit(Job job) {
        inbox.add(job);
    }

    /** The router hands over the params of a request admitted as {@link ConnectorRequest#remotePrefill}. */
    void paramsArrived(long requestId, ContextPhaseParams params) {
        scheduler.kvTransferParamsArrived(requestId, params);
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
        boolean busy = false;
        // --- scheduler: admit, match, allocate ---
        for (Job j; (j = inbox.poll()) != null; ) {
            busy = true;
            if (prefill) {
                active.add(new Active(j));
            } else {
                waiting.add(j);
            }
        }
        for (Iterator<Job> it = waiting.iterator(); it.hasNext(); ) {
            if (admitDecode(it.next())) {
                it.remove();
                busy = true;
            }
        }
        List<Chunk> compute = new ArrayList<>();
        for (Active a : active) {
            compute.add(nextChunk(a));
        }
        for (Long id : abortNextStep) {
            scheduler.abort(id);
        }
        abortNextStep.clear();
        ConnectorMetadata meta = scheduler.buildConnectorMeta();
        meta.saves().forEach(s -> saveStep.put(s.requestId(), steps));
        byte[] wire = meta.toBytes(); // what a worker in another process receives

        // --- workers: the forward pass on every rank at once ---
        List<Future<WorkerOutput>> futures = new ArrayList<>();
        for (int m = 0; m < workers.length; m++) {
            int member = m;
            futures.add(rankThreads.submit(() -> forward(member, ConnectorMetadata.fromBytes(wire), compute)));
        }
        List<WorkerOutput> outputs = new ArrayList<>();
        for (Future<WorkerOutput> f : futures) {
            outputs.add(f.get(RANK_STEP_BOUND.toMillis(), TimeUnit.MILLISECONDS));
        }

        // --- scheduler: what ended, what finished ---
        ConnectorUpdate update = scheduler.updateConnectorOutput(outputs);
        events.addAll(scheduler.takeEvents());
        for (WorkerOutput o : outputs) {
            for (FinishedTransfer f : o.sent()) {
                transfers.computeIfAbsent(f.requestId(), k -> new ConcurrentHashMap<>()).put(o.rank(), f);
            }
            for (FinishedTransfer f : o.received()) {
                transfers.computeIfAbsent(f.requestId(), k -> new ConcurrentHashMap<>()).put(o.rank(), f);
            }
        }
        for (Chunk c : compute) {
            if (!c.last) {
                continue;
            }
            busy = true;
            long id = c.job.request().requestId();
            active.removeIf(a -> a.job == c.job);
            lastChunkStep.put(id, steps);
            FinishResult fr = scheduler.requestFinished(id);
            if (fr.delayFree()) {
                delayedFree.add(id);
            } else {
                free(id);
            }
            listener.prefilled(id, fr);
            if (c.job.abortAfterPrefill()) {
                abortNextStep.add(id); // the client went away after its prefill: the engine aborts the request
            }
        }
        busy |= !compute.isEmpty();
        update.failedSends().forEach(failedSends::put);
        for (Long id : update.finishedSending()) {
            free(id);
        }
        update.failedLoads().forEach(failedLoads::put);
        for (Long id : update.finishedRecving()) {
            LoadFailure lf = update.loadFailures().get(id);
            if (lf == null) {
                verify(id, 0, Integer.MAX_VALUE);
                verified.add(id);
            } else {
                loadFailures.put(id, lf);
                if (lf.recompute()) {
                    // The valid prefix is kept as loaded: every element of it must be right.
                    verify(id, 0, lf.validBlocks());
                    recompute(id, lf.validBlocks());
                    verify(id, 0, Integer.MAX_VALUE);
                    recomputed.add(id);
                } else {
                    failedRequests.add(id);
                }
            }
            // The "decode" is over at once; the connector holds nothing any more.
            FinishResult fr = scheduler.requestFinished(id);
            if (fr.delayFree()) {
                throw new IllegalStateException("request " + id + ": connector holds a finished load");
            }
            free(id);
        }
        return busy || !update.finishedSending().isEmpty() || !update.finishedRecving().isEmpty();
    }

    private final Map<Long, Integer> totals = new ConcurrentHashMap<>();
    /** Engine id -> the id the KV was computed under (the context request id: KvPattern's request). */
    private final Map<Long, Long> patternIds = new ConcurrentHashMap<>();

    /** Blocks of member {@code m}'s share of a request of {@code total} blocks (its CP share). */
    private int share(int m, int total) {
        CacheState s = instance.cacheState(ranks[m]);
        return BlockDistribution.count(total, s.contextParallelism(), s.cpRank(ranks[m]));
    }

    private int firstGlobal(int m, int total) {
        CacheState s = instance.cacheState(ranks[m]);
        return BlockDistribution.firstGlobalBlock(total, s.contextParallelism(), s.cpRank(ranks[m]));
    }

    /** Prefill: allocates the blocks of the request's next chunk and tells the connector. */
    private Chunk nextChunk(Active a) {
        ConnectorRequest q = a.job.request();
        long id = q.requestId();
        int t = config.tokensPerBlock();
        int total = BlockDistribution.blocksFor(q.promptTokens(), t);
        int chunk = a.job.chunkTokens() > 0 ? a.job.chunkTokens() : q.promptTokens();
        int end = Math.min(q.promptTokens(), a.computed + chunk);
        int from = a.computed / t; // a partly computed block is computed again whole
        int to = BlockDistribution.blocksFor(end, t);
        if (a.computed == 0) {
            totals.put(id, total);
            patternIds.put(id, id);
            int[][] none = new int[ranks.length][0];
            held.put(id, none);
            blocksOf.put(id, none);
            for (int m = 0; m < ranks.length; m++) {
                int r = ranks[m];
                KvPattern.fill(scratch[m], scratch[m].allocate(id, share(m, total)), instance.cacheState(r), r, id,
                        total);
            }
        }
        int[][] blocks = held.get(id);
        for (int m = 0; m < ranks.length; m++) {
            int r = ranks[m];
            int want = Math.max(0, Math.min(share(m, total), to - firstGlobal(m, total)));
            if (want > blocks[m].length) {
                PagedKvCache cache = instance.cache(r);
                int[] added = cache.allocate(id, want - blocks[m].length);
                blocks[m] = cache.blocksOf(id);
                // Whatever was in these blocks before: never what the request should end up with.
                KvPattern.fill(cache, blocks[m], instance.cacheState(r), r, id + POISON, total,
                        firstGlobal(m, total) + blocks[m].length - added.length, Integer.MAX_VALUE);
            }
        }
        blocksOf.put(id, blocks);
        a.computed = end;
        a.chunks++;
        chunksOf.put(id, a.chunks);
        scheduler.updateStateAfterAlloc(q, BlockTable.perRank(blocks), 0, end);
        if (a.chunks == 1) {
            listener.admitted(id, scheduler.contextPhaseParams(id));
        }
        return new Chunk(a.job, from, to, end == q.promptTokens());
    }

    /** Decode: asks the connector; false when it answered "ask again later". */
    private boolean admitDecode(Job j) {
        ConnectorRequest q = j.request();
        long id = q.requestId();
        MatchResult m = scheduler.getNumNewMatchedTokens(q, j.cachedTokens());
        if (m.later()) {
            laterAnswers.merge(id, 1, Integer::sum);
            return false;
        }
        matchedTokens.put(id, m.numTokens());
        int t = config.tokensPerBlock();
        int total = BlockDistribution.blocksFor(q.promptTokens(), t);
        totals.put(id, total);
        // The context request id: from the params, which arrived with the request or later.
        long pid = transfersContextId(q, j);
        patternIds.put(id, pid);
        int[][] blocks = new int[ranks.length][];
        for (int k = 0; k < ranks.length; k++) {
            int r = ranks[k];
            PagedKvCache cache = instance.cache(r);
            CacheState s = instance.cacheState(r);
            blocks[k] = cache.allocate(id, share(k, total));
            KvPattern.fill(cache, blocks[k], s, r, id + POISON, total);
            if (j.cachedTokens() > 0) {
                // The local prefix cache already holds these blocks of the prompt.
                KvPattern.fill(cache, blocks[k], s, r, pid, total, 0, j.cachedTokens() / t);
            }
        }
        held.put(id, blocks);
        blocksOf.put(id, blocks);
        scheduler.updateStateAfterAlloc(q, BlockTable.perRank(blocks), m.numTokens());
        return true;
    }

    /** Context request ids of requests admitted without params, set by the router. */
    final Map<Long, Long> contextIds = new ConcurrentHashMap<>();

    private long transfersContextId(ConnectorRequest q, Job j) {
        return q.kvTransferParams().map(ContextPhaseParams::requestId)
                .orElseGet(() -> contextIds.getOrDefault(q.requestId(), q.requestId()));
    }

    /** One rank's part of a step, in vLLM's model-runner order. */
    private WorkerOutput forward(int m, ConnectorMetadata meta, List<Chunk> compute) {
        WorkerConnector w = workers[m];
        int rank = ranks[m];
        w.bindConnectorMetadata(meta);
        for (Chunk c : compute) {
            if (c.last && c.job.dropShareOnRank() == rank && w.cancelOnThisRank(c.job.request().requestId())) {
                droppedShares.add(c.job.request().requestId());
            }
        }
        w.startLoadKv();
        long layerBytes = instance.cache(rank).layout().layerBytes();
        BufferManager bm = instance.bufferManager(rank);
        for (int l = 0; l < w.localLayers(); l++) {
            w.waitForLayerLoad(l);
            for (Chunk c : compute) {
                // "Compute" layer l of the chunk: its values appear in the engine's blocks only now.
                long id = c.job.request().requestId();
                int[] dst = held.get(id)[m];
                int[] src = scratch[m].blocksOf(id);
                int first = firstGlobal(m, totals.get(id));
                for (int b = Math.max(0, c.from - first); b < dst.length && first + b < c.to; b++) {
                    bm.copy(scratch[m].block(src[b]), l * layerBytes, instance.cache(rank).block(dst[b]),
                            l * layerBytes, layerBytes);
                }
            }
            w.saveKvLayer(l);
        }
        w.waitForSave(Duration.ZERO);
        for (Chunk c : compute) {
            if (c.last) {
                scratch[m].free(c.job.request().requestId());
            }
        }
        WorkerOutput out = w.getFinished();
        errorBlocks.computeIfAbsent(rank, k -> ConcurrentHashMap.newKeySet()).addAll(w.getBlockIdsWithLoadErrors());
        w.clearConnectorMetadata();
        return out;
    }

    /** Checks the request's global blocks [from, to) on every member. */
    private void verify(long id, int from, int to) {
        int[][] b = held.get(id);
        for (int m = 0; m < ranks.length; m++) {
            int r = ranks[m];
            KvPattern.verify(instance.cache(r), b[m], instance.cacheState(r), r, patternIds.get(id), totals.get(id),
                    from, to).assertOk();
        }
    }

    /** The engine recomputes the prompt from global block {@code from} on: the model writes the right values. */
    private void recompute(long id, int from) {
        int[][] b = held.get(id);
        for (int m = 0; m < ranks.length; m++) {
            int r = ranks[m];
            KvPattern.fill(instance.cache(r), b[m], instance.cacheState(r), r, patternIds.get(id), totals.get(id),
                    from, Integer.MAX_VALUE);
        }
    }

    private void free(long id) {
        int[][] b = held.remove(id);
        if (b == null) {
            throw new IllegalStateException(name + ": request " + id + " freed twice");
        }
        for (int r : ranks) {
            instance.cache(r).free(id);
        }
        freed.add(id);
        listener.freed(id);
    }

    /** @return blocks still held by the engine (not freed) */
    int heldRequests() {
        return held.size();
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
