package dev.kvtransfer.connector;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.KvTransferException;
import dev.kvtransfer.api.layout.BlockDistribution;
import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.api.transport.TransportConfig;
import dev.kvtransfer.core.TransceiverConfig;
import dev.kvtransfer.core.cache.PagedKvCache;
import dev.kvtransfer.core.local.LocalInstance;
import dev.kvtransfer.core.pattern.KvPattern;
import dev.kvtransfer.formatter.standard.StandardFormatterProvider;
import dev.kvtransfer.testkit.LeakCheckExtension;
import dev.kvtransfer.testkit.loopback.LoopbackTransportProvider;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;
import static org.awaitility.Awaitility.await;

/**
 * The worker side over two real one-rank instances, stepped by hand: a layer reaches the decode side when, and only
 * when, the prefill side saved it.
 */
@ExtendWith(LeakCheckExtension.class)
class WorkerConnectorTest {
    private static final Duration BOUND = Duration.ofSeconds(30);
    private static final CacheState STATE = CacheState.builder().uniformKvHeads(3, 2).sizePerHead(8)
            .tokensPerBlock(8).build();

    private static LocalInstance start(String name) {
        TransceiverConfig c = TransceiverConfig.builder().transferBufferBytes(1 << 20)
                .kvTransferTimeout(Duration.ofSeconds(20)).build();
        TransportConfig t = TransportConfig.builder()
                .property(LoopbackTransportProvider.FABRIC_PROPERTY, "worker-connector-test").build();
        return LocalInstance.builder(name, STATE).transport(new LoopbackTransportProvider(), t)
                .formatter(new StandardFormatterProvider()).config(c).blocksPerRank(16).start();
    }

    @Test
    void aLayerLoadReturnsOnceThatLayerWasSavedAndTimesOutNamingTheRequestBefore() throws Exception {
        long ctxId = 1;
        long decodeId = 101;
        int prompt = 20;
        int blocks = BlockDistribution.blocksFor(prompt, 8);
        try (LocalInstance p = start("prefill"); LocalInstance d = start("decode");
             PagedKvCache computed = PagedKvCache.of(p.bufferManager(0), STATE, 0, blocks)) {
            SchedulerConnector ps = new SchedulerConnector(ConnectorConfig.of(KvRole.PRODUCER, STATE),
                    (id, tokens) -> p.transceiver(0).contextPhaseParams(id, tokens));
            WorkerConnector pw = new WorkerConnector(p.transceiver(0), 0, ConnectorConfig.of(KvRole.PRODUCER, STATE));
            ConnectorConfig dc = ConnectorConfig.of(KvRole.CONSUMER, STATE).withLoadAsync(false)
                    .withLayerLoadTimeout(Duration.ofMillis(300));
            SchedulerConnector ds = new SchedulerConnector(dc, null);
            WorkerConnector dw = new WorkerConnector(d.transceiver(0), 0, dc);
            assertThat(dw.localLayers()).isEqualTo(3);

            // Prefill: blocks hold poison until a layer is "computed" (copied in from the pattern).
            int[] pb = p.cache(0).allocate(ctxId, blocks);
            KvPattern.fill(p.cache(0), pb, STATE, 0, ctxId + (1L << 40), blocks);
            int[] cb = computed.allocate(ctxId, blocks);
            KvPattern.fill(computed, cb, STATE, 0, ctxId, blocks);
            ConnectorRequest pr = ConnectorRequest.prefill(ctxId, prompt, new long[0]);
            ps.updateStateAfterAlloc(pr, BlockTable.uniform(1, pb), 0);
            pw.bindConnectorMetadata(ps.buildConnectorMeta());

            // Decode: loads layer by layer inside its step.
            ConnectorRequest dr = ConnectorRequest.decode(decodeId, prompt, new long[0],
                    ps.contextPhaseParams(ctxId));
            MatchResult m = ds.getNumNewMatchedTokens(dr, 0);
            assertThat(m).isEqualTo(new MatchResult(prompt, false));
            int[] db = d.cache(0).allocate(decodeId, blocks);
            ds.updateStateAfterAlloc(dr, BlockTable.uniform(1, db), m.numTokens());
            dw.bindConnectorMetadata(ds.buildConnectorMeta());
            dw.startLoadKv();

            long layerBytes = p.cache(0).layout().layerBytes();
            copyLayer(p, computed, pb, cb, 0, layerBytes);
            pw.saveKvLayer(0);
            // First contact (connect, infos, ready signal) may take longer than one 300 ms wait on a loaded machine:
            // a wait that times out leaves the load in flight, so waiting again is what an engine would do.
            await().atMost(BOUND).ignoreException(KvTransferException.class)
                    .untilAsserted(() -> dw.waitForLayerLoad(0));
            // Layer 1 is not computed yet: it must not arrive (nothing sends a layer before saveKvLayer).
            assertThatThrownBy(() -> dw.waitForLayerLoad(1)).isInstanceOfSatisfying(KvTransferException.class, e -> {
                assertThat(e.code()).isEqualTo(ErrorCode.TIMEOUT);
                assertThat(e.requestId()).isEqualTo(ctxId);
                assertThat(e.getMessage()).contains("request " + decodeId).contains("layer 1");
            });
            for (int l = 1; l < 3; l++) {
                copyLayer(p, computed, pb, cb, l, layerBytes);
                pw.saveKvLayer(l);
                dw.waitForLayerLoad(l);
            }
            pw.waitForSave(Duration.ZERO);
            KvPattern.verify(d.cache(0), db, STATE, 0, ctxId, blocks).assertOk();

            // The ends, through the status rounds, and what the schedulers make of them.
            List<WorkerOutput> sent = new ArrayList<>();
            List<WorkerOutput> received = new ArrayList<>();
            await().atMost(BOUND).until(() -> {
                WorkerOutput a = pw.getFinished();
                WorkerOutput b = dw.getFinished();
                if (!a.isEmpty()) {
                    sent.add(a);
                }
                if (!b.isEmpty()) {
                    received.add(b);
                }
                return !sent.isEmpty() && !received.isEmpty();
            });
            assertThat(ps.requestFinished(ctxId).delayFree()).isTrue();
            assertThat(ps.updateConnectorOutput(sent).finishedSending()).containsExactly(ctxId);
            ConnectorUpdate du = ds.updateConnectorOutput(received);
            assertThat(du.finishedRecving()).containsExactly(decodeId);
            assertThat(du.failedLoads()).isEmpty();
            FinishedTransfer f = received.get(0).received().get(0);
            assertThat(f.ok()).isTrue();
            assertThat(f.contextRequestId()).isEqualTo(ctxId);
            assertThat(f.bytes()).isEqualTo(blocks * d.cache(0).layout().blockBytes());
            assertThat(dw.getBlockIdsWithLoadErrors()).isEmpty();
            assertThat(pw.savesInFlight()).isZero();
            assertThat(dw.loadsInFlight()).isZero();
            pw.clearConnectorMetadata();
            dw.clearConnectorMetadata();
            p.cache(0).free(ctxId);
            d.cache(0).free(decodeId);
            computed.free(ctxId);
        }
    }

    @Test
    void aPreemptedSaveIsCancelledBeforeTheStepAndShutdownEndsWhatIsLeft() throws Exception {
        try (LocalInstance p = start("prefill-hooks")) {
            ConnectorConfig pc = ConnectorConfig.of(KvRole.PRODUCER, STATE);
            SchedulerConnector ps = new SchedulerConnector(pc, (id, tokens) -> p.transceiver(0)
                    .contextPhaseParams(id, tokens));
            WorkerConnector pw = new WorkerConnector(p.transceiver(0), 0, pc);
            assertThat(pw.getFinishedCount()).isEqualTo(1);
            int[] a = p.cache(0).allocate(1, 2);
            int[] b = p.cache(0).allocate(2, 1);
            ps.updateStateAfterAlloc(ConnectorRequest.prefill(1, 16, new long[0]), BlockTable.uniform(1, a), 0);
            ps.updateStateAfterAlloc(ConnectorRequest.prefill(2, 8, new long[0]), BlockTable.uniform(1, b), 0);
            pw.bindConnectorMetadata(ps.buildConnectorMeta());
            pw.saveKvLayer(0);
            assertThat(pw.hasPendingPushWork()).isTrue();
            assertThat(ps.hasPendingPushWork()).isTrue();
            pw.clearConnectorMetadata();

            // The engine preempts request 1: the next step's metadata makes the worker stop using its blocks first.
            ps.handlePreemptions(java.util.Set.of(1L));
            ConnectorMetadata meta = ps.buildConnectorMeta();
            assertThat(meta.preempted()).containsExactly(1L);
            pw.bindConnectorMetadata(ConnectorMetadata.fromBytes(meta.toBytes()));
            List<WorkerOutput> out = new ArrayList<>();
            await().atMost(BOUND).until(() -> {
                WorkerOutput o = pw.getFinished();
                if (!o.isEmpty()) {
                    out.add(o);
                }
                return !out.isEmpty();
            });
            FinishedTransfer f = out.get(0).sent().get(0);
            assertThat(f.requestId()).isEqualTo(1);
            assertThat(f.error().code()).isEqualTo(ErrorCode.CANCELLED);
            assertThat(ps.updateConnectorOutput(out).finishedSending()).as("the engine took the blocks back")
                    .isEmpty();
            assertThat(ps.takeEvents()).extracting(ConnectorEvent::kind)
                    .containsExactly(ConnectorEvent.Kind.PREEMPTED, ConnectorEvent.Kind.SAVE_FAILED);
            pw.clearConnectorMetadata();
            p.cache(0).free(1);

            // Shutdown: request 2 is still waiting for its decode side; it is cancelled and has ended on return.
            assertThat(pw.hasPendingPushWork()).isTrue();
            assertThat(pw.shutdown(BOUND)).isTrue();
            assertThat(ps.shutdown()).containsExactly(2L);
            assertThatThrownBy(() -> pw.bindConnectorMetadata(new ConnectorMetadata(9, List.of(), List.of(),
                    java.util.Set.of()))).isInstanceOf(IllegalStateException.class).hasMessageContaining("shut down");
            WorkerOutput last = pw.getFinished();
            assertThat(last.sent()).extracting(FinishedTransfer::requestId).containsExactly(2L);
            assertThat(last.sent().get(0).error().code()).isEqualTo(ErrorCode.CANCELLED);
            assertThat(pw.hasPendingPushWork()).isFalse();
            p.cache(0).free(2);
        }
    }

    private static void copyLayer(LocalInstance p, PagedKvCache from, int[] to, int[] src, int layer,
                                  long layerBytes) {
        for (int b = 0; b < to.length; b++) {
            p.bufferManager(0).copy(from.block(src[b]), layer * layerBytes, p.cache(0).block(to[b]),
                    layer * layerBytes, layerBytes);
        }
    }
}
