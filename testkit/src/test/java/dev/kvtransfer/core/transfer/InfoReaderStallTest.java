package dev.kvtransfer.core.transfer;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.KvTransferException;
import dev.kvtransfer.api.layout.BlockDistribution;
import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.memory.MemoryKind;
import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.api.model.DataType;
import dev.kvtransfer.api.transport.Connection;
import dev.kvtransfer.api.transport.ConnectionManager;
import dev.kvtransfer.api.transport.Tags;
import dev.kvtransfer.api.transport.TransportConfig;
import dev.kvtransfer.core.RequestState;
import dev.kvtransfer.core.TransceiverConfig;
import dev.kvtransfer.core.TransferRequest;
import dev.kvtransfer.core.local.LocalInstance;
import dev.kvtransfer.core.memory.HostBufferManager;
import dev.kvtransfer.core.protocol.RequestHeaderFlyweight;
import dev.kvtransfer.core.testsupport.WholeBlockFormatterProvider;
import dev.kvtransfer.testkit.KvPattern;
import dev.kvtransfer.testkit.fault.Faults;
import dev.kvtransfer.testkit.fault.FaultyTransportProvider;
import dev.kvtransfer.testkit.loopback.LoopbackTransportProvider;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

/**
 * Over a transport that does not post receives (the fallback path: the loopback wrapped by
 * {@link FaultyTransportProvider} with no fault armed, whose connections do not post), requesters that send request
 * headers and never their infos must not hold the context side's info readers. Three such connections (more than the two readers) each announce an info that never comes; a
 * genuine request on another connection is then served, every element verified, before any of the missing infos
 * is even given up on (which happens after the control timeout, 5 s here) — before the fix each silent header
 * held a reader for that long and the genuine request waited behind them. The silent headers are then reported
 * {@code TIMEOUT} naming their requests, and the rank keeps serving.
 */
@Timeout(60)
class InfoReaderStallTest {
    private static final Duration BOUND = Duration.ofSeconds(30);
    private final FaultyTransportProvider transport =
            new FaultyTransportProvider(new LoopbackTransportProvider(), new Faults());
    private final List<LocalInstance> instances = new ArrayList<>();
    private final List<Throwable> errors = new CopyOnWriteArrayList<>();

    @AfterEach
    void after() {
        instances.forEach(LocalInstance::close);
    }

    private LocalInstance start(String name) {
        CacheState s = CacheState.builder().uniformKvHeads(4, 4).sizePerHead(8).tokensPerBlock(4)
                .dataType(DataType.FLOAT16).build();
        // The responder does not read infos itself (as over UCX): every info goes through the info readers.
        TransceiverConfig c = TransceiverConfig.builder().backend("loopback").transferBufferBytes(64 << 10)
                .kvTransferTimeout(Duration.ofSeconds(20)).responderInfoWaitMicros(0).build();
        LocalInstance i = LocalInstance.builder(name, s).transport(transport, TransportConfig.builder().build())
                .formatter(new WholeBlockFormatterProvider()).config(c).blocksPerRank(256).errorHandler(errors::add)
                .start();
        instances.add(i);
        return i;
    }

    private long silentHeadersReported() {
        return errors.stream().filter(e -> e instanceof KvTransferException k && k.code() == ErrorCode.TIMEOUT
                && k.getMessage().contains("did not arrive")).count();
    }

    @Test
    void headersWithoutInfosHoldNoReaderAndAreDroppedAfterTheControlTimeout() {
        LocalInstance ctx = start("ctx");
        LocalInstance gen = start("gen");
        long id = 7;
        int prompt = 24;
        int blocks = BlockDistribution.blocksFor(prompt, 4);
        int[] c = ctx.cache(0).allocate(id, blocks);
        KvPattern.fill(ctx.cache(0), c, ctx.cacheState(0), 0, id, blocks);
        int[] g = gen.cache(0).allocate(id, blocks);
        TransferRequest ctxReq = TransferRequest.context(id, prompt, c);
        TransferRequest genReq = TransferRequest.generation(ctx.contextPhaseParams(id, 0), prompt, g);
        ctx.transceiver(0).respondAndSendAsync(ctxReq);
        List<ConnectionManager> silent = new ArrayList<>();
        try (HostBufferManager bm = new HostBufferManager();
             MemoryBuffer header = bm.allocate(RequestHeaderFlyweight.LENGTH, MemoryKind.HOST)) {
            for (int k = 0; k < 3; k++) {
                ConnectionManager m = transport.create(TransportConfig.builder().build());
                silent.add(m);
                Connection conn = m.connection(ctx.commState().addresses().get(0));
                new RequestHeaderFlyweight().wrap(header.asByteBuffer(), 0).requestSend(200, 900 + k, dev.kvtransfer.api.transport.Tags.FIRST_DATA_TAG + k);
                conn.send(Tags.ID_TAG, header, 0, RequestHeaderFlyweight.LENGTH, BOUND);
            }
            gen.transceiver(0).requestAndReceiveAsync(genReq);
            await().atMost(BOUND).until(genReq::isDone);
            assertThat(silentHeadersReported()).as("silent headers given up on before the genuine request was served "
                    + "(it waited for a reader they held)").isZero();
            assertThat(genReq.state()).isEqualTo(RequestState.GENERATION_TRANS_COMPLETE);
            KvPattern.Result r = KvPattern.verify(gen.cache(0), g, gen.cacheState(0), 0, id, blocks);
            assertThat(r.mismatches()).as(r.firstMismatch()).isZero();
            assertThat(r.checkedElements()).isPositive();
            assertThat(Thread.getAllStackTraces().keySet()).as("the fallback's info readers")
                    .anyMatch(t -> t.getName().contains("-info-"));
            await().atMost(BOUND).until(() -> silentHeadersReported() >= 3);
            for (long silentId = 900; silentId < 903; silentId++) {
                long want = silentId;
                assertThat(errors).anySatisfy(e -> {
                    assertThat(e).isInstanceOf(KvTransferException.class);
                    assertThat(((KvTransferException) e).requestId()).isEqualTo(want);
                    assertThat(e.getMessage()).contains("request " + want).contains("did not arrive");
                });
            }
        } finally {
            silent.forEach(ConnectionManager::close);
        }
        // The rank still serves.
        long id2 = 8;
        int[] c2 = ctx.cache(0).allocate(id2, blocks);
        KvPattern.fill(ctx.cache(0), c2, ctx.cacheState(0), 0, id2, blocks);
        int[] g2 = gen.cache(0).allocate(id2, blocks);
        TransferRequest genReq2 = TransferRequest.generation(ctx.contextPhaseParams(id2, 0), prompt, g2);
        ctx.transceiver(0).respondAndSendAsync(TransferRequest.context(id2, prompt, c2));
        gen.transceiver(0).requestAndReceiveSync(genReq2);
        KvPattern.Result r2 = KvPattern.verify(gen.cache(0), g2, gen.cacheState(0), 0, id2, blocks);
        assertThat(r2.mismatches()).as(r2.firstMismatch()).isZero();
    }
}
