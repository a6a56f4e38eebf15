package dev.kvtransfer.formatter.standard;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.KvTransferException;
import dev.kvtransfer.api.cache.KvCacheView;
import dev.kvtransfer.api.format.CacheFormatter;
import dev.kvtransfer.api.format.FormatterCapability;
import dev.kvtransfer.api.format.Support;
import dev.kvtransfer.api.format.TransferBufferPool;
import dev.kvtransfer.api.format.TransferSession;
import dev.kvtransfer.api.layout.BlockDistribution;
import dev.kvtransfer.api.layout.BlockLayout;
import dev.kvtransfer.api.layout.PoolGeometry;
import dev.kvtransfer.api.layout.PoolLayout;
import dev.kvtransfer.api.layout.RankMapping;
import dev.kvtransfer.api.layout.TargetRanks;
import dev.kvtransfer.api.memory.BufferManager;
import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.memory.MemoryKind;
import dev.kvtransfer.api.model.AttentionType;
import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.api.model.RecurrentStateShape;
import dev.kvtransfer.api.model.WindowGroups;
import dev.kvtransfer.formatter.support.ChunkCrc;
import dev.kvtransfer.formatter.support.PartPlan;
import dev.kvtransfer.formatter.support.PartStaging;
import dev.kvtransfer.formatter.support.PeerWriteSink;
import dev.kvtransfer.formatter.support.PoolRegions;
import dev.kvtransfer.formatter.support.PushWrites;
import dev.kvtransfer.formatter.support.WritePlan;

import java.util.ArrayList;
import java.util.EnumSet;
import java.util.List;
import java.util.Objects;
import java.util.Set;

import static dev.kvtransfer.formatter.support.PartStaging.staged;

/**
 * The formatter for MHA/GQA caches ({@link AttentionType#DEFAULT}): re-shards heads (TP, including TP larger
 * than the KV head count), layers (PP, uneven and zero-layer stages), blocks (CP on one side) and attention-DP
 * groups between a context and a generation instance, between any two pool layouts ({@link PoolLayout}: block,
 * layer-nhd, layer-hnd on either side), moving elements as raw bytes of any width, and only the blocks after the
 * generation side's reused prefix ({@link TransferSession#reusedBlocks()}).
 *
 * <p>{@link SplitPlan} cuts this rank's share into one part per peer (a rectangle of blocks x layers x heads);
 * {@link PartPlan} decides how each part travels, from both pool layouts and both block-id lists
 * ({@link TransferSession#peerBlockIds}), so both ranks agree on every message: runs of blocks consecutive on
 * both sides coalesce into one message where both pools hold them contiguously, a side whose runs are contiguous
 * moves them straight from / into its pool (zero copy), and a side that is not (a transpose between
 * {@code [token][head]} and {@code [head][token]}, or a head subset of a token-major pool) stages the part and
 * gathers / scatters it with strided copies through the session's {@link BufferManager}
 * ({@code copy} / {@code copy2d}: one {@code cudaMemcpy2DAsync} each on a device manager). See
 * docs/design/formatter-standard-plans.md for the formulas and the policy.
 *
 * <p>Device pools: where the session's transport does not accept the pool's memory kind
 * ({@link TransferSession#transportAccepts}: a {@code DEVICE} pool over a transport without {@code DEVICE_MEMORY})
 * this rank stages every part, also those the plan moves directly: each direct message is one copy of a pool run
 * into (out of) staging, which core allocates as pinned host memory for a device pool; the messages are the plan's,
 * so the peer plans exactly as before. Pushes from such a pool are always staged ({@link WritePlan.Builder#sourceDirect}).
 * A transport that declares device memory gets the pool's runs as they are (zero copy on the device).
 *
 * <p>Layer-wise ({@link FormatterCapability#LAYER_RANGES}): {@link #format(TransferSession, int, int)} and
 * {@link #unformat(TransferSession, int, int)} move the parts restricted to a global layer range (each side skips
 * the layers it does not hold); both sides derive the same restricted parts and plans, so they agree on every
 * message of every range.
 *
 * <p>One-sided push ({@link FormatterCapability#PUSH}, {@link PushWriter}): {@link #push} writes this rank's parts
 * of a layer range straight into the peers' pools ({@link TransferSession#peerPool}) with a {@link WritePlan} per part: pool to pool
 * where runs are contiguous in both pools (coalesced runs of blocks; with a head ratio each rank's heads at their
 * offset in the destination rows), staged into the destination's order first where that needs fewer, larger
 * entries (see the README for the rule and the numbers), through the grants ({@link PeerWriteSink}). The designated
 * rank of a duplicate-head group writes; reused blocks are not written.
 *
 * <p>Which layouts pair is {@link SupportRules}'s, which ranks of a duplicate-head group talk {@link PeerSelection}'s,
 * and the remembered split plans {@link SplitPlans}'.
 *
 * <p>Thread-safe: all per-request state lives on the stack of {@link #format}/{@link #unformat}/{@link #push};
 * the only shared state is lazily filled, benignly racy tables (region views, supports, split plans), and one
 * reusable write batch per thread.
 */
public final class StandardCacheFormatter implements CacheFormatter, AutoCloseable {
    /**
     * Default of the smallest average message for which both sides move a part straight from / into their pools
     * (below it, one side stages the part and it travels in that side's larger runs).
     */
    public static final long DEFAULT_MIN_BOTH_DIRECT_BYTES = 256 * 1024;

    /**
     * Default of the smallest average write entry for which a push part goes straight from the pool; below it the
     * part is staged into the destination's order when that needs fewer entries.
     */
    public static final long DEFAULT_MIN_DIRECT_ENTRY_BYTES = 64 * 1024;

    /**
     * Largest pull message that joins consecutive whole blocks ({@link PartPlan.Builder#mergeBlocks}): both sides
     * direct, blocks adjacent in both pools. Part of the wire agreement (both ranks plan with it), so not a setting.
     * 4 MiB: a 1 MiB request of 16 KiB blocks is one message instead of 64; a large request still travels in
     * several messages, so the sender's sends and the receiver's posted receives overlap.
     */
    public static final long MERGED_MESSAGE_BYTES = 4L << 20;

    /**
     * Smallest average message for which a part of a layer range (a layer-wise pull: one global layer per call)
     * travels direct on either side; below it both sides stage and the part is one message. In a block pool one
     * layer of a part is one piece per block (llama3-8b: 64 KiB at 16 tokens a block), so a direct layer-wise pull
     * costs a message per block and layer; staged, it costs one per peer and layer plus a gather and a scatter.
     * Part of the wire agreement (both ranks plan with it), so not a setting.
     */
    public static final long LAYER_RANGE_MIN_DIRECT_BYTES = 1L << 20;

    /**
     * Ring places of a staged receive that scatters on a helper ({@link ScatterPipeline}): the receive of message
     * {@code n} reuses the place of message {@code n - 4} once it is scattered. Four places of a 2 MiB row (the
     * llama3-8b TP2 → TP1 row at 32 tokens per block) are 8 MiB per peer: the staged rows stay in the last-level
     * cache until the helper reads them, and the receive rarely waits for a place.
     */
    static final int RECEIVE_RING_SLOTS = 4;

    private final KvCacheView cache;
    private final TransferBufferPool buffers;
    private final PoolGeometry geometry;
    private final long minBothDirectBytes;
    private final boolean pipelinedScatter;
    /** Whether staged messages reuse a few places of the staging buffer (a ring) instead of their stream offsets. */
    private final boolean stagingRing;
    /**
     * Diagnostic switch for measuring the fused checksums against the session's separate pass (the README's table):
     * {@code -Dkvtransfer.standard.fusedChecksums=false}. On by default; not a setting to tune.
     */
    private static final boolean fuseChecksums =
            !"false".equals(System.getProperty("kvtransfer.standard.fusedChecksums"));
    /** Cores a receive may fill with its receiving threads and their scatter helpers (two threads per staged part). */
    private final int helperCores;
    /** Region views by index, fetched once: the hot loops then allocate nothing. */
    private final PoolRegions regions;
    /** Where the pool lives: a transport that does not accept it ({@link TransferSession#transportAccepts}) never sees it. */
    private final MemoryKind poolKind;
    private final SupportRules support = new SupportRules();
    private final SplitPlans plans = new SplitPlans(support);
    private final PushWriter pushWriter;
    /** Helper threads of pipelined staged receives: bounded, named, this formatter's own. */
    private final ScatterHelpers scatterHelpers;

    /**
     * A formatter over one rank's KV pool.
     *
     * @param cache   the rank's blocks
     * @param buffers the rank's staging pool (used by the session that core builds over it)
     */
    public StandardCacheFormatter(KvCacheView cache, TransferBufferPool buffers) {
        this(cache, buffers, DEFAULT_MIN_BOTH_DIRECT_BYTES, true, DEFAULT_MIN_DIRECT_ENTRY_BYTES,
                WritePlan.DEFAULT_STAGING_CHUNK, true, Runtime.getRuntime().availableProcessors());
    }

    /** Pull thresholds as given, push defaults. */
    StandardCacheFormatter(KvCacheView cache, TransferBufferPool buffers, long minBothDirectBytes,
                           boolean pipelinedScatter) {
        this(cache, buffers, minBothDirectBytes, pipelinedScatter, DEFAULT_MIN_DIRECT_ENTRY_BYTES,
                WritePlan.DEFAULT_STAGING_CHUNK);
    }

    /** Pull thresholds and the staging ring as given, push defaults (tests and benchmarks compare both). */
    StandardCacheFormatter(KvCacheView cache, TransferBufferPool buffers, long minBothDirectBytes,
                           boolean pipelinedScatter, boolean stagingRing) {
        this(cache, buffers, minBothDirectBytes, pipelinedScatter, DEFAULT_MIN_DIRECT_ENTRY_BYTES,
                WritePlan.DEFAULT_STAGING_CHUNK, stagingRing);
    }

    StandardCacheFormatter(KvCacheView cache, TransferBufferPool buffers, long minBothDirectBytes,
                           boolean pipelinedScatter, long minDirectEntryBytes, long stagingChunk) {
        this(cache, buffers, minBothDirectBytes, pipelinedScatter, minDirectEntryBytes, stagingChunk, true);
    }

    StandardCacheFormatter(KvCacheView cache, TransferBufferPool buffers, long minBothDirectBytes,
                           boolean pipelinedScatter, long minDirectEntryBytes, long stagingChunk,
                           boolean stagingRing) {
        this(cache, buffers, minBothDirectBytes, pipelinedScatter, minDirectEntryBytes, stagingChunk, stagingRing,
                Integer.MAX_VALUE);
    }

    /**
     * A formatter with another both-direct threshold (both sides of a transfer must use the same value: they decide
     * independently how parts travel) and with or without the helper-thread scatter of staged receives ({@link
     * ScatterPipeline}), and other push policies (smallest average direct entry, largest staging chunk; the sender
     * alone decides those), with or without the staging ring (staged messages of a pull reuse a few places of the
     * staging buffer: {@link #RECEIVE_RING_SLOTS} on a receiver that scatters on a helper, one on a sender and on an
     * inline receiver; a device pool's receiver always uses the stream's own offsets, its copies being asynchronous),
     * and the cores the helper-thread scatter may count on: with {@code pipelinedScatter}, a receive scatters on
     * helpers only when its staged parts and their helpers fit ({@code 2 × staged parts <= helperCores}; the
     * public constructor counts {@link Runtime#availableProcessors()}, the others {@code Integer.MAX_VALUE}: always).
     * Package-private so tests and benchmarks can force either plan.
     */
    StandardCacheFormatter(KvCacheView cache, TransferBufferPool buffers, long minBothDirectBytes,
                           boolean pipelinedScatter, long minDirectEntryBytes, long stagingChunk,
                           boolean stagingRing, int helperCores) {
        this(cache, buffers, minBothDirectBytes, pipelinedScatter, minDirectEntryBytes, stagingChunk, stagingRing,
                helperCores, ScatterHelpers.defaultThreads());
    }

    /** As above, with at most {@code helperThreads} scatter helpers at once (tests show the bound). */
    StandardCacheFormatter(KvCacheView cache, TransferBufferPool buffers, long minBothDirectBytes,
                           boolean pipelinedScatter, long minDirectEntryBytes, long stagingChunk,
                           boolean stagingRing, int helperCores, int helperThreads) {
        this.cache = Objects.requireNonNull(cache, "cache");
        this.buffers = Objects.requireNonNull(buffers, "buffers");
        if (minBothDirectBytes < 0) {
            throw new IllegalArgumentException("minBothDirectBytes = " + minBothDirectBytes + ": must be >= 0");
        }
        if (stagingChunk < 1) {
            throw new IllegalArgumentException("stagingChunk = " + stagingChunk + ": must be at least 1");
        }
        this.minBothDirectBytes = minBothDirectBytes;
        this.pipelinedScatter = pipelinedScatter;
        this.stagingRing = stagingRing;
        this.helperCores = helperCores;
        this.geometry = cache.geometry();
        this.regions = new PoolRegions(cache);
        this.poolKind = regions.kind();
        this.pushWriter = new PushWriter(geometry, regions, poolKind, minDirectEntryBytes, stagingChunk);
        this.scatterHelpers = new ScatterHelpers(helperThreads);
    }

    /** @return the staging pool this formatter was created with */
    public TransferBufferPool bufferPool() {
        return buffers;
    }

    @Override
    public Set<FormatterCapability> capabilities() {
        // Recurrent states move only with whole requests: a layer range or a push would leave them behind.
        return cache.recurrentState() != null ? NO_CAPABILITIES : CAPABILITIES;
    }

    /** Asked once a request (one-copy pull checks PUSH): made once, not per call. */
    private static final Set<FormatterCapability> CAPABILITIES = java.util.Collections.unmodifiableSet(
            EnumSet.of(FormatterCapability.LAYER_RANGES, FormatterCapability.PUSH));
    private static final Set<FormatterCapability> NO_CAPABILITIES = java.util.Collections.unmodifiableSet(
            EnumSet.noneOf(FormatterCapability.class));

    @Override
    public void format(TransferSession session) {
        Objects.requireNonNull(session, "session");
        RecurrentStates.requireView(session, cache.recurrentState());
        send(session, 0, Integer.MAX_VALUE);
        RecurrentStates.send(session, cache.recurrentState());
    }

    @Override
    public void format(TransferSession session, int firstLayer, int layers) {
        Objects.requireNonNull(session, "session");
        wholeRequestsOnly(session, "format of a layer range");
        CacheFormatter.checkLayerRange(session, firstLayer, layers);
        send(session, firstLayer, firstLayer + layers);
    }

    @Override
    public void unformat(TransferSession session) {
        Objects.requireNonNull(session, "session");
        RecurrentStates.requireView(session, cache.recurrentState());
        receive(session, 0, Integer.MAX_VALUE);
        RecurrentStates.receive(session, cache.recurrentState());
    }

    @Override
    public void unformat(TransferSession session, int firstLayer, int layers) {
        Objects.requireNonNull(session, "session");
        wholeRequestsOnly(session, "unformat of a layer range");
        CacheFormatter.checkLayerRange(session, firstLayer, layers);
        receive(session, firstLayer, firstLayer + layers);
    }

    /** A hybrid model's recurrent states move only with whole two-sided requests. */
    private static void wholeRequestsOnly(TransferSession session, String what) {
        if (session.selfState().cacheState().recurrentState() != null) {
            throw new UnsupportedOperationException("request " + session.requestId() + ": " + what + " is not"
                    + " supported for a hybrid model (its recurrent states move only with whole requests)");
        }
    }

    /** The parts of this rank's share restricted to global layers {@code [g0, g1)}. */
    private SplitPlan clipped(SplitPlan plan, CacheState self, int selfIndex, int g0, int g1) {
        return plan.clip(self.firstLayer(self.ppRank(selfIndex)), g0, g1);
    }

    /** Sends this rank's parts of global layers {@code [g0, g1)}. */
    private void send(TransferSession session, int g0, int g1) {
        CacheState self = session.selfState().cacheState();
        int selfIndex = session.selfState().selfIndex();
        CacheState peer = session.peerCacheState();
        TargetRanks t = session.targets();
        if (t.isEmpty() || !PeerSelection.needSendCache(self, selfIndex, peer, t)) {
            return; // a zero-layer stage, or another rank of our duplicate-head group sends
        }
        int[] ids = session.blockIds();
        SplitPlan whole = plans.plan(session, self, selfIndex, peer, t, true);
        checkLayout(session, self, selfIndex, ids, whole);
        boolean layerRange = layerRange(self, g0, g1);
        if (self.windowGroups() == null) {
            sendPlan(session, clipped(whole, self, selfIndex, g0, g1), peer, t, ids, layerRange);
            return;
        }
        for (SplitPlan segment : windowSegments(session, whole, self, selfIndex, g0, g1)) {
            sendPlan(session, segment, peer, t, ids, layerRange);
        }
    }

    /**
     * A windowed (VSWA) share in layer runs of one window each, in ascending global layer order: each run's parts
     * keep only the blocks inside the run's window (after the reused prefix). Both ranks cut the layers both hold at
     * the same window changes, so they agree on the runs, their order and every part.
     */
    private static List<SplitPlan> windowSegments(TransferSession session, SplitPlan whole, CacheState self,
                                                  int selfIndex, int g0, int g1) {
        boolean all = g0 == 0 && g1 == Integer.MAX_VALUE;
        List<SplitPlan> kept = all ? whole.windowRuns : null;
        if (kept != null) {
            return kept; // the remembered plan's runs: same states, blocks and reused prefix
        }
        WindowGroups w = self.windowGroups();
        int first = self.firstLayer(self.ppRank(selfIndex));
        int a = Math.max(g0, first);
        int end = Math.min(g1, first + self.layerCount(self.ppRank(selfIndex)));
        int total = session.totalBlocks();
        int s0 = BlockDistribution.firstGlobalBlock(total, self.contextParallelism(), self.cpRank(selfIndex));
        List<SplitPlan> out = new ArrayList<>();
        while (a < end) {
            int b = w.runEnd(a, end);
            out.add(whole.clip(first, a, b).fromBlock(s0,
                    w.firstMovedBlock(a, self.tokensPerBlock(), total, session.reusedBlocks())));
            a = b;
        }
        List<SplitPlan> runs = List.copyOf(out);
        if (all) {
            whole.windowRuns = runs;
        }
        return runs;
    }

    /** Sends the parts of one plan (a whole share, a layer range, or one window's run of layers). */
    private void sendPlan(TransferSession session, SplitPlan plan, CacheState peer, TargetRanks t, int[] ids,
                          boolean layerRange) {
        PartPlan[] plans = new PartPlan[t.size()];
        int[] active = partPlans(session, plan, peer, ids, true, layerRange, plans);
        // A pool the transport cannot take (device memory without DEVICE_MEMORY) is staged even where the plan is
        // direct: the messages stay the plan's (the peer cannot know our memory), each copied through staging.
        boolean poolOk = session.transportAccepts(poolKind);
        // Peers that get the same staged bytes (duplicated heads on their side) share one gather.
        // One peer (the common case): one group of itself, without the grouping's arrays.
        int[][] groups = active.length == 1 ? new int[][] {active} : sharedStaging(active, plans, poolOk);
        int[] reps;
        if (groups.length == active.length) {
            reps = active; // every peer its own group, in order: the representatives are the active peers
        } else {
            reps = new int[groups.length];
            for (int i = 0; i < reps.length; i++) {
                reps[i] = groups[i][0];
            }
        }
        MemoryBuffer[] staging = PartStaging.buffers(session, reps, plans, t.size(), poolOk);
        int[][] membersOf = new int[t.size()][];
        for (int[] g : groups) {
            membersOf[g[0]] = g;
        }
        BufferManager bm = session.bufferManager();
        session.forEachPeer(reps, rep -> {
            PartPlan pp = plans[rep];
            int[] members = membersOf[rep];
            long start = System.nanoTime();
            PartPlan.Cursor c = pp.cursor();
            if (pp.selfDirect() && poolOk) {
                // Straight from the pool: each message is one contiguous run of a region (zero copy).
                while (c.next()) {
                    session.send(rep, regions.region(c.region()), c.offset(), c.length());
                }
            } else {
                // Gather and send message by message: the next message's copy overlaps the previous transfer.
                MemoryBuffer buf = staging[rep];
                ChunkCrc sum = fusedChecksums(session) ? new ChunkCrc() : null;
                while (c.next()) {
                    // A send returns once its range may be reused: with the staging ring every message is gathered
                    // into the same place, so the transport reads bytes the gather has just left in the cache.
                    long at = stagingRing ? 0 : c.streamOffset();
                    c.copy(bm, regions, buf, at, false, sum == null ? null : sum.begin(buf, at, c.length()));
                    bm.synchronize(); // a device manager's copies may be asynchronous until here
                    int crc = sum == null ? 0 : sum.finish();
                    for (int p : members) {
                        if (sum != null) {
                            session.send(p, buf, at, c.length(), crc);
                        } else {
                            session.send(p, buf, at, c.length());
                        }
                    }
                }
            }
            long end = System.nanoTime();
            for (int p : members) {
                session.recordMeasure(p, start, end, pp.bytes());
            }
        });
    }

    /**
     * Groups the active peers: a staged part whose stream equals an earlier peer's ({@link PartPlan#sameStream})
     * joins that peer's group; every other peer is its own group. O(peers²) plan comparisons, no per-block object.
     */
    private static int[][] sharedStaging(int[] active, PartPlan[] plans, boolean poolOk) {
        int[] rep = new int[active.length];
        int groups = 0;
        for (int i = 0; i < active.length; i++) {
            rep[i] = i;
            PartPlan pp = plans[active[i]];
            if (staged(pp, poolOk)) {
                for (int j = 0; j < i; j++) {
                    if (rep[j] == j && staged(plans[active[j]], poolOk) && plans[active[j]].sameStream(pp)) {
                        rep[i] = j;
                        break;
                    }
                }
            }
            if (rep[i] == i) {
                groups++;
            }
        }
        int[][] out = new int[groups][];
        int k = 0;
        for (int i = 0; i < active.length; i++) {
            if (rep[i] != i) {
                continue;
            }
            int n = 0;
            for (int j = i; j < active.length; j++) {
                n += rep[j] == i ? 1 : 0;
            }
            int[] g = new int[n];
            int m = 0;
            for (int j = i; j < active.length; j++) {
                if (rep[j] == i) {
                    g[m++] = active[j];
                }
            }
            out[k++] = g;
        }
        return out;
    }

    /** Receives this rank's parts of global layers {@code [g0, g1)}. */
    private void receive(TransferSession session, int g0, int g1) {
        CacheState self = session.selfState().cacheState();
        int selfIndex = session.selfState().selfIndex();
        CacheState peer = session.peerCacheState();
        TargetRanks t = session.targets();
        if (t.isEmpty()) {
            return; // a zero-layer stage receives nothing
        }
        int[] ids = session.blockIds();
        SplitPlan whole = plans.plan(session, self, selfIndex, peer, t, false);
        checkLayout(session, self, selfIndex, ids, whole);
        boolean layerRange = layerRange(self, g0, g1);
        if (self.windowGroups() == null) {
            receivePlan(session, clipped(whole, self, selfIndex, g0, g1), peer, t, ids, layerRange);
            return;
        }
        for (SplitPlan segment : windowSegments(session, whole, self, selfIndex, g0, g1)) {
            receivePlan(session, segment, peer, t, ids, layerRange);
        }
    }

    /** Receives the parts of one plan (a whole share, a layer range, or one window's run of layers). */
    private void receivePlan(TransferSession session, SplitPlan plan, CacheState peer, TargetRanks t, int[] ids,
                             boolean layerRange) {
        PartPlan[] plans = new PartPlan[t.size()];
        int[] active = partPlans(session, plan, peer, ids, false, layerRange, plans);
        boolean poolOk = session.transportAccepts(poolKind);
        MemoryBuffer[] staging = PartStaging.buffers(session, active, plans, t.size(), poolOk);
        BufferManager bm = session.bufferManager();
        boolean ring = stagingRing && poolKind == MemoryKind.HOST;
        // Helpers only where the receiving threads and their helpers fit in the cores: on loopback (and any
        // transport whose copies run on the CPU) a receiving thread is busy copying too, and more copying threads
        // than cores only take turns and evict each other's staged bytes (see the README's numbers).
        int stagedParts = 0;
        for (int p : active) {
            stagedParts += staged(plans[p], poolOk) ? 1 : 0;
        }
        boolean helpers = pipelinedScatter && 2L * stagedParts <= helperCores;
        session.forEachPeer(active, p -> {
            PartPlan pp = plans[p];
            long start = System.nanoTime();
            PartPlan.Cursor c = pp.cursor();
            if (pp.selfDirect() && poolOk) {
                // Straight into the pool (zero copy).
                while (c.next()) {
                    session.recv(p, regions.region(c.region()), c.offset(), c.length());
                }
            } else if (helpers && pp.messages() > 1 && pipelined(session, p, pp, bm, staging[p], ring)) {
                // Received here and scattered on a helper: the next receive was posted while the last was scattered.
            } else {
                // Receive and scatter message by message (a host pool: each into the same place, still cached).
                MemoryBuffer buf = staging[p];
                ChunkCrc sum = fusedChecksums(session) ? new ChunkCrc() : null;
                while (c.next()) {
                    long at = ring ? 0 : c.streamOffset();
                    if (sum != null && session.recvChecksumLater(p, buf, at, c.length())) {
                        // The part checksum in the scatter's pass: each chunk summed right after its copy.
                        c.copy(bm, regions, buf, at, true, sum.begin(buf, at, c.length()));
                        session.receivedChecksum(p, sum.finish());
                        continue;
                    } else if (sum == null) {
                        session.recv(p, buf, at, c.length());
                    }
                    c.copy(bm, regions, buf, at, true);
                }
                // Copies issued on this (possibly pooled) thread must be complete before the blocks are handed over.
                bm.synchronize();
            }
            session.recordMeasure(p, start, System.nanoTime(), pp.bytes());
        });
    }

    /**
     * Whether this rank's gathers and scatters compute the part checksums in their own pass ({@link ChunkCrc}): when
     * the session keeps them and the copies are synchronous (a host pool: a device manager's copies may still be in
     * flight until {@code synchronize()}, so a device pool's staged messages are summed by the session after).
     */
    private boolean fusedChecksums(TransferSession session) {
        return fuseChecksums && poolKind == MemoryKind.HOST && session.partChecksums();
    }

    /**
     * Receives a staged part here and scatters it on a helper, so the next receive is posted while the last one is
     * scattered.
     *
     * @return false, before receiving anything, when no helper is free (the caller then scatters inline)
     */
    private boolean pipelined(TransferSession session, int p, PartPlan pp, BufferManager bm, MemoryBuffer staging,
                              boolean ring) {
        long largest = ring ? largestMessage(pp) : 0;
        int slots = ring ? (int) Math.min(RECEIVE_RING_SLOTS, staging.size() / largest) : 0;
        if (slots < 2) {
            slots = 0; // uneven messages: a ring of one place would stop the pipeline
        }
        return ScatterPipeline.receive(session, p, pp, bm, regions, staging, slots, largest, scatterHelpers);
    }

    /**
     * Ends this formatter's scatter helpers ({@link ScatterHelpers}): scatters running now finish, later staged
     * receives scatter on their own thread. Idempotent; the formatter stays usable. Without it the helpers still
     * end 100 ms after their last scatter, so a formatter nobody closes holds no thread while idle.
     */
    @Override
    public void close() {
        scatterHelpers.close();
    }

    /** @return this formatter's scatter helper pool (tests) */
    ScatterHelpers scatterHelpers() {
        return scatterHelpers;
    }

    @Override
    public void push(TransferSession session, int firstLayer, int layers) {
        Objects.requireNonNull(session, "session");
        wholeRequestsOnly(session, "push");
        PushWrites.requirePushSession(session);
        CacheFormatter.checkLayerRange(session, firstLayer, layers);
        CacheState self = session.selfState().cacheState();
        int selfIndex = session.selfState().selfIndex();
        CacheState peer = session.peerCacheState();
        TargetRanks t = session.targets();
        if (t.isEmpty() || !PeerSelection.needSendCache(self, selfIndex, peer, t)) {
            return; // a zero-layer stage, or another rank of our duplicate-head group writes
        }
        int[] ids = session.blockIds();
        SplitPlan whole = plans.plan(session, self, selfIndex, peer, t, true);
        checkLayout(session, self, selfIndex, ids, whole);
        if (self.windowGroups() == null) {
            pushWriter.push(session, peer, t, ids, clipped(whole, self, selfIndex, firstLayer, firstLayer + layers));
            return;
        }
        for (SplitPlan segment : windowSegments(session, whole, self, selfIndex, firstLayer, firstLayer + layers)) {
            pushWriter.push(session, peer, t, ids, segment);
        }
    }

    /** @return whether {@code [g0, g1)} is less than the model's layers: a layer-wise call (both ranks see the same) */
    private static boolean layerRange(CacheState self, int g0, int g1) {
        return g1 - g0 < self.numLayers();
    }

    /**
     * Builds the message plan of every non-empty part; returns their peer positions. A layer range plans with
     * {@link #LAYER_RANGE_MIN_DIRECT_BYTES}: small pieces are staged into one message per part.
     */
    private int[] partPlans(TransferSession session, SplitPlan plan, CacheState peer, int[] ids, boolean sender,
                            boolean layerRange, PartPlan[] out) {
        long minBoth = layerRange ? Math.max(minBothDirectBytes, LAYER_RANGE_MIN_DIRECT_BYTES) : minBothDirectBytes;
        long minOne = layerRange ? LAYER_RANGE_MIN_DIRECT_BYTES : 0;
        int n = 0;
        List<SplitPlan.Part> parts = plan.parts;
        for (int i = 0; i < parts.size(); i++) { // indexed loops: no iterator per request
            SplitPlan.Part part = parts.get(i);
            if (part.blockCount > 0 && part.layerCount > 0) {
                n++;
            }
        }
        int[] active = new int[n];
        int k = 0;
        for (int i = 0; i < parts.size(); i++) {
            SplitPlan.Part part = parts.get(i);
            if (part.blockCount == 0 || part.layerCount == 0) {
                continue; // the peer's CP range holds none of our blocks after the reused prefix: no message at all
            }
            int[] peerIds = session.peerBlockIds(part.peer);
            // The peer's real blocks per region (its ready signal / request info): both ranks then know where
            // consecutive blocks are adjacent in both pools, and join them into one message alike.
            PoolGeometry peerGeometry = PoolGeometry.of(part.peerLayout, peer.poolLayout(),
                    session.peerBlocksPerRegion(part.peer));
            try {
                PartPlan.Builder b = PartPlan.builder().shape(part.blockCount, part.layerCount, part.headCount)
                        .selfIsSender(sender).policy(minBoth, minOne, layerRange).mergeBlocks(MERGED_MESSAGE_BYTES);
                if (sender) {
                    b.sender(geometry, ids, part.firstBlock, part.firstLayer, part.firstHead)
                            .receiver(peerGeometry, peerIds, part.peerFirstBlock, part.peerFirstLayer,
                                    part.peerFirstHead);
                } else {
                    b.sender(peerGeometry, peerIds, part.peerFirstBlock, part.peerFirstLayer, part.peerFirstHead)
                            .receiver(geometry, ids, part.firstBlock, part.firstLayer, part.firstHead);
                }
                out[part.peer] = b.build();
            } catch (IllegalArgumentException e) {
                throw new KvTransferException(ErrorCode.INTERNAL, session.requestId(), "cannot plan the part of peer "
                        + "rank " + session.targets().peerRanks().get(part.peer) + " (" + part + "): "
                        + e.getMessage(), e);
            }
            active[k++] = part.peer;
        }
        return active;
    }

    private void checkLayout(TransferSession session, CacheState self, int selfIndex, int[] ids, SplitPlan plan) {
        BlockLayout expected = BlockLayout.of(self, selfIndex);
        BlockLayout actual = cache.layout();
        if (!expected.equals(actual)) {
            throw new KvTransferException(ErrorCode.INTERNAL, session.requestId(), "the cache's block layout "
                    + actual + " is not rank " + selfIndex + "'s layout " + expected + " of " + self, null);
        }
        if (!cache.poolLayout().equals(self.poolLayout())) {
            throw new KvTransferException(ErrorCode.INTERNAL, session.requestId(), "the cache's pool layout "
                    + cache.poolLayout() + " is not the " + self.poolLayout() + " rank " + selfIndex
                    + "'s state declares (the peer plans its messages from the state)", null);
        }
        if (geometry.layerKind() && geometry.blocksPerRegion() < cache.blockCount()) {
            throw new KvTransferException(ErrorCode.INTERNAL, session.requestId(), "the cache's " + geometry
                    + " splits its " + cache.blockCount() + " blocks over several regions per plane; a layer pool"
                    + " must hold every block of a (layer, kv, segment) in one region", null);
        }
        if (ids.length != plan.localBlocks) {
            throw new KvTransferException(ErrorCode.INTERNAL, session.requestId(), "rank " + selfIndex + " has "
                    + ids.length + " blocks but holds " + plan.localBlocks + " of the request's "
                    + session.totalBlocks() + " under CP " + self.contextParallelism(), null);
        }
    }

    /** The largest message of a part (a ring place must hold it); one walk over the messages, no allocation. */
    static long largestMessage(PartPlan pp) {
        long max = 0;
        PartPlan.Cursor c = pp.cursor();
        while (c.next()) {
            max = Math.max(max, c.length());
        }
        return max;
    }

    /**
     * Checks the fields both sides must share and the CP combination ({@link SupportRules}). Every mismatch is
     * listed with the field and both values.
     */
    @Override
    public Support inquireSupport(CacheState self, CacheState peer) {
        Objects.requireNonNull(self, "self");
        Objects.requireNonNull(peer, "peer");
        return support.inquire(self, peer);
    }

    @Override
    public List<Integer> counterparts(CacheState self, int selfIndex, CacheState peer) {
        return RankMapping.targetRanks(peer, self, selfIndex).peerRanks();
    }

    /**
     * All counterparts, unless the context side duplicates our heads over several TP ranks
     * ({@code peerDupHeadFactor > 1}); then of each duplicate group the one whose TP index matches our DP rank
     * modulo the factor, for every CP and PP slot (reference §3, extended to CP).
     */
    @Override
    public List<Integer> pickRecvConnections(CacheState self, int selfIndex, CacheState peer) {
        Objects.requireNonNull(self, "self");
        Objects.requireNonNull(peer, "peer");
        TargetRanks t = RankMapping.targetRanks(peer, self, selfIndex);
        return PeerSelection.pick(self, t);
    }

    @Override
    public boolean needSendCache(CacheState self, int selfIndex, CacheState peer) {
        Objects.requireNonNull(self, "self");
        Objects.requireNonNull(peer, "peer");
        TargetRanks t = RankMapping.targetRanks(peer, self, selfIndex);
        // Every rank holding recurrent states sends them, even where another rank of its duplicate-head group sends
        // the KV: the states are split over all TP ranks, never duplicated.
        return PeerSelection.needSendCache(self, selfIndex, peer, t)
                || !t.isEmpty() && peer.recurrentState() != null && RecurrentStateShape.holdsState(self, selfIndex);
    }

}
