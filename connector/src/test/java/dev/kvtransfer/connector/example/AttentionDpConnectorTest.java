package dev.kvtransfer.connector.example;

import dev.kvtransfer.aeron.AeronTransportProvider;
import dev.kvtransfer.api.layout.BlockDistribution;
import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.api.model.ContextPhaseParams;
import dev.kvtransfer.api.transport.TransportConfig;
import dev.kvtransfer.api.transport.TransportProvider;
import dev.kvtransfer.connector.ConnectorConfig;
import dev.kvtransfer.connector.ConnectorRequest;
import dev.kvtransfer.connector.KvRole;
import dev.kvtransfer.connector.WorkerConnector;
import dev.kvtransfer.core.TransceiverConfig;
import dev.kvtransfer.core.local.LocalInstance;
import dev.kvtransfer.formatter.standard.StandardFormatterProvider;
import dev.kvtransfer.testkit.LeakCheckExtension;
import dev.kvtransfer.testkit.loopback.LoopbackTransportProvider;
import org.junit.jupiter.api.extension.ExtendWith;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

import java.time.Duration;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.concurrent.atomic.AtomicInteger;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;
import static org.awaitility.Awaitility.await;

/**
 * Attention data parallelism through the connector: each DP rank of an instance is its own {@link MiniEngine} (its
 * own scheduler connector over the ranks of its DP group, as each vLLM DP rank runs its own engine core), and owns
 * its own requests. A prefill instance TP2 with attention DP 2 (two DP ranks of one rank) and a decode instance
 * TP2 × PP2 with attention DP 2 (two DP ranks of two PP stages each); request {@code i} is prefilled on DP rank
 * {@code i % 2} and decoded on DP rank {@code (i + 1) % 2}. Every element is verified on the decode DP group that owns
 * the request, and no rank outside an engine's DP group ever holds or moves its requests.
 */
@ExtendWith(LeakCheckExtension.class)
class AttentionDpConnectorTest {
    private static final Duration BOUND = Duration.ofSeconds(90);
    private static final AtomicInteger FABRIC = new AtomicInteger();
    private static final CacheState PREFILL = CacheState.builder().uniformKvHeads(4, 2).sizePerHead(8)
            .tokensPerBlock(8).tensorParallelism(2).attentionDp(true, 0, 2).build();
    private static final CacheState DECODE = CacheState.builder().uniformKvHeads(4, 2).sizePerHead(8)
            .tokensPerBlock(8).tensorParallelism(2).pipelineParallelism(2).attentionDp(true, 0, 2).build();
    private static final long DECODE_ID = 100;
    private static final int[] PROMPTS = {40, 17, 24, 9};

    private static LocalInstance start(String name, CacheState state, TransportProvider p, String fabric) {
        TransceiverConfig c = TransceiverConfig.builder().transferBufferBytes(1 << 20)
                .kvTransferTimeout(Duration.ofSeconds(30)).build();
        TransportConfig t = p instanceof LoopbackTransportProvider
                ? TransportConfig.builder().property(LoopbackTransportProvider.FABRIC_PROPERTY, fabric).build()
                : TransportConfig.builder().build();
        return LocalInstance.builder(name, state).transport(p, t).formatter(new StandardFormatterProvider())
                .config(c).blocksPerRank(32).start();
    }

    @ParameterizedTest(name = "{0}")
    @ValueSource(strings = {"loopback", "aeron"})
    void eachDpRankOwnsItsRequestsOnItsOwnRanks(String backend) throws Exception {
        // One config per DP rank; the instance-wide one is refused, naming the way out.
        assertThatThrownBy(() -> ConnectorConfig.of(KvRole.PRODUCER, PREFILL))
                .hasMessageContaining("ConnectorConfig.of(role, state, dpRank)");
        assertThat(ConnectorConfig.of(KvRole.CONSUMER, DECODE, 1).members()).containsExactly(1, 3);
        assertThat(ConnectorConfig.of(KvRole.CONSUMER, DECODE, 0).members()).containsExactly(0, 2);

        String fabric = "connector-dp-" + FABRIC.incrementAndGet();
        TransportProvider p1 = backend.equals("aeron") ? new AeronTransportProvider() : new LoopbackTransportProvider();
        TransportProvider p2 = backend.equals("aeron") ? new AeronTransportProvider() : new LoopbackTransportProvider();
        try (LocalInstance p = start("prefill", PREFILL, p1, fabric); LocalInstance d = start("decode", DECODE, p2,
                fabric)) {
            ConnectorConfig decode0 = ConnectorConfig.of(KvRole.CONSUMER, DECODE, 0);
            assertThatThrownBy(() -> new WorkerConnector(d.transceiver(1), 1, decode0))
                    .hasMessageContaining("rank 1 is not a member [0, 2]");

            List<MiniEngine> decodes = new ArrayList<>();
            List<MiniEngine> prefills = new ArrayList<>();
            try {
                for (int dp = 0; dp < 2; dp++) {
                    decodes.add(new MiniEngine("decode-dp" + dp, d, ConnectorConfig.of(KvRole.CONSUMER, DECODE, dp)
                            .withLoadAsync(dp == 0), new MiniEngine.Listener() { }));
                }
                for (int dp = 0; dp < 2; dp++) {
                    prefills.add(new MiniEngine("prefill-dp" + dp, p, ConnectorConfig.of(KvRole.PRODUCER, PREFILL,
                            dp), new MiniEngine.Listener() {
                        @Override
                        public void admitted(long id, ContextPhaseParams params) {
                            int prompt = PROMPTS[(int) id - 1];
                            // The router's choice: the other DP rank of the decode instance.
                            decodes.get((int) ((id + 1) % 2)).submit(new MiniEngine.Job(ConnectorRequest.decode(
                                    DECODE_ID + id, prompt, new long[0], params), 0, false));
                        }
                    }));
                }
                for (int i = 0; i < PROMPTS.length; i++) {
                    long id = i + 1;
                    prefills.get((int) (id % 2)).submit(new MiniEngine.Job(ConnectorRequest.prefill(id, PROMPTS[i],
                            new long[0]), 0, false, 16, -1));
                }
                await().atMost(BOUND).until(() -> failure(prefills) != null || failure(decodes) != null
                        || freed(prefills) == PROMPTS.length && freed(decodes) == PROMPTS.length);
                assertThat(failure(prefills)).isNull();
                assertThat(failure(decodes)).isNull();
            } finally {
                for (MiniEngine e : prefills) {
                    e.close();
                }
                for (MiniEngine e : decodes) {
                    e.close();
                }
            }

            for (int i = 0; i < PROMPTS.length; i++) {
                long id = i + 1;
                MiniEngine pe = prefills.get((int) (id % 2));
                MiniEngine de = decodes.get((int) ((id + 1) % 2));
                MiniEngine other = decodes.get((int) (id % 2));
                // Verified element by element on the decode DP group that owns it; the other never saw it.
                assertThat(de.verified).contains(DECODE_ID + id);
                assertThat(other.transfers).doesNotContainKey(DECODE_ID + id);
                assertThat(other.blocksOf).doesNotContainKey(DECODE_ID + id);
                // Moved only by the ranks of the owning DP groups, every one of them.
                int prefillRank = (int) (id % 2);
                assertThat(pe.transfers.get(id)).containsOnlyKeys(prefillRank);
                int dp = (int) ((id + 1) % 2);
                assertThat(de.transfers.get(DECODE_ID + id)).containsOnlyKeys(dp, dp + 2);
                int blocks = BlockDistribution.blocksFor(PROMPTS[i], 8);
                for (int r : List.of(dp, dp + 2)) {
                    assertThat(de.transfers.get(DECODE_ID + id).get(r).bytes())
                            .isEqualTo(blocks * d.cache(r).layout().blockBytes());
                }
                assertThat(pe.chunksOf.get(id)).isEqualTo((PROMPTS[i] + 15) / 16);
            }
            Set<Long> all = new HashSet<>();
            decodes.forEach(e -> all.addAll(e.verified));
            assertThat(all).hasSize(PROMPTS.length);
            for (int r = 0; r < p.ranks(); r++) {
                assertThat(p.cache(r).requestCount()).isZero();
            }
            for (int r = 0; r < d.ranks(); r++) {
                assertThat(d.cache(r).requestCount()).isZero();
            }
        }
    }

    private static Throwable failure(List<MiniEngine> engines) {
        return engines.stream().map(e -> e.failure).filter(t -> t != null).findFirst().orElse(null);
    }

    private static int freed(List<MiniEngine> engines) {
        return engines.stream().mapToInt(e -> e.freed.size()).sum();
    }
}
