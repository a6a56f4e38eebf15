package dev.kvtransfer.core.local;

import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.api.transport.TransportConfig;
import dev.kvtransfer.core.TransceiverConfig;
import dev.kvtransfer.core.testsupport.WiringCheck;
import dev.kvtransfer.testkit.loopback.LoopbackTransportProvider;
import io.micrometer.core.instrument.MeterRegistry;
import io.micrometer.core.instrument.simple.SimpleMeterRegistry;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.nio.file.Path;

/** {@link LocalInstance} builds its ranks through the one assembly: journal, timing and metrics all take effect. */
class LocalInstanceWiringTest {
    @Test
    void journalTimingAndMetricsAreWired(@TempDir Path dir) throws Exception {
        Path journal = dir.resolve("journal");
        Path timing = dir.resolve("timing");
        TransceiverConfig config = TransceiverConfig.builder().transferBufferBytes(1 << 16).journalDir(journal)
                .timingDir(timing).build();
        CacheState state = CacheState.builder().uniformKvHeads(2, 2).sizePerHead(4).tokensPerBlock(4).build();
        MeterRegistry ctxMeters = new SimpleMeterRegistry();
        MeterRegistry genMeters = new SimpleMeterRegistry();
        TransportConfig t = TransportConfig.builder().property(LoopbackTransportProvider.FABRIC_PROPERTY, "wiring")
                .build();
        try (LocalInstance ctx = LocalInstance.builder("ctx", state).transport(new LoopbackTransportProvider(), t)
                .config(config).meters(ctxMeters).blocksPerRank(8).start();
             LocalInstance gen = LocalInstance.builder("gen", state).transport(new LoopbackTransportProvider(), t)
                     .config(config).meters(genMeters).blocksPerRank(8).start()) {
            WiringCheck.transferAndCheck(ctx.transceiver(0), ctx.cache(0), gen.transceiver(0), gen.cache(0), journal,
                    timing, ctxMeters, genMeters);
        }
    }
}
