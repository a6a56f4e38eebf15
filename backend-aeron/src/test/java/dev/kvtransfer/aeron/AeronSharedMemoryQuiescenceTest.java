package dev.kvtransfer.aeron;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.memory.MemoryKind;
import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.api.transport.TransportConfig;
import dev.kvtransfer.core.RequestState;
import dev.kvtransfer.core.TransceiverConfig;
import dev.kvtransfer.core.TransferRequest;
import dev.kvtransfer.core.local.LocalInstance;
import dev.kvtransfer.core.memory.HostBufferManager;
import dev.kvtransfer.core.plugin.Plugins;
import dev.kvtransfer.testkit.TransferFixture;
import dev.kvtransfer.testkit.TransferFixture.Transfer;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;
import org.junit.jupiter.api.Timeout;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.TimeUnit;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

/**
 * Quiescence of the one-copy path at the transceiver level: a generation request that times out while the context
 * instance writes into its blocks through shared memory reads as ended only after its grants were revoked, so its
 * blocks never change again, although the context side goes on until its next piece is refused. Then the same
 * context instance serves a fresh request byte-exact. In push mode and in pull mode (one-copy writes too, every rank
 * being local).
 */
@Timeout(value = 300, unit = TimeUnit.SECONDS)
class AeronSharedMemoryQuiescenceTest {
    private static final byte[] SECRET = "kvtransfer-shm-quiescence-secret-012".getBytes(StandardCharsets.UTF_8);
    private static final Duration T = Duration.ofSeconds(60);
    /** 2 MiB blocks: 32 layers x 2 x 8 heads x 16 tokens x 128 dims x 2 bytes. */
    private static final CacheState STATE = CacheState.builder().uniformKvHeads(32, 8).sizePerHead(128)
            .tokensPerBlock(16).build();
    private static final int BLOCKS = 64;
    /** The context side's deadline: a round whose generation side gave up before any write ends within it. */
    private static final Duration CTX_TIMEOUT = Duration.ofSeconds(3);
    private final List<AutoCloseable> open = new ArrayList<>();
    private final List<Throwable> errors = new CopyOnWriteArrayList<>();

    @AfterEach
    void close() throws Exception {
        for (int i = open.size() - 1; i >= 0; i--) {
            open.get(i).close();
        }
    }

    private LocalInstance start(String name, Duration timeout, TransceiverConfig.TransferMode mode) {
        TransceiverConfig c = TransceiverConfig.builder().backend("aeron").kvTransferTimeout(timeout)
                .transferMode(mode).build();
        LocalInstance i = LocalInstance.builder(name, STATE)
                .transport(new AeronTransportProvider(), TransportConfig.builder().authSecret(SECRET)
                        .defaultTimeout(T).build())
                .formatter(Plugins.discover().formatterFor(STATE.attentionType())).config(c)
                .blocksPerRank(BLOCKS + 2).errorHandler(errors::add).start();
        open.add(i);
        return i;
    }

    /** Push as configured, and pull, which takes the same path between local instances. */
    @ParameterizedTest
    @EnumSource(TransceiverConfig.TransferMode.class)
    void aTimedOutRequestsBlocksNeverChangeAfterItEnded(TransceiverConfig.TransferMode mode) {
        LocalInstance ctx = start("ctx", CTX_TIMEOUT, mode);
        HostBufferManager snapshots = new HostBufferManager(false, false);
        open.add(snapshots);
        long copied = ShmWriter.copiedBytes();
        int midWrite = 0;
        // Deadlines from before the first write to after the last (where one lands depends on the host's speed):
        // whichever it is, the property holds; the log says how many ended mid-write.
        int[] timeoutsMs = {30, 60, 70, 80, 90, 100, 110, 120, 140, 160};
        for (int round = 0; round < timeoutsMs.length; round++) {
            LocalInstance gen = start("gen" + round, Duration.ofMillis(timeoutsMs[round]), mode);
            Transfer t = TransferFixture.prepare(ctx, gen, STATE, STATE, 16 * BLOCKS, 16 * BLOCKS);
            TransferRequest g = t.all().get(1);
            // The snapshot runs in the thread that ends the request, the moment it reads as ended (what an engine
            // waiting on the request sees first): from then on its blocks must not change.
            int[] ids = g.blockIds();
            List<MemoryBuffer> copies = new ArrayList<>();
            for (int id : ids) {
                copies.add(snapshots.allocate(gen.cache(0).block(id).size(), MemoryKind.HOST));
            }
            java.util.concurrent.CompletableFuture<Void> snapped = g.completion().thenRun(() -> {
                for (int i = 0; i < ids.length; i++) {
                    MemoryBuffer b = gen.cache(0).block(ids[i]);
                    snapshots.copy(b, 0, copies.get(i), 0, b.size());
                }
            }).toCompletableFuture();
            TransferFixture.respond(ctx, t);
            TransferFixture.request(gen, t);
            await("generation side of round " + round).atMost(T).pollInterval(Duration.ofMillis(1))
                    .until(snapped::isDone);
            assertThat(snapped).isNotCompletedExceptionally();
            TransferRequest c = t.all().get(0);
            await("context side of round " + round).atMost(T).pollInterval(Duration.ofMillis(1)).until(c::isDone);
            int changed = 0;
            for (int i = 0; i < ids.length; i++) {
                MemoryBuffer b = gen.cache(0).block(ids[i]);
                if (b.asByteBuffer().mismatch(copies.get(i).asByteBuffer()) != -1) {
                    changed++;
                }
                copies.get(i).close();
            }
            boolean timedOut = g.state() == RequestState.TRANS_ERROR;
            int arrived = 0;
            for (int i = 0; i < ids.length; i++) {
                arrived += dev.kvtransfer.core.pattern.KvPattern.verify(gen.cache(0), ids, STATE, 0, t.id, BLOCKS, i,
                        i + 1).ok() ? 1 : 0;
            }
            boolean someArrived = arrived > 0 && arrived < ids.length;
            midWrite += timedOut && someArrived ? 1 : 0;
            System.out.println(mode + " round " + round + " (timeout " + timeoutsMs[round] + " ms): generation " + g.state()
                    + (g.error().isPresent() ? " " + g.error().get().code() : "") + ", context " + c.state()
                    + ", blocks complete at the end: " + arrived + " of " + ids.length + "; blocks changed after the"
                    + " end: " + changed);
            assertThat(changed).as("round %d: blocks written after the request ended", round).isZero();
            if (timedOut) {
                assertThat(g.error().orElseThrow().code()).isEqualTo(ErrorCode.TIMEOUT);
                assertThat(g.error().orElseThrow().requestId()).isEqualTo(t.id);
                // The context side ends as its writes went: refused, cancelled, or complete when its done notice
                // crossed the generation side's deadline.
                assertThat(c.isDone()).isTrue();
            } else {
                TransferFixture.assertExact(gen, t);
            }
            TransferFixture.free(ctx, gen, t);
            gen.close();
            open.remove(gen);
        }
        System.out.println("rounds that timed out mid-write: " + midWrite + " of " + timeoutsMs.length);
        // The context instance keeps serving: a fresh generation instance gets every element.
        LocalInstance gen = start("gen-fresh", CTX_TIMEOUT, mode);
        Transfer t = TransferFixture.moveExact(ctx, gen, STATE, STATE, 16 * 20 + 3, 0, T);
        assertThat(t.all().get(1).wasPushed()).as("%s moved by one-copy writes", t.all().get(1)).isTrue();
        TransferFixture.free(ctx, gen, t);
        assertThat(ShmWriter.copiedBytes() - copied).as("bytes through shared memory").isPositive();
        errors.removeIf(e -> e instanceof dev.kvtransfer.api.KvTransferException k
                && (k.code() == ErrorCode.CANCELLED || k.code() == ErrorCode.TIMEOUT));
        assertThat(errors).isEmpty();
    }
}
