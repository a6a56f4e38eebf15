package dev.kvtransfer.bench;

import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.api.model.ContextPhaseParams;
import dev.kvtransfer.api.model.DataType;
import dev.kvtransfer.api.transport.TransportConfig;
import dev.kvtransfer.core.RequestState;
import dev.kvtransfer.core.TransceiverConfig;
import dev.kvtransfer.core.TransferRequest;
import dev.kvtransfer.core.local.LocalInstance;
import dev.kvtransfer.core.pattern.KvPattern;
import dev.kvtransfer.core.plugin.Plugins;
import io.micrometer.core.instrument.simple.SimpleMeterRegistry;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * The context side serves a small request on its info reader's thread when nothing waits behind it
 * ({@code CacheSender.serveInline}, counted by {@code kvtransfer.sender.inline}), and hands a request over the size
 * limit to a sender thread as before; either way every element arrives. A TP1 pair of the tiny shape (16 KiB per
 * block) over the loopback test transport, in this JVM.
 */
class InlineServeTest {
    private static final CacheState STATE = CacheState.builder().uniformKvHeads(4, 4).sizePerHead(16)
            .tokensPerBlock(16).dataType(DataType.FLOAT16).tensorParallelism(1).pipelineParallelism(1).build();
    private final SimpleMeterRegistry ctxMeters = new SimpleMeterRegistry();
    private final AtomicLong backgroundErrors = new AtomicLong();
    private LocalInstance ctx;
    private LocalInstance gen;
    private long nextId = 1;

    @BeforeEach
    void start() {
        Plugins plugins = Plugins.discover();
        TransceiverConfig config = TransceiverConfig.defaults().toBuilder().backend("loopback")
                .kvTransferTimeout(Duration.ofSeconds(30)).build();
        ctx = start("inline-ctx", plugins, config).meters(ctxMeters).start();
        gen = start("inline-gen", plugins, config).start();
    }

    private LocalInstance.Builder start(String name, Plugins plugins, TransceiverConfig config) {
        return LocalInstance.builder(name, STATE)
                .transport(plugins.transport("loopback"), TransportConfig.builder().name(name).build())
                .plugins(plugins).config(config).blocksPerRank(256)
                .errorHandler(e -> backgroundErrors.incrementAndGet());
    }

    @AfterEach
    void stop() {
        gen.close();
        ctx.close();
        assertThat(backgroundErrors).hasValue(0);
    }

    private double inlineCount() {
        return ctxMeters.find("kvtransfer.sender.inline").counter().count();
    }

    @Test
    void smallRequestsReadyBeforeTheyAreAskedForAreServedOnTheInfoReader() throws Exception {
        for (int i = 0; i < 12; i++) {
            runOne(1, true);
        }
        assertThat(inlineCount()).as("one-block requests served without a sender thread").isPositive();
    }

    @Test
    void aRequestOverTheSizeLimitGoesToASenderThread() throws Exception {
        double before = inlineCount();
        // 32 blocks of 16 KiB = 512 KiB, over CacheSender.INLINE_SEND_BYTES (256 KiB).
        for (int i = 0; i < 3; i++) {
            runOne(32, true);
        }
        assertThat(inlineCount()).isEqualTo(before);
    }

    @Test
    void manyInFlightAskedBeforeAndAfterTheyAreReadyAllArriveWhole() throws Exception {
        List<Runnable> checks = new ArrayList<>();
        List<TransferRequest> all = new ArrayList<>();
        for (int i = 0; i < 16; i++) {
            long id = nextId++;
            int[] cb = ctx.cache(0).allocate(id, 2);
            KvPattern.fill(ctx.cache(0), cb, ctx.cacheState(0), 0, id, 2);
            int[] gb = gen.cache(0).allocate(id, 2);
            TransferRequest c = TransferRequest.context(id, 32, cb);
            ContextPhaseParams params = ctx.contextPhaseParams(id, 0);
            TransferRequest g = TransferRequest.generation(params, 32, gb);
            if (i % 2 == 0) {
                ctx.transceiver(0).respondAndSendAsync(c);
                gen.transceiver(0).requestAndReceiveAsync(g);
            } else {
                gen.transceiver(0).requestAndReceiveAsync(g);
                ctx.transceiver(0).respondAndSendAsync(c);
            }
            all.add(c);
            all.add(g);
            checks.add(() -> {
                KvPattern.Result v = KvPattern.verify(gen.cache(0), gb, gen.cacheState(0), 0, id, 2);
                assertThat(v.ok()).as("request %d: %s", id, v.firstMismatch()).isTrue();
                assertThat(v.checkedElements()).isEqualTo(2 * 8192L);
                ctx.cache(0).free(id);
                gen.cache(0).free(id);
            });
        }
        for (TransferRequest r : all) {
            r.completion().toCompletableFuture().get(60, TimeUnit.SECONDS);
        }
        for (TransferRequest r : all) {
            assertThat(r.state()).isIn(RequestState.CONTEXT_COMPLETE, RequestState.GENERATION_TRANS_COMPLETE);
        }
        checks.forEach(Runnable::run);
    }

    private void runOne(int blocks, boolean ctxFirst) throws Exception {
        long id = nextId++;
        int[] cb = ctx.cache(0).allocate(id, blocks);
        KvPattern.fill(ctx.cache(0), cb, ctx.cacheState(0), 0, id, blocks);
        int[] gb = gen.cache(0).allocate(id, blocks);
        TransferRequest c = TransferRequest.context(id, blocks * 16, cb);
        TransferRequest g = TransferRequest.generation(ctx.contextPhaseParams(id, 0), blocks * 16, gb);
        if (ctxFirst) {
            ctx.transceiver(0).respondAndSendAsync(c);
        }
        gen.transceiver(0).requestAndReceiveAsync(g);
        if (!ctxFirst) {
            ctx.transceiver(0).respondAndSendAsync(c);
        }
        g.completion().toCompletableFuture().get(60, TimeUnit.SECONDS);
        c.completion().toCompletableFuture().get(60, TimeUnit.SECONDS);
        assertThat(c.state()).isEqualTo(RequestState.CONTEXT_COMPLETE);
        assertThat(g.state()).isEqualTo(RequestState.GENERATION_TRANS_COMPLETE);
        KvPattern.Result v = KvPattern.verify(gen.cache(0), gb, gen.cacheState(0), 0, id, blocks);
        assertThat(v.ok()).as("request %d: %s", id, v.firstMismatch()).isTrue();
        assertThat(v.checkedElements()).isEqualTo(blocks * 8192L);
        ctx.cache(0).free(id);
        gen.cache(0).free(id);
    }
}
