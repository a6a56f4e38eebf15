package dev.kvtransfer.formatter.standard.bench;

import dev.kvtransfer.api.format.CacheFormatter;
import dev.kvtransfer.api.format.TransferBufferPool;
import dev.kvtransfer.api.format.TransferSession;
import dev.kvtransfer.api.layout.BlockDistribution;
import dev.kvtransfer.api.layout.BlockLayout;
import dev.kvtransfer.api.layout.PoolLayout;
import dev.kvtransfer.api.layout.RankMapping;
import dev.kvtransfer.api.layout.TargetRanks;
import dev.kvtransfer.api.memory.BufferManager;
import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.memory.MemoryKind;
import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.api.model.CommState;
import dev.kvtransfer.api.model.DataType;
import dev.kvtransfer.api.model.TransceiverState;
import dev.kvtransfer.core.buffer.DefaultTransferBufferPool;
import dev.kvtransfer.core.cache.PagedKvCache;
import dev.kvtransfer.core.memory.HostBufferManager;
import dev.kvtransfer.formatter.standard.PolicyFormatterProvider;
import dev.kvtransfer.formatter.standard.StandardFormatterProvider;
import org.openjdk.jmh.annotations.Benchmark;
import org.openjdk.jmh.annotations.BenchmarkMode;
import org.openjdk.jmh.annotations.Fork;
import org.openjdk.jmh.annotations.Level;
import org.openjdk.jmh.annotations.Measurement;
import org.openjdk.jmh.annotations.Mode;
import org.openjdk.jmh.annotations.OutputTimeUnit;
import org.openjdk.jmh.annotations.Param;
import org.openjdk.jmh.annotations.Scope;
import org.openjdk.jmh.annotations.Setup;
import org.openjdk.jmh.annotations.State;
import org.openjdk.jmh.annotations.TearDown;
import org.openjdk.jmh.annotations.Warmup;

import java.time.Duration;
import java.util.Collections;
import java.util.concurrent.TimeUnit;
import java.util.function.IntConsumer;

/**
 * JMH: the standard formatter's own work for one request, without a transport — the sender's {@code format}
 * (gather into staging, or nothing for zero copy) and the receiver's {@code unformat} (scatter from staging into
 * the blocks). Sends and receives are no-ops that count bytes, so the numbers are the copy cost and, with
 * {@code -prof gc}, the per-request allocation ({@code gc.alloc.rate.norm}) that must not grow with the blocks.
 * Not a unit test; run it as the formatter-standard README says.
 */
@State(Scope.Thread)
@BenchmarkMode(Mode.AverageTime)
@OutputTimeUnit(TimeUnit.MILLISECONDS)
@Warmup(iterations = 3, time = 1)
@Measurement(iterations = 5, time = 1)
@Fork(value = 1, jvmArgsAppend = {"-Xmx1g"})
public class FormatterBenchmark {
    /** Context TP → generation TP (1→1 is zero copy; 2→1 and 1→2 re-shard heads). */
    @Param({"1to1", "2to1", "1to2"})
    public String layout;

    /** Prompt length; llama3-8b-shaped cache (32 layers, 8 KV heads, D 128, bf16, 32 tokens per block). */
    @Param({"1024"})
    public int tokens;

    /** Pool layout of both sides: {@code block} or {@code layer-nhd}. */
    @Param({"block", "layer-nhd"})
    public String pools;

    /**
     * The plan: {@code default} (both sides direct where both can, so re-sharding copies nothing), or
     * {@code staged} (never both direct: one side gathers / scatters, the copy cost this measures).
     */
    @Param({"default", "staged"})
    public String plan;

    private HostBufferManager memory;
    private PagedKvCache cache;
    private DefaultTransferBufferPool pool;
    private CacheFormatter formatter;
    private NullSession sendSession;
    private NullSession recvSession;

    private CacheState llama(int tp) {
        return CacheState.builder().uniformKvHeads(32, 8).sizePerHead(128).tokensPerBlock(32)
                .dataType(DataType.BFLOAT16).tensorParallelism(tp)
                .poolLayout(PoolLayout.of(PoolLayout.Kind.parse(pools))).build();
    }

    @Setup(Level.Trial)
    public void setUp() {
        int ctxTp = layout.charAt(0) - '0';
        int genTp = layout.charAt(3) - '0';
        CacheState ctx = llama(ctxTp);
        CacheState gen = llama(genTp);
        int n = BlockDistribution.blocksFor(tokens, 32);
        // One cache big enough for rank 0 of either side; the sender formats from it, the receiver scatters into it.
        BlockLayout layout0 = BlockLayout.of(ctxTp <= genTp ? ctx : gen, 0);
        memory = new HostBufferManager();
        cache = new PagedKvCache(memory, layout0, ctx.poolLayout(), MemoryKind.HOST, n);
        int[] blocks = cache.allocate(1, n);
        long slot = (long) n * layout0.blockBytes();
        pool = new DefaultTransferBufferPool(memory, slot, 1, 1, true);
        formatter = (plan.equals("staged") ? new PolicyFormatterProvider(Long.MAX_VALUE)
                : new StandardFormatterProvider()).create(cache, pool);
        if (BlockLayout.of(ctx, 0).equals(layout0)) {
            sendSession = new NullSession(true, ctx, gen, blocks, n, pool, memory);
        }
        if (BlockLayout.of(gen, 0).equals(layout0)) {
            recvSession = new NullSession(false, gen, ctx, blocks, n, pool, memory);
        }
    }

    @TearDown(Level.Trial)
    public void tearDown() {
        pool.close();
        cache.free(1);
        cache.close();
        memory.close();
    }

    /** Context rank 0 formats the request (bytes handed to the no-op transport are counted). */
    @Benchmark
    public long format() {
        if (sendSession == null) {
            return 0;
        }
        sendSession.reset();
        formatter.format(sendSession);
        sendSession.release();
        return sendSession.bytes;
    }

    /** Generation rank 0 unformats the request (parts "arrive" as whatever staging holds). */
    @Benchmark
    public long unformat() {
        if (recvSession == null) {
            return 0;
        }
        recvSession.reset();
        formatter.unformat(recvSession);
        recvSession.release();
        return recvSession.bytes;
    }

    /** A session with a no-op transport: send/recv only count bytes. Staging comes from the real pool. */
    static final class NullSession implements TransferSession {
        private final boolean sender;
        private final TransceiverState self;
        private final CacheState peer;
        private final TargetRanks targets;
        private final int[] blocks;
        private final int total;
        private final TransferBufferPool pool;
        private final BufferManager memory;
        private TransferBufferPool.Slot slot;
        long bytes;

        NullSession(boolean sender, CacheState self, CacheState peer, int[] blocks, int total, TransferBufferPool pool,
                    BufferManager memory) {
            this.sender = sender;
            this.self = new TransceiverState(self, new CommState("null",
                    Collections.nCopies(self.worldSize(), "null"), 0));
            this.peer = peer;
            this.targets = RankMapping.targetRanks(peer, self, 0);
            this.blocks = blocks;
            this.total = total;
            this.pool = pool;
            this.memory = memory;
        }

        void reset() {
            bytes = 0;
        }

        void release() {
            if (slot != null) {
                slot.close();
                slot = null;
            }
        }

        @Override
        public long requestId() {
            return 1;
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
            return blocks;
        }

        @Override
        public int totalBlocks() {
            return total;
        }

        /** Every peer's blocks are ours: consecutive on both sides, so layer pools coalesce whole runs. */
        @Override
        public int[] peerBlockIds(int peerIndex) {
            return blocks;
        }

        @Override
        public MemoryBuffer[] stagingBuffers(long[] sizes) {
            if (slot == null) {
                slot = pool.acquire(sender ? TransferBufferPool.Direction.SEND : TransferBufferPool.Direction.RECV,
                        Duration.ofSeconds(10));
            }
            return slot.carve(sizes);
        }

        @Override
        public BufferManager bufferManager() {
            return memory;
        }

        @Override
        public void send(int peerIndex, MemoryBuffer buffer, long offset, long length) {
            bytes += length;
        }

        @Override
        public void recv(int peerIndex, MemoryBuffer buffer, long offset, long length) {
            bytes += length;
        }

        @Override
        public void forEachPeer(int[] peerIndexes, IntConsumer action) {
            for (int p : peerIndexes) {
                action.accept(p);
            }
        }

        @Override
        public void recordMeasure(int peerIndex, long startNanos, long endNanos, long bytes) {
        }
    }
}
