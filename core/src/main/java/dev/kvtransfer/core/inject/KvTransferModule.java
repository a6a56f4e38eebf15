package dev.kvtransfer.core.inject;

import com.google.inject.AbstractModule;
import com.google.inject.Provides;
import com.google.inject.Singleton;
import dev.kvtransfer.api.memory.BufferManager;
import dev.kvtransfer.api.transport.TransportProvider;
import dev.kvtransfer.api.ErrorHandler;
import dev.kvtransfer.core.TransceiverConfig;
import dev.kvtransfer.core.memory.HostBufferManager;
import dev.kvtransfer.core.plugin.Plugins;
import io.micrometer.core.instrument.MeterRegistry;
import io.micrometer.core.instrument.simple.SimpleMeterRegistry;

import java.util.Objects;

/**
 * The one Guice module of kvtransfer: binds the {@link TransceiverConfig}, the discovered {@link Plugins}, the
 * {@link TransportProvider} named by {@code kvtransfer.backend}, a {@link HostBufferManager} as the
 * {@link BufferManager}, a {@link MeterRegistry} (a {@link SimpleMeterRegistry} unless one is given), an
 * {@link ErrorHandler} (log only, unless one is given) and the {@link CacheTransceiverFactory}. No side effects:
 * nothing is discovered, allocated or started before the injector asks for it, and nothing here closes
 * anything: the application closes what it got (transceivers, connection managers, the buffer manager).
 */
public final class KvTransferModule extends AbstractModule {
    private final TransceiverConfig config;
    private final MeterRegistry meters;
    private final ErrorHandler errors;

    /**
     * A module with its own meter registry and a log-only error handler.
     *
     * @param config settings
     */
    public KvTransferModule(TransceiverConfig config) {
        this(config, null, null);
    }

    /**
     * A module.
     *
     * @param config settings
     * @param meters where counters go, or null for a new {@link SimpleMeterRegistry}
     * @param errors background error handler, or null for log only
     */
    public KvTransferModule(TransceiverConfig config, MeterRegistry meters, ErrorHandler errors) {
        this.config = Objects.requireNonNull(config, "config");
        this.meters = meters;
        this.errors = errors;
    }

    @Override
    protected void configure() {
        bind(TransceiverConfig.class).toInstance(config);
        bind(CacheTransceiverFactory.class).in(Singleton.class);
    }

    @Provides
    @Singleton
    Plugins plugins() {
        return Plugins.discover();
    }

    @Provides
    @Singleton
    TransportProvider transport(Plugins plugins) {
        return plugins.transport(config.backend());
    }

    @Provides
    @Singleton
    BufferManager bufferManager() {
        return new HostBufferManager();
    }

    @Provides
    @Singleton
    MeterRegistry meterRegistry() {
        return meters != null ? meters : new SimpleMeterRegistry();
    }

    @Provides
    @Singleton
    ErrorHandler errorHandler() {
        // Errors are already logged and counted by the transceiver; the default handler adds nothing.
        return errors != null ? errors : e -> { };
    }
}
