package dev.kvtransfer.formatter.support;

import dev.kvtransfer.api.layout.BlockLayout;
import dev.kvtransfer.api.layout.PoolGeometry;
import dev.kvtransfer.api.layout.PoolLayout;
import dev.kvtransfer.api.memory.BufferManager;
import dev.kvtransfer.api.memory.MemoryBuffer;

import java.util.Objects;
import java.util.function.IntFunction;

/**
 * How one <em>part</em> (what one context rank owes one generation rank: a rectangle of blocks x layers x heads,
 * all kv planes, tokens and dims) is written one-sided from the sender's pool straight into the receiver's pool,
 * for any pair of {@link PoolLayout}s: the write entries (source, offset) &rarr; (receiver region, offset), length.
 * The sender alone plans it, from both pools' {@link PoolGeometry} (the receiver's with its real blocks per region,
 * so adjacency of its blocks is known exactly) and both block-id lists; the receiver takes no part.
 *
 * <p><b>Direct.</b> Entries go from the sender's pool to the receiver's: each is a run contiguous in both pools.
 * Inside one block's slice of a (layer, kv) plane the part is a box of {@code heads x tokens} rows of the dims two
 * segments have in common (one piece per dim range; a split latent on either side makes two or three). A box is
 * one run where both pools hold it contiguously (the same order, all heads of a token-major pool), else one run
 * per head ({@code [token][dim]} contiguous on both: head-major pools with a head subset), per token
 * ({@code [head][dim]}: token-major pools, Mooncake's head-ratio writes into an NHD row) or per row (a transpose).
 * Runs are enumerated in the receiver's memory order (layer pool: per (layer, kv, segment), block by block; block
 * pool: block by block, layer, kv) and a run that continues the previous one in both pools joins it, so blocks
 * consecutive on both sides coalesce into one entry (Mooncake's {@code group_concurrent_contiguous}), and so do
 * the planes of a block-pool block when the part holds all of both sides' heads.
 *
 * <p><b>Staged.</b> The sender gathers the part into a staging buffer in the receiver's order (strided copies
 * through the {@link BufferManager}: {@code copy} / {@code copy2d}, so device pools work) and writes runs that are
 * contiguous in the receiver's pool: one per block slice of a plane segment where the receiver holds the part's
 * heads contiguously (a head-major pool, or all heads of a token-major one), else one per token; consecutive ones
 * coalesce as above. The buffer holds at most {@link #stagingBytes()} (a chunk of whole units): it is filled,
 * written ({@link Sink#flush()}) and refilled.
 *
 * <p><b>Policy.</b> Direct when its entries average at least {@code minDirectEntryBytes} or it needs no more
 * entries than staging; staged otherwise (an extra copy of the bytes against fewer, larger entries). Always staged
 * when the builder says the source may not be written directly ({@link Builder#sourceDirect}).
 *
 * <p>Created once per peer and layer range (O(1) objects); {@link #write} allocates nothing but one small helper.
 * Immutable; {@link #write} may run on several threads at once with different sinks and staging buffers.
 */
public final class WritePlan {
    /** How the part travels. */
    public enum Mode {
        /** Pool to pool, no copy on the sender. */
        DIRECT,
        /** Gathered into the receiver's order first. */
        STAGED,
        /** The part holds no block or layer. */
        EMPTY
    }

    /** Where a plan's entries go. */
    public interface Sink {
        /**
         * One write entry: {@code length} bytes of {@code source} at {@code sourceOffset} to bytes
         * {@code [regionOffset, regionOffset + length)} of the receiver pool's region {@code region}.
         *
         * @param source       local memory (a pool region, or the staging buffer)
         * @param sourceOffset first byte in it
         * @param region       receiver region index
         * @param regionOffset first byte in that region
         * @param length       bytes
         */
        void entry(MemoryBuffer source, long sourceOffset, int region, long regionOffset, long length);

        /** The staged entries so far must be written now: the staging buffer is about to be refilled. */
        void flush();
    }

    /** Default staging chunk: 4 MiB. */
    public static final long DEFAULT_STAGING_CHUNK = 4L << 20;

    private final PoolGeometry sg;
    private final PoolGeometry dg;
    private final int[] sIds;
    private final int[] dIds;
    private final int sFirst;
    private final int dFirst;
    private final int sL0;
    private final int dL0;
    private final int sH0;
    private final int dH0;
    private final int blocks;
    private final int layers;
    private final int heads;
    private final int kvF;
    private final int tokens;
    private final int eb;
    private final int dSegs;
    private final int units;
    private final int pieces;
    private final int[] px0;
    private final int[] px1;
    private final int[] ps;
    private final int[] pd;
    private final long bytes;
    private final long stagingBytes;
    private final Mode mode;
    private final int entries;

    private WritePlan(Builder b) {
        this.sg = Objects.requireNonNull(b.sg, "sender geometry");
        this.dg = Objects.requireNonNull(b.dg, "receiver geometry");
        BlockLayout sl = sg.blockLayout();
        BlockLayout dl = dg.blockLayout();
        if (sl.kvFactor() != dl.kvFactor() || sl.tokensPerBlock() != dl.tokensPerBlock()
                || sl.sizePerHead() != dl.sizePerHead() || sl.elementBytes() != dl.elementBytes()) {
            throw new IllegalArgumentException("sender " + sl + " and receiver " + dl + " differ in kvFactor, tokens,"
                    + " head size or element width");
        }
        if (b.blocks < 0 || b.layers < 0 || b.heads < 1) {
            throw new IllegalArgumentException("part of " + b.blocks + " blocks, " + b.layers + " layers, " + b.heads
                    + " heads");
        }
        check("sender", b.sL0, b.layers, sl.localLayers(), "layers");
        check("receiver", b.dL0, b.layers, dl.localLayers(), "layers");
        check("sender", b.sH0, b.heads, sl.localHeads(), "heads");
        check("receiver", b.dH0, b.heads, dl.localHeads(), "heads");
        this.sIds = Objects.requireNonNull(b.sIds, "sender block ids");
        this.dIds = Objects.requireNonNull(b.dIds, "receiver block ids");
        check("sender block ids", b.sFirst, b.blocks, sIds.length, "blocks");
        check("receiver block ids", b.dFirst, b.blocks, dIds.length, "blocks");
        this.sFirst = b.sFirst;
        this.dFirst = b.dFirst;
        this.sL0 = b.sL0;
        this.dL0 = b.dL0;
        this.sH0 = b.sH0;
        this.dH0 = b.dH0;
        this.blocks = b.blocks;
        this.layers = b.layers;
        this.heads = b.heads;
        this.kvF = sl.kvFactor();
        this.tokens = sl.tokensPerBlock();
        this.eb = sl.elementBytes();
        this.dSegs = dg.segments();
        // Dim pieces: the ranges of dims both sides hold in one segment each (at most three).
        int d = sl.sizePerHead();
        int[] cuts = {0, sg.segmentFirstDim(sg.segments() - 1), dg.segmentFirstDim(dSegs - 1), d};
        java.util.Arrays.sort(cuts);
        int n = 0;
        int[] x0 = new int[3];
        int[] x1 = new int[3];
        for (int i = 0; i + 1 < cuts.length; i++) {
            if (cuts[i] < cuts[i + 1]) {
                x0[n] = cuts[i];
                x1[n] = cuts[i + 1];
                n++;
            }
        }
        this.pieces = n;
        this.px0 = x0;
        this.px1 = x1;
        this.ps = new int[n];
        this.pd = new int[n];
        for (int i = 0; i < n; i++) {
            ps[i] = sg.segmentOf(x0[i]);
            pd[i] = dg.segmentOf(x0[i]);
        }
        this.bytes = (long) blocks * layers * kvF * heads * tokens * d * eb;
        this.units = blocks * layers * kvF * dSegs;
        if (blocks == 0 || layers == 0) {
            this.mode = Mode.EMPTY;
            this.entries = 0;
            this.stagingBytes = 0;
            return;
        }
        long largestUnit = 0;
        for (int s = 0; s < dSegs; s++) {
            largestUnit = Math.max(largestUnit, unitBytes(s));
        }
        long chunk = Math.max(b.chunk, largestUnit);
        long staged = Math.min(bytes, chunk);
        int stagedEntries = walkStaged(new Emitter(null), null, null, null, staged);
        // Direct entries, counted up to the point where staging would win anyway.
        long avgLimit = b.minDirectEntryBytes <= 0 ? Long.MAX_VALUE : Math.max(1, bytes / b.minDirectEntryBytes);
        long limit = Math.max(avgLimit, stagedEntries);
        Emitter counter = new Emitter(null);
        counter.limit = limit;
        int direct = walkDirect(counter, null);
        boolean directOk = b.sourceDirect && !counter.exceeded && (b.minDirectEntryBytes <= 0
                || direct <= stagedEntries || (double) bytes / direct >= b.minDirectEntryBytes);
        if (directOk) {
            this.mode = Mode.DIRECT;
            this.entries = direct;
            this.stagingBytes = 0;
        } else {
            this.mode = Mode.STAGED;
            this.entries = stagedEntries;
            this.stagingBytes = staged;
        }
    }

    private static void check(String side, int first, int count, int limit, String what) {
        if (first < 0 || count < 0 || (long) first + count > limit) {
            throw new IllegalArgumentException(side + " " + what + " [" + first + ", " + first + "+" + count
                    + ") outside its " + limit);
        }
    }

    /** @return a builder */
    public static Builder builder() {
        return new Builder();
    }

    /** Collects a plan's inputs. */
    public static final class Builder {
        private PoolGeometry sg;
        private int[] sIds;
        private int sFirst;
        private int sL0;
        private int sH0;
        private PoolGeometry dg;
        private int[] dIds;
        private int dFirst;
        private int dL0;
        private int dH0;
        private int blocks;
        private int layers;
        private int heads = 1;
        private long minDirectEntryBytes;
        private long chunk = DEFAULT_STAGING_CHUNK;
        private boolean sourceDirect = true;

        private Builder() {
        }

        /**
         * Whether entries may be written straight from the sender's pool (default true). False where the transport
         * cannot read the pool's memory (a {@code DEVICE} pool without {@code DEVICE_MEMORY}): the part is then
         * always staged, gathered through the {@link BufferManager} into a staging buffer the transport can read.
         *
         * @param allowed whether a direct plan may be chosen
         * @return this builder
         */
        public Builder sourceDirect(boolean allowed) {
            this.sourceDirect = allowed;
            return this;
        }

        /**
         * The writing (context) side: this rank's pool.
         *
         * @param geometry   its pool geometry (real blocks per region)
         * @param ids        its block ids of the request
         * @param first      index in {@code ids} of the part's first block
         * @param firstLayer first local layer of the part
         * @param firstHead  first local head of the part
         * @return this builder
         */
        public Builder sender(PoolGeometry geometry, int[] ids, int first, int firstLayer, int firstHead) {
            this.sg = geometry;
            this.sIds = ids;
            this.sFirst = first;
            this.sL0 = firstLayer;
            this.sH0 = firstHead;
            return this;
        }

        /**
         * The written (generation) side: the peer's pool.
         *
         * @param geometry   its pool geometry with its real blocks per region ({@code PeerPool.geometry()})
         * @param ids        its block ids of the request
         * @param first      index in {@code ids} of the part's first block
         * @param firstLayer first local layer of the part there
         * @param firstHead  first local head of the part there
         * @return this builder
         */
        public Builder receiver(PoolGeometry geometry, int[] ids, int first, int firstLayer, int firstHead) {
            this.dg = geometry;
            this.dIds = ids;
            this.dFirst = first;
            this.dL0 = firstLayer;
            this.dH0 = firstHead;
            return this;
        }

        /**
         * @param blockCount blocks of the part
         * @param layerCount layers of the part
         * @param headCount  heads of the part (the same on both sides)
         * @return this builder
         */
        public Builder shape(int blockCount, int layerCount, int headCount) {
            this.blocks = blockCount;
            this.layers = layerCount;
            this.heads = headCount;
            return this;
        }

        /**
         * @param minDirectEntryBytes smallest average entry for which the part is written straight from the pool (0 =
         *                            always direct; {@code Long.MAX_VALUE} = direct only when staging saves no entry)
         * @param stagingChunk        largest staging buffer (at least one unit is always staged at once)
         * @return this builder
         */
        public Builder policy(long minDirectEntryBytes, long stagingChunk) {
            if (stagingChunk < 1) {
                throw new IllegalArgumentException("stagingChunk = " + stagingChunk + ": must be at least 1");
            }
            this.minDirectEntryBytes = minDirectEntryBytes;
            this.chunk = stagingChunk;
            return this;
        }

        /** @return the plan */
        public WritePlan build() {
            return new WritePlan(this);
        }
    }

    /** @return how the part travels */
    public Mode mode() {
        return mode;
    }

    /** @return whether the part is gathered into a staging buffer first */
    public boolean staged() {
        return mode == Mode.STAGED;
    }

    /** @return bytes of the part */
    public long bytes() {
        return bytes;
    }

    /** @return entries the plan emits (before a sink splits any at grant boundaries) */
    public int entries() {
        return entries;
    }

    /** @return the staging buffer {@link #write} needs (0 unless {@link #staged()}) */
    public long stagingBytes() {
        return stagingBytes;
    }

    /**
     * Emits the part's entries into a sink: direct, from the sender's regions; staged, gathering chunk by chunk into
     * {@code staging} (synchronising the manager before the chunk's entries are emitted, and calling
     * {@link Sink#flush()} before it is refilled). The last chunk's entries are emitted, not flushed: the caller
     * flushes.
     *
     * @param bm      the copies' manager (staged only)
     * @param regions the sender's regions by index
     * @param staging at least {@link #stagingBytes()} bytes (staged only; may be {@code null} otherwise)
     * @param sink    where the entries go
     */
    public void write(BufferManager bm, IntFunction<MemoryBuffer> regions, MemoryBuffer staging, Sink sink) {
        Objects.requireNonNull(sink, "sink");
        Objects.requireNonNull(regions, "regions");
        if (mode == Mode.EMPTY) {
            return;
        }
        Emitter e = new Emitter(sink);
        if (mode == Mode.DIRECT) {
            walkDirect(e, regions);
        } else {
            Objects.requireNonNull(staging, "staging");
            Objects.requireNonNull(bm, "bm");
            if (staging.size() < stagingBytes) {
                throw new IllegalArgumentException("staging buffer of " + staging.size() + " bytes, the plan needs "
                        + stagingBytes);
            }
            walkStaged(e, bm, regions, staging, stagingBytes);
        }
        e.emitPending();
    }

    /** Merges runs that continue each other in both memories; counts the entries or hands them to the sink. */
    private static final class Emitter {
        final Sink sink;
        long limit = Long.MAX_VALUE;
        boolean exceeded;
        int count;
        boolean pending;
        MemoryBuffer pSrc;
        int pSReg;
        long pS;
        int pDReg;
        long pD;
        long pLen;

        Emitter(Sink sink) {
            this.sink = sink;
        }

        void run(int sReg, MemoryBuffer src, long s, int dReg, long d, long len) {
            if (pending && sReg == pSReg && s == pS + pLen && dReg == pDReg && d == pD + pLen) {
                pLen += len;
                return;
            }
            emitPending();
            pending = true;
            pSReg = sReg;
            pSrc = src;
            pS = s;
            pDReg = dReg;
            pD = d;
            pLen = len;
        }

        void emitPending() {
            if (!pending) {
                return;
            }
            pending = false;
            count++;
            if (count > limit) {
                exceeded = true;
            }
            if (sink != null) {
                sink.entry(pSrc, pS, pDReg, pD, pLen);
            }
        }
    }

    /** Bytes of one staged unit: one block's part of one (layer, kv) plane segment of the receiver. */
    private long unitBytes(int ds) {
        return (long) heads * tokens * dg.segmentDims(ds) * eb;
    }

    // Unit u, in the receiver's memory order: layer pool (layer, kv, segment) outer and blocks inner; block pool
    // blocks outer, then layer, kv.
    private int unitBlock(int u) {
        return dg.layerKind() ? u % blocks : u / (kvF * layers);
    }

    private int unitLayer(int u) {
        return dg.layerKind() ? u / blocks / dSegs / kvF : (u / kvF) % layers;
    }

    private int unitKv(int u) {
        return dg.layerKind() ? (u / blocks / dSegs) % kvF : u % kvF;
    }

    private int unitSegment(int u) {
        return dg.layerKind() ? (u / blocks) % dSegs : 0;
    }

    private int walkDirect(Emitter e, IntFunction<MemoryBuffer> regions) {
        int sHeads = sg.blockLayout().localHeads();
        for (int u = 0; u < units; u++) {
            int j = unitBlock(u);
            int l = unitLayer(u);
            int k = unitKv(u);
            int ds = unitSegment(u);
            int sid = sIds[sFirst + j];
            int did = dIds[dFirst + j];
            for (int p = 0; p < pieces; p++) {
                if (pd[p] != ds) {
                    continue;
                }
                int ss = ps[p];
                int sReg = sg.region(sid, sL0 + l, k, ss);
                long sBase = sg.planeOffset(sid, sL0 + l, k, ss) + sH0 * sg.headStride(ss)
                        + (long) (px0[p] - sg.segmentFirstDim(ss)) * eb;
                int dReg = dg.region(did, dL0 + l, k, ds);
                long dBase = dg.planeOffset(did, dL0 + l, k, ds) + dH0 * dg.headStride(ds)
                        + (long) (px0[p] - dg.segmentFirstDim(ds)) * eb;
                MemoryBuffer src = regions == null ? null : regions.apply(sReg);
                box(e, sReg, src, sBase, sg.headStride(ss), sg.tokenStride(ss), dReg, dBase, dg.headStride(ds),
                        dg.tokenStride(ds), (long) (px1[p] - px0[p]) * eb);
                if (e.exceeded) {
                    return e.count;
                }
            }
        }
        e.emitPending();
        return e.count;
    }

    /** The runs of one box of {@code heads x tokens} rows of {@code w} bytes, in the receiver's order. */
    private void box(Emitter e, int sReg, MemoryBuffer src, long s, long sH, long sT, int dReg, long d, long dH,
                     long dT, long w) {
        if (!dg.tokensOuter()) {
            if (tokens == 1 || sT == w && dT == w) {
                long run = tokens * w;
                if (heads == 1 || sH == run && dH == run) {
                    e.run(sReg, src, s, dReg, d, heads * run);
                    return;
                }
                for (int h = 0; h < heads; h++) {
                    e.run(sReg, src, s + h * sH, dReg, d + h * dH, run);
                }
                return;
            }
            for (int h = 0; h < heads; h++) {
                for (int t = 0; t < tokens; t++) {
                    e.run(sReg, src, s + h * sH + t * sT, dReg, d + h * dH + t * dT, w);
                }
                if (e.exceeded) {
                    return;
                }
            }
            return;
        }
        if (heads == 1 || sH == w && dH == w) {
            long run = heads * w;
            if (tokens == 1 || sT == run && dT == run) {
                e.run(sReg, src, s, dReg, d, tokens * run);
                return;
            }
            for (int t = 0; t < tokens; t++) {
                e.run(sReg, src, s + t * sT, dReg, d + t * dT, run);
            }
            return;
        }
        for (int t = 0; t < tokens; t++) {
            for (int h = 0; h < heads; h++) {
                e.run(sReg, src, s + t * sT + h * sH, dReg, d + t * dT + h * dH, w);
            }
            if (e.exceeded) {
                return;
            }
        }
    }

    /**
     * Staged: units gathered chunk by chunk into the receiver's order (counting only when {@code buf} is null), each
     * chunk's runs emitted after its gather.
     */
    private int walkStaged(Emitter e, BufferManager bm, IntFunction<MemoryBuffer> regions, MemoryBuffer buf,
                           long chunk) {
        int u0 = 0;
        while (u0 < units) {
            // The chunk: units [u0, u1) that fit.
            long pos = 0;
            int u1 = u0;
            while (u1 < units && (u1 == u0 || pos + unitBytes(unitSegment(u1)) <= chunk)) {
                pos += unitBytes(unitSegment(u1));
                u1++;
            }
            if (buf != null) {
                pos = 0;
                for (int u = u0; u < u1; u++) {
                    gather(bm, regions, buf, pos, u);
                    pos += unitBytes(unitSegment(u));
                }
                bm.synchronize(); // the chunk's bytes are in place before any entry over them is written
            }
            pos = 0;
            for (int u = u0; u < u1; u++) {
                stagedRuns(e, buf, pos, u);
                pos += unitBytes(unitSegment(u));
            }
            u0 = u1;
            if (u0 < units) {
                e.emitPending();
                if (e.sink != null) {
                    e.sink.flush();
                }
            }
        }
        e.emitPending();
        return e.count;
    }

    /** Gathers unit {@code u} (all its pieces) into the staging buffer at {@code at}, in the receiver's order. */
    private void gather(BufferManager bm, IntFunction<MemoryBuffer> regions, MemoryBuffer buf, long at, int u) {
        int j = unitBlock(u);
        int l = unitLayer(u);
        int k = unitKv(u);
        int ds = unitSegment(u);
        int sid = sIds[sFirst + j];
        long wds = (long) dg.segmentDims(ds) * eb;
        long bufH = dg.tokensOuter() ? wds : tokens * wds;
        long bufT = dg.tokensOuter() ? heads * wds : wds;
        for (int p = 0; p < pieces; p++) {
            if (pd[p] != ds) {
                continue;
            }
            int ss = ps[p];
            MemoryBuffer src = regions.apply(sg.region(sid, sL0 + l, k, ss));
            long sBase = sg.planeOffset(sid, sL0 + l, k, ss) + sH0 * sg.headStride(ss)
                    + (long) (px0[p] - sg.segmentFirstDim(ss)) * eb;
            long bBase = at + (long) (px0[p] - dg.segmentFirstDim(ds)) * eb;
            SliceCopy.copy3d(bm, src, sBase, sg.headStride(ss), sg.tokenStride(ss), buf, bBase, bufH, bufT, heads,
                    tokens, (long) (px1[p] - px0[p]) * eb);
        }
    }

    /** The receiver-contiguous runs of staged unit {@code u} at {@code at}. */
    private void stagedRuns(Emitter e, MemoryBuffer buf, long at, int u) {
        int j = unitBlock(u);
        int l = unitLayer(u);
        int k = unitKv(u);
        int ds = unitSegment(u);
        int did = dIds[dFirst + j];
        int dReg = dg.region(did, dL0 + l, k, ds);
        long d = dg.planeOffset(did, dL0 + l, k, ds) + dH0 * dg.headStride(ds);
        long size = unitBytes(ds);
        if (!dg.tokensOuter() || tokens == 1 || heads == dg.blockLayout().localHeads()) {
            e.run(-1, buf, at, dReg, d, size);
            return;
        }
        long run = heads * (long) dg.segmentDims(ds) * eb;
        for (int t = 0; t < tokens; t++) {
            e.run(-1, buf, at + t * run, dReg, d + t * dg.tokenStride(ds), run);
        }
    }

    @Override
    public String toString() {
        return "WritePlan{" + mode + ", " + blocks + " blocks x " + layers + " layers x " + heads + " heads, " + bytes
                + " B in " + entries + " entries, " + sg.poolLayout() + " -> " + dg.poolLayout()
                + (stagingBytes > 0 ? ", staging " + stagingBytes + " B" : "") + "}";
    }
}
