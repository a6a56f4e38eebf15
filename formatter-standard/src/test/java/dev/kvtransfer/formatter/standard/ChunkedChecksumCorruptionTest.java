package dev.kvtransfer.formatter.standard;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.KvTransferException;
import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.api.transport.TransportConfig;
import dev.kvtransfer.core.RequestState;
import dev.kvtransfer.core.TransceiverConfig;
import dev.kvtransfer.core.TransferRequest;
import dev.kvtransfer.core.local.LocalInstance;
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
import java.util.function.Predicate;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * A pull received straight into the pool in chunked messages, summed by the session: each block's 512 KiB share is
 * four 128 KiB messages ({@code chunkBytes}), so a request of seven blocks moves 28 messages. One bit flipped in the
 * first message, in a block's last message or in the request's very last message fails the request
 * {@code MALFORMED} naming that message and its byte offset; the requests after it are served, verified, and count
 * every message. (Written for a session that summed a message while the next one arrived; that change was not
 * kept, docs/decisions/2026-12-06-session-sums-while-messages-move.md, and the test stays as the guard of what a
 * corrupted chunk reports.)
 */
class ChunkedChecksumCorruptionTest {
    private static final AtomicInteger FABRICS = new AtomicInteger();
    /** A rank's share of one block: 8 layers x K,V x 4 heads x 64 tokens x 128 dims x 2 B = 512 KiB. */
    private static final long SHARE = 8L * 2 * 4 * 64 * 128 * 2;
    private static final long CHUNK = 128 << 10;
    private static final int BLOCKS = 7;
    private static final int MESSAGES = (int) (BLOCKS * SHARE / CHUNK);
    private final List<LocalInstance> instances = new ArrayList<>();
    private final List<Throwable> background = new CopyOnWriteArrayList<>();
    private final Faults faults = new Faults();

    @AfterEach
    void close() {
        faults.clear();
        instances.forEach(LocalInstance::close);
    }

    private LocalInstance start(String name, String fabric, boolean faulty) {
        TransportConfig base = TransportConfig.builder().name(name).defaultTimeout(Duration.ofSeconds(30))
                .property(LoopbackTransportProvider.FABRIC_PROPERTY, fabric).build();
        LoopbackTransportProvider loopback = new LoopbackTransportProvider();
        LocalInstance i = LocalInstance.builder(name, CacheState.builder().uniformKvHeads(8, 4).sizePerHead(128)
                        .tokensPerBlock(64).build())
                .transport(faulty ? new FaultyTransportProvider(loopback, faults) : loopback, base)
                .config(TransceiverConfig.builder().partChecksums(true).chunkBytes(CHUNK)
                        .kvTransferTimeout(Duration.ofSeconds(30)).senderFutureTimeout(Duration.ofMillis(500))
                        .build())
                .blocksPerRank(64).errorHandler(background::add).start();
        instances.add(i);
        return i;
    }

    private static Transfer transfer(LocalInstance ctx, LocalInstance gen, int prompt) {
        Transfer t = TransferFixture.prepare(ctx, gen, ctx.cacheState(), gen.cacheState(), prompt, prompt);
        TransferFixture.request(gen, t);
        TransferFixture.respond(ctx, t);
        return t;
    }

    private static TransferRequest generation(Transfer t) {
        return t.all().stream().filter(r -> !r.isContext()).findFirst().orElseThrow();
    }

    /** The {@code n}-th data message of at least one chunk (1-based) that the faulty side sends from now on. */
    private static Predicate<Fault.Message> nthDataMessage(int n) {
        AtomicInteger seen = new AtomicInteger();
        Predicate<Fault.Message> data = Fault.dataOfAtLeast(CHUNK);
        return m -> data.test(m) && seen.incrementAndGet() == n;
    }

    @ParameterizedTest(name = "{0}: message {1} of " + MESSAGES + ", bit flipped at byte {2}")
    @CsvSource({
        "the first message, 1, 5",
        "a block's last message, 8, 131071",
        "the request's last message, 28, 70000"})
    void aFlippedBitIsCaughtInTheMessageItHitAndTheRestKeepServing(String which, int message, long at) {
        String fabric = "chunked-crc-" + FABRICS.incrementAndGet();
        LocalInstance ctx = start("ctx", fabric, true);
        LocalInstance gen = start("gen", fabric, false);
        int prompt = (BLOCKS - 1) * 64 + 5; // 7 blocks, the last holding 5 tokens: still a whole block's bytes
        Transfer warm = transfer(ctx, gen, prompt);
        TransferFixture.awaitEnded(List.of(warm), Duration.ofSeconds(60));
        TransferFixture.assertExact(gen, warm);
        assertThat(generation(warm).messageCount()).as("messages of a clean request").isEqualTo(MESSAGES);
        TransferFixture.free(ctx, gen, warm);

        faults.inject(Fault.corruptAt(nthDataMessage(message), at));
        Transfer hit = transfer(ctx, gen, prompt);
        TransferFixture.awaitEnded(List.of(hit), Duration.ofSeconds(60));
        assertThat(faults.injected(Fault.Kind.CORRUPT)).as("the fault was injected").isEqualTo(1);
        faults.clear();
        TransferRequest g = generation(hit);
        assertThat(g.state()).as("%s", which).isNotEqualTo(RequestState.GENERATION_TRANS_COMPLETE);
        KvTransferException e = g.error().orElseThrow();
        assertThat(e.code()).as("%s", e).isEqualTo(ErrorCode.MALFORMED);
        assertThat(e.requestId()).isEqualTo(hit.id);
        assertThat(e.getMessage()).contains("request " + hit.id, "corrupted part: message " + (message - 1) + " of "
                + MESSAGES, "at byte offset " + (message - 1) * CHUNK + " of its " + MESSAGES * CHUNK + " bytes");

        List<Transfer> others = List.of(transfer(ctx, gen, prompt), transfer(ctx, gen, 2 * 64 + 1));
        TransferFixture.awaitEnded(others, Duration.ofSeconds(60));
        for (Transfer t : others) {
            TransferFixture.assertExact(gen, t);
            TransferFixture.free(ctx, gen, t);
        }
        assertThat(generation(others.get(0)).messageCount()).isEqualTo(MESSAGES);
        TransferFixture.free(ctx, gen, hit);
        assertThat(background).as("errors reported in the background").allSatisfy(t ->
                assertThat(t.toString()).contains("request " + hit.id));
    }
}
