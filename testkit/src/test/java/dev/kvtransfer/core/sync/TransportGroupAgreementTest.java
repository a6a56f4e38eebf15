package dev.kvtransfer.core.sync;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.KvTransferException;
import dev.kvtransfer.api.layout.BlockDistribution;
import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.api.model.CommState;
import dev.kvtransfer.api.model.ContextPhaseParams;
import dev.kvtransfer.api.transport.ConnectionManager;
import dev.kvtransfer.api.transport.TransportConfig;
import dev.kvtransfer.core.CacheTransceiver;
import dev.kvtransfer.core.RankAssembly;
import dev.kvtransfer.core.RequestState;
import dev.kvtransfer.core.TransceiverConfig;
import dev.kvtransfer.core.TransferRequest;
import dev.kvtransfer.core.TransferStatus;
import dev.kvtransfer.core.cache.PagedKvCache;
import dev.kvtransfer.core.memory.HostBufferManager;
import dev.kvtransfer.core.plugin.Plugins;
import dev.kvtransfer.testkit.KvPattern;
import dev.kvtransfer.testkit.LeakCheckExtension;
import dev.kvtransfer.testkit.loopback.LoopbackTransportProvider;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.ExtendWith;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.OptionalInt;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.function.Function;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

/**
 * The status agreement of a real transfer when every rank is built on its own, as one process per rank would build
 * it (its own manager, memory, KV pool and transceiver), and its status groups are {@link TransportGroupComm}s
 * formed by {@link TransportGroups}: TP2 context to TP2 generation over loopback, every element verified.
 */
@Timeout(120)
@ExtendWith(LeakCheckExtension.class)
class TransportGroupAgreementTest {
    private static final Duration BOUND = Duration.ofSeconds(60);

    /** One rank as a {@code serve --rank R} process holds it. */
    private record Rank(ConnectionManager cm, HostBufferManager bm, PagedKvCache cache, TransportGroups groups,
                        CacheTransceiver transceiver, CacheState state) implements AutoCloseable {
        @Override
        public void close() {
            transceiver.shutdown();
            cm.close();
            transceiver.close();
            cache.close();
            groups.context().close();
            groups.generation().close();
            bm.close();
        }
    }

    private static List<Rank> instance(String name, CacheState state, TransceiverConfig config, String fabric) {
        int n = state.worldSize();
        List<ConnectionManager> cms = new ArrayList<>();
        List<String> addresses = new ArrayList<>();
        for (int r = 0; r < n; r++) {
            ConnectionManager cm = new LoopbackTransportProvider().create(TransportConfig.builder()
                    .name(name + "-rank-" + r).property(LoopbackTransportProvider.FABRIC_PROPERTY, fabric).build());
            cms.add(cm);
            addresses.add(cm.localAddress());
        }
        // What each process learns from the others (the registry, or --rank-addresses): the addresses alone.
        CommState comm = new CommState(LoopbackTransportProvider.NAME, addresses, -1);
        byte[] tokenKey = dev.kvtransfer.core.transfer.ControlAuth.newIssuingKey();
        Plugins plugins = Plugins.discover();
        List<Rank> ranks = new ArrayList<>();
        for (int r = 0; r < n; r++) {
            HostBufferManager bm = new HostBufferManager();
            PagedKvCache cache = PagedKvCache.of(bm, state, r, 32);
            TransportGroups groups = TransportGroups.join(name, state, r, addresses, cms.get(r));
            CacheTransceiver t = RankAssembly.of(config).rank(name, state, r, comm).connections(cms.get(r))
                    .memory(cache, bm).groups(groups.context(), groups.generation())
                    .formatter(plugins.formatterFor(state.attentionType())).tokenIssuingKey(tokenKey).build();
            ranks.add(new Rank(cms.get(r), bm, cache, groups, t, state));
        }
        return ranks;
    }

    @Test
    void a01_tp2ToTp2AgreesOverTransportGroupsAndEveryElementVerifies() throws Exception {
        CacheState state = CacheState.builder().uniformKvHeads(4, 2).sizePerHead(8).tokensPerBlock(4)
                .tensorParallelism(2).build();
        TransceiverConfig config = TransceiverConfig.builder().transferBufferBytes(64 << 10)
                .kvTransferTimeout(Duration.ofSeconds(20)).build();
        List<Rank> ctx = instance("ctx", state, config, "agree-tg");
        List<Rank> gen = instance("gen", state, config, "agree-tg");
        try {
            long[] ids = {101, 102, 103};
            int prompt = 5 * state.tokensPerBlock() + 1;
            int blocks = BlockDistribution.blocksFor(prompt, state.tokensPerBlock());
            List<TransferRequest[]> genRequests = new ArrayList<>();
            for (long id : ids) {
                ContextPhaseParams params = ctx.get(0).transceiver().contextPhaseParams(id, new long[0]);
                TransferRequest[] g = new TransferRequest[2];
                for (int r = 0; r < 2; r++) {
                    int[] blockIds = ctx.get(r).cache().allocate(id, blocks);
                    KvPattern.fill(ctx.get(r).cache(), blockIds, state, r, id, blocks);
                    ctx.get(r).transceiver().respondAndSendAsync(TransferRequest.context(id, prompt, blockIds));
                }
                for (int r = 0; r < 2; r++) {
                    g[r] = TransferRequest.generation(params, prompt, gen.get(r).cache().allocate(id, blocks));
                    gen.get(r).transceiver().requestAndReceiveAsync(g[r]);
                }
                genRequests.add(g);
            }
            for (TransferRequest[] g : genRequests) {
                for (TransferRequest r : g) {
                    await().atMost(BOUND).until(r::isDone);
                    assertThat(r.state()).as("%s", r.error()).isEqualTo(RequestState.GENERATION_TRANS_COMPLETE);
                }
            }
            // The collective status checks: each rank on its own thread, as each process would call them.
            List<TransferStatus> genStatus = collectively(gen, t -> t.checkGenTransferStatus(OptionalInt.empty()));
            List<TransferStatus> ctxStatus = collectively(ctx,
                    t -> t.checkContextTransferStatus(OptionalInt.empty()));
            for (int r = 0; r < 2; r++) {
                assertThat(genStatus.get(r).completed()).as("generation rank %d", r)
                        .containsExactlyInAnyOrder(101L, 102L, 103L);
                assertThat(genStatus.get(r).failed()).isEmpty();
                assertThat(ctxStatus.get(r).completed()).as("context rank %d", r)
                        .containsExactlyInAnyOrder(101L, 102L, 103L);
            }
            for (int i = 0; i < ids.length; i++) {
                for (int r = 0; r < 2; r++) {
                    TransferRequest g = genRequests.get(i)[r];
                    KvPattern.verify(gen.get(r).cache(), g.blockIds(), state, r, ids[i], blocks).assertOk();
                }
            }
        } finally {
            gen.forEach(Rank::close);
            ctx.forEach(Rank::close);
        }
    }

    @Test
    void a02_aStatusCheckWhoseGroupMemberIsGoneFailsWithinTheTransferTimeout() throws Exception {
        CacheState state = CacheState.builder().uniformKvHeads(4, 2).sizePerHead(8).tokensPerBlock(4)
                .tensorParallelism(2).build();
        TransceiverConfig config = TransceiverConfig.builder().transferBufferBytes(64 << 10)
                .kvTransferTimeout(Duration.ofMillis(500)).build();
        List<Rank> gen = instance("gen2", state, config, "agree-tg2");
        try {
            // Rank 1 never checks: rank 0's block-all check cannot agree and names rank 1.
            assertThat(catching(() -> gen.get(0).transceiver().checkGenTransferStatus(OptionalInt.empty())))
                    .isInstanceOfSatisfying(KvTransferException.class, e -> {
                        assertThat(e.code()).isEqualTo(ErrorCode.TIMEOUT);
                        assertThat(e.getMessage()).contains("member 1 (" + gen.get(1).cm().localAddress() + ")");
                    });
        } finally {
            gen.forEach(Rank::close);
        }
    }

    private static List<TransferStatus> collectively(List<Rank> ranks, Function<CacheTransceiver, TransferStatus> f)
            throws Exception {
        List<CompletableFuture<TransferStatus>> fs = new ArrayList<>();
        for (Rank r : ranks) {
            fs.add(CompletableFuture.supplyAsync(() -> f.apply(r.transceiver())));
        }
        List<TransferStatus> out = new ArrayList<>();
        for (CompletableFuture<TransferStatus> c : fs) {
            out.add(c.get(BOUND.toSeconds(), TimeUnit.SECONDS));
        }
        return out;
    }

    private static Throwable catching(Runnable r) {
        try {
            r.run();
            return null;
        } catch (Throwable t) {
            return t;
        }
    }
}
