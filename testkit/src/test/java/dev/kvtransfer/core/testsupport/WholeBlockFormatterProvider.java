package dev.kvtransfer.core.testsupport;

import dev.kvtransfer.api.cache.KvCacheView;
import dev.kvtransfer.api.format.CacheFormatter;
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
            MemoryBuffer stage = s.stagingBuffers(new long[] {bb * blocks.length})[0];
            for (int i = 0; i < blocks.length; i++) {
                s.bufferManager().copy(cache.block(blocks[i]), 0, stage, i * bb, bb);
            }
            for (int p = 0; p < s.targets().size(); p++) {
                long t0 = System.nanoTime();
                s.send(p, stage, 0, bb * blocks.length);
                s.recordMeasure(p, t0, System.nanoTime(), bb * blocks.length);
            }
        }

        @Override
        public void unformat(TransferSession s) {
            long bb = cache.layout().blockBytes();
            int[] blocks = s.blockIds();
            MemoryBuffer stage = s.stagingBuffers(new long[] {bb * blocks.length})[0];
            int[] peers = IntStream.range(0, s.targets().size()).toArray();
            s.forEachPeer(peers, p -> {
                long t0 = System.nanoTime();
                s.recv(p, stage, 0, bb * blocks.length);
                s.recordMeasure(p, t0, System.nanoTime(), bb * blocks.length);
            });
            for (int i = 0; i < blocks.length; i++) {
                s.bufferManager().copy(stage, i * bb, cache.block(blocks[i]), 0, bb);
            }
        }

        @Override
        public Support inquireSupport(CacheState self, CacheState peer) {
            return self.equals(peer) ? Support.yes()
                    : Support.no("whole-block formatter needs identical layouts: self " + self + ", peer " + peer);
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
