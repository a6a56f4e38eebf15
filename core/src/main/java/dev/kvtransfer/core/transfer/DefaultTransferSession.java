package dev.kvtransfer.core.transfer;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.KvTransferException;
import dev.kvtransfer.api.format.TransferBufferPool;
import dev.kvtransfer.api.format.TransferSession;
import dev.kvtransfer.api.layout.TargetRanks;
import dev.kvtransfer.api.memory.BufferManager;
import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.api.model.TransceiverState;
import dev.kvtransfer.api.transport.Connection;
import dev.kvtransfer.core.journal.Checksums;
import dev.kvtransfer.core.journal.TransferJournal;
import dev.kvtransfer.core.protocol.PushNoticeFlyweight;
import dev.kvtransfer.core.timing.TransferTiming;

import java.time.Duration;
import java.util.Objects;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Future;
import java.util.concurrent.RejectedExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.function.IntConsumer;

/**
 * core's {@link TransferSession}: one request on one rank. Peers are positions in {@link #targets()}; each
 * has a connection and its own data tag (the tag the generation rank chose). Parts are split into messages of
 * exactly {@code chunkBytes} (the last shorter; a part of 0 bytes is one empty message), the same split on
 * both sides because the requester's chunk size travels in its RequestInfo. Every call waits at most until
 * the request's deadline and fails with a {@link KvTransferException} carrying the request id and the code
 * of the transport failure ({@code TIMEOUT}, {@code PEER_LOST}, {@code NETWORK}, {@code MALFORMED}).
 *
 * <p>Staging: the first {@link #stagingBuffers} call takes one slot of the pool (with the deadline); every
 * call carves from that slot; {@link #close()} gives it back. Not thread-safe except {@link #send},
 * {@link #recv} and {@link #recordMeasure} for different peers (what {@link #forEachPeer} runs).
 */
public final class DefaultTransferSession implements TransferSession, AutoCloseable {
    private final long requestId;
    private final boolean sender;
    private final TransceiverState selfState;
    private final CacheState peerCache;
    private final TargetRanks targets;
    private final int[] blockIds;
    private final int totalBlocks;
    private final Connection[] connections;
    private final int[] tags;
    private final long chunkBytes;
    private final TransferBufferPool pool;
    private final BufferManager bufferManager;
    /** Reused buffers for the checksum lists, or null (allocated per list). */
    private final ControlBuffers control;
    private final ExecutorService peerExecutor;
    private final long deadlineNanos;
    private final TransferTiming timing;
    // Added to by the peer threads: a field updated atomically, not a LongAdder object per session.
    private volatile long movedBytes;
    private static final java.lang.invoke.VarHandle MOVED_BYTES;

    static {
        try {
            MOVED_BYTES = java.lang.invoke.MethodHandles.lookup().findVarHandle(DefaultTransferSession.class,
                    "movedBytes", long.class);
        } catch (ReflectiveOperationException e) {
            throw new ExceptionInInitializerError(e);
        }
    }
    private final TransferJournal journal;
    private TransferBufferPool.Slot slot;

    private final int reusedBlocks;
    private final int[][] peerBlockIds;
    private final int[] peerBlocksPerRegion;
    /** Push: the peers' pools (null for a pull session). */
    private final dev.kvtransfer.api.format.PeerPool[] peerPools;
    /** Push: what was written into each peer's pool, and what of it was reported (null for a pull session). */
    private final PushWriteLog writes;
    /** Per peer: the CRC32C and stream offset of every message moved (null when checksums are off). */
    private final PartChecksumLog crcs;
    private final int[] messages;
    private final long[] peerBytes;
    private final SessionLedger ledger;
    /** Whether the transport declared DEVICE_MEMORY ({@link Builder#transportCapabilities}). */
    private final boolean deviceMemory;

    private DefaultTransferSession(Builder b) {
        this.journal = Objects.requireNonNull(b.journal, "journal");
        this.requestId = b.requestId;
        this.sender = b.sender;
        this.selfState = Objects.requireNonNull(b.selfState, "selfState");
        this.peerCache = Objects.requireNonNull(b.peerCache, "peerCache");
        this.targets = Objects.requireNonNull(b.targets, "targets");
        this.blockIds = Objects.requireNonNull(b.blockIds, "blockIds");
        this.totalBlocks = b.totalBlocks;
        this.connections = Objects.requireNonNull(b.connections, "connections");
        this.tags = Objects.requireNonNull(b.tags, "tags");
        if (connections.length != targets.size() || tags.length != targets.size()) {
            throw new IllegalArgumentException("need one connection and tag per target rank: " + targets.size());
        }
        if (b.reusedBlocks < 0 || b.reusedBlocks > b.totalBlocks) {
            throw new IllegalArgumentException("reusedBlocks = " + b.reusedBlocks + ": must be in [0, totalBlocks = "
                    + b.totalBlocks + "]");
        }
        if (b.peerBlockIds != null && b.peerBlockIds.length != targets.size()) {
            throw new IllegalArgumentException("need one peer block-id list (or null) per target rank: "
                    + targets.size());
        }
        this.chunkBytes = b.chunkBytes;
        this.pool = b.pool;
        this.bufferManager = Objects.requireNonNull(b.bufferManager, "bufferManager");
        this.control = b.control;
        this.peerExecutor = b.peerExecutor;
        this.deadlineNanos = b.deadlineNanos;
        this.timing = Objects.requireNonNull(b.timing, "timing");
        this.reusedBlocks = b.reusedBlocks;
        this.peerBlockIds = b.peerBlockIds;
        this.peerBlocksPerRegion = b.peerBlocksPerRegion;
        this.peerPools = b.peerPools;
        if (peerPools != null && peerPools.length != targets.size()) {
            throw new IllegalArgumentException("need one peer pool (or null) per target rank: " + targets.size());
        }
        this.writes = peerPools == null ? null : new PushWriteLog(targets.size());
        this.crcs = b.checksums ? new PartChecksumLog(targets.size()) : null;
        this.messages = new int[targets.size()];
        this.peerBytes = new long[targets.size()];
        this.ledger = new SessionLedger(targets.size());
        this.deviceMemory = b.deviceMemory;
    }

    /**
     * A builder for one request's session on one rank.
     *
     * @param requestId context request id
     * @param sender    true on the context side
     * @return the builder
     */
    public static Builder builder(long requestId, boolean sender) {
        return new Builder(requestId, sender);
    }

    /** Builds a {@link DefaultTransferSession}; every setter without a default must be called. */
    public static final class Builder {
        private final long requestId;
        private final boolean sender;
        private TransceiverState selfState;
        private CacheState peerCache;
        private TargetRanks targets;
        private int[] blockIds;
        private int totalBlocks;
        private Connection[] connections;
        private int[] tags;
        private long chunkBytes;
        private TransferBufferPool pool;
        private BufferManager bufferManager;
        private ExecutorService peerExecutor;
        private long deadlineNanos;
        private TransferTiming timing;
        private TransferJournal journal = TransferJournal.NOOP;
        private int reusedBlocks;
        private int[][] peerBlockIds;
        private int[] peerBlocksPerRegion;
        private dev.kvtransfer.api.format.PeerPool[] peerPools;
        private boolean checksums;
        private ControlBuffers control;
        private boolean deviceMemory;

        private Builder(long requestId, boolean sender) {
            this.requestId = requestId;
            this.sender = sender;
        }

        /**
         * @param self   this rank's state (selfIndex set)
         * @param peer   the peer instance's cache state
         * @param t      target ranks of this rank in the peer instance
         * @return this builder
         */
        public Builder states(TransceiverState self, CacheState peer, TargetRanks t) {
            this.selfState = self;
            this.peerCache = peer;
            this.targets = t;
            return this;
        }

        /**
         * @param ids   this rank's blocks of the request (reused ones included)
         * @param total blocks of the whole request
         * @return this builder
         */
        public Builder blocks(int[] ids, int total) {
            this.blockIds = ids;
            this.totalBlocks = total;
            return this;
        }

        /**
         * @param conns connection per peer position (null for a peer this rank does not talk to)
         * @param t     data tag per peer position
         * @param chunk largest message, 0 = unchunked
         * @return this builder
         */
        public Builder connections(Connection[] conns, int[] t, long chunk) {
            this.connections = conns;
            this.tags = t;
            this.chunkBytes = chunk;
            return this;
        }

        /**
         * @param p   staging pool (null: {@link #stagingBuffers} fails)
         * @param bm  copies
         * @param exe runs per-peer actions concurrently, or null for sequential
         * @return this builder
         */
        public Builder resources(TransferBufferPool p, BufferManager bm, ExecutorService exe) {
            this.pool = p;
            this.bufferManager = bm;
            this.peerExecutor = exe;
            return this;
        }

        /**
         * @param deadline {@code System.nanoTime()} deadline of the request
         * @param t        where measures and stamps go
         * @return this builder
         */
        public Builder deadline(long deadline, TransferTiming t) {
            this.deadlineNanos = deadline;
            this.timing = t;
            return this;
        }

        /**
         * @param j where each part is recorded (default none)
         * @return this builder
         */
        public Builder journal(TransferJournal j) {
            this.journal = j;
            return this;
        }

        /**
         * @param n leading global blocks the generation side already holds (default 0)
         * @return this builder
         */
        public Builder reusedBlocks(int n) {
            this.reusedBlocks = n;
            return this;
        }

        /**
         * @param ids per peer position, that peer rank's block ids of the request, or null where unknown
         * @return this builder
         */
        public Builder peerBlockIds(int[][] ids) {
            this.peerBlockIds = ids;
            return this;
        }

        /**
         * @param pools per peer position, its pool for a one-sided push (null entries for peers this rank does
         *              not write); makes this a push session
         * @return this builder
         */
        public Builder push(dev.kvtransfer.api.format.PeerPool[] pools) {
            this.peerPools = pools;
            return this;
        }

        /**
         * @param bpr per peer position, the peer pool's blocks per region (null = 1 everywhere)
         * @return this builder
         */
        public Builder peerBlocksPerRegion(int[] bpr) {
            this.peerBlocksPerRegion = bpr;
            return this;
        }

        /**
         * @param on whether every message's CRC32C is kept for the end-to-end check (default off)
         * @return this builder
         */
        public Builder checksums(boolean on) {
            this.checksums = on;
            return this;
        }

        /**
         * @param buffers reused HOST buffers for the checksum lists (the sender's / receiver's), or null
         * @return this builder
         */
        Builder controlBuffers(ControlBuffers buffers) {
            this.control = buffers;
            return this;
        }

        /**
         * @param caps the capabilities of the connections' transport (default none): with
         *             {@link dev.kvtransfer.api.transport.TransportCapability#DEVICE_MEMORY} the formatter may hand it
         *             {@code DEVICE} buffers ({@link DefaultTransferSession#transportAccepts}), else it stages device pools
         * @return this builder
         */
        public Builder transportCapabilities(java.util.Set<dev.kvtransfer.api.transport.TransportCapability> caps) {
            this.deviceMemory = Objects.requireNonNull(caps, "caps").contains(
                    dev.kvtransfer.api.transport.TransportCapability.DEVICE_MEMORY);
            return this;
        }

        /** @return the session */
        public DefaultTransferSession build() {
            return new DefaultTransferSession(this);
        }
    }

    @Override
    public long requestId() {
        return requestId;
    }

    @Override
    public boolean isSender() {
        return sender;
    }

    @Override
    public TransceiverState selfState() {
        return selfState;
    }

    @Override
    public CacheState peerCacheState() {
        return peerCache;
    }

    @Override
    public TargetRanks targets() {
        return targets;
    }

    @Override
    public int[] blockIds() {
        return blockIds;
    }

    @Override
    public int totalBlocks() {
        return totalBlocks;
    }

    @Override
    public synchronized MemoryBuffer[] stagingBuffers(long[] sizes) {
        Objects.requireNonNull(sizes, "sizes");
        if (pool == null) {
            throw new KvTransferException(ErrorCode.INTERNAL, requestId, "this session has no staging pool", null);
        }
        if (slot == null) {
            slot = pool.acquire(sender ? TransferBufferPool.Direction.SEND : TransferBufferPool.Direction.RECV,
                    remaining("waiting for a staging slot"));
        }
        MemoryBuffer[] carved = slot.carve(sizes);
        ledger.staging(carved);
        return carved;
    }

    /**
     * The copy ledger of what this session moved, read once it moved everything (after {@link #close()} or the
     * formatter's last call).
     *
     * @return this rank's ledger of the request
     */
    public dev.kvtransfer.core.CopyLedger copyLedger() {
        return ledger.total(movedBytes);
    }

    @Override
    public int reusedBlocks() {
        return reusedBlocks;
    }

    @Override
    public int[] peerBlockIds(int peerIndex) {
        Objects.checkIndex(peerIndex, targets.size());
        return peerBlockIds == null ? null : peerBlockIds[peerIndex];
    }

    @Override
    public boolean isPush() {
        return peerPools != null;
    }

    @Override
    public dev.kvtransfer.api.format.PeerPool peerPool(int peerIndex) {
        Objects.checkIndex(peerIndex, targets.size());
        return peerPools == null ? null : peerPools[peerIndex];
    }

    @Override
    public void write(int peerIndex, dev.kvtransfer.api.transport.WriteBatch batch) {
        Objects.requireNonNull(batch, "batch");
        if (peerPools == null) {
            throw new UnsupportedOperationException("request " + requestId + ": not a push session");
        }
        Connection conn = connection(peerIndex);
        long started = System.nanoTime();
        timing.preprocessAtMost(started);
        writes.write(this, peerIndex, conn, batch, crcs != null);
        timing.transmissions(System.nanoTime());
        for (int i = 0; i < batch.size(); i++) {
            long n = batch.length(i);
            ledger.moved(peerIndex, batch.source(i), n, conn.writeCopiesPerByte(n));
            if (crcs != null) {
                ledger.checksummed(peerIndex, n);
            }
        }
        messages[peerIndex] += batch.size();
        peerBytes[peerIndex] += batch.totalBytes();
        MOVED_BYTES.getAndAdd(this, batch.totalBytes());
    }

    /** Push, context side: the peers that take progress notices ({@link PushWriteLog#progress}). */
    void progressNotices(boolean[] perPeer) {
        writes.progress(perPeer);
    }

    /**
     * Push, context side: sends a peer the done notification and the list of what was written into its pool since
     * the last {@link #sendLayerWritten} (region id, offset, length, CRC32C of each entry), which the peer checks
     * before it completes.
     *
     * @param peerIndex the peer
     */
    public void sendPushDone(int peerIndex) {
        writes.send(this, peerIndex, PushNoticeFlyweight.TYPE_DONE, 0, "that the push is done");
    }

    /**
     * Push, context side, layer-wise: tells a peer that a global layer was written, with the list of what was
     * written into its pool since the previous notice, so the peer checks those entries while this rank writes the
     * next layer (not all of them after the last one).
     *
     * @param peerIndex the peer
     * @param layer     the global layer
     */
    public void sendLayerWritten(int peerIndex, int layer) {
        writes.send(this, peerIndex, PushNoticeFlyweight.TYPE_LAYER, layer, "that layer " + layer + " was written");
    }

    /**
     * Sends a peer a small notification on the request's data tag ({@link PushNoticeFlyweight}).
     *
     * @param peerIndex the peer
     * @param type      the notice type
     * @param layer     a global layer (or 0)
     * @param value     a value (or 0)
     */
    public void sendNotice(int peerIndex, int type, int layer, long value) {
        Connection conn = connection(peerIndex);
        try (ControlBuffers.Lease m = controlBuffer(PushNoticeFlyweight.LENGTH)) {
            new PushNoticeFlyweight().wrap(m.bytes(), 0).write(type, layer, value);
            conn.send(tags[peerIndex], m.buffer(), 0, PushNoticeFlyweight.LENGTH, remaining("sending a notification"));
            m.reusable();
        }
    }

    /** @return {@code System.nanoTime()} deadline of the request */
    long deadlineNanos() {
        return deadlineNanos;
    }

    /** @return the peer connection of a position (for the protocol's own messages) */
    Connection peerConnection(int peerIndex) {
        return connection(peerIndex);
    }

    /** @return the data tag of a position */
    int peerTag(int peerIndex) {
        return tags[peerIndex];
    }

    @Override
    public int peerBlocksPerRegion(int peerIndex) {
        Objects.checkIndex(peerIndex, targets.size());
        return peerBlocksPerRegion == null ? 1 : Math.max(1, peerBlocksPerRegion[peerIndex]);
    }

    @Override
    public boolean transportAccepts(dev.kvtransfer.api.memory.MemoryKind kind) {
        return Objects.requireNonNull(kind, "kind") != dev.kvtransfer.api.memory.MemoryKind.DEVICE || deviceMemory;
    }

    @Override
    public BufferManager bufferManager() {
        return bufferManager;
    }

    @Override
    public void send(int peerIndex, MemoryBuffer buffer, long offset, long length) {
        move(true, peerIndex, buffer, offset, length, 0, false);
    }

    @Override
    public void send(int peerIndex, MemoryBuffer buffer, long offset, long length, int crc32c) {
        move(true, peerIndex, buffer, offset, length, crc32c, true);
    }

    @Override
    public void recv(int peerIndex, MemoryBuffer buffer, long offset, long length) {
        move(false, peerIndex, buffer, offset, length, 0, false);
    }

    @Override
    public boolean recvChecksumLater(int peerIndex, MemoryBuffer buffer, long offset, long length) {
        return move(false, peerIndex, buffer, offset, length, 0, true);
    }

    @Override
    public boolean partChecksums() {
        return crcs != null;
    }

    @Override
    public void receivedChecksum(int peerIndex, int crc32c) {
        PartChecksumLog.settle(crcs, this, peerIndex, crc32c);
    }

    /** Moves a part as messages of at most chunkBytes with their CRC32C (checksums on): a sender sums a message
     *  before it goes (that pass leaves it cached for the transport's copy; formatter-standard README), a receiver
     *  after it arrived. {@code fused}: a one-message part's sum comes from the formatter ({@code crc}, or later
     *  through receivedChecksum on a receive: then this returns true). */
    private boolean move(boolean out, int peerIndex, MemoryBuffer buffer, long offset, long length, int crc,
                         boolean fused) {
        Objects.requireNonNull(buffer, "buffer");
        Connection conn = connection(peerIndex);
        Objects.checkFromIndexSize(offset, length, buffer.size());
        int tag = tags[peerIndex];
        long started = System.nanoTime();
        timing.preprocessAtMost(started);
        boolean whole = fused && crcs != null && (chunkBytes <= 0 || length <= chunkBytes);
        if (crcs != null) {
            crcs.checkSettled(this, peerIndex); // a formatter that forgot one fails here, named
        }
        // Hot path (one call per block for zero-copy formatters): no strings or lists built unless it fails.
        long pos = 0;
        do {
            long n = chunkBytes > 0 ? Math.min(chunkBytes, length - pos) : length;
            long left = deadlineNanos - System.nanoTime();
            if (left <= 0) {
                throw new KvTransferException(ErrorCode.TIMEOUT, requestId, "deadline passed before "
                        + describe(out, peerIndex, conn, tag, n), null);
            }
            int sum = out && crcs != null && !whole ? (int) Checksums.crc32c(buffer, offset + pos, n) : crc;
            try {
                if (out) {
                    conn.send(tag, buffer, offset + pos, n, Waits.left(left));
                } else {
                    conn.recv(tag, buffer, offset + pos, n, Waits.left(left));
                }
            } catch (KvTransferException e) {
                throw new KvTransferException(e.code(), requestId, describe(out, peerIndex, conn, tag, n)
                        + " failed: " + e.getMessage(), e);
            } catch (RuntimeException e) {
                throw new KvTransferException(ErrorCode.NETWORK, requestId, describe(out, peerIndex, conn, tag, n)
                        + " failed: " + e, e);
            }
            sum = !out && crcs != null && !whole ? (int) Checksums.crc32c(buffer, offset + pos, n) : sum;
            record(peerIndex, n, sum, !out && whole);
            ledger.moved(peerIndex, buffer, n, conn.copiesPerByte(n));
            pos += n;
            MOVED_BYTES.getAndAdd(this, n);
        } while (pos < length);
        long ended = System.nanoTime();
        timing.transmissions(ended);
        if (journal.enabled()) {
            // After the move, so neither the checksum nor the journal delays the bytes; a fixed-size event.
            long jcrc = journal.checksums() ? Checksums.crc32c(buffer, offset, length) : TransferJournal.NO_CRC;
            if (journal.checksums()) {
                ledger.checksummed(peerIndex, length);
            }
            int peerRank = targets.peerRanks().get(peerIndex);
            if (out) {
                journal.partSent(requestId, peerRank, length, jcrc, ended - started);
            } else {
                journal.partReceived(requestId, peerRank, length, jcrc, ended - started);
            }
        }
        return !out && whole;
    }

    /** Counts one message of a peer and keeps its CRC32C, or notes that the formatter owes it (the per-peer arrays
     *  are only touched by that peer's thread: forEachPeer gives each peer one thread). */
    private void record(int peerIndex, long n, int crc, boolean owed) {
        int k = messages[peerIndex]++;
        long start = peerBytes[peerIndex];
        peerBytes[peerIndex] += n;
        if (crcs != null) {
            if (owed) {
                crcs.owe(peerIndex, k, start);
            } else {
                crcs.record(peerIndex, k, start, crc);
            }
            ledger.checksummed(peerIndex, n);
        }
    }

    /**
     * The per-peer byte counts themselves, for a caller that reads them once the session moved everything (after
     * {@link #close()} or the formatter's last call): no copy. The caller must not modify the array.
     *
     * @return bytes moved with each peer, in target order
     */
    long[] peerBytesAfterClose() {
        return peerBytes;
    }

    /** @return bytes moved with each peer so far, in target order (a copy) */
    public long[] peerBytes() {
        return peerBytes.clone();
    }

    /** @return messages moved with all peers so far */
    public int messageCount() {
        int n = 0;
        for (int m : messages) {
            n += m;
        }
        return n;
    }

    /** A buffer for a control message (a checksum list, a notice): a reused one with {@link ControlBuffers}. */
    ControlBuffers.Lease controlBuffer(long bytes) {
        return (control != null ? control : ControlBuffers.unpooled(bufferManager)).acquire(bytes);
    }

    /**
     * Sender, after the formatter returned: sends each peer it sent messages to the CRC32C of every one of them
     * ({@link dev.kvtransfer.core.protocol.PartChecksumsFlyweight}), so the receiver can check every byte end to
     * end. Does nothing when checksums are off.
     */
    public void sendChecksums() {
        if (crcs != null) {
            crcs.send(this);
        }
    }

    /**
     * Receiver, after the formatter returned and before the request may complete: receives each sending peer's
     * checksums and compares them with what arrived. A difference fails the request {@code MALFORMED} naming the
     * peer, the message and its byte offset in that peer's stream. Does nothing when checksums are off.
     */
    public void verifyChecksums() {
        if (crcs != null) {
            crcs.verify(this);
        }
    }

    /** @return messages moved with one peer so far */
    int messagesWith(int peerIndex) {
        return messages[peerIndex];
    }

    /** @return bytes moved with one peer so far */
    long bytesWith(int peerIndex) {
        return peerBytes[peerIndex];
    }

    /** @return the connection of a peer */
    Connection peerConnectionOf(int peerIndex) {
        return connection(peerIndex);
    }

    private String describe(boolean out, int peerIndex, Connection conn, int tag, long n) {
        return (out ? "sending " : "receiving ") + n + " bytes " + (out ? "to" : "from") + " peer rank "
                + targets.peerRanks().get(peerIndex) + " (" + conn.peer() + ", tag " + tag + ")";
    }

    private Connection connection(int peerIndex) {
        Objects.checkIndex(peerIndex, connections.length);
        Connection c = connections[peerIndex];
        if (c == null) {
            throw new KvTransferException(ErrorCode.INTERNAL, requestId, "peer position " + peerIndex + " (rank "
                    + targets.peerRanks().get(peerIndex) + ") has no connection in this session", null);
        }
        return c;
    }

    /**
     * Time left until the request's deadline.
     *
     * @param what what is about to wait, for the error
     * @return a positive duration
     * @throws KvTransferException {@code TIMEOUT} when the deadline has passed
     */
    Duration remaining(String what) {
        long left = deadlineNanos - System.nanoTime();
        if (left <= 0) {
            throw new KvTransferException(ErrorCode.TIMEOUT, requestId, "deadline passed before " + what, null);
        }
        return Waits.left(left);
    }

    @Override
    public void forEachPeer(int[] peerIndexes, IntConsumer action) {
        Objects.requireNonNull(peerIndexes, "peerIndexes");
        Objects.requireNonNull(action, "action");
        if (peerExecutor == null || peerIndexes.length <= 1) {
            // The same contract as the parallel path: every peer runs, the first failure is rethrown after.
            RuntimeException first = null;
            for (int p : peerIndexes) {
                try {
                    action.accept(p);
                } catch (RuntimeException e) {
                    if (first == null) {
                        first = e;
                    } else if (first != e) {
                        first.addSuppressed(e);
                    }
                }
            }
            if (first != null) {
                throw first;
            }
            return;
        }
        Future<?>[] futures = new Future<?>[peerIndexes.length];
        RuntimeException first = null;
        for (int i = 1; i < peerIndexes.length; i++) {
            int p = peerIndexes[i];
            try {
                futures[i] = peerExecutor.submit(() -> action.accept(p));
            } catch (RejectedExecutionException e) {
                futures[i] = null;
                // Saturated or closing: run it here rather than fail the transfer.
                try {
                    action.accept(p);
                } catch (RuntimeException ex) {
                    first = first == null ? ex : first;
                }
            }
        }
        try {
            action.accept(peerIndexes[0]);
        } catch (RuntimeException e) {
            first = first == null ? e : first;
        }
        for (int i = 1; i < futures.length; i++) {
            if (futures[i] == null) {
                continue;
            }
            try {
                // Each action waits on the same deadline; a little grace lets it report its own TIMEOUT.
                long left = Math.max(0, deadlineNanos - System.nanoTime()) + TimeUnit.SECONDS.toNanos(1);
                futures[i].get(left, TimeUnit.NANOSECONDS);
            } catch (java.util.concurrent.ExecutionException e) {
                Throwable c = e.getCause();
                RuntimeException r = c instanceof RuntimeException re ? re
                        : new KvTransferException(ErrorCode.INTERNAL, requestId, "peer action failed: " + c, c);
                first = first == null ? r : first;
            } catch (java.util.concurrent.TimeoutException e) {
                futures[i].cancel(true);
                first = first == null ? new KvTransferException(ErrorCode.TIMEOUT, requestId,
                        "peer action for position " + peerIndexes[i] + " did not finish by the deadline", null) : first;
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                first = first == null ? new KvTransferException(ErrorCode.CANCELLED, requestId,
                        "interrupted while waiting for peer actions", e) : first;
            }
        }
        if (first != null) {
            throw first;
        }
    }

    @Override
    public void recordMeasure(int peerIndex, long startNanos, long endNanos, long bytes) {
        timing.measure(peerIndex, startNanos, endNanos, bytes);
    }

    /** @return payload bytes sent or received through this session so far */
    public long movedBytes() {
        return movedBytes;
    }

    /** @return the timing this session records into */
    public TransferTiming timing() {
        return timing;
    }

    /** Gives the staging slot back (idempotent). */
    @Override
    public synchronized void close() {
        if (slot != null) {
            slot.close();
            slot = null;
        }
    }
}
