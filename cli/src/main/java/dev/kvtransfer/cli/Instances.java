package dev.kvtransfer.cli;

import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.api.transport.TransportConfig;
import dev.kvtransfer.api.transport.TransportProvider;
import dev.kvtransfer.core.TransceiverConfig;
import dev.kvtransfer.core.local.LocalInstance;
import dev.kvtransfer.core.plugin.Plugins;

import java.time.Duration;

/** Starts a {@link LocalInstance} the way the demo and its worker both need it. */
final class Instances {
    private Instances() {
    }

    static LocalInstance start(String name, CacheState state, DemoOptions options, int blocksPerRank) {
        return start(name, state, options, blocksPerRank, new io.micrometer.core.instrument.simple.SimpleMeterRegistry());
    }

    static LocalInstance start(String name, CacheState state, DemoOptions options, int blocksPerRank,
                               io.micrometer.core.instrument.MeterRegistry meters) {
        return start(name, state, options, blocksPerRank, meters, TransportConfig.DEFAULT_HOST, 0);
    }

    /**
     * Starts an instance whose ranks bind {@code host}: rank {@code r} on {@code basePort + r} when
     * {@code basePort > 0}, else on any free port ({@code kvtransfer serve --listen}).
     */
    static LocalInstance start(String name, CacheState state, DemoOptions options, int blocksPerRank,
                               io.micrometer.core.instrument.MeterRegistry meters, String host, int basePort) {
        Plugins plugins = Plugins.discover();
        PoolMemory memory = PoolMemory.resolve(options, plugins);
        TransceiverConfig config = options.transceiverConfig();
        TransportProvider transport = plugins.transport(config.backend());
        TransportConfig base = TransportConfig.builder()
                .name(name)
                .host(host)
                .port(basePort)
                .defaultTimeout(Duration.ofSeconds(options.timeoutSeconds))
                .properties(options.transportProperties)
                .build();
        return LocalInstance.builder(name, state)
                .transport(transport, base)
                .plugins(plugins)
                .config(config)
                .blocksPerRank(blocksPerRank)
                .sharedBufferManager(true)
                .memory(memory.factory(), memory.kind())
                .meters(meters)
                .errorHandler(e -> System.err.println("kvtransfer[" + name + "]: " + e.getMessage()))
                .start();
    }
}
