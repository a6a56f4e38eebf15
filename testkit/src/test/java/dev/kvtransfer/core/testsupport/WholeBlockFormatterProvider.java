package dev.kvtransfer.core.testsupport;

import dev.kvtransfer.api.cache.KvCacheView;
import dev.kvtransfer.api.format.CacheFormatter;
import dev.kvtransfer.api.format.FormatterCapability;
import dev.kvtransfer.api.format.PeerPool;
import dev.kvtransfer.api.format.FormatterProvider;
import dev.kvtransfer.api.format.Support;
import dev.kvtransfer.api.format.TransferBufferPool;
import dev.kvtransfer.api.format.TransferSession;
import dev.kvtransfer.api.layout.RankMapping;
import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.model.AttentionType;
import dev.kvtransfer.api.model.CacheState;

import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.stream.IntStream;

/**
 * core's in-test formatter ("whole-block"): identical layouts only, one peer per rank; the sender stages all
 * of the request's blocks into one staging buffer and sends it as one part (chunked by the session), the
 * receiver receives into staging and copies back. Enough to exercise the protocol, the pool and chunking
 * without the standard formatter (which lives in a module core cannot depend on). A test can make
 * {@link #format} fail for one request id or block until a latch opens.
 *
 * <p>It also declares {@link FormatterCapability#LAYER_RANGES} (per layer range: each block's layers are one
 * contiguous run of a block pool, sent as one message per block) and {@link FormatterCapability#PUSH} (each
 * block's layer run written one-sided into the same block of the peer's pool), for block pools of identical
 * layouts: enough to test core's layer-wise and push protocols.
 */
public final class WholeBlockFormatterProvider implements FormatterProvider {
    /** Request id whose format throws (tests of one failing request). */
    public static volatile long failRequestId = Long.MIN_VALUE;
    /** When set, format waits (bounded) on it: tests of head-of-line blocking and cancel after ready. */
    public static volatile CountDownLatch formatGate;

    @Override
    public String name() {
        return "whole-block";
    }

    @Override
    public boolean handles(AttentionType type) {
        return type == AttentionType.DEFAULT;
    }

    @Override
    public CacheFormatter create(KvCacheView cache, TransferBufferPool buffers) {
        return new Formatter(cache);
    }

    static final class Formatter implements CacheFormatter {
        private final KvCacheView cache;

        Formatter(KvCacheView cache) {
            this.cache = cache;
        }

        @Override
        public void format(TransferSession s) {
            if (s.requestId() == failRequestId) {
                throw new IllegalStateException("injected failure for request " + s.requestId());
            }
            CountDownLatch gate = formatGate;
            if (gate != null) {
                try {
                    gate.await(30, TimeUnit.SECONDS);
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
            }
            long bb = cache.layout().blockBytes();
            int[] blocks = s.blockIds();
            int first = s.reusedBlocks(); // identical layouts, CP 1: local block i is global block i
            int n = blocks.length - first;
            MemoryBuffer stage = s.stagingBuffers(new long[] {bb * n})[0];
            for (int i = 0; i < n; i++) {
                s.bufferManager().copy(cache.block(blocks[first + i]), 0, stage, i * bb, bb);
            }
            for (int p = 0; p < s.targets().size(); p++) {
                long t0 = System.nanoTime();
                s.send(p, stage, 0, bb * n);
                s.recordMeasure(p, t0, System.nanoTime(), bb * n);
            }
        }

        @Override
        public void unformat(TransferSession s) {
            long bb = cache.layout().blockBytes();
            int[] blocks = s.blockIds();
            int first = s.reusedBlocks();
            int n = blocks.length - first;
            MemoryBuffer stage = s.stagingBuffers(new long[] {bb * n})[0];
            int[] peers = IntStream.range(0, s.targets().size()).toArray();
            s.forEachPeer(peers, p -> {
                long t0 = System.nanoTime();
                s.recv(p, stage, 0, bb * n);
                s.recordMeasure(p, t0, System.nanoTime(), bb * n);
            });
            for (int i = 0; i < n; i++) {
                s.bufferManager().copy(stage, i * bb, cache.block(blocks[first + i]), 0, bb);
            }
        }

        @Override
        public java.util.Set<FormatterCapability> capabilities() {
            return java.util.EnumSet.of(FormatterCapability.LAYER_RANGES, FormatterCapability.PUSH);
        }

        /** The local layer range {@code [l0, l1)} of global layers {@code [first, first + n)} on this rank. */
        private static int[] localRange(TransferSession s, int first, int n) {
            CacheState st = s.selfState().cacheState();
            int pp = st.ppRank(s.selfState().selfIndex());
            int a0 = st.firstLayer(pp);
            int a1 = a0 + st.layerCount(pp);
            int l0 = Math.max(first, a0) - a0;
            int l1 = Math.min(first + n, a1) - a0;
            return new int[] {l0, Math.max(l0, l1)};
        }

        @Override
        public void format(TransferSession s, int first, int n) {
            int[] r = localRange(s, first, n);
            if (r[1] == r[0]) {
                return;
            }
            long lb = cache.layout().layerBytes();
            int[] blocks = s.blockIds();
            for (int p = 0; p < s.targets().size(); p++) {
                long t0 = System.nanoTime();
                for (int i = s.reusedBlocks(); i < blocks.length; i++) {
                    s.send(p, cache.block(blocks[i]), r[0] * lb, (r[1] - r[0]) * lb);
                }
                s.recordMeasure(p, t0, System.nanoTime(), (blocks.length - s.reusedBlocks()) * (r[1] - r[0]) * lb);
            }
        }

        @Override
        public void unformat(TransferSession s, int first, int n) {
            int[] r = localRange(s, first, n);
            if (r[1] == r[0]) {
                return;
            }
            long lb = cache.layout().layerBytes();
            int[] blocks = s.blockIds();
            int[] peers = IntStream.range(0, s.targets().size()).toArray();
            s.forEachPeer(peers, p -> {
                long t0 = System.nanoTime();
                for (int i = s.reusedBlocks(); i < blocks.length; i++) {
                    s.recv(p, cache.block(blocks[i]), r[0] * lb, (r[1] - r[0]) * lb);
                }
                s.recordMeasure(p, t0, System.nanoTime(), (blocks.length - s.reusedBlocks()) * (r[1] - r[0]) * lb);
            });
        }

        @Override
        public void push(TransferSession s, int first, int n) {
            if (s.requestId() == failRequestId) {
                throw new IllegalStateException("injected failure for request " + s.requestId());
            }
            int[] r = localRange(s, first, n);
            if (r[1] == r[0]) {
                return;
            }
            long lb = cache.layout().layerBytes();
            int[] blocks = s.blockIds();
            for (int p = 0; p < s.targets().size(); p++) {
                PeerPool pool = s.peerPool(p);
                dev.kvtransfer.api.layout.PoolGeometry g = pool.geometry();
                dev.kvtransfer.api.transport.WriteBatch batch = new dev.kvtransfer.api.transport.WriteBatch();
                long t0 = System.nanoTime();
                for (int i = s.reusedBlocks(); i < blocks.length; i++) {
                    int peerBlock = pool.blockId(i);
                    pool.add(batch, cache.block(blocks[i]), r[0] * lb, g.region(peerBlock, r[0], 0, 0),
                            g.planeOffset(peerBlock, r[0], 0, 0), (r[1] - r[0]) * lb);
                }
                s.write(p, batch);
                s.recordMeasure(p, t0, System.nanoTime(), batch.totalBytes());
            }
        }

        @Override
        public Support inquireSupport(CacheState self, CacheState peer) {
            // Reuse capabilities do not change a block's bytes: core negotiates them per request.
            return withoutReuse(self).equals(withoutReuse(peer)) ? Support.yes()
                    : Support.no("whole-block formatter needs identical layouts: self " + self + ", peer " + peer);
        }

        private static CacheState withoutReuse(CacheState s) {
            return s.toBuilder().partialReuse(false).blockReuse(false).build();
        }

        @Override
        public List<Integer> counterparts(CacheState self, int selfIndex, CacheState peer) {
            return new ArrayList<>(RankMapping.targetRanks(peer, self, selfIndex).peerRanks());
        }

        @Override
        public List<Integer> pickRecvConnections(CacheState self, int selfIndex, CacheState peer) {
            return IntStream.range(0, counterparts(self, selfIndex, peer).size()).boxed().toList();
        }

        @Override
        public boolean needSendCache(CacheState self, int selfIndex, CacheState peer) {
            return true;
        }
    }
}
