package dev.kvtransfer.cli;

import dev.kvtransfer.api.cache.KvCacheView;
import dev.kvtransfer.api.layout.PoolGeometry;
import dev.kvtransfer.api.layout.PoolLayout;
import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.api.model.ContextPhaseParams;
import dev.kvtransfer.api.model.RecurrentStateShape;
import dev.kvtransfer.core.RequestState;
import dev.kvtransfer.core.TransferRequest;
import dev.kvtransfer.core.cache.PagedKvCache;
import dev.kvtransfer.core.local.LocalInstance;
import dev.kvtransfer.core.pattern.KvPattern;
import dev.kvtransfer.core.pattern.WindowPattern;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;

/**
 * Drives a generation {@link LocalInstance}: allocates each serving rank's share of a request's blocks (and writes
 * the reused prefix, as a prefix cache would hold it), requests the transfer on every serving rank, and later
 * verifies every element with {@link KvPattern}, dumps the blocks and frees them.
 *
 * <p>Dump format: a {@code block} pool writes {@code DIR/gen-rank-R/request-ID.bin}, the request's blocks in block
 * order, each as stored. A layer pool writes one file per (local layer {@code L}, kv plane {@code K}) region,
 * {@code DIR/gen-rank-R/request-ID.region-L-K.bin}: each block's slice of that plane in block order, exactly as
 * stored; with a split MLA latent {@code K} is {@code nope} or {@code rope} (one file per segment).
 */
final class GenRunner implements GenSide {
    private final LocalInstance gen;
    private final boolean verify;
    private final Path dumpDir;
    private final int reuseBlocks;
    private final Map<Long, Pending> pending = new ConcurrentHashMap<>();

    private record RankPart(int rank, int[] blocks, TransferRequest[] request) {
    }

    private record Pending(int isl, int totalBlocks, int reused, List<RankPart> parts) {
    }

    GenRunner(LocalInstance gen, DemoOptions options) {
        this.gen = gen;
        this.verify = options.verify;
        this.dumpDir = options.dumpDir;
        this.reuseBlocks = options.genReuseBlocks;
    }

    @Override
    public String prepare(int index, long requestId, int isl) {
        CacheState s = gen.cacheState();
        int total = DemoRanks.totalBlocks(s, isl);
        int reused = Math.min(reuseBlocks, total);
        List<RankPart> parts = new ArrayList<>();
        try {
            for (int r : DemoRanks.serving(s, index)) {
                int[] blocks = gen.cache(r).allocate(requestId, DemoRanks.blocksOnRank(s, r, total));
                parts.add(new RankPart(r, blocks, new TransferRequest[1]));
                if (reused > 0) {
                    // The prefix-cache hit: the leading blocks already hold this prompt's KV.
                    KvPattern.fill(gen.cache(r), gen.bufferManager(r), blocks, gen.cacheState(r), r, requestId, total,
                            0, reused);
                }
                if (verify && s.windowGroups() != null) {
                    // Sliding windows: the blocks after the prefix are poisoned, so the check shows that a local
                    // layer's blocks before its window were never written.
                    KvPattern.fill(gen.cache(r), gen.bufferManager(r), blocks, gen.cacheState(r), r,
                            requestId + DemoRanks.WINDOW_POISON, total, reused, total);
                }
            }
        } catch (RuntimeException e) {
            for (RankPart p : parts) {
                gen.cache(p.rank).free(requestId);
            }
            return "request " + requestId + ": " + e.getMessage();
        }
        pending.put(requestId, new Pending(isl, total, reused, parts));
        return "";
    }

    @Override
    public CompletableFuture<GenTransfer> submit(int index, long requestId, int isl, ContextPhaseParams params) {
        long submit = System.nanoTime();
        Pending p = pending.get(requestId);
        if (p == null) {
            return CompletableFuture.completedFuture(GenTransfer.failed(requestId, submit,
                    "request " + requestId + " was not prepared (its blocks could not be allocated)"));
        }
        long[] hashes = Arrays.copyOf(DemoRanks.blockHashes(requestId, p.totalBlocks), p.reused);
        CompletableFuture<?>[] done = new CompletableFuture<?>[p.parts.size()];
        for (int i = 0; i < p.parts.size(); i++) {
            RankPart part = p.parts.get(i);
            TransferRequest req = TransferRequest.generation(params, isl, part.blocks, p.reused, hashes);
            part.request[0] = req;
            gen.transceiver(part.rank).requestAndReceiveAsync(req);
            done[i] = req.completion().toCompletableFuture();
        }
        return CompletableFuture.allOf(done).thenApply(v -> {
            long end = System.nanoTime();
            long bytes = 0;
            long messages = 0;
            long skipped = 0;
            String error = "";
            boolean ok = true;
            boolean pushed = false;
            for (RankPart part : p.parts) {
                TransferRequest req = part.request[0];
                pushed |= req.wasPushed();
                if (req.state() != RequestState.GENERATION_TRANS_COMPLETE) {
                    ok = false;
                    if (error.isEmpty()) {
                        error = "gen rank " + part.rank + ": " + req.state()
                                + req.error().map(e -> " " + e.getMessage()).orElse("");
                    }
                }
                bytes += req.kvCacheSize();
                messages += req.messageCount();
                skipped += (long) reusedOnRank(p, part.rank) * gen.cache(part.rank).layout().blockBytes();
            }
            return new GenTransfer(requestId, ok, bytes, submit, end, messages, p.reused, skipped, pushed, error);
        });
    }

    /** Reused blocks among a rank's blocks: its CP share of the leading {@code reused} global blocks. */
    private int reusedOnRank(Pending p, int rank) {
        CacheState s = gen.cacheState();
        int first = dev.kvtransfer.api.layout.BlockDistribution.firstGlobalBlock(p.totalBlocks,
                s.contextParallelism(), s.cpRank(rank));
        return Math.max(0, Math.min(p.reused - first, DemoRanks.blocksOnRank(s, rank, p.totalBlocks)));
    }

    @Override
    public GenCheck check(long requestId) {
        Pending p = pending.remove(requestId);
        if (p == null) {
            return new GenCheck(requestId, 0, 0, "unknown request " + requestId);
        }
        long checked = 0;
        long mismatches = 0;
        String first = "";
        try {
            for (RankPart part : p.parts) {
                TransferRequest req = part.request[0];
                if (req == null || req.state() != RequestState.GENERATION_TRANS_COMPLETE) {
                    continue;
                }
                PagedKvCache cache = gen.cache(part.rank);
                if (verify) {
                    // Every block, reused ones included.
                    KvPattern.Result r = gen.cacheState(part.rank).windowGroups() == null
                            ? KvPattern.verify(cache, gen.bufferManager(part.rank), part.blocks,
                            gen.cacheState(part.rank), part.rank, requestId, p.totalBlocks)
                            : WindowPattern.verify(cache, gen.bufferManager(part.rank), part.blocks,
                            gen.cacheState(part.rank), part.rank, requestId, requestId + DemoRanks.WINDOW_POISON,
                            p.totalBlocks, p.reused);
                    checked += r.checkedElements();
                    mismatches += r.mismatches();
                    if (first.isEmpty() && !r.ok()) {
                        first = "gen rank " + part.rank + ": " + r.firstMismatch();
                    }
                    CacheState rs = gen.cacheState(part.rank);
                    if (RecurrentStateShape.holdsState(rs, part.rank)) {
                        KvPattern.Result st = KvPattern.verifyRecurrent(cache.recurrentState(),
                                gen.bufferManager(part.rank), rs, part.rank, requestId);
                        checked += st.checkedElements();
                        mismatches += st.mismatches();
                        if (first.isEmpty() && !st.ok()) {
                            first = "gen rank " + part.rank + ": " + st.firstMismatch();
                        }
                    }
                }
                if (dumpDir != null && requestId < DemoCommand.WARMUP_ID_BASE) {
                    dump(dumpDir, cache, part.rank, requestId, part.blocks);
                }
            }
        } finally {
            for (RankPart part : p.parts) {
                gen.cache(part.rank).free(requestId);
            }
        }
        return new GenCheck(requestId, checked, mismatches, first);
    }

    /**
     * Writes a rank's blocks of a request as stored: one file for a block pool, one per (layer, kv, segment)
     * region for a layer pool (see the class comment).
     *
     * @param dumpDir   the dump root
     * @param cache     the rank's pool
     * @param rank      the rank index
     * @param requestId the request id
     * @param blocks    the rank's blocks of the request, in order
     */
    static void dump(Path dumpDir, KvCacheView cache, int rank, long requestId, int[] blocks) {
        Path dir = dumpDir.resolve("gen-rank-" + rank);
        try {
            Files.createDirectories(dir);
            PoolLayout pool = cache.poolLayout();
            if (pool.kind() == PoolLayout.Kind.BLOCK) {
                try (FileChannel ch = open(dir.resolve("request-" + requestId + ".bin"))) {
                    for (int b : blocks) {
                        write(ch, cache.block(b));
                    }
                }
                return;
            }
            PoolGeometry g = cache.geometry();
            for (int layer = 0; layer < cache.layout().localLayers(); layer++) {
                for (int kv = 0; kv < cache.layout().kvFactor(); kv++) {
                    for (int seg = 0; seg < g.segments(); seg++) {
                        String k = pool.splitLatent() ? (seg == 0 ? "nope" : "rope") : Integer.toString(kv);
                        Path f = dir.resolve("request-" + requestId + ".region-" + layer + "-" + k + ".bin");
                        try (FileChannel ch = open(f)) {
                            for (int b : blocks) {
                                write(ch, cache.planeSegment(b, layer, kv, seg));
                            }
                        }
                    }
                }
            }
        } catch (IOException e) {
            throw new UncheckedIOException("cannot dump request " + requestId + " of gen rank " + rank + " to " + dir, e);
        }
    }

    private static FileChannel open(Path f) throws IOException {
        return FileChannel.open(f, StandardOpenOption.CREATE, StandardOpenOption.WRITE,
                StandardOpenOption.TRUNCATE_EXISTING);
    }

    private static void write(FileChannel ch, MemoryBuffer b) throws IOException {
        ByteBuffer bb = b.asByteBuffer();
        while (bb.hasRemaining()) {
            ch.write(bb);
        }
    }

    /** Runs the generation status check on every rank (a collective per status group). */
    String sync(int timeoutSeconds) {
        return StatusSync.generation(gen, timeoutSeconds);
    }

    /** Closes the generation instance this runner drives (the in-process demo owns it). */
    void closeInstance() {
        close();
        gen.close();
    }

    @Override
    public void close() {
        for (Long id : List.copyOf(pending.keySet())) {
            Pending p = pending.remove(id);
            if (p == null) {
                continue;
            }
            for (RankPart part : p.parts) {
                gen.cache(part.rank).free(id);
            }
        }
    }
}
