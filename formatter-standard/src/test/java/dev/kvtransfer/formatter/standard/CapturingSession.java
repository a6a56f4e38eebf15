package dev.kvtransfer.formatter.standard;

import dev.kvtransfer.api.format.TransferSession;
import dev.kvtransfer.api.layout.RankMapping;
import dev.kvtransfer.api.layout.TargetRanks;
import dev.kvtransfer.api.memory.BufferManager;
import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.memory.MemoryKind;
import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.api.model.CommState;
import dev.kvtransfer.api.model.TransceiverState;

import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Collections;
import java.util.Deque;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.function.IntConsumer;

/**
 * A transport-free session for unit tests: a sender's parts are copied into owned buffers per peer rank (in
 * order), and a receiver is served from such captures. Records whether staging was asked for and which buffers
 * were sent from or received into, so zero copy can be checked by identity.
 */
final class CapturingSession implements TransferSession, AutoCloseable {
    /** One captured message. */
    record Message(MemoryBuffer source, long offset, long length, MemoryBuffer copy) {
    }

    private final long requestId;
    private final boolean sender;
    private final CacheState self;
    private final int selfIndex;
    private final CacheState peer;
    private final TargetRanks targets;
    private final int[] blockIds;
    private final int totalBlocks;
    private final BufferManager memory;
    /** Sender: messages sent, per peer position. Receiver: messages to deliver, per peer position. */
    final List<List<Message>> perPeer;
    private final Deque<Integer> cursor = new ArrayDeque<>();
    final List<MemoryBuffer> staging = Collections.synchronizedList(new ArrayList<>());
    final List<MemoryBuffer> receivedInto = Collections.synchronizedList(new ArrayList<>());
    final List<Long> receivedAt = Collections.synchronizedList(new ArrayList<>());
    private int reused;
    private int[][] peerIds;
    private final Map<Integer, Integer> next = new ConcurrentHashMap<>();

    CapturingSession(long requestId, boolean sender, CacheState self, int selfIndex, CacheState peer,
                     int[] blockIds, int totalBlocks, BufferManager memory, List<List<Message>> deliveries) {
        this.requestId = requestId;
        this.sender = sender;
        this.self = self;
        this.selfIndex = selfIndex;
        this.peer = peer;
        this.targets = RankMapping.targetRanks(peer, self, selfIndex);
        this.blockIds = blockIds;
        this.totalBlocks = totalBlocks;
        this.memory = memory;
        if (deliveries != null) {
            this.perPeer = deliveries;
        } else {
            this.perPeer = new ArrayList<>();
            for (int i = 0; i < targets.size(); i++) {
                perPeer.add(Collections.synchronizedList(new ArrayList<>()));
            }
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
        List<String> addresses = new ArrayList<>();
        for (int i = 0; i < self.worldSize(); i++) {
            addresses.add("test://" + i);
        }
        return new TransceiverState(self, new CommState("test", addresses, selfIndex));
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
        return blockIds;
    }

    @Override
    public int totalBlocks() {
        return totalBlocks;
    }

    /** Sets the reused prefix. @param n reused blocks @return this */
    CapturingSession reused(int n) {
        this.reused = n;
        return this;
    }

    /** Sets the peers' block ids. @param ids per peer position @return this */
    CapturingSession peerBlockIds(int[][] ids) {
        this.peerIds = ids;
        return this;
    }

    @Override
    public int reusedBlocks() {
        return reused;
    }

    @Override
    public int[] peerBlockIds(int peerIndex) {
        return peerIds == null ? null : peerIds[peerIndex];
    }

    @Override
    public MemoryBuffer[] stagingBuffers(long[] sizes) {
        MemoryBuffer[] out = new MemoryBuffer[sizes.length];
        for (int i = 0; i < sizes.length; i++) {
            out[i] = memory.allocate(sizes[i], MemoryKind.HOST);
            staging.add(out[i]);
        }
        return out;
    }

    /** What {@link #bufferManager()} hands the formatter instead of the session's own manager, or null. */
    volatile BufferManager formatterManager;

    @Override
    public BufferManager bufferManager() {
        BufferManager m = formatterManager;
        return m != null ? m : memory;
    }

    @Override
    public void send(int peerIndex, MemoryBuffer buffer, long offset, long length) {
        MemoryBuffer copy = memory.allocate(length, MemoryKind.HOST);
        memory.copy(buffer, offset, copy, 0, length);
        perPeer.get(peerIndex).add(new Message(buffer, offset, length, copy));
    }

    @Override
    public void recv(int peerIndex, MemoryBuffer buffer, long offset, long length) {
        int i = next.merge(peerIndex, 1, Integer::sum) - 1;
        List<Message> queue = perPeer.get(peerIndex);
        if (i >= queue.size()) {
            throw new AssertionError("rank " + selfIndex + " receives message " + i + " from position " + peerIndex
                    + " but only " + queue.size() + " were sent");
        }
        Message m = queue.get(i);
        if (m.length() != length) {
            throw new AssertionError("rank " + selfIndex + " expects " + length + " bytes from position " + peerIndex
                    + ", message " + i + " has " + m.length());
        }
        memory.copy(m.copy(), 0, buffer, offset, length);
        receivedInto.add(buffer);
        receivedAt.add(offset);
    }

    /** @return messages received from a peer position so far */
    int received(int peerIndex) {
        return next.getOrDefault(peerIndex, 0);
    }

    @Override
    public void forEachPeer(int[] peerIndexes, IntConsumer action) {
        for (int p : peerIndexes) {
            action.accept(p);
        }
    }

    @Override
    public void recordMeasure(int peerIndex, long startNanos, long endNanos, long bytes) {
        // not measured here
    }

    /** Frees staging and, on a sender, the captured copies. */
    @Override
    public void close() {
        staging.forEach(MemoryBuffer::close);
        if (sender) {
            for (List<Message> l : perPeer) {
                l.forEach(m -> m.copy().close());
            }
        }
    }
}
