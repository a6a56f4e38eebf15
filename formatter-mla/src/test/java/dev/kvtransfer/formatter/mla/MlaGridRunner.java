package dev.kvtransfer.formatter.mla;

import dev.kvtransfer.api.format.CacheFormatter;
import dev.kvtransfer.api.layout.BlockDistribution;
import dev.kvtransfer.api.layout.BlockLayout;
import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.api.model.CommState;
import dev.kvtransfer.api.model.TransceiverState;
import dev.kvtransfer.core.cache.PagedKvCache;
import dev.kvtransfer.core.memory.HostBufferManager;
import dev.kvtransfer.testkit.KvPattern;

import java.util.ArrayList;
import java.util.List;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * Runs whole MLA transfers of one {@link MlaPair} in one JVM: every rank of both instances gets a
 * {@link PagedKvCache} and a formatter from the provider; per request, the context ranks of the serving DP
 * group fill their blocks with {@link KvPattern} and format, then the generation ranks of the serving DP
 * group unformat, and every generation byte is checked. Requests go round-robin over the DP ranks of each side
 * (request {@code i}: context DP rank {@code i % ctxDp}, generation DP rank {@code i % genDp}).
 *
 * <p>Checked per request: counterpart lists are symmetric and stay inside the serving DP groups; no part is
 * left undelivered (a sender never sends to a rank that does not pick it); a context rank that is not the
 * designated sender sends nothing; each generation rank receives exactly its blocks' bytes; the blocks match
 * the pattern byte for byte (and the indexer-K pool too); no off-heap buffer leaks.
 */
final class MlaGridRunner {
    /** Blocks of request {@code i} are {@code BLOCKS[i % BLOCKS.length]}: includes fewer blocks than CP ranks. */
    private static final int[] BLOCKS = {5, 3, 10, 1};

    private MlaGridRunner() {
    }

    /** What one pair moved, for tests that assert more than correctness. */
    record Stats(int requests, long payloadBytes, int parts, int stagingCalls, int senders, int silentCtxRanks) {
    }

    static Stats run(MlaPair pair) {
        return run(pair, MlaCacheFormatter.DEFAULT_DIRECT_RUN_MIN_BYTES);
    }

    /**
     * Runs a pair with formatters using a direct-run threshold ({@code DEFAULT_DIRECT_RUN_MIN_BYTES}: the
     * provider's formatters).
     */
    static Stats run(MlaPair pair, long directRunMinBytes) {
        CacheState ctxBase = pair.ctxState();
        CacheState genBase = pair.genState();
        int ctxDp = ctxBase.attentionDpEnabled() ? ctxBase.dpSize() : 1;
        int genDp = genBase.attentionDpEnabled() ? genBase.dpSize() : 1;
        int requests = Math.max(2, Math.max(ctxDp, genDp));
        int capacity = 0;
        for (int i = 0; i < requests; i++) {
            capacity += BLOCKS[i % BLOCKS.length];
        }
        long payload = 0;
        int parts = 0;
        int staging = 0;
        int senders = 0;
        int silent = 0;
        MlaFormatterProvider provider = new MlaFormatterProvider();
        try (HostBufferManager memory = new HostBufferManager()) {
            DynamicBufferPool pool = new DynamicBufferPool(memory);
            LocalFabric fabric = new LocalFabric(memory);
            PagedKvCache[] ctxCaches = caches(memory, ctxBase, pair.indexerDim(), capacity);
            PagedKvCache[] genCaches = caches(memory, genBase, pair.indexerDim(), capacity);
            try {
                CacheFormatter[] ctxFormatters = formatters(provider, ctxCaches, pool, directRunMinBytes);
                CacheFormatter[] genFormatters = formatters(provider, genCaches, pool, directRunMinBytes);
                CommState ctxComm = comm("ctx", ctxBase.worldSize());
                CommState genComm = comm("gen", genBase.worldSize());
                for (int i = 0; i < requests; i++) {
                    long requestId = 1000 + i;
                    int n = BLOCKS[i % BLOCKS.length];
                    CacheState ctx = ctxBase.attentionDpEnabled() ? ctxBase.withDpRank(i % ctxDp) : ctxBase;
                    CacheState gen = genBase.attentionDpEnabled() ? genBase.withDpRank(i % genDp) : genBase;
                    List<Integer> ctxRanks = servingRanks(ctx);
                    List<Integer> genRanks = servingRanks(gen);
                    checkCounterparts(pair, ctxFormatters[0], ctx, ctxRanks, gen, genRanks);

                    List<LocalSession> senderSessions = new ArrayList<>();
                    List<LocalSession> receiverSessions = new ArrayList<>();
                    try {
                        for (int c : ctxRanks) {
                            int[] ids = ctxCaches[c].allocate(requestId, n);
                            KvPattern.fill(ctxCaches[c], ids, ctx, c, requestId, n);
                            if (pair.indexerDim() > 0) {
                                KvPattern.fillIndexer(ctxCaches[c], ids, ctx, c, requestId, n);
                            }
                            senderSessions.add(new LocalSession(requestId, true,
                                    new TransceiverState(ctx, ctxComm.withSelfIndex(c)), gen, ids, n, memory, pool,
                                    fabric));
                        }
                        for (int g : genRanks) {
                            int[] ids = genCaches[g].allocate(requestId,
                                    BlockDistribution.count(n, gen.contextParallelism(), gen.cpRank(g)));
                            receiverSessions.add(new LocalSession(requestId, false,
                                    new TransceiverState(gen, genComm.withSelfIndex(g)), ctx, ids, n, memory, pool,
                                    fabric));
                        }
                        for (int k = 0; k < ctxRanks.size(); k++) {
                            ctxFormatters[ctxRanks.get(k)].format(senderSessions.get(k));
                        }
                        for (int k = 0; k < genRanks.size(); k++) {
                            genFormatters[genRanks.get(k)].unformat(receiverSessions.get(k));
                        }
                        assertThat(fabric.undelivered()).as("%s request %d: parts nobody received", pair, i)
                                .isZero();
                        for (int k = 0; k < ctxRanks.size(); k++) {
                            int c = ctxRanks.get(k);
                            LocalSession s = senderSessions.get(k);
                            if (ctxFormatters[c].needSendCache(ctx, c, gen)) {
                                senders++;
                            } else {
                                silent++;
                                assertThat(s.sentBytes).as("%s: non-designated context rank %d sent payload", pair, c)
                                        .isZero();
                                assertThat(s.sentParts).isZero();
                                assertThat(s.stagingCalls).isZero();
                            }
                            payload += s.sentBytes;
                            parts += s.sentParts;
                            staging += s.stagingCalls;
                        }
                        for (int k = 0; k < genRanks.size(); k++) {
                            int g = genRanks.get(k);
                            LocalSession s = receiverSessions.get(k);
                            int[] ids = s.blockIds();
                            long expected = ids.length * blockBytes(genCaches[g]);
                            assertThat(s.receivedBytes).as("%s request %d: bytes received by generation rank %d",
                                    pair, i, g).isEqualTo(expected);
                            KvPattern.verify(genCaches[g], ids, gen, g, requestId, n).assertOk();
                            if (pair.indexerDim() > 0) {
                                KvPattern.verifyIndexer(genCaches[g], ids, gen, g, requestId, n).assertOk();
                            }
                            staging += s.stagingCalls;
                        }
                    } finally {
                        senderSessions.forEach(LocalSession::close);
                        receiverSessions.forEach(LocalSession::close);
                        fabric.drain();
                        for (PagedKvCache c : ctxCaches) {
                            c.free(requestId);
                        }
                        for (PagedKvCache c : genCaches) {
                            c.free(requestId);
                        }
                    }
                }
            } finally {
                for (PagedKvCache c : ctxCaches) {
                    c.close();
                }
                for (PagedKvCache c : genCaches) {
                    c.close();
                }
            }
        }
        return new Stats(requests, payload, parts, staging, senders, silent);
    }

    private static long blockBytes(PagedKvCache cache) {
        long b = cache.layout().blockBytes();
        if (cache.indexerKCache() != null) {
            b += cache.indexerKCache().layout().blockBytes();
        }
        return b;
    }

    /** Ranks of the DP group serving the request (all ranks without attention DP). */
    static List<Integer> servingRanks(CacheState s) {
        List<Integer> out = new ArrayList<>();
        int g = s.tpPerDpGroup();
        for (int r = 0; r < s.worldSize(); r++) {
            if (!s.attentionDpEnabled() || s.tpRank(r) / g == s.dpRank()) {
                out.add(r);
            }
        }
        return out;
    }

    private static void checkCounterparts(MlaPair pair, CacheFormatter f, CacheState ctx, List<Integer> ctxRanks,
                                          CacheState gen, List<Integer> genRanks) {
        for (int c : ctxRanks) {
            for (int g : f.counterparts(ctx, c, gen)) {
                assertThat(genRanks).as("%s: context rank %d's counterpart %d serves the request", pair, c, g)
                        .contains(g);
                assertThat(f.counterparts(gen, g, ctx)).as("%s: symmetric counterparts of %d and %d", pair, c, g)
                        .contains(c);
            }
        }
        for (int g : genRanks) {
            for (int c : f.counterparts(gen, g, ctx)) {
                assertThat(ctxRanks).as("%s: generation rank %d's counterpart %d serves the request", pair, g, c)
                        .contains(c);
                assertThat(f.counterparts(ctx, c, gen)).contains(g);
            }
            List<Integer> cps = f.counterparts(gen, g, ctx);
            for (int p : f.pickRecvConnections(gen, g, ctx)) {
                assertThat(f.needSendCache(ctx, cps.get(p), gen))
                        .as("%s: generation rank %d picks context rank %d, which must be a designated sender", pair,
                                g, cps.get(p))
                        .isTrue();
            }
        }
    }

    private static PagedKvCache[] caches(HostBufferManager memory, CacheState s, int indexerDim, int blocks) {
        PagedKvCache[] out = new PagedKvCache[s.worldSize()];
        for (int r = 0; r < out.length; r++) {
            BlockLayout main = BlockLayout.of(s, r);
            BlockLayout idx = indexerDim > 0
                    ? new BlockLayout(main.localLayers(), 1, 1, s.tokensPerBlock(), indexerDim, 1)
                    : null;
            out[r] = new PagedKvCache(memory, main, idx, blocks);
        }
        return out;
    }

    private static CacheFormatter[] formatters(MlaFormatterProvider provider, PagedKvCache[] caches,
                                               DynamicBufferPool pool, long directRunMinBytes) {
        CacheFormatter[] out = new CacheFormatter[caches.length];
        for (int r = 0; r < caches.length; r++) {
            out[r] = directRunMinBytes == MlaCacheFormatter.DEFAULT_DIRECT_RUN_MIN_BYTES
                    ? provider.create(caches[r], pool)
                    : new MlaCacheFormatter(caches[r], pool, directRunMinBytes);
        }
        return out;
    }

    private static CommState comm(String prefix, int ranks) {
        List<String> addresses = new ArrayList<>();
        for (int r = 0; r < ranks; r++) {
            addresses.add(prefix + "-" + r);
        }
        return new CommState("local", addresses, -1);
    }
}
