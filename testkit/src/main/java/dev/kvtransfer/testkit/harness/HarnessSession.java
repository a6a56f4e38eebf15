package dev.kvtransfer.testkit.harness;

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

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Objects;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicLongArray;
import java.util.concurrent.atomic.LongAdder;
import java.util.function.IntConsumer;

/**
 * A faithful in-JVM {@link TransferSession} for formatter tests, without core's protocol: one request on one rank,
 * peers reached through real {@link Connection}s on one data tag per request, staging from a
 * {@link TransferBufferPool} slot taken with the request's deadline, copies through a {@link BufferManager}.
 *
 * <p>Parts are split into messages of {@code chunkBytes} (0 = one message per part) on both sides, as core does.
 * Every wait honours the deadline and fails with a {@link KvTransferException} naming the request. It counts the
 * bytes moved per peer so tests can check who sent what.
 *
 * <p>Staging: each {@link #stagingBuffers} call takes its own slot (so a formatter may stage twice, e.g. MLA's
 * indexer pass); {@link #close()} gives them back.
 */
public final class HarnessSession implements TransferSession, AutoCloseable {
    private final long requestId;
    private final boolean sender;
    private final TransceiverState selfState;
    private final CacheState peerCache;
    private final TargetRanks targets;
    private final int[] blockIds;
    private final int totalBlocks;
    private final Connection[] connections;
    private final int dataTag;
    private final long chunkBytes;
    private final TransferBufferPool pool;
    private final BufferManager bufferManager;
    private final ExecutorService peerExecutor;
    private final long deadlineNanos;
    private final AtomicLongArray bytesPerPeer;
    private final LongAdder measuredBytes = new LongAdder();
    private final LongAdder measures = new LongAdder();
    private final List<TransferBufferPool.Slot> slots = new ArrayList<>();

    /**
     * Creates a session.
     *
     * @param requestId     context request id
     * @param sender        true on the context side
     * @param selfState     this rank's instance state, selfIndex = this rank
     * @param peerCache     the peer instance's cache state for this request
     * @param targets       {@code RankMapping.targetRanks(peerCache, self, selfIndex)}
     * @param blockIds      this rank's blocks of the request
     * @param totalBlocks   blocks of the whole request
     * @param connections   one connection per target position
     * @param dataTag       the request's data tag
     * @param chunkBytes    largest message, 0 = one message per part
     * @param pool          staging pool
     * @param bufferManager copies
     * @param peerExecutor  runs {@link #forEachPeer} actions concurrently, or {@code null} for sequential
     * @param deadlineNanos {@code System.nanoTime()} deadline
     */
    public HarnessSession(long requestId, boolean sender, TransceiverState selfState, CacheState peerCache,
                          TargetRanks targets, int[] blockIds, int totalBlocks, Connection[] connections, int dataTag,
                          long chunkBytes, TransferBufferPool pool, BufferManager bufferManager,
                          ExecutorService peerExecutor, long deadlineNanos) {
        this.requestId = requestId;
        this.sender = sender;
        this.selfState = Objects.requireNonNull(selfState, "selfState");
        this.peerCache = Objects.requireNonNull(peerCache, "peerCache");
        this.targets = Objects.requireNonNull(targets, "targets");
        this.blockIds = Objects.requireNonNull(blockIds, "blockIds").clone();
        this.totalBlocks = totalBlocks;
        this.connections = Objects.requireNonNull(connections, "connections").clone();
        if (connections.length != targets.size()) {
            throw new IllegalArgumentException(connections.length + " connections for " + targets.size()
                    + " target ranks");
        }
        if (chunkBytes < 0) {
            throw new IllegalArgumentException("chunkBytes = " + chunkBytes + ": must be at least 0");
        }
        this.dataTag = dataTag;
        this.chunkBytes = chunkBytes;
        this.pool = Objects.requireNonNull(pool, "pool");
        this.bufferManager = Objects.requireNonNull(bufferManager, "bufferManager");
        this.peerExecutor = peerExecutor;
        this.deadlineNanos = deadlineNanos;
        this.bytesPerPeer = new AtomicLongArray(targets.size());
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
    public MemoryBuffer[] stagingBuffers(long[] sizes) {
        Objects.requireNonNull(sizes, "sizes");
        TransferBufferPool.Slot slot = pool.acquire(sender ? TransferBufferPool.Direction.SEND
                : TransferBufferPool.Direction.RECV, remaining("waiting for a staging slot"));
        synchronized (slots) {
            slots.add(slot);
        }
        return slot.carve(sizes);
    }

    @Override
    public BufferManager bufferManager() {
        return bufferManager;
    }

    @Override
    public void send(int peerIndex, MemoryBuffer buffer, long offset, long length) {
        move(true, peerIndex, buffer, offset, length);
    }

    @Override
    public void recv(int peerIndex, MemoryBuffer buffer, long offset, long length) {
        move(false, peerIndex, buffer, offset, length);
    }

    private void move(boolean out, int peerIndex, MemoryBuffer buffer, long offset, long length) {
        Objects.requireNonNull(buffer, "buffer");
        Objects.checkIndex(peerIndex, connections.length);
        Objects.checkFromIndexSize(offset, length, buffer.size());
        Connection conn = connections[peerIndex];
        long pos = 0;
        do {
            long n = chunkBytes > 0 ? Math.min(chunkBytes, length - pos) : length;
            String what = (out ? "sending " : "receiving ") + n + " bytes " + (out ? "to" : "from") + " peer rank "
                    + targets.peerRanks().get(peerIndex) + " (position " + peerIndex + ", tag " + dataTag + ")";
            Duration left = remaining(what);
            try {
                if (out) {
                    conn.send(dataTag, buffer, offset + pos, n, left);
                } else {
                    conn.recv(dataTag, buffer, offset + pos, n, left);
                }
            } catch (KvTransferException e) {
                throw new KvTransferException(e.code(), requestId, what + " failed: " + e.getMessage(), e);
            } catch (RuntimeException e) {
                throw new KvTransferException(ErrorCode.NETWORK, requestId, what + " failed: " + e, e);
            }
            pos += n;
            bytesPerPeer.addAndGet(peerIndex, n);
        } while (pos < length);
    }

    private Duration remaining(String what) {
        long left = deadlineNanos - System.nanoTime();
        if (left <= 0) {
            throw new KvTransferException(ErrorCode.TIMEOUT, requestId, "deadline passed before " + what, null);
        }
        return Duration.ofNanos(left);
    }

    @Override
    public void forEachPeer(int[] peerIndexes, IntConsumer action) {
        Objects.requireNonNull(peerIndexes, "peerIndexes");
        Objects.requireNonNull(action, "action");
        if (peerExecutor == null || peerIndexes.length <= 1) {
            RuntimeException first = null;
            for (int p : peerIndexes) {
                try {
                    action.accept(p);
                } catch (RuntimeException e) {
                    first = first == null ? e : first;
                }
            }
            if (first != null) {
                throw first;
            }
            return;
        }
        List<Future<?>> futures = new ArrayList<>(peerIndexes.length);
        for (int p : peerIndexes) {
            futures.add(peerExecutor.submit(() -> action.accept(p)));
        }
        RuntimeException first = null;
        for (int i = 0; i < futures.size(); i++) {
            Future<?> f = futures.get(i);
            try {
                // A little grace past the deadline lets the action report its own TIMEOUT.
                long left = Math.max(0, deadlineNanos - System.nanoTime()) + TimeUnit.SECONDS.toNanos(1);
                f.get(left, TimeUnit.NANOSECONDS);
            } catch (ExecutionException e) {
                Throwable c = e.getCause();
                RuntimeException r = c instanceof RuntimeException re ? re
                        : new KvTransferException(ErrorCode.INTERNAL, requestId, "peer action failed: " + c, c);
                first = first == null ? r : first;
            } catch (TimeoutException e) {
                f.cancel(true);
                first = first == null ? new KvTransferException(ErrorCode.TIMEOUT, requestId, "peer action for"
                        + " position " + peerIndexes[i] + " did not finish by the deadline", null) : first;
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
        Objects.checkIndex(peerIndex, connections.length);
        if (endNanos < startNanos || bytes < 0) {
            throw new IllegalArgumentException("measure of peer " + peerIndex + ": start " + startNanos + ", end "
                    + endNanos + ", bytes " + bytes);
        }
        measures.increment();
        measuredBytes.add(bytes);
    }

    /** @return payload bytes sent or received through this session, all peers */
    public long movedBytes() {
        long s = 0;
        for (int i = 0; i < bytesPerPeer.length(); i++) {
            s += bytesPerPeer.get(i);
        }
        return s;
    }

    /**
     * @param peerIndex a target position
     * @return payload bytes moved with that peer
     */
    public long movedBytes(int peerIndex) {
        return bytesPerPeer.get(peerIndex);
    }

    /** @return bytes reported through {@link #recordMeasure} */
    public long measuredBytes() {
        return measuredBytes.sum();
    }

    /** @return number of {@link #recordMeasure} calls */
    public long measureCount() {
        return measures.sum();
    }

    /** Gives the staging slots back (idempotent). */
    @Override
    public void close() {
        synchronized (slots) {
            for (TransferBufferPool.Slot s : slots) {
                s.close();
            }
            slots.clear();
        }
    }
}
