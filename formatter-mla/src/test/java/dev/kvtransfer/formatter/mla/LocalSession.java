package dev.kvtransfer.formatter.mla;

import dev.kvtransfer.api.format.TransferBufferPool;
import dev.kvtransfer.api.format.TransferSession;
import dev.kvtransfer.api.layout.RankMapping;
import dev.kvtransfer.api.layout.TargetRanks;
import dev.kvtransfer.api.memory.BufferManager;
import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.api.model.TransceiverState;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.function.IntConsumer;

/**
 * A {@link TransferSession} over a {@link LocalFabric}: one request on one rank, peers addressed by their
 * position in the target-rank list, staging from a {@link TransferBufferPool} slot per call, all released by
 * {@link #close()}. Counts what moved so tests can assert who sent what.
 */
final class LocalSession implements TransferSession, AutoCloseable {
    private final long requestId;
    private final boolean sender;
    private final TransceiverState self;
    private final CacheState peer;
    private final TargetRanks targets;
    private final int[] blockIds;
    private final int totalBlocks;
    private final BufferManager memory;
    private final TransferBufferPool pool;
    private final LocalFabric fabric;
    private final List<TransferBufferPool.Slot> slots = new ArrayList<>();
    long sentBytes;
    int sentParts;
    long receivedBytes;
    int receivedParts;
    int stagingCalls;
    int measures;

    LocalSession(long requestId, boolean sender, TransceiverState self, CacheState peer, int[] blockIds,
                 int totalBlocks, BufferManager memory, TransferBufferPool pool, LocalFabric fabric) {
        this.requestId = requestId;
        this.sender = sender;
        this.self = self;
        this.peer = peer;
        this.targets = RankMapping.targetRanks(peer, self.cacheState(), self.selfIndex());
        this.blockIds = blockIds.clone();
        this.totalBlocks = totalBlocks;
        this.memory = memory;
        this.pool = pool;
        this.fabric = fabric;
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
        return self;
    }

    @Override
    public CacheState peerCacheState() {
        return peer;
    }

    @Override
    public TargetRanks targets() {
        return targets;
    }

    @Override
    public int[] blockIds() {
        return blockIds.clone();
    }

    @Override
    public int totalBlocks() {
        return totalBlocks;
    }

    @Override
    public MemoryBuffer[] stagingBuffers(long[] sizes) {
        stagingCalls++;
        TransferBufferPool.Slot slot = pool.acquire(
                sender ? TransferBufferPool.Direction.SEND : TransferBufferPool.Direction.RECV, Duration.ofSeconds(5));
        slots.add(slot);
        return slot.carve(sizes);
    }

    @Override
    public BufferManager bufferManager() {
        return memory;
    }

    @Override
    public void send(int peerIndex, MemoryBuffer buffer, long offset, long length) {
        if (!sender) {
            throw new IllegalStateException("generation session sends no payload");
        }
        fabric.send(self.selfIndex(), targets.peerRanks().get(peerIndex), buffer, offset, length);
        sentBytes += length;
        sentParts++;
    }

    @Override
    public void recv(int peerIndex, MemoryBuffer buffer, long offset, long length) {
        if (sender) {
            throw new IllegalStateException("context session receives no payload");
        }
        fabric.recv(requestId, targets.peerRanks().get(peerIndex), self.selfIndex(), buffer, offset, length);
        receivedBytes += length;
        receivedParts++;
    }

    @Override
    public void forEachPeer(int[] peerIndexes, IntConsumer action) {
        for (int p : peerIndexes) {
            action.accept(p);
        }
    }

    @Override
    public void recordMeasure(int peerIndex, long startNanos, long endNanos, long bytes) {
        if (endNanos < startNanos || bytes < 0 || peerIndex < 0 || peerIndex >= targets.size()) {
            throw new IllegalArgumentException("bad measure: peer " + peerIndex + " " + startNanos + ".."
                    + endNanos + " " + bytes + " B");
        }
        measures++;
    }

    @Override
    public void close() {
        slots.forEach(TransferBufferPool.Slot::close);
        slots.clear();
    }
}
