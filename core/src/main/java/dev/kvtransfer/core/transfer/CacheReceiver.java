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
import dev.kvtransfer.api.model.CommState;
import dev.kvtransfer.api.model.ContextPhaseParams;
import dev.kvtransfer.api.model.RequestInfo;
import dev.kvtransfer.api.transport.Connection;
import dev.kvtransfer.api.transport.Tags;
import dev.kvtransfer.core.journal.TransferJournal;
import dev.kvtransfer.core.protocol.PushEntryFlyweight;
import dev.kvtransfer.core.protocol.PushNoticeFlyweight;
import dev.kvtransfer.core.protocol.ReadySignalFlyweight;
import dev.kvtransfer.core.protocol.RequestHeaderFlyweight;
import dev.kvtransfer.core.protocol.RequestInfoFrame;
import dev.kvtransfer.core.timing.EpochClock;
import dev.kvtransfer.core.timing.TransferTiming;

import java.nio.ByteBuffer;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.LinkedBlockingQueue;
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
 * {@code formatter.unformat}. Everything waits at most until {@code kvTransferTimeout} after the async call.
 *
 * <p>Cancel: possible until the request's infos are sent; refused after.
 */
public final class CacheReceiver implements AutoCloseable {
    private static final int QUEUED = 0;
    private static final int SENDING = 1;
    private static final int ENDED = 2;

    private final TransferEnv env;
    private final DataTags tags;
    private final Map<CommState, ThreadPoolExecutor> workers = new ConcurrentHashMap<>();
    private final Map<TransferHandle, Job> jobs = new ConcurrentHashMap<>();
    private final Map<String, Object> connectionLocks = new ConcurrentHashMap<>();
    private final AtomicInteger instanceCount = new AtomicInteger();
    private final Object lifecycle = new Object();
    private volatile boolean closing;
    /** Reused HOST buffers of the handshakes (request header, info and ready signals). */
    private final ControlBuffers control;

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
    }

    private static final class Job {
        final TransferHandle handle;
        final long deadlineNanos;
        final TransferTiming timing;
        final AtomicInteger phase = new AtomicInteger(QUEUED);
        /** Push: what this rank registered for the request (revoked when it ends, success or not). */
        final List<dev.kvtransfer.api.transport.RegisteredRegion> registrations = new ArrayList<>();
        /** Push: region id to the registered memory, for checking what was written. */
        final Map<Long, MemoryBuffer> granted = new java.util.HashMap<>();
        boolean push;
        boolean layered;
        /** Push: bytes the context ranks wrote into this rank's blocks (checked). */
        long pushedBytes;
        /** Push: write entries the context ranks reported. */
        int pushedEntries;
        /** Push: bytes each context rank (in target order) wrote. */
        long[] pushedPeerBytes;

        Job(TransferHandle handle, long startNanos, long deadlineNanos) {
            this.handle = handle;
            this.deadlineNanos = deadlineNanos;
            this.timing = new TransferTiming(handle.requestId(), startNanos);
        }
    }

    /**
     * Queues a request's receive.
     *
     * @param h the request (with its context phase params)
     */
    public void receive(TransferHandle h) {
        ContextPhaseParams params = Objects.requireNonNull(h.contextPhaseParams(), "contextPhaseParams");
        long now = System.nanoTime();
        Job job = new Job(h, now, now + env.config().kvTransferTimeout().toNanos());
        CommState ctx = params.contextState().commState();
        synchronized (lifecycle) {
            if (closing) {
                h.fail(new KvTransferException(ErrorCode.CANCELLED, h.requestId(), "the transceiver is closed", null));
                return;
            }
            jobs.put(h, job);
            ThreadPoolExecutor pool = workers.get(ctx);
            if (pool == null) {
                pool = workers.computeIfAbsent(ctx, this::newPool);
            }
            try {
                pool.execute(() -> run(job));
            } catch (RejectedExecutionException e) {
                jobs.remove(h);
                h.fail(new KvTransferException(ErrorCode.CANCELLED, h.requestId(), "the transceiver is closing", e));
            }
        }
    }

    private ThreadPoolExecutor newPool(CommState ctx) {
        int n = env.config().requestThreadsPerPeerInstance();
        String prefix = env.threadPrefix() + "-recv-" + instanceCount.getAndIncrement() + "-";
        AtomicInteger count = new AtomicInteger();
        ThreadPoolExecutor pool = new ThreadPoolExecutor(n, n, 30, TimeUnit.SECONDS, new LinkedBlockingQueue<>(), r -> {
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
        Job job = jobs.get(h);
        if (job == null || !job.phase.compareAndSet(QUEUED, ENDED)) {
            return false;
        }
        jobs.remove(h);
        h.fail(new KvTransferException(ErrorCode.CANCELLED, h.requestId(),
                "cancelled by the generation side before its request was sent", null));
        return true;
    }

    private void run(Job job) {
        if (!job.phase.compareAndSet(QUEUED, SENDING)) {
            return;
        }
        TransferHandle h = job.handle;
        int tag = -1;
        DefaultTransferSession session = null;
        try {
            if (closing) {
                throw new KvTransferException(ErrorCode.CANCELLED, h.requestId(), "the transceiver is closing", null);
            }
            tag = tags.acquire();
            session = handshake(job, tag);
            if (session != null) {
                try {
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
            h.recordMessages(messages, job.push);
            long end = EpochClock.nowNanos();
            h.succeed(bytes, end, () -> {
                env.metrics().outcome(false, true, bytes);
                env.metrics().messages(false, messages);
                env.metrics().completed(false, end - h.startedEpochNanos(end), peers, perPeer);
                if (env.timing() != null) {
                    env.timing().submit(false, job.timing);
                }
            });
        } catch (RuntimeException e) {
            KvTransferException k = TransferErrors.forRequest(e, h.requestId(), "receiving");
            long moved = session == null ? 0 : session.movedBytes();
            h.fail(k, () -> env.metrics().outcome(false, false, moved));
        } finally {
            // Quiescence: once the grants are revoked no context rank can write into these blocks any more, so the
            // engine may reuse them when the request ends, whatever the outcome.
            revokeGrants(job);
            job.phase.set(ENDED);
            jobs.remove(h);
            if (tag >= 0) {
                tags.release(tag);
            }
        }
    }

    /** Pull: the formatter receives (whole, or layer by layer); push: wait for the writers' done notices. */
    private void receive(Job job, DefaultTransferSession session) {
        if (session.reusedBlocks() == session.totalBlocks()) {
            return; // every block was reused: nothing moves (the context side skips it too)
        }
        if (job.push) {
            awaitPush(job, session);
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

    private void markAllLayers(Job job) {
        CacheState self = env.selfCache();
        int layers = self.layerCount(self.ppRank(env.selfIndex()));
        for (int l = 0; l < layers; l++) {
            job.handle.layerArrived(l);
        }
    }

    /**
     * Push, generation side: from every picked counterpart, its layer notices and its done notice, each followed by
     * the list of what it wrote since its previous notice. Each list is checked on arrival — every entry must lie
     * in this request's grants and match its CRC32C over the memory as it is now — on that counterpart's receive
     * thread, while the counterpart writes the next layer: the check hides behind the prefill instead of running
     * over the whole request after the last layer. A layer is complete when every picked writer holding it
     * announced it and its entries checked. At the end the entries together must cover this rank's non-reused
     * blocks exactly once.
     */
    private void awaitPush(Job job, DefaultTransferSession session) {
        long id = job.handle.requestId();
        CacheState self = env.selfCache();
        CacheState ctx = session.peerCacheState();
        int pp = self.ppRank(env.selfIndex());
        int first = self.firstLayer(pp);
        int layers = self.layerCount(pp);
        List<Integer> picks = env.formatter().pickRecvConnections(self, env.selfIndex(), ctx);
        TargetRanks t = session.targets();
        int[] writersOf = new int[layers];
        for (int k : picks) {
            for (int l = 0; l < layers; l++) {
                if (CacheSender.holds(ctx, t.peerRanks().get(k), first + l)) {
                    writersOf[l]++;
                }
            }
        }
        int[] noticed = new int[layers];
        Written[] written = new Written[t.size()];
        int[] picked = picks.stream().mapToInt(Integer::intValue).toArray();
        boolean checksums = env.config().partChecksums();
        session.forEachPeer(picked, k -> {
            Connection c = session.peerConnection(k);
            int peerRank = t.peerRanks().get(k);
            Written w = written[k] = new Written();
            try (MemoryBuffer notice = env.buffers().allocate(PushNoticeFlyweight.LENGTH, MemoryKind.HOST)) {
                ByteBuffer nb = notice.asByteBuffer();
                PushNoticeFlyweight noticeFly = new PushNoticeFlyweight();
                while (true) {
                    try {
                        c.recv(session.peerTag(k), notice, 0, PushNoticeFlyweight.LENGTH,
                                remaining(job, "waiting for context rank " + peerRank + " to finish its writes"));
                    } catch (KvTransferException e) {
                        throw new KvTransferException(e.code(), id, "context rank " + peerRank + " (" + Texts.peer(
                                c.peer()) + ") did not finish its writes: " + e.getMessage(), e);
                    }
                    PushNoticeFlyweight n = noticeFly.wrap(nb, 0);
                    int type = n.type();
                    int layer = n.layer();
                    long value = n.value();
                    PushTrace.at("gen", id, "notice" + type, layer);
                    if (type == PushNoticeFlyweight.TYPE_LAYER || type == PushNoticeFlyweight.TYPE_DONE) {
                        if (value < 0 || value > MAX_PUSH_ENTRIES - w.count) {
                            throw new KvTransferException(ErrorCode.MALFORMED, id, "context rank " + peerRank
                                    + " announced " + value + " written entries", null);
                        }
                        receiveWritten(job, session, k, c, w, (int) value, checksums);
                    }
                    if (type == PushNoticeFlyweight.TYPE_LAYER) {
                        int l = layer - first;
                        if (l < 0 || l >= layers) {
                            throw new KvTransferException(ErrorCode.MALFORMED, id, "context rank " + peerRank
                                    + " announced layer " + layer + ", which this rank does not hold", null);
                        }
                        boolean complete;
                        synchronized (noticed) {
                            complete = ++noticed[l] == writersOf[l];
                        }
                        if (complete) {
                            job.handle.layerArrived(l);
                        }
                    } else if (type == PushNoticeFlyweight.TYPE_DONE) {
                        return;
                    } else if (type == PushNoticeFlyweight.TYPE_ABORT) {
                        ErrorCode code = value >= 0 && value < ErrorCode.values().length
                                ? ErrorCode.values()[(int) value] : ErrorCode.INTERNAL;
                        throw new KvTransferException(code, id, "context rank " + peerRank + " (" + Texts.peer(
                                c.peer()) + ") failed while writing (" + code + ")", null);
                    } else {
                        throw new KvTransferException(ErrorCode.MALFORMED, id, "context rank " + peerRank
                                + " sent notice type " + type, null);
                    }
                }
            }
        });
        PushTrace.at("gen", id, "all-done", -1);
        checkWritten(job, session, picked, written);
        PushTrace.at("gen", id, "checked", -1);
    }

    /** Most written entries one counterpart may report. */
    static final int MAX_PUSH_ENTRIES = 1 << 24;

    /** Push: what one counterpart reported writing (region id, offset, length per entry), checked on arrival. */
    private static final class Written {
        long[] entries = new long[3 * 8];
        int count;
        long bytes;

        void add(long region, long offset, long length) {
            if (3 * count == entries.length) {
                entries = java.util.Arrays.copyOf(entries, entries.length * 2);
            }
            entries[3 * count] = region;
            entries[3 * count + 1] = offset;
            entries[3 * count + 2] = length;
            count++;
            bytes += length;
        }
    }

    /**
     * Receives the list of {@code n} entries that follows a notice and checks each at once: inside what this
     * request granted, and (with checksums on) its CRC32C over the memory as it is now equal to the writer's.
     */
    private void receiveWritten(Job job, DefaultTransferSession session, int k, Connection c, Written w, int n,
                                boolean checksums) {
        if (n == 0) {
            return;
        }
        long id = job.handle.requestId();
        int peerRank = session.targets().peerRanks().get(k);
        try (MemoryBuffer list = env.buffers().allocate((long) PushEntryFlyweight.LENGTH * n, MemoryKind.HOST)) {
            c.recv(session.peerTag(k), list, 0, (long) PushEntryFlyweight.LENGTH * n,
                    remaining(job, "receiving what context rank " + peerRank + " wrote"));
            ByteBuffer lb = list.asByteBuffer();
            PushEntryFlyweight entry = new PushEntryFlyweight();
            for (int i = 0; i < n; i++) {
                entry.wrap(lb, 0, i);
                long region = entry.regionId();
                long off = entry.writeOffset();
                long len = entry.writeLength();
                int want = entry.crc();
                MemoryBuffer mem = job.granted.get(region); // filled before the request was sent, only read now
                if (mem == null || off < 0 || len < 0 || off > mem.size() - len) {
                    throw new KvTransferException(ErrorCode.MALFORMED, id, "context rank " + peerRank + " reports "
                            + len + " bytes written at offset " + off + " of grant #" + region
                            + ", outside what this request granted", null);
                }
                if (checksums) {
                    int crc = (int) dev.kvtransfer.core.journal.Checksums.crc32c(mem, off, len);
                    if (crc != want) {
                        throw new KvTransferException(ErrorCode.MALFORMED, id, "corrupted part: write " + w.count
                                + " by context rank " + peerRank + " (grant #" + region + ", byte offset " + off
                                + ", " + len + " bytes): CRC32C " + Integer.toHexString(crc) + " in memory, the "
                                + "writer's is " + Integer.toHexString(want), null);
                    }
                }
                w.add(region, off, len);
            }
        }
    }

    /** The entries every counterpart reported (each checked on arrival) cover this rank's blocks exactly once. */
    private void checkWritten(Job job, DefaultTransferSession session, int[] picked, Written[] written) {
        long id = job.handle.requestId();
        long total = 0;
        int n = 0;
        Map<Long, List<long[]>> byRegion = new java.util.HashMap<>();
        long[] perPeer = new long[session.targets().size()];
        job.pushedPeerBytes = perPeer;
        for (int k : picked) {
            Written w = written[k];
            for (int i = 0; i < w.count; i++) {
                byRegion.computeIfAbsent(w.entries[3 * i], r -> new ArrayList<>())
                        .add(new long[] {w.entries[3 * i + 1], w.entries[3 * i + 2]});
            }
            total += w.bytes;
            perPeer[k] = w.bytes;
            n += w.count;
        }
        long expected = expectedPushBytes(job, session);
        job.pushedBytes = total;
        job.pushedEntries = n;
        if (total != expected) {
            throw new KvTransferException(ErrorCode.MALFORMED, id, "the context ranks wrote " + total + " bytes into"
                    + " this rank's blocks, " + expected + " were expected (partial or doubled push)", null);
        }
        for (Map.Entry<Long, List<long[]>> r : byRegion.entrySet()) {
            List<long[]> runs = r.getValue();
            runs.sort((a, b) -> Long.compare(a[0], b[0]));
            for (int i = 1; i < runs.size(); i++) {
                if (runs.get(i)[0] < runs.get(i - 1)[0] + runs.get(i - 1)[1]) {
                    throw new KvTransferException(ErrorCode.MALFORMED, id, "two writes overlap in grant #"
                            + r.getKey() + " at byte offset " + runs.get(i)[0] + " (and others were missed)", null);
                }
            }
        }
    }

    /** Bytes of this rank's non-reused blocks of the request: what the pushes must cover exactly. */
    private long expectedPushBytes(Job job, DefaultTransferSession session) {
        CacheState self = env.selfCache();
        int total = session.totalBlocks();
        int cp = self.contextParallelism();
        int cpRank = self.cpRank(env.selfIndex());
        int firstGlobal = BlockDistribution.firstGlobalBlock(total, cp, cpRank);
        int count = BlockDistribution.count(total, cp, cpRank);
        int fresh = 0;
        for (int i = 0; i < count; i++) {
            if (firstGlobal + i >= session.reusedBlocks()) {
                fresh++;
            }
        }
        return (long) fresh * env.cache().layout().blockBytes();
    }

    /**
     * Push: registers, for this request only, the bytes of this rank's non-reused blocks (every (layer, kv,
     * segment) plane of each, merged into runs per region), so a writer can reach nothing else and nothing after
     * the request ended.
     *
     * @return the grants, empty when the transport cannot register (then the transfer is a pull)
     */
    private List<dev.kvtransfer.api.format.PeerPool.Grant> registerGrants(Job job, int totalBlocks, int reused) {
        dev.kvtransfer.api.cache.KvCacheView cache = env.cache();
        dev.kvtransfer.api.layout.PoolGeometry g = cache.geometry();
        dev.kvtransfer.api.layout.BlockLayout bl = cache.layout();
        CacheState self = env.selfCache();
        int cp = self.contextParallelism();
        int cpRank = self.cpRank(env.selfIndex());
        int firstGlobal = BlockDistribution.firstGlobalBlock(totalBlocks, cp, cpRank);
        int[] ids = job.handle.blockIds();
        List<long[]> ranges = new ArrayList<>();
        for (int i = 0; i < ids.length; i++) {
            if (firstGlobal + i < reused) {
                continue;
            }
            for (int l = 0; l < bl.localLayers(); l++) {
                for (int kv = 0; kv < bl.kvFactor(); kv++) {
                    for (int seg = 0; seg < g.segments(); seg++) {
                        ranges.add(new long[] {g.region(ids[i], l, kv, seg), g.planeOffset(ids[i], l, kv, seg),
                                g.segmentPlaneBytes(seg)});
                    }
                }
            }
        }
        ranges.sort((a, b) -> a[0] != b[0] ? Long.compare(a[0], b[0]) : Long.compare(a[1], b[1]));
        List<dev.kvtransfer.api.format.PeerPool.Grant> grants = new ArrayList<>();
        int i = 0;
        try {
            while (i < ranges.size()) {
                long region = ranges.get(i)[0];
                long start = ranges.get(i)[1];
                long end = start + ranges.get(i)[2];
                i++;
                while (i < ranges.size() && ranges.get(i)[0] == region && ranges.get(i)[1] <= end) {
                    end = Math.max(end, ranges.get(i)[1] + ranges.get(i)[2]);
                    i++;
                }
                MemoryBuffer mem = cache.region((int) region).slice(start, end - start);
                dev.kvtransfer.api.transport.RegisteredRegion reg = env.connections().register(mem);
                job.registrations.add(reg);
                job.granted.put(reg.descriptor().regionId(), mem);
                grants.add(new dev.kvtransfer.api.format.PeerPool.Grant((int) region, start, reg.descriptor()));
            }
        } catch (UnsupportedOperationException e) {
            revokeGrants(job);
            return List.of();
        }
        return grants;
    }

    private void revokeGrants(Job job) {
        for (dev.kvtransfer.api.transport.RegisteredRegion r : job.registrations) {
            try {
                r.close();
            } catch (RuntimeException e) {
                env.metrics().error(new KvTransferException(TransferErrors.codeOf(e), job.handle.requestId(),
                        "revoking a push grant failed: " + e.getMessage(), e));
            }
        }
        job.registrations.clear();
        job.granted.clear();
    }

    /** Sends the infos and waits for the ready signals; returns the session, or null when nothing is to move. */
    private DefaultTransferSession handshake(Job job, int tag) {
        TransferHandle h = job.handle;
        long id = h.requestId();
        ContextPhaseParams params = h.contextPhaseParams();
        CacheState self = env.selfCache();
        CacheState ctx = params.contextState().cacheState();
        env.journal().peerContact(TransferJournal.Role.GENERATION, id, params.contextState());
        Support support;
        try {
            support = env.formatter().inquireSupport(self, ctx);
        } catch (RuntimeException e) {
            support = Support.no("the formatter could not check the layouts: " + e);
        }
        if (!support.supported()) {
            announceUnsupported(job, tag, params, support.reason());
            throw new KvTransferException(ErrorCode.UNSUPPORTED_LAYOUT, id, "unsupported layout: "
                    + support.reason(), null);
        }
        TargetRanks targets;
        List<Integer> counterparts;
        try {
            targets = RankMapping.targetRanks(ctx, self, env.selfIndex());
            counterparts = env.formatter().counterparts(self, env.selfIndex(), ctx);
        } catch (IllegalArgumentException e) {
            announceUnsupported(job, tag, params, e.getMessage());
            throw new KvTransferException(ErrorCode.UNSUPPORTED_LAYOUT, id, "unsupported layout: "
                    + e.getMessage(), e);
        }
        if (targets.isEmpty() || counterparts.isEmpty()) {
            h.started(EpochClock.nowNanos());
            return null;
        }
        // Only the counterparts' connections (no list of every rank's per request).
        List<String> addresses = params.contextState().commState().addresses();
        Connection[] conns = new Connection[targets.size()];
        int[] positions = new int[counterparts.size()];
        for (int k = 0; k < counterparts.size(); k++) {
            int rank = counterparts.get(k);
            int pos = targets.peerRanks().indexOf(rank);
            if (pos < 0 || rank >= addresses.size()) {
                throw new KvTransferException(ErrorCode.INTERNAL, id, "formatter counterpart rank " + rank
                        + " is not among the target ranks " + targets.peerRanks() + " of the context instance", null);
            }
            positions[k] = pos;
            conns[pos] = env.connections().connection(addresses.get(rank));
        }
        int totalBlocks = BlockDistribution.blocksFor(h.promptLength(), ctx.tokensPerBlock());
        int reused = h.reusedBlocks();
        if (reused > totalBlocks) {
            throw new KvTransferException(ErrorCode.MALFORMED, id, reused + " reused blocks but the prompt of "
                    + h.promptLength() + " tokens has " + totalBlocks, null);
        }
        // As upstream's kvCacheTransferStart on the generation side: the handshake begins now.
        h.started(EpochClock.nowNanos());
        ControlAuth auth = env.auth();
        byte[] nonce = auth.nonce();
        int flags = (env.config().partChecksums() ? RequestInfo.FLAG_PART_CHECKSUMS : 0)
                | (env.config().coalesce() ? 0 : RequestInfo.FLAG_NO_COALESCE);
        List<dev.kvtransfer.api.format.PeerPool.Grant> grants = env.config().transferMode()
                == dev.kvtransfer.core.TransceiverConfig.TransferMode.PUSH && reused < totalBlocks
                ? registerGrants(job, totalBlocks, reused) : List.of();
        // Taken over, not copied: the request's own arrays (never changed after it was built) and fresh ones.
        RequestInfo info = RequestInfo.ofOwnedArrays(id, totalBlocks - 1, new long[0], env.selfState(), tag,
                env.config().chunkBytes(), reused, h.blockHashes(), h.blockIds(), params.requestToken(), nonce,
                System.currentTimeMillis(), flags, env.cache().blocksPerRegion(), grants);
        int infoBytes = info.messageSize();
        int mac = auth.macBytes();
        int infoAt = HEADER_BYTES;
        int[] readyAt = new int[positions.length];
        int[] ctxBlocks = new int[positions.length];
        int end = infoAt + infoBytes + mac;
        for (int k = 0; k < positions.length; k++) {
            int rank = targets.peerRanks().get(positions[k]);
            ctxBlocks[k] = BlockDistribution.count(totalBlocks, ctx.contextParallelism(), ctx.cpRank(rank));
            readyAt[k] = end;
            end += ReadySignalFlyweight.length(ctxBlocks[k], mac);
        }
        int[][] peerIds = new int[targets.size()][];
        int[] peerBpr = new int[targets.size()];
        String selfAddress = env.connections().localAddress();
        ReadySignalFlyweight readyFly = new ReadySignalFlyweight();
        try (ControlBuffers.Lease lease = control.acquire(end)) {
            MemoryBuffer ctl = lease.buffer();
            ByteBuffer bb = lease.bytes();
            new RequestHeaderFlyweight().wrap(bb, 0).requestSend(RequestInfoFrame.length(infoBytes, mac), id);
            info.writeMessage(bb, infoAt);
            for (int pos : positions) {
                Connection c = conns[pos];
                if (mac > 0) {
                    // The MAC binds the info to the context rank it is for: it cannot be replayed to another.
                    auth.infoMacInto(bb, infoAt, infoBytes, utf8(c.peer()), infoAt + infoBytes);
                }
                try {
                    sendInfo(job, c, ctl, infoAt, infoBytes + mac);
                    env.journal().requestInfoSent(id, targets.peerRanks().get(pos));
                } catch (KvTransferException e) {
                    throw new KvTransferException(e.code(), id, "request info to context rank "
                            + targets.peerRanks().get(pos) + " (" + c.peer() + ") failed: " + e.getMessage(), e);
                }
            }
            job.timing.requestInfo(System.nanoTime());
            for (int k = 0; k < positions.length; k++) {
                Connection c = conns[positions[k]];
                int rank = targets.peerRanks().get(positions[k]);
                int at = readyAt[k];
                int len = ReadySignalFlyweight.length(ctxBlocks[k], mac);
                try {
                    c.recv(tag, ctl, at, len, remaining(job, "waiting for the ready signal of context rank " + rank));
                } catch (KvTransferException e) {
                    throw new KvTransferException(e.code(), id, "no ready signal from context rank " + rank + " ("
                            + c.peer() + "): " + e.getMessage(), e);
                }
                ReadySignalFlyweight ready = readyFly.wrap(bb, at);
                byte status = ready.status();
                if (!ready.refused()) {
                    boolean pushing = ready.push();
                    boolean layered = ready.layered();
                    if (k == 0) {
                        job.push = pushing;
                        job.layered = layered;
                    } else if (job.push != pushing || job.layered != layered) {
                        throw new KvTransferException(ErrorCode.MALFORMED, id, "context ranks of request " + id
                                + " disagree on push/pull or layer by layer", null);
                    }
                }
                if (mac > 0) {
                    if (!auth.readyMacValid(bb, at, len - mac, id, tag, nonce, utf8(c.peer()), utf8(selfAddress))) {
                        env.metrics().error(new KvTransferException(ErrorCode.UNAUTHORIZED, id, "ready signal on tag "
                                + tag + " from " + Texts.peer(c.peer()) + " failed authentication; refused", null));
                        throw new KvTransferException(ErrorCode.UNAUTHORIZED, id, "the ready signal of context rank "
                                + rank + " (" + Texts.peer(c.peer()) + ") failed authentication (forged, replayed or a"
                                + " different deployment secret)", null);
                    }
                }
                env.journal().readySignalReceived(id, rank, !ready.refused());
                if (ready.refused()) {
                    throw Signals.readRefusal(env.buffers(), c, tag, remaining(job, "reading a refusal"), id);
                }
                peerIds[positions[k]] = ready.blockIds(ctxBlocks[k], id, rank);
                peerBpr[positions[k]] = ready.blocksPerRegion();
            }
            lease.reusable();
        }
        job.timing.preparation(System.nanoTime());
        int[] tagArr = new int[targets.size()];
        java.util.Arrays.fill(tagArr, tag);
        if (!job.push) {
            revokeGrants(job); // the context side pulls after all (its formatter cannot push): nothing is written
        }
        return DefaultTransferSession.builder(id, false).states(env.selfState(), ctx, targets)
                .blocks(h.blockIds(), totalBlocks).connections(conns, tagArr, env.config().chunkBytes())
                .resources(env.pool(), env.buffers(), env.peerExecutor()).deadline(job.deadlineNanos, job.timing)
                .journal(env.journal()).reusedBlocks(reused)
                // Without coalescing both sides plan without the peer's ids: one message per block.
                .peerBlockIds(job.push || env.config().coalesce() ? peerIds : null).peerBlocksPerRegion(peerBpr)
                .checksums(env.config().partChecksums()).controlBuffers(control)
                .transportCapabilities(env.connections().capabilities()).build();
    }

    /** Bytes of the request header on {@link Tags#ID_TAG} ({@link RequestHeaderFlyweight}). */
    static final int HEADER_BYTES = RequestHeaderFlyweight.LENGTH;

    /**
     * The UTF-8 bytes of an address, for a MAC. Remembered (addresses repeat in every request); callers only read
     * the array.
     */
    static byte[] utf8(String s) {
        byte[] b = UTF8.get(s);
        if (b == null) {
            b = s.getBytes(java.nio.charset.StandardCharsets.UTF_8);
            if (UTF8.size() >= MAX_UTF8) {
                UTF8.clear();
            }
            UTF8.put(s, b);
        }
        return b;
    }

    private static final int MAX_UTF8 = 4096;
    private static final Map<String, byte[]> UTF8 = new java.util.concurrent.ConcurrentHashMap<>();

    /**
     * The layouts cannot be converted, so there are no counterparts to compute: the request info goes to every
     * context rank, each of which refuses it and fails its own copy of the request with
     * {@code UNSUPPORTED_LAYOUT} and the reason. Their refusals are not awaited (the request fails here at once);
     * they arrive on this request's data tag, which is never reused soon (see {@link DataTags}).
     */
    private void announceUnsupported(Job job, int tag, ContextPhaseParams params, String reason) {
        CommState ctxComm = params.contextState().commState();
        try {
            List<Connection> all = env.connections().getConnections(ctxComm);
            int totalBlocks = BlockDistribution.blocksFor(job.handle.promptLength(),
                    params.contextState().cacheState().tokensPerBlock());
            RequestInfo info = new RequestInfo(job.handle.requestId(), totalBlocks - 1, new long[0], env.selfState(),
                    tag, env.config().chunkBytes(), 0, new long[0], job.handle.blockIds(),
                    params.requestToken(), env.auth().nonce(), System.currentTimeMillis(), 0, 1, List.of());
            sendInfos(job, all, info);
        } catch (RuntimeException e) {
            env.metrics().error(new KvTransferException(ErrorCode.UNSUPPORTED_LAYOUT, job.handle.requestId(),
                    "could not tell the context ranks that the layouts are unsupported (" + reason + "): "
                    + e.getMessage(), e));
        }
    }

    private void sendInfos(Job job, List<Connection> conns, RequestInfo info) {
        byte[] bytes = info.toBytes();
        int mac = env.auth().macBytes();
        try (MemoryBuffer ctl = env.buffers().allocate(HEADER_BYTES + bytes.length + mac, MemoryKind.HOST)) {
            ByteBuffer bb = ctl.asByteBuffer();
            new RequestHeaderFlyweight().wrap(bb, 0).requestSend(RequestInfoFrame.length(bytes.length, mac),
                    info.requestId());
            bb.put(HEADER_BYTES, bytes);
            for (Connection c : conns) {
                if (mac > 0) {
                    bb.put(HEADER_BYTES + bytes.length, env.auth().mac("INFO", bytes, utf8(c.peer())));
                }
                sendInfo(job, c, ctl, HEADER_BYTES, bytes.length + mac);
            }
        }
    }

    private void sendInfo(Job job, Connection c, MemoryBuffer ctl, int infoAt, int infoBytes) {
        Object connLock = connectionLocks.computeIfAbsent(c.peer(), k -> new Object());
        // The two messages of one request must not interleave with another request's on this connection:
        // the responder reads a header, then that request's info, from each connection in order.
        synchronized (connLock) {
            c.send(Tags.ID_TAG, ctl, 0, HEADER_BYTES, remaining(job, "sending the request header"));
            c.send(Tags.INFO_TAG, ctl, infoAt, infoBytes, remaining(job, "sending the request info"));
        }
    }

    private static Duration remaining(Job job, String what) {
        long left = job.deadlineNanos - System.nanoTime();
        if (left <= 0) {
            throw new KvTransferException(ErrorCode.TIMEOUT, job.handle.requestId(), "deadline passed before "
                    + what, null);
        }
        return Waits.left(left);
    }

    /** Stops accepting requests, cancels queued ones and interrupts the request threads; does not wait. */
    public void shutdown() {
        List<ThreadPoolExecutor> pools;
        synchronized (lifecycle) {
            if (closing) {
                return;
            }
            closing = true;
            pools = new ArrayList<>(workers.values());
        }
        for (Job job : new ArrayList<>(jobs.values())) {
            if (job.phase.compareAndSet(QUEUED, ENDED)) {
                jobs.remove(job.handle);
                job.handle.fail(new KvTransferException(ErrorCode.CANCELLED, job.handle.requestId(),
                        "the transceiver closed before the request was sent", null));
            }
        }
        for (ThreadPoolExecutor p : pools) {
            p.shutdownNow();
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
        releaseControlBuffers();
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
