package dev.kvtransfer.formatter.standard;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.KvTransferException;
import dev.kvtransfer.api.cache.KvCacheView;
import dev.kvtransfer.api.format.CacheFormatter;
import dev.kvtransfer.api.format.FormatterCapability;
import dev.kvtransfer.api.format.PeerPool;
import dev.kvtransfer.api.format.Support;
import dev.kvtransfer.api.format.TransferBufferPool;
import dev.kvtransfer.api.format.TransferSession;
import dev.kvtransfer.api.layout.BlockLayout;
import dev.kvtransfer.api.layout.BlockDistribution;
import dev.kvtransfer.api.layout.PartPlan;
import dev.kvtransfer.api.layout.PeerWriteSink;
import dev.kvtransfer.api.layout.PoolGeometry;
import dev.kvtransfer.api.layout.PoolLayout;
import dev.kvtransfer.api.layout.RankMapping;
import dev.kvtransfer.api.layout.TargetRanks;
import dev.kvtransfer.api.layout.WritePlan;
import dev.kvtransfer.api.memory.BufferManager;
import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.memory.MemoryKind;
import dev.kvtransfer.api.model.AttentionType;
import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.api.transport.WriteBatch;

import java.util.ArrayList;
import java.util.EnumSet;
import java.util.List;
import java.util.Objects;
import java.util.Set;
import java.util.concurrent.atomic.AtomicReferenceArray;
import java.util.function.IntFunction;

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
 * formatter-standard/README.md for the formulas and the policy.
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
 * <p>One-sided push ({@link FormatterCapability#PUSH}): {@link #push} writes this rank's parts of a layer range
 * straight into the peers' pools ({@link TransferSession#peerPool}) with a {@link WritePlan} per part: pool to pool
 * where runs are contiguous in both pools (coalesced runs of blocks; with a head ratio each rank's heads at their
 * offset in the destination rows), staged into the destination's order first where that needs fewer, larger
 * entries (see the README for the rule and the numbers), through the grants ({@link PeerWriteSink}). The designated
 * rank of a duplicate-head group writes; reused blocks are not written.
 *
 * <p>Thread-safe: all per-request state lives on the stack of {@link #format}/{@link #unformat}/{@link #push};
 * the only shared state is a lazily filled, benignly racy table of region views, and one reusable write batch per
 * thread.
 */
public final class StandardCacheFormatter implements CacheFormatter {
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
     * Ring places of a staged receive that scatters on a helper ({@link ScatterPipeline}): the receive of message
     * {@code n} reuses the place of message {@code n - 4} once it is scattered. Four places of a 2 MiB row (the
     * llama3-8b TP2 → TP1 row at 32 tokens per block) are 8 MiB per peer: the staged rows stay in the last-level
     * cache until the helper reads them, and the receive rarely waits for a place.
     */
    static final int RECEIVE_RING_SLOTS = 4;

    /** One write batch per thread, cleared and refilled by every push (no batch per request). */
    private static final ThreadLocal<WriteBatch> BATCHES = ThreadLocal.withInitial(() -> new WriteBatch(1024));

    private final KvCacheView cache;
    private final TransferBufferPool buffers;
    private final PoolGeometry geometry;
    private final long minBothDirectBytes;
    private final boolean pipelinedScatter;
    /** Whether staged messages reuse a few places of the staging buffer (a ring) instead of their stream offsets. */
    private final boolean stagingRing;
    /** Cores a receive may fill with its receiving threads and their scatter helpers (two threads per staged part). */
    private final int helperCores;
    private final long minDirectEntryBytes;
    private final long stagingChunk;
    /** Region views by index, fetched once: the hot loops then allocate nothing. */
    private final AtomicReferenceArray<MemoryBuffer> regionViews;
    private final IntFunction<MemoryBuffer> regions = this::region;
    /** Where the pool lives: a transport that does not accept it ({@link TransferSession#transportAccepts}) never sees it. */
    private final MemoryKind poolKind;

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
        this.minDirectEntryBytes = minDirectEntryBytes;
        this.stagingChunk = stagingChunk;
        this.geometry = cache.geometry();
        this.regionViews = new AtomicReferenceArray<>(cache.regionCount());
        this.poolKind = cache.regionCount() > 0 ? cache.region(0).kind() : MemoryKind.HOST;
    }

    /** @return the staging pool this formatter was created with */
    public TransferBufferPool bufferPool() {
        return buffers;
    }

    @Override
    public Set<FormatterCapability> capabilities() {
        return EnumSet.of(FormatterCapability.LAYER_RANGES, FormatterCapability.PUSH);
    }

    @Override
    public void format(TransferSession session) {
        Objects.requireNonNull(session, "session");
        send(session, 0, Integer.MAX_VALUE);
    }

    @Override
    public void format(TransferSession session, int firstLayer, int layers) {
        Objects.requireNonNull(session, "session");
        CacheFormatter.checkLayerRange(session, firstLayer, layers);
        send(session, firstLayer, firstLayer + layers);
    }

    @Override
    public void unformat(TransferSession session) {
        Objects.requireNonNull(session, "session");
        receive(session, 0, Integer.MAX_VALUE);
    }

    @Override
    public void unformat(TransferSession session, int firstLayer, int layers) {
        Objects.requireNonNull(session, "session");
        CacheFormatter.checkLayerRange(session, firstLayer, layers);
        receive(session, firstLayer, firstLayer + layers);
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
        if (t.isEmpty() || !needSendCache(self, selfIndex, peer, t)) {
            return; // a zero-layer stage, or another rank of our duplicate-head group sends
        }
        int[] ids = session.blockIds();
        SplitPlan whole = plan(session, self, selfIndex, peer, t, true);
        checkLayout(session, self, selfIndex, ids, whole);
        SplitPlan plan = clipped(whole, self, selfIndex, g0, g1);
        PartPlan[] plans = new PartPlan[t.size()];
        int[] active = partPlans(session, plan, peer, ids, true, plans);
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
        MemoryBuffer[] staging = staging(session, reps, plans, t.size(), poolOk);
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
                    session.send(rep, region(c.region()), c.offset(), c.length());
                }
            } else {
                // Gather and send message by message: the next message's copy overlaps the previous transfer.
                MemoryBuffer buf = staging[rep];
                while (c.next()) {
                    // A send returns once its range may be reused: with the staging ring every message is gathered
                    // into the same place, so the transport reads bytes the gather has just left in the cache.
                    long at = stagingRing ? 0 : c.streamOffset();
                    c.copy(bm, regions, buf, at, false);
                    bm.synchronize(); // a device manager's copies may be asynchronous until here
                    for (int p : members) {
                        session.send(p, buf, at, c.length());
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
        SplitPlan whole = plan(session, self, selfIndex, peer, t, false);
        checkLayout(session, self, selfIndex, ids, whole);
        SplitPlan plan = clipped(whole, self, selfIndex, g0, g1);
        PartPlan[] plans = new PartPlan[t.size()];
        int[] active = partPlans(session, plan, peer, ids, false, plans);
        boolean poolOk = session.transportAccepts(poolKind);
        MemoryBuffer[] staging = staging(session, active, plans, t.size(), poolOk);
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
                    session.recv(p, region(c.region()), c.offset(), c.length());
                }
            } else if (helpers && pp.messages() > 1) {
                // Receive here, scatter on a helper: the next receive is posted while the last one is scattered.
                long largest = ring ? largestMessage(pp) : 0;
                int slots = ring ? (int) Math.min(RECEIVE_RING_SLOTS, staging[p].size() / largest) : 0;
                if (slots < 2) {
                    slots = 0; // uneven messages: a ring of one place would stop the pipeline
                }
                ScatterPipeline.receive(session, p, pp, bm, regions, staging[p], slots, largest);
            } else {
                // Receive and scatter message by message (a host pool: each into the same place, still cached).
                MemoryBuffer buf = staging[p];
                while (c.next()) {
                    long at = ring ? 0 : c.streamOffset();
                    session.recv(p, buf, at, c.length());
                    c.copy(bm, regions, buf, at, true);
                }
                // Copies issued on this (possibly pooled) thread must be complete before the blocks are handed over.
                bm.synchronize();
            }
            session.recordMeasure(p, start, System.nanoTime(), pp.bytes());
        });
    }

    @Override
    public void push(TransferSession session, int firstLayer, int layers) {
        Objects.requireNonNull(session, "session");
        if (!session.isPush()) {
            throw new KvTransferException(ErrorCode.INTERNAL, session.requestId(), "push on a session that is not a"
                    + " push session (no peer pools)", null);
        }
        CacheFormatter.checkLayerRange(session, firstLayer, layers);
        CacheState self = session.selfState().cacheState();
        int selfIndex = session.selfState().selfIndex();
        CacheState peer = session.peerCacheState();
        TargetRanks t = session.targets();
        if (t.isEmpty() || !needSendCache(self, selfIndex, peer, t)) {
            return; // a zero-layer stage, or another rank of our duplicate-head group writes
        }
        int[] ids = session.blockIds();
        SplitPlan whole = plan(session, self, selfIndex, peer, t, true);
        checkLayout(session, self, selfIndex, ids, whole);
        SplitPlan plan = clipped(whole, self, selfIndex, firstLayer, firstLayer + layers);
        WritePlan[] plans = new WritePlan[t.size()];
        PeerPool[] pools = new PeerPool[t.size()];
        // A pool the transport cannot read (device memory without DEVICE_MEMORY) is gathered into staging first.
        boolean poolOk = session.transportAccepts(poolKind);
        int active = 0;
        int staged = 0;
        for (SplitPlan.Part part : plan.parts) {
            if (part.blockCount == 0 || part.layerCount == 0) {
                continue; // nothing of this peer's blocks after the reused prefix, or none of the range's layers
            }
            PeerPool pool = peerPool(session, peer, t, part);
            try {
                plans[part.peer] = WritePlan.builder()
                        .sender(geometry, ids, part.firstBlock, part.firstLayer, part.firstHead)
                        .receiver(pool.geometry(), pool.blockIds(), part.peerFirstBlock, part.peerFirstLayer,
                                part.peerFirstHead)
                        .shape(part.blockCount, part.layerCount, part.headCount)
                        .policy(minDirectEntryBytes, stagingChunk).sourceDirect(poolOk).build();
            } catch (IllegalArgumentException e) {
                throw new KvTransferException(ErrorCode.INTERNAL, session.requestId(), "cannot plan the writes into "
                        + "generation rank " + pool.rank() + " (" + part + "): " + e.getMessage(), e);
            }
            pools[part.peer] = pool;
            active++;
            staged += plans[part.peer].staged() ? 1 : 0;
        }
        int[] peers = new int[active];
        long[] sizes = new long[staged];
        int k = 0;
        int j = 0;
        for (int p = 0; p < plans.length; p++) {
            if (plans[p] != null) {
                peers[k++] = p;
                if (plans[p].staged()) {
                    sizes[j++] = plans[p].stagingBytes();
                }
            }
        }
        MemoryBuffer[] staging = new MemoryBuffer[t.size()];
        if (staged > 0) {
            MemoryBuffer[] got = session.stagingBuffers(sizes);
            j = 0;
            for (int p : peers) {
                if (plans[p].staged()) {
                    staging[p] = got[j++];
                }
            }
        }
        BufferManager bm = session.bufferManager();
        session.forEachPeer(peers, p -> write(session, p, plans[p], pools[p], bm, staging[p]));
    }

    /** Writes one peer's part; returns on remote completion of every entry. */
    private void write(TransferSession session, int p, WritePlan plan, PeerPool pool, BufferManager bm,
                       MemoryBuffer staging) {
        long start = System.nanoTime();
        WriteBatch batch = BATCHES.get();
        try {
            PeerWriteSink sink = new PeerWriteSink(pool, batch, PeerWriteSink.DEFAULT_MAX_ENTRIES,
                    b -> session.write(p, b));
            plan.write(bm, regions, staging, sink);
            sink.flush();
        } catch (IndexOutOfBoundsException | IllegalArgumentException e) {
            throw new KvTransferException(ErrorCode.INTERNAL, session.requestId(), "writing " + plan + " into "
                    + "generation rank " + pool.rank() + " failed: " + e.getMessage(), e);
        } finally {
            batch.clear();
        }
        session.recordMeasure(p, start, System.nanoTime(), plan.bytes());
    }

    /** The pool of the part's peer, checked against what this rank expects of it. */
    private static PeerPool peerPool(TransferSession session, CacheState peer, TargetRanks t, SplitPlan.Part part) {
        int rank = t.peerRanks().get(part.peer);
        PeerPool pool = session.peerPool(part.peer);
        if (pool == null) {
            throw new KvTransferException(ErrorCode.INTERNAL, session.requestId(), "push session without the pool of "
                    + "generation rank " + rank + " (position " + part.peer + ")", null);
        }
        int expected = BlockDistribution.count(session.totalBlocks(), peer.contextParallelism(), peer.cpRank(rank));
        if (pool.rank() != rank || pool.blockCount() != expected || !pool.blockLayout().equals(part.peerLayout)
                || !pool.state().poolLayout().equals(peer.poolLayout())) {
            throw new KvTransferException(ErrorCode.INTERNAL, session.requestId(), "the pool of generation rank "
                    + rank + " is " + pool + " with " + pool.blockLayout() + "; expected rank " + rank + ", "
                    + expected + " blocks, " + part.peerLayout + " in a " + peer.poolLayout() + " pool", null);
        }
        return pool;
    }

    /**
     * Builds the message plan of every non-empty part; returns their peer positions.
     */
    private int[] partPlans(TransferSession session, SplitPlan plan, CacheState peer, int[] ids, boolean sender,
                            PartPlan[] out) {
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
            PoolGeometry peerGeometry = PoolGeometry.of(part.peerLayout, peer.poolLayout(), 1);
            try {
                PartPlan.Builder b = PartPlan.builder().shape(part.blockCount, part.layerCount, part.headCount)
                        .selfIsSender(sender).policy(minBothDirectBytes, 0, false);
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

    // ---------------------------------------------------------------- plan caches (issue 14 item 3)
    //
    // A request's split plan depends only on (direction, own state, own index, peer state, target ranks, blocks,
    // reused blocks): states are immutable and decoded once per distinct bytes (api StateCodecCache), target ranks
    // are memoized, so the same few instances come back on every request and the plan is remembered per instance
    // (PLAN_SLOTS direct-mapped entries). A part's message plan also depends on both sides' block ids, which differ
    // from request to request in an engine: it is built per request (a cache by ids' content would hit only in a
    // benchmark that reuses its blocks, and copy the ids on every miss). Entries are
    // immutable records in plain array slots (a racing reader sees a whole entry or another one); every plan is
    // immutable and shared read-only by the peer threads already.

    private static final int PLAN_SLOTS = 16;
    private final PlanEntry[] planCache = new PlanEntry[PLAN_SLOTS];

    private record PlanEntry(boolean sender, CacheState self, int selfIndex, CacheState peer, TargetRanks t,
                             int totalBlocks, int reused, SplitPlan plan) {
    }

    private static int planSlot(boolean sender, CacheState self, int selfIndex, CacheState peer, TargetRanks t,
                                int totalBlocks, int reused) {
        int h = System.identityHashCode(self);
        h = h * 31 + System.identityHashCode(peer);
        h = h * 31 + System.identityHashCode(t);
        h = h * 31 + selfIndex;
        h = h * 31 + totalBlocks;
        h = h * 31 + reused;
        h = h * 2 + (sender ? 1 : 0);
        return (h ^ (h >>> 16)) & (PLAN_SLOTS - 1);
    }


    private SplitPlan plan(TransferSession session, CacheState self, int selfIndex, CacheState peer, TargetRanks t,
                           boolean sender) {
        int totalBlocks = session.totalBlocks();
        int reusedBlocks = session.reusedBlocks();
        int slot = planSlot(sender, self, selfIndex, peer, t, totalBlocks, reusedBlocks);
        PlanEntry e = planCache[slot];
        if (e != null && e.sender == sender && e.self == self && e.selfIndex == selfIndex && e.peer == peer
                && e.t == t && e.totalBlocks == totalBlocks && e.reused == reusedBlocks) {
            return e.plan;
        }
        SplitPlan made = makePlan(session, self, selfIndex, peer, t, sender);
        planCache[slot] = new PlanEntry(sender, self, selfIndex, peer, t, totalBlocks, reusedBlocks, made);
        return made;
    }

    private SplitPlan makePlan(TransferSession session, CacheState self, int selfIndex, CacheState peer,
                               TargetRanks t, boolean sender) {
        Support s = inquireSupport(self, peer);
        if (!s.supported()) {
            throw new KvTransferException(ErrorCode.UNSUPPORTED_LAYOUT, session.requestId(), s.reason(), null);
        }
        int reused = session.reusedBlocks();
        if (reused < 0 || reused > session.totalBlocks()) {
            throw new KvTransferException(ErrorCode.INTERNAL, session.requestId(), "reusedBlocks " + reused
                    + " outside [0, " + session.totalBlocks() + "]", null);
        }
        try {
            return sender
                    ? SplitPlan.forSender(self, selfIndex, peer, t, session.totalBlocks(), reused)
                    : SplitPlan.forReceiver(self, selfIndex, peer, t, pickRecvConnections(self, selfIndex, peer),
                    session.totalBlocks(), reused);
        } catch (RuntimeException e) {
            throw new KvTransferException(ErrorCode.INTERNAL, session.requestId(), "cannot plan the "
                    + (sender ? "split" : "concat") + " of rank " + selfIndex + " of " + self + " against " + peer
                    + ": " + e.getMessage(), e);
        }
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

    /** One staging buffer per part this rank stages (a whole part), from one call; null where direct. */
    private static MemoryBuffer[] staging(TransferSession session, int[] active, PartPlan[] plans, int peers,
                                          boolean poolOk) {
        int staged = 0;
        for (int p : active) {
            if (staged(plans[p], poolOk)) {
                staged++;
            }
        }
        MemoryBuffer[] out = new MemoryBuffer[peers];
        if (staged == 0) {
            return out;
        }
        long[] sizes = new long[staged];
        int j = 0;
        for (int p : active) {
            if (staged(plans[p], poolOk)) {
                sizes[j++] = plans[p].bytes();
            }
        }
        MemoryBuffer[] got = session.stagingBuffers(sizes);
        j = 0;
        for (int p : active) {
            if (staged(plans[p], poolOk)) {
                out[p] = got[j++];
            }
        }
        return out;
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

    /** Whether this rank moves a part through staging: its plan stages, or its pool may not reach the transport. */
    private static boolean staged(PartPlan pp, boolean poolOk) {
        return !pp.selfDirect() || !poolOk;
    }

    private MemoryBuffer region(int index) {
        MemoryBuffer b = regionViews.get(index);
        if (b == null) {
            b = cache.region(index);
            regionViews.set(index, b); // racing threads store equivalent views of the same stable region
        }
        return b;
    }

    /**
     * Checks the fields both sides must share and the CP combination. Every mismatch is listed with the field
     * and both values.
     */
    @Override
    public Support inquireSupport(CacheState self, CacheState peer) {
        Objects.requireNonNull(self, "self");
        Objects.requireNonNull(peer, "peer");
        // Remembered per (state instance, state instance): the answer depends on the two immutable states only,
        // and the control plane asks it for the same pair on every request (issue 14 item 3).
        int slot = ((System.identityHashCode(self) * 31 + System.identityHashCode(peer)) >>> 3) & (SUPPORT_SLOTS - 1);
        SupportEntry e = supportCache[slot];
        if (e != null && e.self == self && e.peer == peer) {
            return e.support;
        }
        Support s = computeSupport(self, peer);
        supportCache[slot] = new SupportEntry(self, peer, s);
        return s;
    }

    private static final int SUPPORT_SLOTS = 16;
    private final SupportEntry[] supportCache = new SupportEntry[SUPPORT_SLOTS];

    private record SupportEntry(CacheState self, CacheState peer, Support support) {
    }

    private static Support computeSupport(CacheState self, CacheState peer) {
        List<String> why = new ArrayList<>();
        if (self.attentionType() != AttentionType.DEFAULT || peer.attentionType() != AttentionType.DEFAULT) {
            why.add("attentionType: self " + self.attentionType() + ", peer " + peer.attentionType()
                    + " (the standard formatter handles DEFAULT attention only; MLA needs the mla formatter)");
        }
        if (self.dataType() != peer.dataType()) {
            why.add("dataType: self " + self.dataType() + ", peer " + peer.dataType() + " (no conversion)");
        }
        if (self.kvFactor() != peer.kvFactor()) {
            why.add("kvFactor: self " + self.kvFactor() + ", peer " + peer.kvFactor());
        }
        if (self.tokensPerBlock() != peer.tokensPerBlock()) {
            why.add("tokensPerBlock: self " + self.tokensPerBlock() + ", peer " + peer.tokensPerBlock());
        }
        if (self.sizePerHead() != peer.sizePerHead()) {
            why.add("sizePerHead: self " + self.sizePerHead() + ", peer " + peer.sizePerHead());
        }
        if (self.numLayers() != peer.numLayers()) {
            why.add("layer count (kvHeadsPerLayer.size): self " + self.numLayers() + ", peer " + peer.numLayers());
        }
        boolean uniform = true;
        if (!self.uniformHeads()) {
            why.add("kvHeadsPerLayer: self has non-uniform head counts " + self.kvHeadsPerLayer()
                    + " (every layer must have the same KV heads)");
            uniform = false;
        }
        if (!peer.uniformHeads()) {
            why.add("kvHeadsPerLayer: peer has non-uniform head counts " + peer.kvHeadsPerLayer()
                    + " (every layer must have the same KV heads)");
            uniform = false;
        }
        if (uniform && !self.kvHeadsPerLayer().get(0).equals(peer.kvHeadsPerLayer().get(0))) {
            why.add("kvHeadsPerLayer: self " + self.kvHeadsPerLayer().get(0) + " KV heads, peer "
                    + peer.kvHeadsPerLayer().get(0) + " (the model's heads must be the same on both sides)");
        }
        int sc = self.contextParallelism();
        int pc = peer.contextParallelism();
        if (sc > 1 && pc > 1 && sc != pc) {
            why.add("contextParallelism: self " + sc + ", peer " + pc + " (context CP > 1 is supported only when"
                    + " the other side has CP 1 or the same CP; unequal CP > 1 on both sides would need blocks"
                    + " from ranks outside the target mapping)");
        }
        return why.isEmpty() ? Support.yes() : Support.no(String.join("; ", why));
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
        return pick(self, t);
    }

    static List<Integer> pick(CacheState self, TargetRanks t) {
        int n = t.size();
        List<Integer> out = new ArrayList<>(n);
        int peerDup = t.peerDupHeadFactor();
        if (peerDup <= 1) {
            for (int p = 0; p < n; p++) {
                out.add(p);
            }
            return out;
        }
        int selfDp = self.attentionDpEnabled() ? self.dpRank() : 0;
        for (int c = 0; c < t.domainCp(); c++) {
            for (int i = 0; i < t.domainTp(); i++) {
                if (i % peerDup == selfDp % peerDup) {
                    for (int j = 0; j < t.domainPp(); j++) {
                        out.add((c * t.domainTp() + i) * t.domainPp() + j);
                    }
                }
            }
        }
        return out;
    }

    @Override
    public boolean needSendCache(CacheState self, int selfIndex, CacheState peer) {
        Objects.requireNonNull(self, "self");
        Objects.requireNonNull(peer, "peer");
        return needSendCache(self, selfIndex, peer, RankMapping.targetRanks(peer, self, selfIndex));
    }

    /**
     * Reference §3: a rank sends unless it belongs to a duplicate-head group ({@code dupHeadFactor > 1}) and is
     * not the member designated by the peer's DP rank.
     */
    static boolean needSendCache(CacheState self, int selfIndex, CacheState peer, TargetRanks t) {
        if (t.isEmpty()) {
            return false;
        }
        int dup = t.dupHeadFactor();
        if (dup <= 1) {
            return true;
        }
        int tpRank = self.tpRank(selfIndex);
        int g = self.attentionDpEnabled() ? tpRank % self.tpPerDpGroup() : tpRank;
        int peerDp = peer.attentionDpEnabled() ? peer.dpRank() : 0;
        return peerDp % dup == g % dup;
    }
}
