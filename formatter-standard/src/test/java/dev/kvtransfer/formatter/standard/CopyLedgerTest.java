package dev.kvtransfer.formatter.standard;

import dev.kvtransfer.api.layout.PoolLayout;
import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.api.transport.TransportConfig;
import dev.kvtransfer.core.CopyLedger;
import dev.kvtransfer.core.TransceiverConfig;
import dev.kvtransfer.core.TransferRequest;
import dev.kvtransfer.core.local.LocalInstance;
import dev.kvtransfer.core.plugin.Plugins;
import dev.kvtransfer.testkit.TransferFixture;
import dev.kvtransfer.testkit.loopback.LoopbackTransportProvider;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.atomic.AtomicInteger;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * The copy ledger of the standard formatter over loopback, path by path, against the table of this module's
 * README ("Copy ledger"): staging copies per byte on each side, the transport's passes (loopback: one, a posted
 * receive written straight from the sender's buffer) and the checksum passes (one per side with part checksums
 * on). Every transfer's bytes are checked element by element first.
 */
class CopyLedgerTest {
    private static final AtomicInteger FABRICS = new AtomicInteger();
    private final List<LocalInstance> instances = new ArrayList<>();
    private final List<Throwable> background = new CopyOnWriteArrayList<>();

    @AfterEach
    void close() {
        instances.forEach(LocalInstance::close);
    }

    private LocalInstance start(String name, CacheState state, String fabric, boolean checksums) {
        TransportConfig base = TransportConfig.builder().name(name).defaultTimeout(Duration.ofSeconds(30))
                .property(LoopbackTransportProvider.FABRIC_PROPERTY, fabric).build();
        LocalInstance i = LocalInstance.builder(name, state).transport(new LoopbackTransportProvider(), base)
                .formatter(Plugins.discover().formatterFor(state.attentionType()))
                .config(TransceiverConfig.builder().partChecksums(checksums).kvTransferTimeout(Duration.ofSeconds(30))
                        .senderFutureTimeout(Duration.ofMillis(500)).transferBufferBytes(1 << 20)
                        .build())
                .blocksPerRank(12).errorHandler(background::add).start();
        instances.add(i);
        return i;
    }

    private static CacheState state(int tp, PoolLayout.Kind layout, int tokensPerBlock) {
        return CacheState.builder().uniformKvHeads(4, 4).sizePerHead(64).tokensPerBlock(tokensPerBlock)
                .tensorParallelism(tp).poolLayout(PoolLayout.of(layout)).build();
    }

    /**
     * A layer-wise pull between block pools: each layer of the part is one 16 KiB piece per block, under
     * {@link StandardCacheFormatter#LAYER_RANGE_MIN_DIRECT_BYTES}, so both sides stage and each layer is one message
     * per peer (4 layers: 4 messages, not 4 x 9 blocks), at one gather and one scatter per byte.
     */
    @org.junit.jupiter.api.Test
    void aLayerWisePullBetweenBlockPoolsSendsOneMessagePerLayerAndStagesBothSides() {
        String fabric = "ledger-" + FABRICS.incrementAndGet();
        CacheState c = state(1, PoolLayout.Kind.BLOCK, 16);
        LocalInstance ctx = start("ctx", c, fabric, true);
        LocalInstance gen = start("gen", c, fabric, true);
        int prompt = 8 * 16 + 3;
        TransferFixture.Transfer t = TransferFixture.prepare(ctx, gen, c, c, prompt, prompt);
        TransferFixture.request(gen, t);
        TransferRequest r = t.all().stream().filter(TransferRequest::isContext).findFirst().orElseThrow();
        ctx.transceiver(0).respondAndSendLayerWise(r);
        for (int l = 0; l < c.numLayers(); l++) {
            r.layerReady(l);
        }
        TransferFixture.awaitEnded(List.of(t), Duration.ofSeconds(60));
        TransferFixture.assertExact(gen, t);
        TransferRequest g = t.all().stream().filter(x -> !x.isContext()).findFirst().orElseThrow();
        assertThat(g.isLayerWise() || r.isLayerWise()).as("%s / %s", r, g).isTrue();
        assertThat(g.messageCount()).as("messages of the layer-wise pull %s", g).isEqualTo(c.numLayers());
        CopyLedger cl = r.copyLedger();
        CopyLedger gl = g.copyLedger();
        assertThat(cl.staged()).as("%s", cl).isEqualTo(cl.bytes());
        assertThat(gl.staged()).as("%s", gl).isEqualTo(gl.bytes()).isEqualTo(cl.bytes());
        assertThat(background).isEmpty();
    }

    /**
     * @param ctxStaged staging copies per byte the context ranks make (gathers)
     * @param genStaged staging copies per byte the generation ranks make (scatters)
     */
    @ParameterizedTest(name = "{0}: TP{1} {2} -> TP{3} {4}, {5} tokens a block: staged {6} / {7}")
    @CsvSource({
        "matching block pools, 1, BLOCK, 1, BLOCK, 16, 0, 0",
        "TP2 -> TP1 units of 2 KiB, 2, BLOCK, 1, BLOCK, 16, 0, 1",
        "TP2 -> TP1 units of 32 KiB (under the both-direct bar), 2, BLOCK, 1, BLOCK, 128, 0, 1",
        "layer-nhd -> block transpose, 1, LAYER_NHD, 1, BLOCK, 16, 1, 0",
        "layer-nhd TP2 -> layer-nhd TP1, 2, LAYER_NHD, 1, LAYER_NHD, 16, 0, 1"})
    void eachPathCountsTheCopiesItsPlanMakes(String path, int ctxTp, PoolLayout.Kind ctxLayout, int genTp,
                                             PoolLayout.Kind genLayout, int tokensPerBlock, int ctxStaged, int genStaged) {
        for (boolean checksums : new boolean[] {true, false}) {
            String fabric = "ledger-" + FABRICS.incrementAndGet();
            CacheState c = state(ctxTp, ctxLayout, tokensPerBlock);
            CacheState g = state(genTp, genLayout, tokensPerBlock);
            LocalInstance ctx = start("ctx", c, fabric, checksums);
            LocalInstance gen = start("gen", g, fabric, checksums);
            int prompt = 8 * tokensPerBlock + 3;
            TransferFixture.Transfer t = TransferFixture.prepare(ctx, gen, c, g, prompt, prompt);
            TransferFixture.respond(ctx, t);
            TransferFixture.request(gen, t);
            TransferFixture.awaitEnded(List.of(t), Duration.ofSeconds(60));
            TransferFixture.assertExact(gen, t);
            CopyLedger ctxSide = CopyLedger.NONE;
            CopyLedger genSide = CopyLedger.NONE;
            for (TransferRequest r : t.all()) {
                if (r.isContext()) {
                    ctxSide = ctxSide.plus(r.copyLedger());
                } else {
                    genSide = genSide.plus(r.copyLedger());
                }
            }
            String what = path + ", checksums " + checksums + ": context " + ctxSide + ", generation " + genSide;
            assertThat(ctxSide.bytes()).as(what).isPositive().isEqualTo(genSide.bytes());
            assertThat(ctxSide.staged()).as(what).isEqualTo(ctxStaged * ctxSide.bytes());
            assertThat(genSide.staged()).as(what).isEqualTo(genStaged * genSide.bytes());
            assertThat(ctxSide.transportUnknown()).as(what).isZero();
            assertThat(ctxSide.transport()).as(what).isEqualTo(ctxSide.bytes());
            assertThat(genSide.transport()).as(what).isEqualTo(genSide.bytes());
            long crc = checksums ? ctxSide.bytes() : 0;
            assertThat(ctxSide.checksummed()).as(what).isEqualTo(crc);
            assertThat(genSide.checksummed()).as(what).isEqualTo(crc);
            TransferFixture.free(ctx, gen, t);
            close();
            instances.clear();
        }
        assertThat(background).isEmpty();
    }
}
