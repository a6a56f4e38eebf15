package dev.kvtransfer.core.transfer;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.layout.BlockDistribution;
import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.api.model.DataType;
import dev.kvtransfer.api.transport.Tags;
import dev.kvtransfer.api.transport.TransportConfig;
import dev.kvtransfer.api.transport.TransportProvider;
import dev.kvtransfer.core.RequestState;
import dev.kvtransfer.core.TransceiverConfig;
import dev.kvtransfer.core.TransferRequest;
import dev.kvtransfer.core.local.LocalInstance;
import dev.kvtransfer.core.testsupport.WholeBlockFormatterProvider;
import dev.kvtransfer.testkit.KvPattern;
import dev.kvtransfer.testkit.fault.Fault;
import dev.kvtransfer.testkit.fault.Faults;
import dev.kvtransfer.testkit.fault.FaultyTransportProvider;
import dev.kvtransfer.testkit.loopback.LoopbackTransportProvider;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

/**
 * A context rank closed while a pull waits for its requester's go ({@link PullGo}, a posted receive over the
 * loopback, which posts): the request ends {@code CANCELLED} saying so, the close leaks no buffer (the go's buffer
 * comes back once the transport ended its receive) and no thread, and the requester's side ends too. The requester's
 * go is dropped by a faulty transport under the generation instance, so the wait lasts until the close.
 */
@Timeout(60)
class PullGoCloseTest {
    private static final Duration BOUND = Duration.ofSeconds(30);
    private final Faults faults = new Faults();
    private final List<LocalInstance> instances = new ArrayList<>();

    @AfterEach
    void after() {
        instances.forEach(LocalInstance::close);
    }

    private LocalInstance start(String name, TransportProvider transport) {
        // 16 KiB blocks: a 32-block prompt is 512 KiB, above the size from which pulls wait for the go.
        CacheState s = CacheState.builder().uniformKvHeads(4, 4).sizePerHead(64).tokensPerBlock(4)
                .dataType(DataType.FLOAT16).build();
        TransceiverConfig c = TransceiverConfig.builder().backend("loopback").transferBufferBytes(1 << 20)
                .kvTransferTimeout(Duration.ofSeconds(20)).build();
        LocalInstance i = LocalInstance.builder(name, s).transport(transport, TransportConfig.builder().build())
                .formatter(new WholeBlockFormatterProvider()).config(c).blocksPerRank(64).start();
        instances.add(i);
        return i;
    }

    @Test
    void closingAContextRankWhosePullWaitsForItsGoCancelsItAndLeaksNothing() {
        LocalInstance ctx = start("ctx", new LoopbackTransportProvider());
        LocalInstance gen = start("gen", new FaultyTransportProvider(new LoopbackTransportProvider(), faults));
        faults.inject(new Fault(Fault.Kind.DROP, m -> m.tag() >= Tags.FIRST_DATA_TAG && m.length() == 16,
                Fault.UNLIMITED, Duration.ZERO));
        long id = 11;
        int prompt = 128;
        int blocks = BlockDistribution.blocksFor(prompt, 4);
        int[] c = ctx.cache(0).allocate(id, blocks);
        KvPattern.fill(ctx.cache(0), c, ctx.cacheState(0), 0, id, blocks);
        int[] g = gen.cache(0).allocate(id, blocks);
        TransferRequest ctxReq = TransferRequest.context(id, prompt, c);
        TransferRequest genReq = TransferRequest.generation(ctx.contextPhaseParams(id, 0), prompt, g);
        ctx.transceiver(0).respondAndSendAsync(ctxReq);
        gen.transceiver(0).requestAndReceiveAsync(genReq);
        // Dispatched (its ready signal went out) and its go dropped: it waits for the go, holding no thread.
        await().atMost(BOUND).until(() -> ctxReq.transferStart().isPresent()
                && faults.injected(Fault.Kind.DROP) >= 1);
        assertThat(ctxReq.isDone()).isFalse();
        instances.remove(ctx);
        ctx.close(); // fails naming the buffer if the go's leaked
        assertThat(ctxReq.state()).isEqualTo(RequestState.CANCELLED);
        assertThat(ctxReq.error().orElseThrow().code()).isEqualTo(ErrorCode.CANCELLED);
        assertThat(ctxReq.error().orElseThrow().getMessage()).contains("request " + id)
                .contains("waited for its requester's go");
        await().atMost(BOUND).until(genReq::isDone);
        assertThat(genReq.state()).isEqualTo(RequestState.TRANS_ERROR);
    }
}
