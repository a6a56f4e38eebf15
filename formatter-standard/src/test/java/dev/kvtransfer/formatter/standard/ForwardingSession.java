package dev.kvtransfer.formatter.standard;

import dev.kvtransfer.api.format.PeerPool;
import dev.kvtransfer.api.format.TransferSession;
import dev.kvtransfer.api.layout.TargetRanks;
import dev.kvtransfer.api.memory.BufferManager;
import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.api.model.TransceiverState;
import dev.kvtransfer.api.transport.WriteBatch;

import java.util.function.IntConsumer;

/** A session that forwards every call to another: the broken-formatter tests override only what they break. */
abstract class ForwardingSession implements TransferSession {
    protected final TransferSession s;

    ForwardingSession(TransferSession s) {
        this.s = s;
    }

    @Override
    public long requestId() {
        return s.requestId();
    }

    @Override
    public boolean isSender() {
        return s.isSender();
    }

    @Override
    public TransceiverState selfState() {
        return s.selfState();
    }

    @Override
    public CacheState peerCacheState() {
        return s.peerCacheState();
    }

    @Override
    public TargetRanks targets() {
        return s.targets();
    }

    @Override
    public int[] blockIds() {
        return s.blockIds();
    }

    @Override
    public int totalBlocks() {
        return s.totalBlocks();
    }

    @Override
    public int reusedBlocks() {
        return s.reusedBlocks();
    }

    @Override
    public int[] peerBlockIds(int peerIndex) {
        return s.peerBlockIds(peerIndex);
    }

    @Override
    public int peerBlocksPerRegion(int peerIndex) {
        return s.peerBlocksPerRegion(peerIndex);
    }

    @Override
    public boolean isPush() {
        return s.isPush();
    }

    @Override
    public PeerPool peerPool(int peerIndex) {
        return s.peerPool(peerIndex);
    }

    @Override
    public void write(int peerIndex, WriteBatch batch) {
        s.write(peerIndex, batch);
    }

    @Override
    public MemoryBuffer[] stagingBuffers(long[] sizes) {
        return s.stagingBuffers(sizes);
    }

    @Override
    public BufferManager bufferManager() {
        return s.bufferManager();
    }

    @Override
    public void send(int peerIndex, MemoryBuffer buffer, long offset, long length) {
        s.send(peerIndex, buffer, offset, length);
    }

    @Override
    public void recv(int peerIndex, MemoryBuffer buffer, long offset, long length) {
        s.recv(peerIndex, buffer, offset, length);
    }

    @Override
    public void forEachPeer(int[] peerIndexes, IntConsumer action) {
        s.forEachPeer(peerIndexes, action);
    }

    @Override
    public void recordMeasure(int peerIndex, long startNanos, long endNanos, long bytes) {
        s.recordMeasure(peerIndex, startNanos, endNanos, bytes);
    }
}
