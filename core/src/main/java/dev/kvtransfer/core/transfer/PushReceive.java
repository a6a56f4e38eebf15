package dev.kvtransfer.core.transfer;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.KvTransferException;
import dev.kvtransfer.api.layout.BlockDistribution;
import dev.kvtransfer.api.layout.TargetRanks;
import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.memory.MemoryKind;
import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.api.transport.Connection;
import dev.kvtransfer.core.journal.Checksums;
import dev.kvtransfer.core.protocol.PushEntryFlyweight;
import dev.kvtransfer.core.protocol.PushNoticeFlyweight;
import dev.kvtransfer.core.pattern.WindowPattern;

import java.nio.ByteBuffer;
import java.time.Duration;
import java.util.List;

/**
 * The generation side of a push: the grants registered for a request (and revoked when it ends, so no context rank
 * can write into its blocks afterwards), the writers' layer and done notices ({@link PushNoticeFlyweight}) with the
 * entries they wrote ({@link PushEntryFlyweight}), each checked on arrival against the grants and its CRC32C.
 */
final class PushReceive {
    private final TransferEnv env;

    PushReceive(TransferEnv env) {
        this.env = env;
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
    void awaitPush(GenerationJob job, DefaultTransferSession session) {
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
            long waitFrom = System.nanoTime();
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
                    if (type == PushNoticeFlyweight.TYPE_LAYER || type == PushNoticeFlyweight.TYPE_DONE
                            || type == PushNoticeFlyweight.TYPE_PROGRESS) {
                        if (value < 0 || value > MAX_PUSH_ENTRIES - w.count) {
                            throw new KvTransferException(ErrorCode.MALFORMED, id, "context rank " + peerRank
                                    + " announced " + value + " written entries", null);
                        }
                        receiveWritten(job, session, k, c, w, (int) value, checksums);
                    }
                    if (type == PushNoticeFlyweight.TYPE_PROGRESS) {
                        continue; // checked above while the writer goes on
                    } else if (type == PushNoticeFlyweight.TYPE_LAYER) {
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
                        // One measure per writer, from the wait's start to its done notice, over the bytes it wrote:
                        // the receive row of a push (as upstream's receive of a one-sided writer's notification).
                        job.timing.measure(k, waitFrom, System.nanoTime(), w.bytes);
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

        /** Room for {@code n} more entries (a notice says how many follow: one growth per notice at most). */
        void reserve(int n) {
            if (3L * (count + n) > entries.length) {
                entries = java.util.Arrays.copyOf(entries, (int) Math.max(3L * (count + n), 2L * entries.length));
            }
        }

        void add(long region, long offset, long length) {
            if (3 * count == entries.length) {
                reserve(1);
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
    private void receiveWritten(GenerationJob job, DefaultTransferSession session, int k, Connection c, Written w, int n,
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
            w.reserve(n);
            MemoryBuffer viewOf = null; // the grant whose bytes `view` shows: one view per grant, not per entry
            ByteBuffer view = null;
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
                    if (mem != viewOf) {
                        viewOf = mem;
                        view = mem.kind() != MemoryKind.DEVICE && mem.size() <= Integer.MAX_VALUE
                                ? mem.asByteBuffer() : null;
                    }
                    int crc = (int) (view != null ? Checksums.crc32c(view, (int) off, (int) len)
                            : Checksums.crc32c(mem, off, len));
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
    private void checkWritten(GenerationJob job, DefaultTransferSession session, int[] picked, Written[] written) {
        long id = job.handle.requestId();
        long total = 0;
        int n = 0;
        long[] perPeer = new long[session.targets().size()];
        job.pushedPeerBytes = perPeer;
        for (int k : picked) {
            total += written[k].bytes;
            perPeer[k] = written[k].bytes;
            n += written[k].count;
        }
        long expected = expectedPushBytes(job, session);
        job.pushedBytes = total;
        job.pushedEntries = n;
        if (total != expected) {
            throw new KvTransferException(ErrorCode.MALFORMED, id, "the context ranks wrote " + total + " bytes into"
                    + " this rank's blocks, " + expected + " were expected (partial or doubled push)", null);
        }
        // With the total right, the writes cover the blocks exactly once unless two overlap. Sorted apart, the
        // starts and the ends of disjoint ranges pair up in order; where a byte is written twice, some start comes
        // before the end that precedes it. Keys: (grant index, offset), primitives only.
        long[] grants = new long[job.granted.size()];
        int g = 0;
        for (long r : job.granted.keySet()) {
            grants[g++] = r;
        }
        java.util.Arrays.sort(grants);
        long[] starts = new long[n];
        long[] ends = new long[n];
        int m = 0;
        for (int k : picked) {
            Written w = written[k];
            for (int i = 0; i < w.count; i++) {
                long len = w.entries[3 * i + 2];
                if (len > 0) {
                    long at = (long) java.util.Arrays.binarySearch(grants, w.entries[3 * i]) << OFFSET_BITS;
                    starts[m] = at | w.entries[3 * i + 1];
                    ends[m++] = at | (w.entries[3 * i + 1] + len);
                }
            }
        }
        int at = overlap(starts, ends, m);
        if (at >= 0) {
            throw new KvTransferException(ErrorCode.MALFORMED, id, "two writes overlap in grant #"
                    + grants[(int) (starts[at] >>> OFFSET_BITS)] + " at byte offset "
                    + (starts[at] & ((1L << OFFSET_BITS) - 1)) + " (and others were missed)", null);
        }
    }

    /**
     * Whether the non-empty ranges {@code [starts[j], ends[j])} of the first {@code m} of each overlap. Sorts both
     * arrays (their pairing is lost: for disjoint ranges sorted starts and sorted ends pair up again).
     *
     * @return an index {@code i} whose sorted start lies before the sorted end at {@code i - 1} (a byte covered
     *         twice lies at or after that start), or -1 when the ranges are disjoint
     */
    static int overlap(long[] starts, long[] ends, int m) {
        java.util.Arrays.sort(starts, 0, m);
        java.util.Arrays.sort(ends, 0, m);
        for (int i = 1; i < m; i++) {
            if (starts[i] < ends[i - 1]) {
                return i;
            }
        }
        return -1;
    }

    /** Bits of a write's offset in the overlap check's keys: a grant of up to 16 TiB. */
    private static final int OFFSET_BITS = 44;

    /** Bytes of this rank's non-reused blocks of the request: what the pushes must cover exactly. */
    private long expectedPushBytes(GenerationJob job, DefaultTransferSession session) {
        CacheState self = env.selfCache();
        int total = session.totalBlocks();
        if (self.windowGroups() != null) {
            // Sliding windows: per layer only the blocks inside its window are written.
            return WindowPattern.movedBytes(self, env.selfIndex(), total, session.reusedBlocks());
        }
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
    List<dev.kvtransfer.api.format.PeerPool.Grant> registerGrants(GenerationJob job, int totalBlocks, int reused,
                                                                  java.util.Set<String> writers) {
        CacheState self = env.selfCache();
        int firstGlobal = BlockDistribution.firstGlobalBlock(totalBlocks, self.contextParallelism(),
                self.cpRank(env.selfIndex()));
        try {
            return PushGrants.register(env.cache(), env.connections(), job.handle.blockIds(), firstGlobal, reused,
                    writers, job.registrations, job.granted);
        } catch (UnsupportedOperationException e) {
            revokeGrants(job);
            return List.of();
        }
    }

    void revokeGrants(GenerationJob job) {
        List<dev.kvtransfer.api.transport.RegisteredRegion> regs = job.registrations;
        if (regs.isEmpty() && job.granted.isEmpty()) {
            return; // a pull, or revoked already: no iterator, nothing to clear
        }
        for (int i = 0; i < regs.size(); i++) {
            dev.kvtransfer.api.transport.RegisteredRegion r = regs.get(i);
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

    private static Duration remaining(GenerationJob job, String what) {
        return GenerationHandshake.remaining(job, what);
    }
}
