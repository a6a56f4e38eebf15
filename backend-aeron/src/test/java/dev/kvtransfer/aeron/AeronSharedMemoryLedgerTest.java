package dev.kvtransfer.aeron;

import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.api.transport.TransportConfig;
import dev.kvtransfer.core.CopyLedger;
import dev.kvtransfer.core.TransceiverConfig;
import dev.kvtransfer.core.TransferRequest;
import dev.kvtransfer.core.local.LocalInstance;
import dev.kvtransfer.core.plugin.Plugins;
import dev.kvtransfer.testkit.TransferFixture;
import dev.kvtransfer.testkit.TransferFixture.Transfer;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * The copy ledger of a transfer between instances that reach each other's pools through shared files: one transport
 * pass per byte on the context side ({@code writeCopiesPerByte} 1), matching layouts and re-sharded, every element
 * verified with KvPattern. Push as configured, and pull, which takes the same path when every rank is local.
 */
class AeronSharedMemoryLedgerTest {
    private static final byte[] SECRET = "kvtransfer-shm-ledger-secret-0123456".getBytes(StandardCharsets.UTF_8);
    private static final Duration T = Duration.ofSeconds(30);
    private final List<LocalInstance> open = new ArrayList<>();
    private final List<Throwable> errors = new CopyOnWriteArrayList<>();

    @AfterEach
    void close() {
        for (int i = open.size() - 1; i >= 0; i--) {
            open.get(i).close();
        }
        assertThat(errors).isEmpty();
    }

    private LocalInstance start(String name, CacheState s, TransceiverConfig.TransferMode mode) {
        TransceiverConfig c = TransceiverConfig.builder().backend("aeron").kvTransferTimeout(T)
                .transferMode(mode).build();
        LocalInstance i = LocalInstance.builder(name, s)
                .transport(new AeronTransportProvider(), TransportConfig.builder().authSecret(SECRET).build())
                .formatter(Plugins.discover().formatterFor(s.attentionType())).config(c).blocksPerRank(64)
                .errorHandler(errors::add).start();
        open.add(i);
        return i;
    }

    private static CacheState state(int tp, int pp) {
        return CacheState.builder().uniformKvHeads(8, 4).sizePerHead(64).tokensPerBlock(16).tensorParallelism(tp)
                .pipelineParallelism(pp).build();
    }

    /**
     * Staging: TP1 to TP2 writes head ranges of 8 KiB here, under the formatter's 64 KiB bar for direct entries, so the
     * context side gathers them first (its policy, not the transport's): one staging copy and one transport pass.
     */
    @ParameterizedTest(name = "TP{0} PP{1} -> TP{2} PP{3}, {5}")
    @CsvSource({"1,1,1,1,0,PUSH", "2,1,1,1,0,PUSH", "1,2,1,1,0,PUSH", "1,1,2,1,1,PUSH",
        "1,1,1,1,0,PULL", "2,1,1,1,0,PULL", "1,2,1,1,0,PULL", "1,1,2,1,1,PULL"})
    void onePassPerByteFromPoolToPool(int ctxTp, int ctxPp, int genTp, int genPp, int staged,
                                      TransceiverConfig.TransferMode mode) {
        CacheState ctxState = state(ctxTp, ctxPp);
        CacheState genState = state(genTp, genPp);
        LocalInstance ctx = start("ctx", ctxState, mode);
        LocalInstance gen = start("gen", genState, mode);
        long copied = ShmWriter.copiedBytes();
        Transfer t = TransferFixture.moveExact(ctx, gen, ctxState, genState, 16 * 20 + 5, 0, T);
        CopyLedger sent = CopyLedger.NONE;
        for (TransferRequest r : t.all()) {
            if (r.isContext()) {
                sent = sent.plus(r.copyLedger());
            } else {
                assertThat(r.wasPushed()).as("%s", r).isTrue();
            }
        }
        System.out.println("ledger " + mode + " TP" + ctxTp + "PP" + ctxPp + "->TP" + genTp + "PP" + genPp
                + ": context " + sent);
        assertThat(sent.bytes()).isPositive();
        assertThat(sent.transportUnknown()).isZero();
        assertThat(sent.transportPerByte()).as("transport passes per byte: %s", sent).isEqualTo(1.0);
        assertThat(sent.stagedPerByte()).as("staging copies per byte: %s", sent).isEqualTo(staged);
        assertThat(ShmWriter.copiedBytes() - copied).as("bytes through shared memory").isEqualTo(sent.bytes());
        TransferFixture.free(ctx, gen, t);
    }
}
