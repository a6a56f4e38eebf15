package dev.kvtransfer.formatter.support;

import dev.kvtransfer.api.layout.BlockLayout;
import dev.kvtransfer.api.layout.PoolGeometry;
import dev.kvtransfer.api.layout.PoolLayout;
import dev.kvtransfer.api.memory.BufferManager;
import dev.kvtransfer.api.memory.MemoryBuffer;

import java.util.Objects;
import java.util.function.IntFunction;

/**
 * How one <em>part</em> (what one context rank sends one generation rank: a rectangle of blocks x layers x heads,
 * all kv planes, tokens and dims) travels between two pools of any {@link PoolLayout}: its byte stream, its
 * messages, and which side moves them straight from / into its pool (zero copy) and which stages. Both ranks build
 * the same plan from the same facts &mdash; both pool layouts, both block-id lists, the rectangle, the policy
 * &mdash; so they agree on every message length without talking.
 *
 * <p><b>Runs.</b> The part's blocks are cut into runs: with both ranks' block ids known, maximal runs whose ids
 * are consecutive on both sides (Mooncake's {@code group_concurrent_contiguous}); without the peer's ids, one
 * block per run. A run can only be contiguous in a layer pool ({@link PoolLayout.Kind#LAYER_NHD},
 * {@link PoolLayout.Kind#LAYER_HND}: all blocks of one (layer, kv, segment) share a region); in a block pool
 * a run of several blocks is never contiguous (its stream is {@code [layer][kv][block]}); whole blocks join instead
 * ({@link Builder#mergeBlocks}).
 *
 * <p><b>Byte stream.</b> The part is the concatenation of its runs; a run of {@code R} blocks is
 * {@code [layer][kv][wire segment][block of the run][slice]}, a slice being one block's {@code heads x tokens x
 * segment dims} in the <em>wire order</em>: the receiver's ({@code [token][head][w]} when the receiving pool is
 * layer-nhd, else {@code [head][token][w]}; segments split like the receiver's latent). With runs of one block
 * this is {@code [block][layer][kv][head][token][dim]}, the stream of the block-major formatters.
 *
 * <p><b>Units and contiguity.</b> A unit is one (run, layer, kv, wire segment): {@code R} slices. It is contiguous
 * in a side's pool when the slice is ({@link #sliceContiguous}: the same element order and segment bounds, and a
 * head range that is contiguous there) and, for {@code R > 1}, when the slice is a block's whole plane segment of
 * a layer pool. Consecutive units merge into one message where they are adjacent in memory on every direct side
 * (a block pool's whole row of layers, when the part holds all of its heads).
 *
 * <p><b>Policy.</b> Candidates: both sides direct with coalesced runs (A) or one-block runs (B), whichever needs
 * fewer messages; one side direct with coalesced (C) or one-block runs (D), the side and runs giving the fewest
 * messages (the receiver on a tie); (E) both sides staged, one message per run, or one per part with
 * {@code stagedPerPart}. The plan without both-direct is one side direct when its messages average at least
 * {@code minDirectBytes}, else staged; both direct replaces it when its messages average at least
 * {@code minBothDirectBytes} or it needs no more messages than the plan it replaces. With
 * {@link Builder#mergeBlocks} a message of (B) continues into the next block where the bytes continue in both pools
 * (a block pool: consecutive ids in one region on both sides), so consecutive whole blocks travel as one message.
 *
 * <p>Created once per peer and request (O(peers) objects); iterating the messages ({@link Cursor}) allocates
 * nothing.
 */
public final class PartPlan {
    /** Planning choices, for tests and reports. */
    public enum Mode {
        /** Coalesced runs, both sides straight from / into their pools. */
        BOTH_DIRECT_RUNS,
        /** One-block runs, both sides direct. */
        BOTH_DIRECT_BLOCKS,
        /** Coalesced runs, one side direct, the other staged. */
        ONE_DIRECT_RUNS,
        /** One-block runs, one side direct. */
        ONE_DIRECT_BLOCKS,
        /** Both sides staged. */
        STAGED,
        /** The part holds no block. */
        EMPTY
    }

    final PartSide snd;
    final PartSide rcv;
    private final boolean selfIsSender;
    final int blocks;
    private final int layers;
    private final int kvFactor;
    private final int heads;
    private final int tokens;
    private final int dims;
    private final int eb;
    private final boolean wireTokensOuter;
    private final int wireSegments;
    private final int wireRope;
    private final long rowBytes;
    private final long bytes;
    private final boolean coalesce;
    private final boolean stagedPerPart;
    /** Which whole blocks join, when they may ({@link Builder#mergeBlocks} and both id lists known); else null. */
    private final PartJoins joins;
    private final Mode mode;
    private final boolean sndDirect;
    private final boolean rcvDirect;
    private final int messages;

    private PartPlan(Builder b) {
        Objects.requireNonNull(b.sndGeometry, "sender geometry");
        Objects.requireNonNull(b.rcvGeometry, "receiver geometry");
        BlockLayout sl = b.sndGeometry.blockLayout();
        BlockLayout rl = b.rcvGeometry.blockLayout();
        if (sl.kvFactor() != rl.kvFactor() || sl.tokensPerBlock() != rl.tokensPerBlock()
                || sl.sizePerHead() != rl.sizePerHead() || sl.elementBytes() != rl.elementBytes()) {
            throw new IllegalArgumentException("sender " + sl + " and receiver " + rl + " differ in kvFactor, tokens,"
                    + " head size or element width");
        }
        if (b.blocks < 0 || b.layers < 0 || b.heads < 1) {
            throw new IllegalArgumentException("part of " + b.blocks + " blocks, " + b.layers + " layers, " + b.heads
                    + " heads");
        }
        PartSide.checkRange("sender", b.sndFirstLayer, b.layers, sl.localLayers(), "layers");
        PartSide.checkRange("receiver", b.rcvFirstLayer, b.layers, rl.localLayers(), "layers");
        PartSide.checkRange("sender", b.sndFirstHead, b.heads, sl.localHeads(), "heads");
        PartSide.checkRange("receiver", b.rcvFirstHead, b.heads, rl.localHeads(), "heads");
        int[] selfIds = b.selfIsSender ? b.sndIds : b.rcvIds;
        Objects.requireNonNull(selfIds, "own block ids");
        PartSide.checkIds(b.selfIsSender ? "own (sender)" : "own (receiver)", selfIds,
                b.selfIsSender ? b.sndFirst : b.rcvFirst, b.blocks);
        int[] peerIds = b.selfIsSender ? b.rcvIds : b.sndIds;
        if (peerIds != null) {
            PartSide.checkIds("peer", peerIds, b.selfIsSender ? b.rcvFirst : b.sndFirst, b.blocks);
        }
        this.snd = new PartSide(b.sndGeometry, b.sndIds, b.sndFirst, b.sndFirstLayer, b.sndFirstHead);
        this.rcv = new PartSide(b.rcvGeometry, b.rcvIds, b.rcvFirst, b.rcvFirstLayer, b.rcvFirstHead);
        this.selfIsSender = b.selfIsSender;
        this.blocks = b.blocks;
        this.layers = b.layers;
        this.kvFactor = sl.kvFactor();
        this.heads = b.heads;
        this.tokens = sl.tokensPerBlock();
        this.dims = sl.sizePerHead();
        this.eb = sl.elementBytes();
        this.wireTokensOuter = b.rcvGeometry.tokensOuter();
        this.wireSegments = b.rcvGeometry.segments();
        this.wireRope = b.rcvGeometry.poolLayout().ropeDim();
        this.rowBytes = (long) layers * kvFactor * heads * tokens * dims * eb;
        this.bytes = rowBytes * blocks;
        this.stagedPerPart = b.stagedPerPart;
        boolean idsKnown = b.sndIds != null && b.rcvIds != null;
        this.joins = idsKnown && b.mergeMaxBytes > 0 ? new PartJoins(this, b.mergeMaxBytes) : null;
        if (blocks == 0 || layers == 0) {
            this.coalesce = false;
            this.mode = Mode.EMPTY;
            this.sndDirect = false;
            this.rcvDirect = false;
            this.messages = 0;
            return;
        }
        int maxRun = idsKnown ? maxRun() : 1;
        boolean sOne = sliceContiguous(snd);
        boolean rOne = sliceContiguous(rcv);
        boolean sLong = sOne && fullPlaneOfLayerPool(snd);
        boolean rLong = rOne && fullPlaneOfLayerPool(rcv);
        boolean runs = idsKnown && maxRun > 1;
        // The best plan with both sides direct, and the best with one side direct (fewest messages each).
        Mode both = null;
        int bothMsgs = Integer.MAX_VALUE;
        if (runs && sLong && rLong) {
            both = Mode.BOTH_DIRECT_RUNS;
            bothMsgs = count(true, true, true);
        }
        if (sOne && rOne) {
            int n = count(false, true, true);
            if (n < bothMsgs) {
                both = Mode.BOTH_DIRECT_BLOCKS;
                bothMsgs = n;
            }
        }
        Mode one = null;
        int oneMsgs = Integer.MAX_VALUE;
        boolean oneReceiver = false;
        for (boolean r : runs ? new boolean[] {true, false} : new boolean[] {false}) {
            int sm = (r ? sLong : sOne) ? count(r, true, false) : Integer.MAX_VALUE;
            int rm = (r ? rLong : rOne) ? count(r, false, true) : Integer.MAX_VALUE;
            int n = Math.min(sm, rm);
            if (n < oneMsgs) {
                one = r ? Mode.ONE_DIRECT_RUNS : Mode.ONE_DIRECT_BLOCKS;
                oneMsgs = n;
                oneReceiver = rm <= sm;
            }
        }
        // Without both-direct, the plan would be one side direct (when its messages are large enough) or staged.
        boolean oneOk = one != null && average(oneMsgs) >= b.minDirectBytes;
        int altMsgs = oneOk ? oneMsgs : count(runs, false, false);
        Mode m;
        boolean sd;
        boolean rd;
        int msgs;
        if (both != null && (average(bothMsgs) >= b.minBothDirectBytes || bothMsgs <= altMsgs)) {
            // Both direct: no copy on either side; taken when its messages are large enough, or when it needs no
            // more messages than the plan it replaces.
            m = both;
            sd = rd = true;
            msgs = bothMsgs;
        } else if (oneOk) {
            m = one;
            rd = oneReceiver;
            sd = !oneReceiver;
            msgs = oneMsgs;
        } else {
            m = Mode.STAGED;
            sd = rd = false;
            msgs = altMsgs;
        }
        boolean co = m == Mode.BOTH_DIRECT_RUNS || m == Mode.ONE_DIRECT_RUNS || m == Mode.STAGED && runs;
        this.coalesce = co;
        this.mode = m;
        this.sndDirect = sd;
        this.rcvDirect = rd;
        this.messages = msgs;
    }

    /** @return a builder */
    public static Builder builder() {
        return new Builder();
    }

    /** Collects a plan's inputs; sender and receiver must be given, the rest has defaults. */
    public static final class Builder {
        private PoolGeometry sndGeometry;
        private int[] sndIds;
        private int sndFirst;
        private int sndFirstLayer;
        private int sndFirstHead;
        private PoolGeometry rcvGeometry;
        private int[] rcvIds;
        private int rcvFirst;
        private int rcvFirstLayer;
        private int rcvFirstHead;
        private int blocks;
        private int layers;
        private int heads = 1;
        private boolean selfIsSender;
        private long minBothDirectBytes;
        private long minDirectBytes;
        private boolean stagedPerPart;
        private long mergeMaxBytes;

        private Builder() {
        }

        /**
         * The sending (context) side.
         *
         * @param geometry   its pool (the peer's: block layout and pool layout, and its real blocks per region
         *                   where {@link #mergeBlocks} is on)
         * @param ids        its block ids of the request, or {@code null} when unknown (a peer that did not send
         *                   them); required for this rank
         * @param first      index in {@code ids} of the part's first block
         * @param firstLayer first local layer of the part on that side
         * @param firstHead  first local head of the part on that side
         * @return this builder
         */
        public Builder sender(PoolGeometry geometry, int[] ids, int first, int firstLayer, int firstHead) {
            this.sndGeometry = geometry;
            this.sndIds = ids;
            this.sndFirst = first;
            this.sndFirstLayer = firstLayer;
            this.sndFirstHead = firstHead;
            return this;
        }

        /**
         * The receiving (generation) side; its pool layout fixes the wire order.
         *
         * @param geometry   its pool
         * @param ids        its block ids of the request, or {@code null} when unknown
         * @param first      index in {@code ids} of the part's first block
         * @param firstLayer first local layer of the part on that side
         * @param firstHead  first local head of the part on that side
         * @return this builder
         */
        public Builder receiver(PoolGeometry geometry, int[] ids, int first, int firstLayer, int firstHead) {
            this.rcvGeometry = geometry;
            this.rcvIds = ids;
            this.rcvFirst = first;
            this.rcvFirstLayer = firstLayer;
            this.rcvFirstHead = firstHead;
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
         * @param v whether this rank is the sender (else the receiver)
         * @return this builder
         */
        public Builder selfIsSender(boolean v) {
            this.selfIsSender = v;
            return this;
        }

        /**
         * The policy; both ranks must use the same values.
         *
         * @param minBothDirect smallest average message for plans where both sides are direct
         * @param minDirect     smallest average message for plans where one side is direct
         * @param perPart       when both sides stage: one message for the whole part (else one per run)
         * @return this builder
         */
        public Builder policy(long minBothDirect, long minDirect, boolean perPart) {
            this.minBothDirectBytes = minBothDirect;
            this.minDirectBytes = minDirect;
            this.stagedPerPart = perPart;
            return this;
        }

        /**
         * Lets a message of a plan with both sides direct and one block per run continue into the next block where
         * its bytes continue in both pools (consecutive ids in one region of each side, a part of whole blocks), up
         * to {@code maxMessageBytes}. Needs both id lists and each side's real blocks per region in its geometry
         * (the peer's as it reported them); both ranks must use the same value.
         *
         * @param maxMessageBytes the largest joined message; 0 (the default) keeps one message per block
         * @return this builder
         */
        public Builder mergeBlocks(long maxMessageBytes) {
            if (maxMessageBytes < 0) {
                throw new IllegalArgumentException("maxMessageBytes = " + maxMessageBytes + ": must be 0 or more");
            }
            this.mergeMaxBytes = maxMessageBytes;
            return this;
        }

        /** @return the plan */
        public PartPlan build() {
            return new PartPlan(this);
        }
    }

    /** @return how the part travels */
    public Mode mode() {
        return mode;
    }

    /** @return bytes of the part */
    public long bytes() {
        return bytes;
    }

    /** @return messages the part travels in (0 when empty) */
    public int messages() {
        return messages;
    }

    /** @return whether this rank moves the part straight from / into its pool */
    public boolean selfDirect() {
        return selfIsSender ? sndDirect : rcvDirect;
    }

    /** @return whether the peer moves the part straight from / into its pool */
    public boolean peerDirect() {
        return selfIsSender ? rcvDirect : sndDirect;
    }

    /** @return whether runs are coalesced from both block-id lists */
    public boolean coalesced() {
        return coalesce;
    }

    /** @return bytes of one block's share of the part (all its layers, kv planes and heads) */
    public long rowBytes() {
        return rowBytes;
    }

    /**
     * Whether another plan of this rank moves exactly the same bytes of this rank's pool in the same stream and
     * messages (e.g. two peers holding duplicated heads): a sender that stages can then gather once and send the
     * staged bytes to both.
     *
     * @param o another plan of this rank
     * @return whether the staged streams are interchangeable
     */
    public boolean sameStream(PartPlan o) {
        PartSide x = selfIsSender ? snd : rcv;
        PartSide y = o.selfIsSender ? o.snd : o.rcv;
        if (o.selfIsSender != selfIsSender || o.mode != mode || o.blocks != blocks || o.layers != layers
                || o.heads != heads || o.coalesce != coalesce || o.stagedPerPart != stagedPerPart
                || joinCap() != o.joinCap()
                || o.sndDirect != sndDirect || o.rcvDirect != rcvDirect || o.messages != messages
                || o.wireTokensOuter != wireTokensOuter || o.wireSegments != wireSegments || o.wireRope != wireRope
                || x.firstLayer != y.firstLayer || x.firstHead != y.firstHead || !x.actual.equals(y.actual)) {
            return false;
        }
        for (int i = 0; i < blocks; i++) {
            if (x.ids[x.first + i] != y.ids[y.first + i]) {
                return false;
            }
        }
        int i = 0;
        while (i < blocks) {
            int e = runEnd(i, coalesce);
            if (e != o.runEnd(i, coalesce)) {
                return false;
            }
            i = e;
        }
        Cursor a = cursor();
        Cursor b = o.cursor();
        while (a.next()) {
            if (!b.next() || a.length() != b.length() || a.streamOffset() != b.streamOffset()) {
                return false;
            }
        }
        return !b.next();
    }

    /** @return a cursor over the messages, from the first */
    public Cursor cursor() {
        return new Cursor();
    }

    private double average(int msgs) {
        return msgs <= 0 ? 0 : (double) bytes / msgs;
    }

    private int maxRun() {
        int max = 1;
        int i = 0;
        while (i < blocks) {
            int e = runEnd(i, true);
            max = Math.max(max, e - i);
            i = e;
        }
        return max;
    }

    private int runEnd(int i, boolean runs) {
        if (!runs) {
            return i + 1;
        }
        int j = i + 1;
        while (j < blocks && snd.ids[snd.first + j] == snd.ids[snd.first + j - 1] + 1
                && rcv.ids[rcv.first + j] == rcv.ids[rcv.first + j - 1] + 1) {
            j++;
        }
        return j;
    }

    private int wireFirstDim(int ws) {
        return ws == 0 ? 0 : dims - wireRope;
    }

    private int wireDims(int ws) {
        return wireSegments == 1 ? dims : ws == 0 ? dims - wireRope : wireRope;
    }

    private long sliceBytes(int ws) {
        return (long) heads * tokens * wireDims(ws) * eb;
    }

    /** The side's segment holding exactly the wire segment's dims, or -1. */
    private int sideSegment(PoolGeometry g, int ws) {
        int a = wireFirstDim(ws);
        int n = wireDims(ws);
        for (int s = 0; s < g.segments(); s++) {
            if (g.segmentFirstDim(s) == a && g.segmentDims(s) == n) {
                return s;
            }
        }
        return -1;
    }

    /** Whether one block's slice (of every wire segment) is one contiguous run of the side's pool, in wire order. */
    private boolean sliceContiguous(PartSide x) {
        PoolGeometry g = x.plan;
        for (int ws = 0; ws < wireSegments; ws++) {
            if (sideSegment(g, ws) < 0) {
                return false;
            }
        }
        int hs = g.blockLayout().localHeads();
        if (g.tokensOuter()) {
            return heads == hs && (wireTokensOuter || hs == 1);
        }
        return !wireTokensOuter || heads == 1 || tokens == 1;
    }

    /** Whether a run's slices of one plane segment are adjacent: a layer pool, all of the side's heads. */
    private boolean fullPlaneOfLayerPool(PartSide x) {
        return x.plan.layerKind() && heads == x.plan.blockLayout().localHeads();
    }

    /** Stream offset of a unit. */
    private long unitStreamOffset(int runStart, int runLen, int unit) {
        int ws = unit % wireSegments;
        int plane = unit / wireSegments; // layer * kvFactor + kv
        return runStart * rowBytes + (long) runLen * ((long) plane * heads * tokens * dims * eb
                + (long) heads * tokens * wireFirstDim(ws) * eb);
    }

    long unitBytes(int runLen, int unit) {
        return runLen * sliceBytes(unit % wireSegments);
    }

    /** Region of a unit's first byte on a (direct) side, block {@code blockId} first in its run. */
    int unitRegion(PartSide x, PoolGeometry g, int blockId, int unit) {
        int ws = unit % wireSegments;
        int plane = unit / wireSegments;
        return g.region(blockId, x.firstLayer + plane / kvFactor, plane % kvFactor, sideSegment(g, ws));
    }

    /** Offset of a unit's first byte on a (direct) side, block {@code blockId} first in its run. */
    long unitOffset(PartSide x, PoolGeometry g, int blockId, int unit) {
        int ws = unit % wireSegments;
        int plane = unit / wireSegments;
        int s = sideSegment(g, ws);
        return g.planeOffset(blockId, x.firstLayer + plane / kvFactor, plane % kvFactor, s)
                + x.firstHead * g.headStride(s);
    }

    int units() {
        return layers * kvFactor * wireSegments;
    }

    /**
     * Whether unit {@code u} starts where unit {@code u-1} ends on a side, in the planning geometry (a block pool
     * of one block per region, layer pools of one region per plane segment). That answer does not depend on the
     * run's first block id (a block pool's units of one block, a layer pool's planes in separate regions), so it is
     * taken at block 0: the peer's ids are not needed.
     */
    boolean follows(PartSide x, int runLen, int u) {
        PoolGeometry g = x.plan;
        if (unitRegion(x, g, 0, u - 1) != unitRegion(x, g, 0, u)) {
            return false;
        }
        return unitOffset(x, g, 0, u - 1) + unitBytes(runLen, u - 1) == unitOffset(x, g, 0, u);
    }

    /** Counts the messages of a candidate plan. */
    private int count(boolean runs, boolean sd, boolean rd) {
        if (!sd && !rd && stagedPerPart) {
            return 1;
        }
        if (!runs && sd && rd && joins != null) {
            return joins.count();
        }
        int n = 0;
        int u = units();
        int i = 0;
        while (i < blocks) {
            int e = runEnd(i, runs);
            int len = e - i;
            if (!sd && !rd) {
                n++;
            } else {
                n++;
                for (int k = 1; k < u; k++) {
                    if (sd && !follows(snd, len, k) || rd && !follows(rcv, len, k)) {
                        n++;
                    }
                }
            }
            i = e;
        }
        return n;
    }

    @Override
    public String toString() {
        return "PartPlan{" + mode + ", " + blocks + " blocks x " + layers + " layers x " + heads + " heads, " + bytes
                + " B in " + messages + " messages, sender " + snd.actual.poolLayout() + (sndDirect ? " direct"
                : " staged") + ", receiver " + rcv.actual.poolLayout() + (rcvDirect ? " direct" : " staged")
                + (coalesce ? ", coalesced" : "") + (joins != null && mode == Mode.BOTH_DIRECT_BLOCKS
                ? ", whole blocks joined up to " + joinCap() + " B" : "") + "}";
    }

    private long joinCap() {
        return joins == null ? 0 : joins.maxBytes;
    }

    /**
     * Iterates the part's messages in order. For each, this rank either moves {@link #length()} bytes straight
     * from / into {@code region(}{@link #region()}{@code )} at {@link #offset()} (when {@link #selfDirect()}), or
     * stages: the message is stream bytes {@code [streamOffset, streamOffset + length)}, gathered from / scattered
     * into the pool by {@link #copy}. Not thread-safe; one per peer action.
     */
    public final class Cursor {
        private int runStart;
        private int runLen;
        private int unitEnd;
        private int msgRun;
        private int msgRunLen;
        private int msgUnitStart;
        private int msgUnitEnd;
        private long msgLength;
        private long msgStream;
        private boolean started;

        private Cursor() {
        }

        /**
         * Advances to the next message.
         *
         * @return false when there is none left
         */
        public boolean next() {
            int u = units();
            if (mode == Mode.EMPTY) {
                return false;
            }
            if (!sndDirect && !rcvDirect && stagedPerPart) {
                if (started) {
                    return false;
                }
                started = true;
                msgRun = 0;
                msgRunLen = -1;
                msgStream = 0;
                msgLength = bytes;
                return true;
            }
            if (!started) {
                started = true;
                runStart = 0;
                runLen = runEnd(0, coalesce);
                unitEnd = 0;
            } else if (unitEnd == u) {
                runStart += runLen;
                if (runStart >= blocks) {
                    return false;
                }
                runLen = runEnd(runStart, coalesce) - runStart;
                unitEnd = 0;
            }
            int start = unitEnd;
            int end = start + 1;
            if (!sndDirect && !rcvDirect) {
                end = u;
            } else {
                while (end < u && (!sndDirect || follows(snd, runLen, end))
                        && (!rcvDirect || follows(rcv, runLen, end))) {
                    end++;
                }
            }
            unitEnd = end;
            msgRun = runStart;
            msgRunLen = runLen;
            msgUnitStart = start;
            msgUnitEnd = end;
            msgStream = unitStreamOffset(runStart, runLen, start);
            long len = 0;
            for (int k = start; k < end; k++) {
                len += unitBytes(runLen, k);
            }
            if (mode == Mode.BOTH_DIRECT_BLOCKS && joins != null && end == u) {
                // Whole blocks whose bytes continue in both pools join this message (the stream is block-major).
                int j = joins.joinable(runStart, len);
                if (j > 0) {
                    runStart += j;
                    end = joins.blockEnd();
                    len += j * joins.blockBytes();
                    unitEnd = end;
                    msgUnitEnd = end;
                }
            }
            msgLength = len;
            return true;
        }

        /** @return bytes of the current message */
        public long length() {
            return msgLength;
        }

        /** @return offset of the current message in the part's byte stream */
        public long streamOffset() {
            return msgStream;
        }

        /** @return this rank's region holding the current message (only when {@link #selfDirect()}) */
        public int region() {
            PartSide x = selfIsSender ? snd : rcv;
            return unitRegion(x, x.actual, x.ids[x.first + msgRun], msgUnitStart);
        }

        /** @return offset of the current message in {@link #region()} (only when {@link #selfDirect()}) */
        public long offset() {
            PartSide x = selfIsSender ? snd : rcv;
            return unitOffset(x, x.actual, x.ids[x.first + msgRun], msgUnitStart);
        }

        /**
         * Copies the current message's bytes between this rank's pool and a buffer holding them at
         * {@code bufOffset}: a gather on the sender ({@code toPool == false}), a scatter on the receiver. Works for
         * every plan: where this rank is direct the message is one run of its pool and one {@code copy} moves it
         * (how a rank whose transport cannot take its pool's memory, e.g. a device pool, stages a direct part).
         *
         * @param bm        the copies' manager
         * @param regions   this rank's regions by index
         * @param buf       the staging buffer
         * @param bufOffset where the message's first byte is in {@code buf}
         * @param toPool    true to scatter into the pool, false to gather from it
         */
        public void copy(BufferManager bm, IntFunction<MemoryBuffer> regions, MemoryBuffer buf, long bufOffset,
                         boolean toPool) {
            copy(bm, regions, buf, bufOffset, toPool, null);
        }

        /**
         * As {@link #copy(BufferManager, IntFunction, MemoryBuffer, long, boolean)}, summing the message's bytes in
         * {@code buf} with {@code crc} in the same pass: each slice (or chunk of a direct message) right after its
         * copy. The caller has {@link ChunkCrc#begin begun} the message at {@code bufOffset} and takes the value
         * with {@link ChunkCrc#finish}. Only for synchronous (host) copies.
         *
         * @param crc the message's summer, or null for none
         */
        public void copy(BufferManager bm, IntFunction<MemoryBuffer> regions, MemoryBuffer buf, long bufOffset,
                         boolean toPool, ChunkCrc crc) {
            if (msgRunLen >= 0 && selfDirect()) {
                // A direct message is one contiguous run of this rank's pool in wire order: one copy (a rank whose
                // transport cannot take its pool's memory kind bounces its direct messages through staging).
                MemoryBuffer region = regions.apply(region());
                if (crc != null) {
                    crc.copy(bm, toPool ? buf : region, toPool ? bufOffset : offset(), toPool ? region : buf,
                            toPool ? offset() : bufOffset, msgLength, toPool);
                } else if (toPool) {
                    bm.copy(buf, bufOffset, region, offset(), msgLength);
                } else {
                    bm.copy(region, offset(), buf, bufOffset, msgLength);
                }
                return;
            }
            if (msgRunLen < 0) {
                // The whole part: every run, every unit.
                int i = 0;
                long off = bufOffset;
                while (i < blocks) {
                    int e = runEnd(i, coalesce);
                    off = copyUnits(bm, regions, buf, off, toPool, i, e - i, 0, units(), crc);
                    i = e;
                }
                return;
            }
            copyUnits(bm, regions, buf, bufOffset, toPool, msgRun, msgRunLen, msgUnitStart, msgUnitEnd, crc);
        }
    }

    private long copyUnits(BufferManager bm, IntFunction<MemoryBuffer> regions, MemoryBuffer buf, long off,
                           boolean toPool, int runStart, int runLen, int u0, int u1, ChunkCrc crc) {
        PartSide x = selfIsSender ? snd : rcv;
        PoolGeometry g = x.actual;
        for (int u = u0; u < u1; u++) {
            int ws = u % wireSegments;
            int plane = u / wireSegments;
            int layer = x.firstLayer + plane / kvFactor;
            int kv = plane % kvFactor;
            long slice = sliceBytes(ws);
            for (int j = 0; j < runLen; j++) {
                copySlice(bm, g, regions, x.ids[x.first + runStart + j], layer, kv, x.firstHead, ws, buf, off,
                        toPool);
                off += slice;
                if (crc != null) {
                    crc.placed(off);
                }
            }
        }
        return off;
    }

    /** One block's slice of one wire segment, between the pool (any layout) and the wire order at {@code off}. */
    private void copySlice(BufferManager bm, PoolGeometry g, IntFunction<MemoryBuffer> regions, int blockId,
                           int layer, int kv, int firstHead, int ws, MemoryBuffer buf, long off, boolean toPool) {
        int a = wireFirstDim(ws);
        int w = wireDims(ws);
        long wireH = wireTokensOuter ? (long) w * eb : (long) tokens * w * eb;
        long wireT = wireTokensOuter ? (long) heads * w * eb : (long) w * eb;
        for (int s = 0; s < g.segments(); s++) {
            int sa = g.segmentFirstDim(s);
            int x0 = Math.max(a, sa);
            int x1 = Math.min(a + w, sa + g.segmentDims(s));
            if (x0 >= x1) {
                continue;
            }
            MemoryBuffer region = regions.apply(g.region(blockId, layer, kv, s));
            long poolOff = g.planeOffset(blockId, layer, kv, s) + firstHead * g.headStride(s) + (long) (x0 - sa) * eb;
            long wireOff = off + (long) (x0 - a) * eb;
            long row = (long) (x1 - x0) * eb;
            if (toPool) {
                SliceCopy.copy3d(bm, buf, wireOff, wireH, wireT, region, poolOff, g.headStride(s), g.tokenStride(s),
                        heads, tokens, row);
            } else {
                SliceCopy.copy3d(bm, region, poolOff, g.headStride(s), g.tokenStride(s), buf, wireOff, wireH, wireT,
                        heads, tokens, row);
            }
        }
    }
}
