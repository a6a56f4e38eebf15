package dev.kvtransfer.aeron;

import dev.kvtransfer.api.layout.BlockDistribution;
import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.api.model.ContextPhaseParams;
import dev.kvtransfer.api.model.DataType;
import dev.kvtransfer.api.transport.TransportConfig;
import dev.kvtransfer.core.RequestState;
import dev.kvtransfer.core.TransceiverConfig;
import dev.kvtransfer.core.TransferRequest;
import dev.kvtransfer.core.local.LocalInstance;
import dev.kvtransfer.testkit.KvPattern;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;

/**
 * A context and a generation {@link LocalInstance} of many ranks each over Aeron in this JVM (every rank its own
 * manager on the process's shared driver), moving KV of a few requests from the first contact on and checking
 * every element with {@link KvPattern}: what {@code ManyRanksTest} (64 ranks, CI) and {@code ManyRanksBench}
 * (192 ranks) run. The very first requests are the ones that meet the connection set-up of every rank pair.
 */
final class ManyRanks implements AutoCloseable {
    private static final AtomicLong NEXT_ID = new AtomicLong(50_000);

    final CacheState ctxState;
    final CacheState genState;
    final LocalInstance ctx;
    final LocalInstance gen;
    final List<Throwable> errors = new CopyOnWriteArrayList<>();
    final long startMs;

    /** Result of one round of requests. */
    record Round(int requests, long elements, long millis, List<String> failures) {
    }

    ManyRanks(int layers, int heads, int sizePerHead, int tokensPerBlock, int ctxTp, int ctxPp, int genTp, int genPp,
              TransportConfig transport, int blocksPerRank) {
        this.ctxState = state(layers, heads, sizePerHead, tokensPerBlock, ctxTp, ctxPp);
        this.genState = state(layers, heads, sizePerHead, tokensPerBlock, genTp, genPp);
        TransceiverConfig c = TransceiverConfig.builder().backend(AeronTransportProvider.NAME)
                .transferBufferBytes(1 << 20).chunkBytes(256 << 10).sendConcurrency(1).recvSlots(1)
                .requestThreadsPerPeerInstance(1).kvTransferTimeout(Duration.ofSeconds(60))
                .senderFutureTimeout(Duration.ofSeconds(1)).build();
        long t0 = System.nanoTime();
        LocalInstance cx = null;
        try {
            cx = LocalInstance.builder("ctx", ctxState).transport(new AeronTransportProvider(), transport).config(c)
                    .blocksPerRank(blocksPerRank).errorHandler(errors::add).start();
            this.ctx = cx;
            this.gen = LocalInstance.builder("gen", genState).transport(new AeronTransportProvider(), transport)
                    .config(c).blocksPerRank(blocksPerRank).errorHandler(errors::add).start();
        } catch (RuntimeException e) {
            if (cx != null) {
                cx.close();
            }
            throw e;
        }
        this.startMs = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - t0);
    }

    private static CacheState state(int layers, int heads, int sizePerHead, int tokensPerBlock, int tp, int pp) {
        return CacheState.builder().uniformKvHeads(layers, heads).sizePerHead(sizePerHead)
                .tokensPerBlock(tokensPerBlock).tensorParallelism(tp).pipelineParallelism(pp)
                .dataType(DataType.FLOAT16).build();
    }

    /**
     * Runs requests all at once (the first round meets every connection's set-up) and waits for them.
     *
     * @param requests how many
     * @param prompt   tokens per request
     * @param bound    how long to wait at most
     */
    Round round(int requests, int prompt, Duration bound) {
        long t0 = System.nanoTime();
        int total = BlockDistribution.blocksFor(prompt, ctxState.tokensPerBlock());
        List<long[]> ids = new ArrayList<>();
        List<List<TransferRequest>> ctxReqs = new ArrayList<>();
        List<List<TransferRequest>> genReqs = new ArrayList<>();
        List<int[][]> genBlocks = new ArrayList<>();
        for (int i = 0; i < requests; i++) {
            long id = NEXT_ID.incrementAndGet();
            ids.add(new long[] {id});
            List<TransferRequest> cr = new ArrayList<>();
            for (int r = 0; r < ctx.ranks(); r++) {
                int[] b = ctx.cache(r).allocate(id, total);
                KvPattern.fill(ctx.cache(r), b, ctx.cacheState(r), r, id, total);
                cr.add(TransferRequest.context(id, prompt, b));
            }
            ContextPhaseParams params = ctx.contextPhaseParams(id, 0);
            List<TransferRequest> gr = new ArrayList<>();
            int[][] gb = new int[gen.ranks()][];
            for (int r = 0; r < gen.ranks(); r++) {
                gb[r] = gen.cache(r).allocate(id, total);
                gr.add(TransferRequest.generation(params, prompt, gb[r]));
            }
            ctxReqs.add(cr);
            genReqs.add(gr);
            genBlocks.add(gb);
        }
        for (int i = 0; i < requests; i++) {
            for (int r = 0; r < gen.ranks(); r++) {
                gen.transceiver(r).requestAndReceiveAsync(genReqs.get(i).get(r));
            }
            for (int r = 0; r < ctx.ranks(); r++) {
                ctx.transceiver(r).respondAndSendAsync(ctxReqs.get(i).get(r));
            }
        }
        long deadline = System.nanoTime() + bound.toNanos();
        List<TransferRequest> all = new ArrayList<>();
        ctxReqs.forEach(all::addAll);
        genReqs.forEach(all::addAll);
        for (TransferRequest t : all) {
            while (!t.isDone() && System.nanoTime() - deadline < 0) {
                java.util.concurrent.locks.LockSupport.parkNanos(TimeUnit.MILLISECONDS.toNanos(5));
            }
        }
        List<String> failures = new ArrayList<>();
        long elements = 0;
        for (int i = 0; i < requests; i++) {
            long id = ids.get(i)[0];
            for (TransferRequest t : ctxReqs.get(i)) {
                if (t.state() != RequestState.CONTEXT_COMPLETE) {
                    failures.add("ctx " + id + ": " + t);
                }
            }
            for (int r = 0; r < gen.ranks(); r++) {
                TransferRequest t = genReqs.get(i).get(r);
                if (t.state() != RequestState.GENERATION_TRANS_COMPLETE) {
                    failures.add("gen rank " + r + " of " + id + ": " + t);
                    continue;
                }
                KvPattern.Result v = KvPattern.verify(gen.cache(r), genBlocks.get(i)[r], gen.cacheState(r), r, id,
                        total);
                if (!v.ok()) {
                    failures.add("gen rank " + r + " of " + id + ": " + v);
                }
                elements += v.checkedElements();
            }
            for (int r = 0; r < ctx.ranks(); r++) {
                ctx.cache(r).free(id);
            }
            for (int r = 0; r < gen.ranks(); r++) {
                gen.cache(r).free(id);
            }
        }
        return new Round(requests, elements, TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - t0), failures);
    }

    @Override
    public void close() {
        try {
            gen.close();
        } finally {
            ctx.close();
        }
    }
}
