package dev.kvtransfer.cli.journal;

import dev.kvtransfer.api.layout.BlockDistribution;
import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.api.model.ContextPhaseParams;
import dev.kvtransfer.api.transport.TransportConfig;
import dev.kvtransfer.api.transport.TransportProvider;
import dev.kvtransfer.core.RequestState;
import dev.kvtransfer.core.TransceiverConfig;
import dev.kvtransfer.core.TransferRequest;
import dev.kvtransfer.core.local.LocalInstance;
import dev.kvtransfer.core.plugin.Plugins;
import dev.kvtransfer.testkit.KvPattern;
import dev.kvtransfer.testkit.loopback.LoopbackTransportProvider;

import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;

/**
 * Test helper: a context and a generation {@link LocalInstance} in this JVM over the loopback transport with the
 * standard formatter (found by discovery), journaling to a directory, moving requests and checking every byte
 * with {@link KvPattern}.
 */
final class JournalRun {
    /** Context layout: TP 2. */
    static final CacheState CTX = CacheState.builder().uniformKvHeads(4, 4).sizePerHead(16).tokensPerBlock(16)
            .tensorParallelism(2).build();
    /** Generation layout: PP 2 (heads and layers both re-shard). */
    static final CacheState GEN = CacheState.builder().uniformKvHeads(4, 4).sizePerHead(16).tokensPerBlock(16)
            .pipelineParallelism(2).build();

    private JournalRun() {
    }

    static TransceiverConfig config(Path journalDir, boolean checksums, long chunkBytes) {
        Map<String, String> p = new LinkedHashMap<>();
        p.put(TransceiverConfig.P_BACKEND, "loopback");
        p.put(JournalOptions.P_JOURNAL_DIR, journalDir.toString());
        p.put(JournalOptions.P_JOURNAL_CHECKSUMS, Boolean.toString(checksums));
        p.put(TransceiverConfig.P_CHUNK_BYTES, Long.toString(chunkBytes));
        p.put(TransceiverConfig.P_KV_TRANSFER_TIMEOUT_MS, "60000");
        return TransceiverConfig.fromProperties(p);
    }

    static LocalInstance start(String name, CacheState state, TransportProvider transport, String fabric,
                               TransceiverConfig config, int blocksPerRank) {
        TransportConfig base = TransportConfig.builder().name(name)
                .properties(Map.of(LoopbackTransportProvider.FABRIC_PROPERTY, fabric)).build();
        return LocalInstance.builder(name, state).transport(transport, base).plugins(Plugins.discover())
                .config(config).blocksPerRank(blocksPerRank).start();
    }

    /** One request on every serving rank of both instances. */
    static final class Transfer {
        final long id;
        final int prompt;
        final int totalBlocks;
        final Map<Integer, TransferRequest> ctx = new LinkedHashMap<>();
        final Map<Integer, TransferRequest> gen = new LinkedHashMap<>();
        final Map<Integer, int[]> genBlocks = new LinkedHashMap<>();

        Transfer(long id, int prompt, int totalBlocks) {
            this.id = id;
            this.prompt = prompt;
            this.totalBlocks = totalBlocks;
        }

        List<TransferRequest> all() {
            List<TransferRequest> l = new ArrayList<>(ctx.values());
            l.addAll(gen.values());
            return l;
        }
    }

    static List<Integer> serving(CacheState s) {
        List<Integer> out = new ArrayList<>();
        for (int r = 0; r < s.worldSize(); r++) {
            if (s.layerCount(s.ppRank(r)) > 0) {
                out.add(r);
            }
        }
        return out;
    }

    static Transfer submit(LocalInstance ctx, LocalInstance gen, long id, int prompt) {
        int total = BlockDistribution.blocksFor(prompt, ctx.cacheState().tokensPerBlock());
        Transfer t = new Transfer(id, prompt, total);
        CacheState cs = ctx.cacheState();
        for (int r : serving(cs)) {
            int[] blocks = ctx.cache(r).allocate(id, BlockDistribution.count(total, cs.contextParallelism(),
                    cs.cpRank(r)));
            KvPattern.fill(ctx.cache(r), blocks, ctx.cacheState(r), r, id, total);
            TransferRequest req = TransferRequest.context(id, prompt, blocks);
            t.ctx.put(r, req);
            ctx.transceiver(r).respondAndSendAsync(req);
        }
        ContextPhaseParams params = ctx.contextPhaseParams(id, serving(cs).get(0));
        CacheState gs = gen.cacheState();
        for (int r : serving(gs)) {
            int[] blocks = gen.cache(r).allocate(id, BlockDistribution.count(total, gs.contextParallelism(),
                    gs.cpRank(r)));
            TransferRequest req = TransferRequest.generation(params, prompt, blocks);
            t.gen.put(r, req);
            t.genBlocks.put(r, blocks);
            gen.transceiver(r).requestAndReceiveAsync(req);
        }
        return t;
    }

    /** Waits (bounded) for every rank, asserts success and KvPattern on every generation rank, frees the blocks. */
    static long awaitAndVerify(LocalInstance ctx, LocalInstance gen, Transfer t) throws Exception {
        for (TransferRequest r : t.all()) {
            r.completion().toCompletableFuture().get(60, TimeUnit.SECONDS);
        }
        long checked = 0;
        for (Map.Entry<Integer, TransferRequest> e : t.ctx.entrySet()) {
            if (e.getValue().state() != RequestState.CONTEXT_COMPLETE) {
                throw new AssertionError("ctx rank " + e.getKey() + " request " + t.id + ": " + e.getValue().state()
                        + " " + e.getValue().error());
            }
            ctx.cache(e.getKey()).free(t.id);
        }
        for (Map.Entry<Integer, TransferRequest> e : t.gen.entrySet()) {
            int r = e.getKey();
            if (e.getValue().state() != RequestState.GENERATION_TRANS_COMPLETE) {
                throw new AssertionError("gen rank " + r + " request " + t.id + ": " + e.getValue().state() + " "
                        + e.getValue().error());
            }
            KvPattern.Result v = KvPattern.verify(gen.cache(r), t.genBlocks.get(r), gen.cacheState(r), r, t.id,
                    t.totalBlocks);
            v.assertOk();
            checked += v.checkedElements();
            gen.cache(r).free(t.id);
        }
        return checked;
    }

    /**
     * A whole run: requests in two waves (the second starts when the first is verified, so the journal records
     * a real inter-arrival gap), then both instances close (which flushes and closes the journals).
     *
     * @param journalDir where the journals go
     * @param checksums  whether parts carry CRC32C
     * @param prompts    prompt length of request i + 1
     * @return elements verified
     */
    static long run(Path journalDir, boolean checksums, int... prompts) throws Exception {
        TransceiverConfig cfg = config(journalDir, checksums, 4096);
        String fabric = "journal-run-" + System.nanoTime();
        TransportProvider loopback = new LoopbackTransportProvider();
        long checked = 0;
        try (LocalInstance ctx = start("ctx", CTX, loopback, fabric, cfg, 256);
             LocalInstance gen = start("gen", GEN, loopback, fabric, cfg, 256)) {
            int half = (prompts.length + 1) / 2;
            for (int[] wave : new int[][] {{0, half}, {half, prompts.length}}) {
                List<Transfer> ts = new ArrayList<>();
                for (int i = wave[0]; i < wave[1]; i++) {
                    ts.add(submit(ctx, gen, i + 1, prompts[i]));
                }
                for (Transfer t : ts) {
                    checked += awaitAndVerify(ctx, gen, t);
                }
            }
        }
        return checked;
    }
}
