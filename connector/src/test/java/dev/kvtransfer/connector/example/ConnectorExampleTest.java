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
import java.util.HashSet;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.stream.Collectors;
import java.util.stream.IntStream;
import java.util.stream.Stream;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

/**
 * The connector README's example, run as a test: a prefill engine (TP2) and a decode engine (PP2), each a
 * {@link MiniEngine} over a {@link LocalInstance}, driven only through the connector API (the workers get the
 * metadata only as bytes). Six requests: four move and verify element by element ({@code KvPattern}), one of them
 * reusing a two-block prefix the decode side already holds, one reaching the decode side before its params (the
 * connector answers "ask again later" until they arrive); three are prefilled in chunks, their saves handed over with
 * the last chunk. The fifth is aborted (cancelled) on the prefill side after its prefill, so its load fails
 * {@code CANCELLED}; the sixth claims a cached prefix block the prefill side's prefix cache disagrees with, so its load
 * is refused before any byte moves. The blocks of both failed loads come back from {@code getBlockIdsWithLoadErrors};
 * under the default {@code RECOMPUTE} policy their valid prefix is verified as kept and the rest recomputed. Prefill
 * saves layer by layer (a per-layer step copies the layer in just before {@code saveKvLayer}); decode loads layer by
 * layer inside its step or asynchronously.
 */
@ExtendWith(LeakCheckExtension.class)
class ConnectorExampleTest {
    private static final Duration BOUND = Duration.ofSeconds(90);
    private static final AtomicInteger FABRIC = new AtomicInteger();
    private static final CacheState PREFILL = CacheState.builder().uniformKvHeads(4, 4).sizePerHead(8)
            .tokensPerBlock(8).tensorParallelism(2).build();
    private static final CacheState DECODE = CacheState.builder().uniformKvHeads(4, 4).sizePerHead(8)
            .tokensPerBlock(8).pipelineParallelism(2).build();
    /** Decode-side engine ids are the prefill ids plus this (the connector maps them). */
    private static final long DECODE_ID = 100;
    /**
     * Prompt lengths of requests 1..6; request 3 finds 2 blocks in the decode side's prefix cache; 5 is aborted;
     * 6 finds a block in the decode side's prefix cache whose key the prefill side does not share.
     */
    private static final int[] PROMPTS = {40, 17, 48, 8, 30, 24};
    private static final long REUSING = 3;
    private static final int REUSED_BLOCKS = 2;
    private static final long ABORTED = 5;
    private static final long MISMATCHED = 6;
    /** Request 4 reaches the decode side before its params (the connector answers "ask again later" until then). */
    private static final long PARAMS_LATE = 4;
    /** Chunked prefill: tokens per chunk of requests 1..6 (0: the whole prompt in one step). */
    private static final int[] CHUNKS = {16, 10, 24, 0, 0, 0};

    static Stream<Arguments> runs() {
        return Stream.of(
                Arguments.of("loopback", TransceiverConfig.TransferMode.PULL, false),
                Arguments.of("loopback", TransceiverConfig.TransferMode.PUSH, true),
                Arguments.of("aeron", TransceiverConfig.TransferMode.PULL, false));
    }

    private static long[] hashes(long ctxId, int blocks) {
        long[] h = new long[blocks];
        for (int b = 0; b < blocks; b++) {
            h[b] = ctxId * 1000 + b; // a prefix-cache key, the same function on both instances
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
                .config(c).blocksPerRank(64).start();
    }

    /** The router: hands each request to the decode engine with the prefill's params. */
    private static final class Proxy implements MiniEngine.Listener {
        MiniEngine decode;
        final Map<Long, ContextPhaseParams> late = new ConcurrentHashMap<>();

        MiniEngine.Job decodeJob(long ctxId, ContextPhaseParams params) {
            int prompt = PROMPTS[(int) ctxId - 1];
            int blocks = BlockDistribution.blocksFor(prompt, 8);
            int cached = ctxId == REUSING ? REUSED_BLOCKS * 8 : ctxId == MISMATCHED ? 8 : 0;
            long[] h = hashes(ctxId, blocks);
            if (ctxId == MISMATCHED) {
                h[0] ^= 1; // the decode side's prefix cache disagrees with the prefill side's on block 0
            }
            return new MiniEngine.Job(ConnectorRequest.decode(DECODE_ID + ctxId, prompt, h, params), cached, false);
        }

        @Override
        public void admitted(long id, ContextPhaseParams params) {
            if (id == PARAMS_LATE) {
                // The decode side gets the request first, without params (do_remote_prefill, params pending).
                MiniEngine.Job j = decodeJob(id, params);
                decode.contextIds.put(DECODE_ID + id, id);
                decode.submit(new MiniEngine.Job(ConnectorRequest.remotePrefill(DECODE_ID + id,
                        j.request().promptTokens(), j.request().blockHashes()), j.cachedTokens(), false));
            } else if (id != ABORTED) {
                // Decode first, as Mooncake's layer-wise connector: its request is waiting while prefill computes,
                // so each layer moves as soon as it is saved.
                decode.submit(decodeJob(id, params));
            }
        }

        @Override
        public void prefilled(long id, FinishResult result) {
            if (id == PARAMS_LATE) {
                // The params reach the decode side once it has asked at least once without them (the router is slow).
                ContextPhaseParams p = result.kvTransferParams().orElseThrow();
                Thread t = new Thread(() -> {
                    await().atMost(BOUND).until(() -> decode.laterAnswers.containsKey(DECODE_ID + id)
                            || decode.failure != null);
                    decode.paramsArrived(DECODE_ID + id, p);
                }, "router");
                t.setDaemon(true);
                t.start();
            }
            if (id == ABORTED) {
                late.put(id, result.kvTransferParams().orElseThrow());
            }
        }

        @Override
        public void freed(long id) {
            ContextPhaseParams p = late.remove(id);
            if (p != null) {
                // A request the prefill side dropped still reaches the decode side (a router race): its load must
                // fail cleanly and give its blocks back.
                decode.submit(decodeJob(id, p));
            }
        }
    }

    @ParameterizedTest(name = "{0} {1} async loads {2}")
    @MethodSource("runs")
    void prefillAndDecodeEnginesMoveVerifiedRequestsThroughTheConnector(String backend,
                                                                       TransceiverConfig.TransferMode mode,
                                                                       boolean asyncLoads) throws Exception {
        String fabric = "connector-example-" + FABRIC.incrementAndGet();
        TransportProvider p1 = backend.equals("aeron") ? new AeronTransportProvider() : new LoopbackTransportProvider();
        TransportProvider p2 = backend.equals("aeron") ? new AeronTransportProvider() : new LoopbackTransportProvider();
        Proxy proxy = new Proxy();
        try (LocalInstance p = start("prefill", PREFILL, p1, fabric, TransceiverConfig.TransferMode.PULL);
             LocalInstance d = start("decode", DECODE, p2, fabric, mode)) {
            MiniEngine decode = new MiniEngine("decode", d, ConnectorConfig.of(KvRole.CONSUMER, DECODE)
                    .withLoadAsync(asyncLoads), new MiniEngine.Listener() { });
            proxy.decode = decode;
            MiniEngine prefill = new MiniEngine("prefill", p, ConnectorConfig.of(KvRole.PRODUCER, PREFILL), proxy);
            try {
                for (int i = 0; i < PROMPTS.length; i++) {
                    long id = i + 1;
                    int blocks = BlockDistribution.blocksFor(PROMPTS[i], 8);
                    prefill.submit(new MiniEngine.Job(ConnectorRequest.prefill(id, PROMPTS[i], hashes(id, blocks)),
                            0, id == ABORTED, CHUNKS[i], -1));
                }
                await().atMost(BOUND).until(() -> prefill.failure != null || decode.failure != null
                        || prefill.freed.size() == PROMPTS.length && decode.freed.size() == PROMPTS.length);
                assertThat(prefill.failure).as("prefill engine").isNull();
                assertThat(decode.failure).as("decode engine").isNull();
            } finally {
                prefill.close();
                decode.close();
            }

            Set<Long> good = Set.of(DECODE_ID + 1, DECODE_ID + 2, DECODE_ID + 3, DECODE_ID + 4);
            Set<Long> failed = Set.of(DECODE_ID + ABORTED, DECODE_ID + MISMATCHED);
            // Every element of every good request was verified on every decode rank before its blocks were freed.
            assertThat(decode.verified).containsExactlyInAnyOrderElementsOf(good);
            // Chunked prefill: the save reached the workers in the step of the last chunk, with every chunk's blocks
            // (the verification above covers the blocks of the earlier chunks too).
            for (int i = 0; i < PROMPTS.length; i++) {
                long id = i + 1;
                int chunks = CHUNKS[i] == 0 ? 1 : (PROMPTS[i] + CHUNKS[i] - 1) / CHUNKS[i];
                assertThat(prefill.chunksOf.get(id)).as("request %d chunks", id).isEqualTo(chunks);
                assertThat(prefill.saveStep.get(id)).as("request %d save step", id)
                        .isEqualTo(prefill.lastChunkStep.get(id));
            }
            // "Ask again later": request 4 was asked about before its params arrived, then loaded.
            assertThat(decode.laterAnswers.get(DECODE_ID + PARAMS_LATE)).isPositive();
            // take_events: one LOADED event per good load, naming the keys of the full blocks it wrote.
            assertThat(decode.events.stream().filter(e -> e.kind() == ConnectorEvent.Kind.LOADED)
                    .map(ConnectorEvent::requestId)).containsExactlyInAnyOrderElementsOf(good);
            ConnectorEvent reusing = decode.events.stream().filter(e -> e.requestId() == DECODE_ID + REUSING)
                    .findFirst().orElseThrow();
            assertThat(reusing.blockHashes()).containsExactly(Arrays.copyOfRange(hashes(REUSING, 6), REUSED_BLOCKS, 6));
            assertThat(prefill.events.stream().filter(e -> e.kind() == ConnectorEvent.Kind.SAVE_FAILED)
                    .map(ConnectorEvent::requestId)).containsExactlyInAnyOrder(ABORTED, MISMATCHED);
            // Prefix reuse: only the tokens beyond the cached prefix were asked for, only the missing blocks moved.
            assertThat(decode.matchedTokens.get(DECODE_ID + REUSING))
                    .isEqualTo(PROMPTS[(int) REUSING - 1] - REUSED_BLOCKS * 8);
            int reusingBlocks = BlockDistribution.blocksFor(PROMPTS[(int) REUSING - 1], 8);
            for (int r = 0; r < d.ranks(); r++) {
                FinishedTransfer f = decode.transfers.get(DECODE_ID + REUSING).get(r);
                assertThat(f.ok()).isTrue();
                assertThat(f.contextRequestId()).isEqualTo(REUSING);
                assertThat(f.bytes()).as("rank %d bytes", r)
                        .isEqualTo((reusingBlocks - REUSED_BLOCKS) * d.cache(r).layout().blockBytes());
            }
            // The aborted request: CANCELLED on both sides. The mismatched prefix: refused by the prefill side before
            // any byte moved (UNSUPPORTED_LAYOUT, naming the block) on both sides. The decode blocks the two loads
            // were to fill come back as errors; the mismatched request's locally cached block is not among them.
            assertThat(prefill.failedSends).containsOnlyKeys(ABORTED, MISMATCHED);
            assertThat(prefill.failedSends.get(ABORTED).code()).isEqualTo(ErrorCode.CANCELLED);
            assertThat(prefill.failedSends.get(MISMATCHED).code()).isEqualTo(ErrorCode.UNSUPPORTED_LAYOUT);
            assertThat(prefill.delayedFree).as("the connector held the aborted request's blocks").contains(ABORTED);
            assertThat(decode.failedLoads).containsOnlyKeys(failed);
            assertThat(decode.failedLoads.get(DECODE_ID + ABORTED).code()).isEqualTo(ErrorCode.CANCELLED);
            assertThat(decode.failedLoads.get(DECODE_ID + ABORTED).requestId()).isEqualTo(ABORTED);
            assertThat(decode.failedLoads.get(DECODE_ID + MISMATCHED).code()).isEqualTo(ErrorCode.UNSUPPORTED_LAYOUT);
            assertThat(decode.failedLoads.get(DECODE_ID + MISMATCHED).getMessage()).contains("prefix mismatch at block 0");
            // The failure policy (recompute, the default): the valid prefix (the reused block of request 6, nothing of
            // request 5) was verified as kept, the rest recomputed, then the whole request verified.
            assertThat(decode.recomputed).containsExactlyInAnyOrderElementsOf(failed);
            assertThat(decode.loadFailures.get(DECODE_ID + ABORTED).validBlocks()).isZero();
            assertThat(decode.loadFailures.get(DECODE_ID + MISMATCHED).validBlocks()).isEqualTo(1);
            assertThat(decode.loadFailures.get(DECODE_ID + MISMATCHED).validTokens()).isEqualTo(8);
            for (int r = 0; r < d.ranks(); r++) {
                int[] row = decode.blocksOf.get(DECODE_ID + MISMATCHED)[r];
                assertThat(decode.loadFailures.get(DECODE_ID + MISMATCHED).invalidBlocks().get(r))
                        .containsExactlyInAnyOrderElementsOf(Arrays.stream(row, 1, row.length).boxed().toList());
            }
            for (int r = 0; r < d.ranks(); r++) {
                Set<Integer> expected = Arrays.stream(decode.blocksOf.get(DECODE_ID + ABORTED)[r]).boxed()
                        .collect(Collectors.toSet());
                int[] mismatched = decode.blocksOf.get(DECODE_ID + MISMATCHED)[r];
                Arrays.stream(mismatched, 1, mismatched.length).forEach(expected::add);
                assertThat(decode.errorBlocks.get(r)).as("rank %d error blocks", r).isEqualTo(expected);
                for (long id : failed) {
                    FinishedTransfer f = decode.transfers.get(id).get(r);
                    assertThat(f.ok()).isFalse();
                    assertThat(f.bytes()).as("request %d rank %d bytes", id, r).isZero();
                }
            }
            // Every block went back to its pool; nothing is tracked any more.
            assertThat(prefill.freed).containsExactlyInAnyOrderElementsOf(
                    IntStream.rangeClosed(1, PROMPTS.length).mapToObj(i -> (long) i).collect(Collectors.toSet()));
            Set<Long> allDecode = new HashSet<>(good);
            allDecode.addAll(failed);
            assertThat(decode.freed).containsExactlyInAnyOrderElementsOf(allDecode);
            assertThat(prefill.heldRequests()).isZero();
            assertThat(decode.heldRequests()).isZero();
            assertThat(prefill.scheduler().savesInFlight()).isZero();
            assertThat(decode.scheduler().loadsInFlight()).isZero();
            for (int r = 0; r < 2; r++) {
                assertThat(prefill.worker(r).savesInFlight()).isZero();
                assertThat(decode.worker(r).loadsInFlight()).isZero();
                assertThat(p.cache(r).requestCount()).isZero();
                assertThat(d.cache(r).requestCount()).isZero();
            }
        }
    }
}
