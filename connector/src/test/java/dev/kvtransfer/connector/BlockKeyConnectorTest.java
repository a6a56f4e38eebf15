package dev.kvtransfer.connector;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.layout.BlockDistribution;
import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.api.transport.TransportConfig;
import dev.kvtransfer.core.TransceiverConfig;
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
import static org.awaitility.Awaitility.await;

/**
 * The key of the prompt's last block through the connector: the engine sets it on its requests, the metadata carries
 * it to the workers, and the prefill side refuses a decode side whose key differs (another LoRA adapter, other extra
 * keys), naming both, before a byte moves; the next request, keys alike, moves every element.
 */
@ExtendWith(LeakCheckExtension.class)
class BlockKeyConnectorTest {
    private static final Duration BOUND = Duration.ofSeconds(30);
    private static final CacheState STATE = CacheState.builder().uniformKvHeads(3, 2).sizePerHead(8)
            .tokensPerBlock(8).build();

    private static LocalInstance start(String name) {
        TransceiverConfig c = TransceiverConfig.builder().transferBufferBytes(1 << 20)
                .kvTransferTimeout(Duration.ofSeconds(20)).build();
        TransportConfig t = TransportConfig.builder()
                .property(LoopbackTransportProvider.FABRIC_PROPERTY, "block-key-connector-test").build();
        return LocalInstance.builder(name, STATE).transport(new LoopbackTransportProvider(), t)
                .formatter(new StandardFormatterProvider()).config(c).blocksPerRank(16).start();
    }

    /** One request through both connectors; returns the decode and prefill workers' ends. */
    private static FinishedTransfer[] run(LocalInstance p, LocalInstance d, SchedulerConnector ps,
                                          WorkerConnector pw, SchedulerConnector ds, WorkerConnector dw, long ctxId,
                                          long[] prefillKey, long[] decodeKey) {
        int prompt = 20;
        int blocks = BlockDistribution.blocksFor(prompt, 8);
        int[] pb = p.cache(0).allocate(ctxId, blocks);
        KvPattern.fill(p.cache(0), pb, STATE, 0, ctxId, blocks);
        ps.updateStateAfterAlloc(ConnectorRequest.prefill(ctxId, prompt, new long[0]).withLastBlockKey(prefillKey),
                BlockTable.uniform(1, pb), 0);
        pw.bindConnectorMetadata(ConnectorMetadata.fromBytes(ps.buildConnectorMeta().toBytes()));
        for (int l = 0; l < 3; l++) {
            pw.saveKvLayer(l);
        }
        ConnectorRequest dr = ConnectorRequest.decode(100 + ctxId, prompt, new long[0], ps.contextPhaseParams(ctxId))
                .withLastBlockKey(decodeKey);
        MatchResult m = ds.getNumNewMatchedTokens(dr, 0);
        int[] db = d.cache(0).allocate(100 + ctxId, blocks);
        ds.updateStateAfterAlloc(dr, BlockTable.uniform(1, db), m.numTokens());
        dw.bindConnectorMetadata(ConnectorMetadata.fromBytes(ds.buildConnectorMeta().toBytes()));
        dw.startLoadKv();
        List<FinishedTransfer> sent = new ArrayList<>();
        List<FinishedTransfer> received = new ArrayList<>();
        await().atMost(BOUND).until(() -> {
            sent.addAll(pw.getFinished().sent());
            received.addAll(dw.getFinished().received());
            return !sent.isEmpty() && !received.isEmpty();
        });
        pw.clearConnectorMetadata();
        dw.clearConnectorMetadata();
        FinishedTransfer got = received.get(0);
        if (got.ok()) {
            KvPattern.verify(d.cache(0), db, STATE, 0, ctxId, blocks).assertOk();
        }
        p.cache(0).free(ctxId);
        d.cache(0).free(100 + ctxId);
        return new FinishedTransfer[] {got, sent.get(0)};
    }

    @Test
    void aDecodeSideUnderAnotherAdapterIsRefusedNamingBothKeysAndTheNextRequestIsServed() {
        try (LocalInstance p = start("prefill"); LocalInstance d = start("decode")) {
            ConnectorConfig pc = ConnectorConfig.of(KvRole.PRODUCER, STATE);
            SchedulerConnector ps = new SchedulerConnector(pc, (id, tokens) -> p.transceiver(0)
                    .contextPhaseParams(id, tokens));
            WorkerConnector pw = new WorkerConnector(p.transceiver(0), 0, pc);
            ConnectorConfig dc = ConnectorConfig.of(KvRole.CONSUMER, STATE);
            SchedulerConnector ds = new SchedulerConnector(dc, null);
            WorkerConnector dw = new WorkerConnector(d.transceiver(0), 0, dc);

            // The same prompt under LoRA task 7 on the prefill side and task 9 on the decode side.
            FinishedTransfer[] refused = run(p, d, ps, pw, ds, dw, 1, new long[] {1, 7}, new long[] {1, 9});
            for (FinishedTransfer f : refused) {
                assertThat(f.ok()).as("%s", f).isFalse();
                assertThat(f.error().code()).isEqualTo(ErrorCode.UNSUPPORTED_LAYOUT);
                assertThat(f.error().getMessage()).contains("request 1", "expects last block key [1, 9]",
                        "computed the request under [1, 7]");
                assertThat(f.bytes()).isZero();
            }

            // Keys alike: every element arrives.
            FinishedTransfer[] served = run(p, d, ps, pw, ds, dw, 2, new long[] {1, 7}, new long[] {1, 7});
            assertThat(served[0].ok()).as("%s", served[0]).isTrue();
            assertThat(served[1].ok()).as("%s", served[1]).isTrue();
            assertThat(served[0].bytes()).isEqualTo(3 * d.cache(0).layout().blockBytes());
        }
    }
}
