package dev.kvtransfer.core.transfer;

import dev.kvtransfer.api.layout.BlockDistribution;
import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.api.model.ContextPhaseParams;
import dev.kvtransfer.api.transport.Tags;
import dev.kvtransfer.api.transport.TransportConfig;
import dev.kvtransfer.core.RequestState;
import dev.kvtransfer.core.TransceiverConfig;
import dev.kvtransfer.core.TransferRequest;
import dev.kvtransfer.core.local.LocalInstance;
import dev.kvtransfer.core.protocol.PushNoticeFlyweight;
import dev.kvtransfer.testkit.KvPattern;
import dev.kvtransfer.testkit.LeakCheckExtension;
import dev.kvtransfer.testkit.fault.Fault;
import dev.kvtransfer.testkit.fault.Faults;
import dev.kvtransfer.testkit.fault.FaultyTransportProvider;
import dev.kvtransfer.testkit.loopback.LoopbackTransportProvider;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.extension.ExtendWith;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.atomic.AtomicInteger;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

/**
 * Progress notices of a push ({@code RequestInfo.FLAG_PROGRESS_NOTICES}): with part checksums on, a context rank
 * writes a batch larger than twice {@link PushWriteLog#PROGRESS_BYTES} in parts, each announced with its entries, so
 * the generation rank sums those while the next part is written; with checksums off it writes the batch at once.
 * Every element verified with KvPattern either way. Over loopback, whose emulated writes count one pass per byte.
 */
@ExtendWith(LeakCheckExtension.class)
class PushProgressTest {
    private static final Duration BOUND = Duration.ofSeconds(60);
    /** 8 layers, 8 KV heads of 128, 64 tokens per block, FP16: 2 MiB blocks. */
    private static final CacheState STATE = CacheState.builder().uniformKvHeads(8, 8).sizePerHead(128)
            .tokensPerBlock(64).build();
    private final List<LocalInstance> instances = new ArrayList<>();

    @AfterEach
    void close() {
        for (LocalInstance i : instances) {
            i.close();
        }
    }

    private LocalInstance start(String name, Faults faults, boolean checksums) {
        TransceiverConfig c = TransceiverConfig.builder().transferMode(TransceiverConfig.TransferMode.PUSH)
                .partChecksums(checksums).kvTransferTimeout(Duration.ofSeconds(30)).build();
        LocalInstance i = LocalInstance.builder(name, STATE)
                .transport(new FaultyTransportProvider(new LoopbackTransportProvider(), faults),
                        TransportConfig.builder().property(LoopbackTransportProvider.FABRIC_PROPERTY, "progress")
                                .build())
                .config(c).blocksPerRank(26).start();
        instances.add(i);
        return i;
    }

    @ParameterizedTest(name = "part checksums {0}")
    @ValueSource(booleans = {true, false})
    void aLargeBatchIsWrittenInAnnouncedPartsWithChecksumsOn(boolean checksums) {
        Faults faults = new Faults();
        AtomicInteger notices = new AtomicInteger();
        // Counts every notice the context side sends on a data tag; injects nothing.
        faults.inject(new Fault(Fault.Kind.DELAY, m -> {
            if (m.tag() >= Tags.FIRST_DATA_TAG && m.length() == PushNoticeFlyweight.LENGTH) {
                notices.incrementAndGet();
            }
            return false;
        }, Fault.UNLIMITED, Duration.ZERO, Fault.MIDDLE));
        LocalInstance ctx = start("ctx", faults, checksums);
        LocalInstance gen = start("gen", new Faults(), checksums);
        long id = 900;
        int blocks = 24; // 48 MiB: three parts of 16 MiB
        int prompt = blocks * STATE.tokensPerBlock();
        assertThat(BlockDistribution.blocksFor(prompt, STATE.tokensPerBlock())).isEqualTo(blocks);
        long[] hashes = new long[blocks];
        int[] c = ctx.cache(0).allocate(id, blocks);
        KvPattern.fill(ctx.cache(0), c, STATE, 0, id, blocks);
        int[] g = gen.cache(0).allocate(id, blocks);
        ContextPhaseParams params = ctx.contextPhaseParams(id, 0);
        TransferRequest cr = TransferRequest.context(id, prompt, c, hashes);
        TransferRequest gr = TransferRequest.generation(params, prompt, g, 0, new long[0]);
        gen.transceiver(0).requestAndReceiveAsync(gr);
        ctx.transceiver(0).respondAndSendAsync(cr);
        await().atMost(BOUND).until(() -> cr.isDone() && gr.isDone());
        assertThat(gr.state()).as("%s", gr).isEqualTo(RequestState.GENERATION_TRANS_COMPLETE);
        assertThat(cr.state()).as("%s", cr).isEqualTo(RequestState.CONTEXT_COMPLETE);
        KvPattern.verify(gen.cache(0), g, STATE, 0, id, blocks).assertOk();
        long bytes = (long) blocks * gen.cache(0).layout().blockBytes();
        assertThat(bytes).isEqualTo(3 * PushWriteLog.PROGRESS_BYTES);
        // The done notice, plus with checksums a progress notice after each part but the last.
        assertThat(notices.get()).as("notices sent").isEqualTo(checksums ? 3 : 1);
        ctx.cache(0).free(id);
        gen.cache(0).free(id);
    }
}
