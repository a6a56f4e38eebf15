package dev.kvtransfer.core.journal;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.layout.BlockDistribution;
import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.api.model.ContextPhaseParams;
import dev.kvtransfer.api.transport.TransportConfig;
import dev.kvtransfer.core.RequestState;
import dev.kvtransfer.core.TransceiverConfig;
import dev.kvtransfer.core.TransferRequest;
import dev.kvtransfer.core.journal.TransferJournal.Role;
import dev.kvtransfer.core.local.LocalInstance;
import dev.kvtransfer.core.testsupport.Bytes;
import dev.kvtransfer.testkit.loopback.LoopbackTransportProvider;
import dev.kvtransfer.core.testsupport.WholeBlockFormatterProvider;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * The protocol hooks: {@link LocalInstance} with {@code kvtransfer.journalDir} journals every rank, and the
 * journal records a completed, a failed and a cancelled request with the right events on both sides (core's
 * in-memory transport and whole-block test formatter; the cli module runs the same with the real formatter).
 */
class JournaledTransceiverTest {
    @TempDir
    Path dir;

    private final List<Throwable> errors = new java.util.concurrent.CopyOnWriteArrayList<>();

    @AfterEach
    void reset() {
        WholeBlockFormatterProvider.failRequestId = Long.MIN_VALUE;
    }

    private static final CacheState STATE = CacheState.builder().uniformKvHeads(4, 4).sizePerHead(8).tokensPerBlock(4)
            .tensorParallelism(2).build();

    private LocalInstance start(String name, TransceiverConfig c) {
        return LocalInstance.builder(name, STATE).transport(new LoopbackTransportProvider(),
                TransportConfig.builder().build()).formatter(new WholeBlockFormatterProvider()).config(c)
                .blocksPerRank(64).errorHandler(errors::add).start();
    }

    private static TransferRequest[][] submit(LocalInstance ctx, LocalInstance gen, long id, int prompt,
                                              boolean askGen) {
        int blocks = BlockDistribution.blocksFor(prompt, STATE.tokensPerBlock());
        ContextPhaseParams params = ctx.contextPhaseParams(id, 0);
        TransferRequest[][] r = new TransferRequest[2][ctx.ranks()];
        for (int k = 0; k < ctx.ranks(); k++) {
            int[] ids = ctx.cache(k).allocate(id, blocks);
            Bytes.fill(ctx.cache(k), ids, id * 100 + k);
            r[0][k] = TransferRequest.context(id, prompt, ids);
            r[1][k] = TransferRequest.generation(params, prompt, gen.cache(k).allocate(id, blocks));
        }
        for (int k = 0; k < ctx.ranks(); k++) {
            ctx.transceiver(k).respondAndSendAsync(r[0][k]);
        }
        if (askGen) {
            for (int k = 0; k < gen.ranks(); k++) {
                gen.transceiver(k).requestAndReceiveAsync(r[1][k]);
            }
        }
        return r;
    }

    private static void await(TransferRequest... rs) throws Exception {
        for (TransferRequest r : rs) {
            r.completion().toCompletableFuture().get(30, TimeUnit.SECONDS);
        }
    }

    @Test
    void completedFailedAndCancelledRequestsAreJournaledOnEveryRank() throws Exception {
        TransceiverConfig c = TransceiverConfig.builder().backend("loopback").transferBufferBytes(64 << 10)
                .chunkBytes(1000).kvTransferTimeout(Duration.ofSeconds(20)).journalDir(dir).build();
        try (LocalInstance ctx = start("ctx", c); LocalInstance gen = start("gen", c)) {
            TransferRequest[][] ok = submit(ctx, gen, 1, 10, true);
            await(ok[0]);
            await(ok[1]);
            for (int k = 0; k < 2; k++) {
                assertThat(ok[1][k].state()).isEqualTo(RequestState.GENERATION_TRANS_COMPLETE);
                assertThat(Bytes.mismatches(gen.cache(k), ok[1][k].blockIds(), 100 + k)).isZero();
            }
            WholeBlockFormatterProvider.failRequestId = 2;
            TransferRequest[][] failing = submit(ctx, gen, 2, 10, true);
            // The generation side waits for data that never comes; closing the instances ends it (CANCELLED).
            await(failing[0]);
            assertThat(failing[0][0].state()).isEqualTo(RequestState.TRANS_ERROR);
            // Cancelled on the context side before any generation rank asked.
            TransferRequest[][] cancelled = submit(ctx, gen, 3, 10, false);
            for (int k = 0; k < 2; k++) {
                assertThat(ctx.transceiver(k).cancelRequest(cancelled[0][k])).isTrue();
            }
            await(cancelled[0]);
        }

        JournalReader.Result r = JournalReader.readAll(dir);
        assertThat(r.queues()).containsExactly("ctx-rank-0", "ctx-rank-1", "gen-rank-0", "gen-rank-1");
        Map<Long, RequestTimeline> t = RequestTimeline.of(r.events());

        RequestTimeline one = t.get(1L);
        assertThat(one.outcome()).isEqualTo(RequestTimeline.Outcome.COMPLETED);
        assertThat(one.accepted(Role.CONTEXT)).hasSize(2);
        assertThat(one.accepted(Role.GENERATION)).hasSize(2);
        long blockBytes = ctx0BlockBytes();
        assertThat(one.sentBytes()).isEqualTo(one.receivedBytes()).isEqualTo(2 * 3 * blockBytes);
        assertThat(one.events()).extracting(JournalEvent::type).contains(RecordType.INFO_SENT,
                RecordType.INFO_RECEIVED, RecordType.READY_SENT, RecordType.READY_RECEIVED, RecordType.PART_SENT,
                RecordType.PART_RECEIVED, RecordType.COMPLETED);
        assertThat(one.checksumPairsCompared()).isZero(); // checksums were off
        assertThat(one.events()).filteredOn(e -> e instanceof JournalEvent.Part)
                .allMatch(e -> !((JournalEvent.Part) e).hasCrc());

        RequestTimeline two = t.get(2L);
        assertThat(two.outcome()).isEqualTo(RequestTimeline.Outcome.FAILED);
        assertThat(two.ends().values()).filteredOn(e -> e.source().instance().equals("ctx"))
                .allMatch(e -> e instanceof JournalEvent.Ended x && x.type() == RecordType.FAILED
                        && x.code() == ErrorCode.INTERNAL && x.message().contains("injected failure"));

        RequestTimeline three = t.get(3L);
        assertThat(three.outcome()).isEqualTo(RequestTimeline.Outcome.FAILED);
        assertThat(three.accepted(Role.GENERATION)).isEmpty();
        assertThat(three.ends().values()).hasSize(2).allMatch(e -> e instanceof JournalEvent.Ended x
                && x.type() == RecordType.CANCELLED);
        List<String> contacts = new ArrayList<>();
        for (JournalEvent e : r.events()) {
            if (e instanceof JournalEvent.PeerContact pc) {
                contacts.add(pc.source() + "->" + pc.peerRank());
                assertThat(pc.selfState()).isEqualTo(STATE);
                assertThat(pc.peerState()).isEqualTo(STATE);
            }
        }
        assertThat(contacts).doesNotHaveDuplicates().isNotEmpty();
    }

    private static long ctx0BlockBytes() {
        return dev.kvtransfer.api.layout.BlockLayout.of(STATE, 0).blockBytes();
    }
}
