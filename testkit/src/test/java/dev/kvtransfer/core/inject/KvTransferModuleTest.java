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
import org.junit.jupiter.api.Test;

import java.util.List;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

class KvTransferModuleTest {
    @Test
    void wiresATransceiverFromTheConfigAndTheDiscoveredPlugins() {
        TransceiverConfig config = TransceiverConfig.builder().backend("loopback").transferBufferBytes(1 << 16).build();
        Injector injector = Guice.createInjector(new KvTransferModule(config));
        assertThat(injector.getInstance(TransceiverConfig.class)).isSameAs(config);
        TransportProvider transport = injector.getInstance(TransportProvider.class);
        assertThat(transport.name()).isEqualTo("loopback");
        BufferManager buffers = injector.getInstance(BufferManager.class);
        assertThat(buffers).isInstanceOf(HostBufferManager.class).isSameAs(injector.getInstance(BufferManager.class));
        CacheTransceiverFactory factory = injector.getInstance(CacheTransceiverFactory.class);
        CacheState state = CacheState.builder().uniformKvHeads(2, 2).sizePerHead(4).tokensPerBlock(4).build();
        try (ConnectionManager cm = transport.create(TransportConfig.builder().build());
             PagedKvCache cache = new PagedKvCache(buffers, BlockLayout.of(state, 0), 4);
             LocalGroupComm group = new LocalGroupComm()) {
            CommState comm = new CommState("loopback", List.of(cm.localAddress()), -1);
            CacheTransceiver t = factory.create(state, 0, comm, cm, cache, group);
            assertThat(t.state().selfIndex()).isZero();
            assertThat(t.state().cacheState()).isEqualTo(state);
            t.close(); // closes the staging pool it owns
        }
        buffers.close(); // nothing outstanding
    }

    @Test
    void anUnknownBackendFailsWhenTheTransportIsFirstAskedFor() {
        Injector injector = Guice.createInjector(new KvTransferModule(TransceiverConfig.builder().backend("ucx")
                .build()));
        assertThatThrownBy(() -> injector.getInstance(TransportProvider.class))
                .hasStackTraceContaining("no transport named 'ucx'; found: loopback (available)");
    }
}
