package dev.kvtransfer.formatter.standard;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.KvTransferException;
import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.api.transport.TransportConfig;
import dev.kvtransfer.core.RequestState;
import dev.kvtransfer.core.TransceiverConfig;
import dev.kvtransfer.core.TransferRequest;
import dev.kvtransfer.core.local.LocalInstance;
import dev.kvtransfer.formatter.support.ChunkCrc;
import dev.kvtransfer.testkit.TransferFixture;
import dev.kvtransfer.testkit.TransferFixture.Transfer;
import dev.kvtransfer.testkit.fault.Fault;
import dev.kvtransfer.testkit.fault.Faults;
import dev.kvtransfer.testkit.fault.FaultyTransportProvider;
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
 * One flipped bit of a part is still caught end to end over loopback now that the part checksums are computed in
 * the gather's / scatter's pass ({@link ChunkCrc}): in the first chunk, a middle chunk (byte 256 KiB + 17) and the
 * last byte of a message of 4 chunks, on each path (generation scatter, context gather, both direct). The hit
 * request fails {@code MALFORMED} with the checksum error naming it; the requests after it are served and verified.
 */
class FusedChecksumCorruptionTest {
    private static final AtomicInteger FABRICS = new AtomicInteger();
    /** A context rank's share of one block: 8 layers x K,V x 2 heads x 64 tokens x 128 dims x 2 B = 512 KiB. */
    private static final long SHARE = 8L * 2 * 2 * 64 * 128 * 2;
    private final List<LocalInstance> instances = new ArrayList<>();
    private final List<Throwable> background = new CopyOnWriteArrayList<>();
    private final Faults faults = new Faults();

    @AfterEach
    void close() {
        faults.clear();
        instances.forEach(LocalInstance::close);
    }

    private LocalInstance start(String name, CacheState state, String fabric, boolean faulty) {
        TransportConfig base = TransportConfig.builder().name(name).defaultTimeout(Duration.ofSeconds(30))
                .property(LoopbackTransportProvider.FABRIC_PROPERTY, fabric).build();
        LoopbackTransportProvider loopback = new LoopbackTransportProvider();
        // Scatter inline whatever the cores: the receive whose checksum is computed in the scatter's pass.
        LocalInstance i = LocalInstance.builder(name, state)
                .transport(faulty ? new FaultyTransportProvider(loopback, faults) : loopback, base)
                .formatter(new PolicyFormatterProvider(StandardCacheFormatter.DEFAULT_MIN_BOTH_DIRECT_BYTES, false))
                .config(TransceiverConfig.builder().partChecksums(true).chunkBytes(4 << 20)
                        .kvTransferTimeout(Duration.ofSeconds(30)).senderFutureTimeout(Duration.ofMillis(500))
                        .transferBufferBytes(8 << 20).build())
                .blocksPerRank(64).errorHandler(background::add).start();
        instances.add(i);
        return i;
    }

    private static CacheState state(int tp) {
        return CacheState.builder().uniformKvHeads(8, 4).sizePerHead(128).tokensPerBlock(64).tensorParallelism(tp)
                .build();
    }

    private static Transfer transfer(LocalInstance ctx, LocalInstance gen, int prompt) {
        Transfer t = TransferFixture.prepare(ctx, gen, ctx.cacheState(), gen.cacheState(), prompt, prompt);
        TransferFixture.request(gen, t);
        TransferFixture.respond(ctx, t);
        return t;
    }

    @ParameterizedTest(name = "{0}: TP{1} -> TP{2}, bit flipped at byte {3}")
    @CsvSource({
        "generation scatters (fused), 2, 1, 5",
        "generation scatters (fused), 2, 1, 262161",
        "generation scatters (fused), 2, 1, 9223372036854775807",
        "context gathers (fused), 1, 2, 5",
        "context gathers (fused), 1, 2, 262161",
        "context gathers (fused), 1, 2, 9223372036854775807",
        "both direct (summed by the session), 1, 1, 5",
        "both direct (summed by the session), 1, 1, 262161",
        "both direct (summed by the session), 1, 1, 9223372036854775807"})
    void aFlippedBitIsCaughtAndTheRestKeepServing(String path, int ctxTp, int genTp, long at) {
        assertThat(SHARE / ChunkCrc.DEFAULT_CHUNK_BYTES).as("chunks in a message").isGreaterThanOrEqualTo(4);
        String fabric = "fused-crc-" + FABRICS.incrementAndGet();
        LocalInstance ctx = start("ctx", state(ctxTp), fabric, true);
        LocalInstance gen = start("gen", state(genTp), fabric, false);
        Transfer warm = transfer(ctx, gen, 3 * 64);
        TransferFixture.awaitEnded(List.of(warm), Duration.ofSeconds(60));
        TransferFixture.assertExact(gen, warm);
        TransferFixture.free(ctx, gen, warm);

        faults.inject(Fault.corruptAt(Fault.dataOfAtLeast(SHARE), at));
        Transfer hit = transfer(ctx, gen, 6 * 64 + 5);
        TransferFixture.awaitEnded(List.of(hit), Duration.ofSeconds(60));
        assertThat(faults.injected(Fault.Kind.CORRUPT)).as("the fault was injected").isEqualTo(1);
        faults.clear();
        int failed = 0;
        for (TransferRequest r : hit.all()) {
            if (r.isContext() || r.state() == RequestState.GENERATION_TRANS_COMPLETE) {
                continue; // TP1 -> TP2: the other generation rank's part was intact
            }
            KvTransferException e = r.error().orElseThrow();
            assertThat(e.code()).as("%s", e).isEqualTo(ErrorCode.MALFORMED);
            assertThat(e.requestId()).isEqualTo(hit.id);
            assertThat(e.getMessage()).contains("request " + hit.id, "corrupted part", "CRC32C", "peer rank");
            failed++;
        }
        assertThat(failed).as("%s: generation ranks that caught the flipped bit", path).isEqualTo(1);

        List<Transfer> others = List.of(transfer(ctx, gen, 5 * 64), transfer(ctx, gen, 2 * 64 + 1));
        TransferFixture.awaitEnded(others, Duration.ofSeconds(60));
        for (Transfer t : others) {
            TransferFixture.assertExact(gen, t);
            TransferFixture.free(ctx, gen, t);
        }
        TransferFixture.free(ctx, gen, hit);
        assertThat(background).as("errors reported in the background").allSatisfy(t ->
                assertThat(t.toString()).contains("request " + hit.id));
    }
}
