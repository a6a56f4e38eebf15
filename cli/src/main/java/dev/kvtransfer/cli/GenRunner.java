package dev.kvtransfer.cli;

import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.api.model.ContextPhaseParams;
import dev.kvtransfer.core.RequestState;
import dev.kvtransfer.core.TransferRequest;
import dev.kvtransfer.core.cache.PagedKvCache;
import dev.kvtransfer.core.local.LocalInstance;
import dev.kvtransfer.testkit.KvPattern;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;

/**
 * Drives a generation {@link LocalInstance}: allocates each serving rank's share of a request's blocks,
 * requests the transfer on every serving rank, and later verifies every element with {@link KvPattern},
 * dumps the blocks and frees them.
 */
final class GenRunner implements GenSide {
    private final LocalInstance gen;
    private final boolean verify;
    private final Path dumpDir;
    private final Map<Long, Pending> pending = new ConcurrentHashMap<>();

    private record RankPart(int rank, int[] blocks, TransferRequest request) {
    }

    private record Pending(int isl, int totalBlocks, List<RankPart> parts) {
    }

    GenRunner(LocalInstance gen, boolean verify, Path dumpDir) {
        this.gen = gen;
        this.verify = verify;
        this.dumpDir = dumpDir;
    }

    @Override
    public CompletableFuture<GenTransfer> submit(int index, long requestId, int isl, ContextPhaseParams params) {
        CacheState s = gen.cacheState();
        int total = DemoRanks.totalBlocks(s, isl);
        List<RankPart> parts = new ArrayList<>();
        long submit = System.nanoTime();
        try {
            for (int r : DemoRanks.serving(s, index)) {
                int[] blocks = gen.cache(r).allocate(requestId, DemoRanks.blocksOnRank(s, r, total));
                parts.add(new RankPart(r, blocks, TransferRequest.generation(params, isl, blocks)));
            }
        } catch (RuntimeException e) {
            for (RankPart p : parts) {
                gen.cache(p.rank).free(requestId);
            }
            return CompletableFuture.completedFuture(
                    new GenTransfer(requestId, false, 0, submit, System.nanoTime(), e.getMessage()));
        }
        pending.put(requestId, new Pending(isl, total, parts));
        CompletableFuture<?>[] done = new CompletableFuture<?>[parts.size()];
        for (int i = 0; i < parts.size(); i++) {
            RankPart p = parts.get(i);
            gen.transceiver(p.rank).requestAndReceiveAsync(p.request);
            done[i] = p.request.completion().toCompletableFuture();
        }
        return CompletableFuture.allOf(done).thenApply(v -> {
            long end = System.nanoTime();
            long bytes = 0;
            String error = "";
            boolean ok = true;
            for (RankPart p : parts) {
                if (p.request.state() != RequestState.GENERATION_TRANS_COMPLETE) {
                    ok = false;
                    if (error.isEmpty()) {
                        error = "gen rank " + p.rank + ": " + p.request.state()
                                + p.request.error().map(e -> " " + e.getMessage()).orElse("");
                    }
                }
                bytes += (long) p.blocks.length * gen.cache(p.rank).layout().blockBytes();
            }
            return new GenTransfer(requestId, ok, bytes, submit, end, error);
        });
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
                if (part.request.state() != RequestState.GENERATION_TRANS_COMPLETE) {
                    continue;
                }
                PagedKvCache cache = gen.cache(part.rank);
                if (verify) {
                    KvPattern.Result r = KvPattern.verify(cache, part.blocks, gen.cacheState(part.rank), part.rank,
                            requestId, p.totalBlocks);
                    checked += r.checkedElements();
                    mismatches += r.mismatches();
                    if (first.isEmpty() && !r.ok()) {
                        first = "gen rank " + part.rank + ": " + r.firstMismatch();
                    }
                }
                if (dumpDir != null && requestId < DemoCommand.WARMUP_ID_BASE) {
                    dump(cache, part.rank, requestId, part.blocks);
                }
            }
        } finally {
            for (RankPart part : p.parts) {
                gen.cache(part.rank).free(requestId);
            }
        }
        return new GenCheck(requestId, checked, mismatches, first);
    }

    private void dump(PagedKvCache cache, int rank, long requestId, int[] blocks) {
        Path dir = dumpDir.resolve("gen-rank-" + rank);
        try {
            Files.createDirectories(dir);
            try (FileChannel ch = FileChannel.open(dir.resolve("request-" + requestId + ".bin"),
                    StandardOpenOption.CREATE, StandardOpenOption.WRITE, StandardOpenOption.TRUNCATE_EXISTING)) {
                for (int b : blocks) {
                    MemoryBuffer block = cache.block(b);
                    ByteBuffer bb = block.asByteBuffer();
                    while (bb.hasRemaining()) {
                        ch.write(bb);
                    }
                }
            }
        } catch (IOException e) {
            throw new UncheckedIOException("cannot dump request " + requestId + " of gen rank " + rank + " to " + dir, e);
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
            for (RankPart part : p.parts) {
                gen.cache(part.rank).free(id);
            }
        }
    }
}
