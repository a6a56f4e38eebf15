package dev.kvtransfer.aeron;

import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.api.transport.Tags;
import dev.kvtransfer.api.transport.TransportConfig;
import dev.kvtransfer.core.TransceiverConfig;
import dev.kvtransfer.core.local.LocalInstance;
import dev.kvtransfer.core.plugin.Plugins;
import dev.kvtransfer.testkit.TransferFixture;
import dev.kvtransfer.testkit.TransferFixture.Transfer;
import dev.kvtransfer.testkit.fault.Fault;
import dev.kvtransfer.testkit.fault.Faults;
import dev.kvtransfer.testkit.fault.FaultyTransportProvider;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.atomic.AtomicInteger;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * Progress notices ({@code RequestInfo.FLAG_PROGRESS_NOTICES}) over one-copy shared-memory writes: with part
 * checksums on, a context rank writes a share of more than 32 MiB in 16 MiB parts, each followed by a notice with
 * its entries, so the generation rank sums each part while the next is written; with checksums off the share goes
 * at once under a single done notice. Push as configured and pull (local, so one copy too); every element verified
 * with KvPattern.
 */
class AeronSharedMemoryProgressTest {
    private static final byte[] SECRET = "kvtransfer-shm-progress-secret-01234".getBytes(StandardCharsets.UTF_8);
    private static final Duration T = Duration.ofSeconds(60);
    /** 8 layers, 8 KV heads of 128, 64 tokens per block, FP16: 2 MiB blocks; 24 blocks are 48 MiB. */
    private static final CacheState STATE = CacheState.builder().uniformKvHeads(8, 8).sizePerHead(128)
            .tokensPerBlock(64).build();
    private final List<LocalInstance> open = new ArrayList<>();
    private final List<Throwable> errors = new CopyOnWriteArrayList<>();

    @AfterEach
    void close() {
        for (int i = open.size() - 1; i >= 0; i--) {
            open.get(i).close();
        }
        assertThat(errors).isEmpty();
    }

    private LocalInstance start(String name, Faults faults, TransceiverConfig.TransferMode mode, boolean checksums) {
        TransceiverConfig c = TransceiverConfig.builder().backend("aeron").kvTransferTimeout(T).transferMode(mode)
                .partChecksums(checksums).build();
        LocalInstance i = LocalInstance.builder(name, STATE)
                .transport(new FaultyTransportProvider(new AeronTransportProvider(), faults),
                        TransportConfig.builder().authSecret(SECRET).build())
                .formatter(Plugins.discover().formatterFor(STATE.attentionType())).config(c).blocksPerRank(26)
                .errorHandler(errors::add).start();
        open.add(i);
        return i;
    }

    @ParameterizedTest(name = "{0}, part checksums {1}")
    @CsvSource({"PUSH,true", "PUSH,false", "PULL,true"})
    void aLargeShareIsWrittenInAnnouncedPartsWhenChecksumsAreOn(TransceiverConfig.TransferMode mode,
                                                                boolean checksums) {
        Faults faults = new Faults();
        AtomicInteger notices = new AtomicInteger();
        // Counts the 16-byte notices the context side sends on data tags; injects nothing.
        faults.inject(new Fault(Fault.Kind.DELAY, m -> {
            if (m.tag() >= Tags.FIRST_DATA_TAG && m.length() == 16) {
                notices.incrementAndGet();
            }
            return false;
        }, Fault.UNLIMITED, Duration.ZERO, Fault.MIDDLE));
        LocalInstance ctx = start("ctx", faults, mode, checksums);
        LocalInstance gen = start("gen", new Faults(), mode, checksums);
        int blocks = 24;
        assertThat((long) blocks * gen.cache(0).layout().blockBytes()).isEqualTo(48L << 20);
        long copied = ShmWriter.copiedBytes();
        int prompt = blocks * STATE.tokensPerBlock();
        Transfer t = TransferFixture.moveExact(ctx, gen, STATE, STATE, prompt, 0, T);
        TransferFixture.assertPushed(t, true);
        assertThat(ShmWriter.copiedBytes() - copied).as("bytes through shared memory").isEqualTo(48L << 20);
        // The done notice, and with checksums a progress notice after each 16 MiB part but the last.
        assertThat(notices.get()).as("notices sent").isEqualTo(checksums ? 3 : 1);
        TransferFixture.free(ctx, gen, t);
    }
}
