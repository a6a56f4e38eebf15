package dev.kvtransfer.connector.example;

import dev.kvtransfer.aeron.AeronTransportProvider;
import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.layout.BlockDistribution;
import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.api.model.ContextPhaseParams;
import dev.kvtransfer.api.transport.TransportConfig;
import dev.kvtransfer.api.transport.TransportProvider;
import dev.kvtransfer.connector.ConnectorConfig;
import dev.kvtransfer.connector.ConnectorEvent;
import dev.kvtransfer.connector.ConnectorRequest;
import dev.kvtransfer.connector.FinishResult;
import dev.kvtransfer.connector.FinishedTransfer;
import dev.kvtransfer.connector.KvRole;
import dev.kvtransfer.connector.LoadFailure;
import dev.kvtransfer.connector.LoadFailurePolicy;
import dev.kvtransfer.core.TransceiverConfig;
import dev.kvtransfer.core.local.LocalInstance;
import dev.kvtransfer.formatter.standard.StandardFormatterProvider;
import dev.kvtransfer.testkit.LeakCheckExtension;
import dev.kvtransfer.testkit.loopback.LoopbackTransportProvider;
import org.junit.jupiter.api.extension.ExtendWith;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.MethodSource;

import java.time.Duration;
import java.util.Arrays;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.stream.Stream;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

/**
 * A load that fails on part of the ranks, end to end through two {@link MiniEngine}s: a prefill instance with context
 * parallelism 2 and a decode instance with context parallelism 2, so each decode CP rank loads its own blocks (the
 * contiguous CP distribution) from its own prefill CP rank. One prefill rank drops its share of a save (it found its
 * blocks unusable): the decode CP rank it served fails {@code CANCELLED}, the other loads its blocks. The connector
 * reports exactly the failed rank's blocks as invalid and the valid prefix: all of CP rank 0's blocks when rank 1
 * failed (kept, verified element by element, the rest recomputed), nothing when rank 0 failed (rank 1's blocks are
 * valid but lie after the first invalid block). Both prefills are chunked. With the {@code FAIL} policy the same
 * failures are reported and the engine fails the requests.
 */
@ExtendWith(LeakCheckExtension.class)
class PartialLoadFailureTest {
    private static final Duration BOUND = Duration.ofSeconds(90);
    private static final AtomicInteger FABRIC = new AtomicInteger();
    private static final int TPB = 8;
    private static final CacheState PREFILL = CacheState.builder().uniformKvHeads(2, 2).sizePerHead(8)
            .tokensPerBlock(TPB).contextParallelism(2).build();
    private static final CacheState DECODE = PREFILL;
    private static final long DECODE_ID = 100;
    /** Request 1: prefill rank 1 drops its share; 2: rank 0 does; 3 moves whole. */
    private static final int[] PROMPTS = {32, 40, 24};
    private static final int[] CHUNKS = {12, 16, 8};
    private static final int[] DROP = {1, 0, -1};

    static Stream<Arguments> runs() {
        return Stream.of(
                Arguments.of("loopback", TransceiverConfig.TransferMode.PULL, LoadFailurePolicy.RECOMPUTE),
                Arguments.of("loopback", TransceiverConfig.TransferMode.PUSH, LoadFailurePolicy.FAIL),
                Arguments.of("aeron", TransceiverConfig.TransferMode.PULL, LoadFailurePolicy.RECOMPUTE));
    }

    private static long[] hashes(long id, int blocks) {
        long[] h = new long[blocks];
        for (int b = 0; b < blocks; b++) {
            h[b] = id * 1000 + b;
        }
        return h;
    }

    private static LocalInstance start(String name, CacheState state, TransportProvider p, String fabric,
                                       TransceiverConfig.TransferMode mode) {
        TransceiverConfig c = TransceiverConfig.builder().transferBufferBytes(1 << 20).transferMode(mode)
                .kvTransferTimeout(Duration.ofSeconds(30)).build();
        TransportConfig t = p instanceof LoopbackTransportProvider
                ? TransportConfig.builder().property(LoopbackTransportProvider.FABRIC_PROPERTY, fabric).build()
                : TransportConfig.builder().build();
        return LocalInstance.builder(name, state).transport(p, t).formatter(new StandardFormatterProvider())
                .config(c).blocksPerRank(32).start();
    }

    @ParameterizedTest(name = "{0} {1} {2}")
    @MethodSource("runs")
    void aLoadThatFailsOnOneCpRankKeepsTheValidPrefixAndNamesExactlyTheInvalidBlocks(
            String backend, TransceiverConfig.TransferMode mode, LoadFailurePolicy policy) throws Exception {
        String fabric = "connector-partial-" + FABRIC.incrementAndGet();
        TransportProvider p1 = backend.equals("aeron") ? new AeronTransportProvider() : new LoopbackTransportProvider();
        TransportProvider p2 = backend.equals("aeron") ? new AeronTransportProvider() : new LoopbackTransportProvider();
        try (LocalInstance p = start("prefill", PREFILL, p1, fabric, TransceiverConfig.TransferMode.PULL);
             LocalInstance d = start("decode", DECODE, p2, fabric, mode)) {
            MiniEngine decode = new MiniEngine("decode", d, ConnectorConfig.of(KvRole.CONSUMER, DECODE)
                    .withLoadFailurePolicy(policy), new MiniEngine.Listener() { });
            MiniEngine.Listener router = new MiniEngine.Listener() {
                private MiniEngine.Job job(long id, ContextPhaseParams params) {
                    int prompt = PROMPTS[(int) id - 1];
                    return new MiniEngine.Job(ConnectorRequest.decode(DECODE_ID + id, prompt,
                            hashes(id, BlockDistribution.blocksFor(prompt, TPB)), params), 0, false);
                }

                @Override
                public void admitted(long id, ContextPhaseParams params) {
                    if (DROP[(int) id - 1] < 0) {
                        decode.submit(job(id, params));
                    }
                }

                @Override
                public void prefilled(long id, FinishResult result) {
                    if (DROP[(int) id - 1] >= 0) {
                        // After the prefill rank dropped its share: its decode rank is refused, never half-served.
                        decode.submit(job(id, result.kvTransferParams().orElseThrow()));
                    }
                }
            };
            MiniEngine prefill = new MiniEngine("prefill", p, ConnectorConfig.of(KvRole.PRODUCER, PREFILL), router);
            try {
                for (int i = 0; i < PROMPTS.length; i++) {
                    long id = i + 1;
                    prefill.submit(new MiniEngine.Job(ConnectorRequest.prefill(id, PROMPTS[i],
                            hashes(id, BlockDistribution.blocksFor(PROMPTS[i], TPB))), 0, false, CHUNKS[i], DROP[i]));
                }
                await().atMost(BOUND).until(() -> prefill.failure != null || decode.failure != null
                        || prefill.freed.size() == PROMPTS.length && decode.freed.size() == PROMPTS.length);
                assertThat(prefill.failure).as("prefill engine").isNull();
                assertThat(decode.failure).as("decode engine").isNull();
            } finally {
                prefill.close();
                decode.close();
            }

            long rank1Failed = DECODE_ID + 1;
            long rank0Failed = DECODE_ID + 2;
            assertThat(prefill.droppedShares).containsExactlyInAnyOrder(1L, 2L);
            assertThat(prefill.failedSends).containsOnlyKeys(1L, 2L);
            assertThat(prefill.failedSends.get(1L).code()).isEqualTo(ErrorCode.CANCELLED);
            // The prefill rank that kept its share completed it: the other half moved.
            assertThat(prefill.transfers.get(1L).get(0).ok()).isTrue();
            assertThat(prefill.transfers.get(1L).get(1).error().code()).isEqualTo(ErrorCode.CANCELLED);
            assertThat(prefill.transfers.get(2L).get(1).ok()).isTrue();

            assertThat(decode.verified).containsExactly(DECODE_ID + 3);
            assertThat(decode.failedLoads).containsOnlyKeys(rank1Failed, rank0Failed);
            // Rank 1 failed: CP rank 0's blocks (global 0, 1 of 4) loaded fine and are the valid prefix.
            LoadFailure a = decode.loadFailures.get(rank1Failed);
            int[][] blocksA = decode.blocksOf.get(rank1Failed);
            assertThat(BlockDistribution.count(4, 2, 0)).isEqualTo(2);
            assertThat(a.validBlocks()).isEqualTo(2);
            assertThat(a.validTokens()).isEqualTo(2 * TPB);
            assertThat(a.invalidBlocks()).containsOnlyKeys(1);
            assertThat(a.invalidBlocks().get(1)).containsExactlyInAnyOrderElementsOf(
                    Arrays.stream(blocksA[1]).boxed().toList());
            assertThat(a.error().code()).isEqualTo(ErrorCode.CANCELLED);
            assertThat(a.contextRequestId()).isEqualTo(1);
            FinishedTransfer kept = decode.transfers.get(rank1Failed).get(0);
            assertThat(kept.ok()).isTrue();
            assertThat(kept.bytes()).isEqualTo(2L * d.cache(0).layout().blockBytes());
            assertThat(decode.transfers.get(rank1Failed).get(1).bytes()).isZero();
            // Rank 0 failed: nothing before its first block is valid; rank 1's blocks loaded but come after it.
            LoadFailure b = decode.loadFailures.get(rank0Failed);
            assertThat(b.validBlocks()).isZero();
            assertThat(b.validTokens()).isZero();
            assertThat(b.invalidBlocks()).containsOnlyKeys(0);
            assertThat(b.invalidBlocks().get(0)).containsExactlyInAnyOrderElementsOf(
                    Arrays.stream(decode.blocksOf.get(rank0Failed)[0]).boxed().toList());
            assertThat(decode.transfers.get(rank0Failed).get(1).ok()).isTrue();
            // getBlockIdsWithLoadErrors on each rank: exactly its failed share.
            assertThat(decode.errorBlocks.get(0)).containsExactlyInAnyOrderElementsOf(
                    Arrays.stream(decode.blocksOf.get(rank0Failed)[0]).boxed().toList());
            assertThat(decode.errorBlocks.get(1)).containsExactlyInAnyOrderElementsOf(
                    Arrays.stream(blocksA[1]).boxed().toList());
            assertThat(decode.events.stream().filter(e -> e.kind() == ConnectorEvent.Kind.LOAD_FAILED)
                    .filter(e -> e.requestId() == rank1Failed).findFirst().orElseThrow().blockHashes())
                    .containsExactly(1000, 1001);

            if (policy == LoadFailurePolicy.RECOMPUTE) {
                // The valid prefix was verified as kept, the rest recomputed, the whole request verified after.
                assertThat(a.recompute()).isTrue();
                assertThat(decode.recomputed).containsExactlyInAnyOrder(rank1Failed, rank0Failed);
                assertThat(decode.failedRequests).isEmpty();
            } else {
                assertThat(a.recompute()).isFalse();
                assertThat(decode.failedRequests).containsExactlyInAnyOrder(rank1Failed, rank0Failed);
                assertThat(decode.recomputed).isEmpty();
            }
            assertThat(decode.freed).containsExactlyInAnyOrder(DECODE_ID + 1, DECODE_ID + 2, DECODE_ID + 3);
            assertThat(prefill.freed).containsExactlyInAnyOrder(1L, 2L, 3L);
            assertThat(prefill.scheduler().savesInFlight()).isZero();
            assertThat(decode.scheduler().loadsInFlight()).isZero();
            for (int r = 0; r < 2; r++) {
                assertThat(p.cache(r).requestCount()).isZero();
                assertThat(d.cache(r).requestCount()).isZero();
            }
            for (long id = 1; id <= 3; id++) {
                assertThat(prefill.chunksOf.get(id)).as("request %d chunks", id).isEqualTo(3);
                assertThat(prefill.saveStep.get(id)).isEqualTo(prefill.lastChunkStep.get(id));
            }
        }
    }
}
