package dev.kvtransfer.core.inject;

import com.google.inject.Guice;
import com.google.inject.Injector;
import dev.kvtransfer.api.layout.BlockLayout;
import dev.kvtransfer.api.memory.BufferManager;
import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.api.model.CommState;
import dev.kvtransfer.api.transport.ConnectionManager;
import dev.kvtransfer.api.transport.TransportConfig;
import dev.kvtransfer.api.transport.TransportProvider;
import dev.kvtransfer.core.CacheTransceiver;
import dev.kvtransfer.core.TransceiverConfig;
import dev.kvtransfer.core.cache.PagedKvCache;
import dev.kvtransfer.core.memory.HostBufferManager;
import dev.kvtransfer.core.sync.LocalGroupComm;
import dev.kvtransfer.core.testsupport.WiringCheck;
import io.micrometer.core.instrument.MeterRegistry;
import io.micrometer.core.instrument.simple.SimpleMeterRegistry;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.nio.file.Path;

import java.util.List;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

class KvTransferModuleTest {
    @Test
    void wiresATransceiverFromTheConfigAndTheDiscoveredPlugins(@TempDir Path dir) throws Exception {
        Path journal = dir.resolve("journal");
        Path timing = dir.resolve("timing");
        TransceiverConfig config = TransceiverConfig.builder().backend("loopback").transferBufferBytes(1 << 16)
                .journalDir(journal).timingDir(timing).build();
        MeterRegistry meters = new SimpleMeterRegistry();
        Injector injector = Guice.createInjector(new KvTransferModule(config, meters, null));
        assertThat(injector.getInstance(TransceiverConfig.class)).isSameAs(config);
        TransportProvider transport = injector.getInstance(TransportProvider.class);
        assertThat(transport.name()).isEqualTo("loopback");
        BufferManager buffers = injector.getInstance(BufferManager.class);
        assertThat(buffers).isInstanceOf(HostBufferManager.class).isSameAs(injector.getInstance(BufferManager.class));
        CacheTransceiverFactory factory = injector.getInstance(CacheTransceiverFactory.class);
        CacheState state = CacheState.builder().uniformKvHeads(2, 2).sizePerHead(4).tokensPerBlock(4).build();
        try (ConnectionManager ccm = transport.create(TransportConfig.builder().build());
             ConnectionManager gcm = transport.create(TransportConfig.builder().build());
             PagedKvCache ctxCache = new PagedKvCache(buffers, BlockLayout.of(state, 0), 8);
             PagedKvCache genCache = new PagedKvCache(buffers, BlockLayout.of(state, 0), 8);
             LocalGroupComm g1 = new LocalGroupComm(); LocalGroupComm g2 = new LocalGroupComm();
             LocalGroupComm g3 = new LocalGroupComm(); LocalGroupComm g4 = new LocalGroupComm()) {
            CacheTransceiver ctx = factory.create("ctx", state, 0, new CommState("loopback",
                    List.of(ccm.localAddress()), -1), ccm, ctxCache, g1, g2);
            CacheTransceiver gen = factory.create("gen", state, 0, new CommState("loopback",
                    List.of(gcm.localAddress()), -1), gcm, genCache, g3, g4);
            assertThat(ctx.state().selfIndex()).isZero();
            assertThat(ctx.state().cacheState()).isEqualTo(state);
            // The journal directory, the timing directory and the registry all took effect (the Guice path once
            // ignored the journal directory).
            WiringCheck.transferAndCheck(ctx, ctxCache, gen, genCache, journal, timing, meters, meters);
        }
        buffers.close(); // nothing outstanding: the transceivers closed the staging pools they own
    }

    @Test
    void anUnknownBackendFailsWhenTheTransportIsFirstAskedFor() {
        Injector injector = Guice.createInjector(new KvTransferModule(TransceiverConfig.builder().backend("ucx")
                .build()));
        assertThatThrownBy(() -> injector.getInstance(TransportProvider.class))
                .hasStackTraceContaining("no transport named 'ucx'; found: loopback (available)");
    }
}
