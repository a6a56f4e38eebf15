package dev.kvtransfer.core.inject;

import dev.kvtransfer.api.cache.KvCacheView;
import dev.kvtransfer.api.format.CacheFormatter;
import dev.kvtransfer.api.format.FormatterProvider;
import dev.kvtransfer.api.memory.BufferManager;
import dev.kvtransfer.api.model.AttentionType;
import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.api.model.CommState;
import dev.kvtransfer.api.sync.GroupComm;
import dev.kvtransfer.api.transport.ConnectionManager;
import dev.kvtransfer.core.CacheTransceiver;
import dev.kvtransfer.api.ErrorHandler;
import dev.kvtransfer.core.TransceiverConfig;
import dev.kvtransfer.core.buffer.DefaultTransferBufferPool;
import dev.kvtransfer.core.plugin.Plugins;
import io.micrometer.core.instrument.MeterRegistry;
import jakarta.inject.Inject;

import java.util.Objects;

/**
 * Builds one rank's {@link CacheTransceiver}: picks the formatter (by name from the config, else the one that
 * handles the cache's attention type), creates the rank's {@link DefaultTransferBufferPool} (slot size from
 * {@link TransceiverConfig#slotBytes}, {@code sendConcurrency} send and {@code recvSlots} receive slots) and
 * the formatter over the rank's KV pool. The transceiver owns the pool (closes it on close). Usable with or
 * without Guice.
 */
public final class CacheTransceiverFactory {
    private final TransceiverConfig config;
    private final Plugins plugins;
    private final BufferManager buffers;
    private final MeterRegistry meters;
    private final ErrorHandler errors;

    /**
     * Creates the factory.
     *
     * @param config  settings
     * @param plugins where formatters are found
     * @param buffers allocates staging and control memory
     * @param meters  where counters go
     * @param errors  background error handler
     */
    @Inject
    public CacheTransceiverFactory(TransceiverConfig config, Plugins plugins, BufferManager buffers,
                                   MeterRegistry meters, ErrorHandler errors) {
        this.config = Objects.requireNonNull(config, "config");
        this.plugins = Objects.requireNonNull(plugins, "plugins");
        this.buffers = Objects.requireNonNull(buffers, "buffers");
        this.meters = Objects.requireNonNull(meters, "meters");
        this.errors = Objects.requireNonNull(errors, "errors");
    }

    /** @return the config */
    public TransceiverConfig config() {
        return config;
    }

    /**
     * The formatter provider for a cache: the configured name, else by attention type.
     *
     * @param type the cache's attention type
     * @return the provider
     */
    public FormatterProvider formatterProvider(AttentionType type) {
        return config.formatter().map(plugins::formatter).orElseGet(() -> plugins.formatterFor(type));
    }

    /**
     * Builds a rank's transceiver.
     *
     * @param cacheState  the rank's cache state
     * @param selfIndex   the rank's index
     * @param commState   every rank's address in the instance
     * @param connections the rank's transport endpoint (the caller's to close)
     * @param cache       the rank's KV pool (the caller's)
     * @param statusGroup the rank's status group (the caller's)
     * @return the transceiver (it owns the staging pool)
     */
    public CacheTransceiver create(CacheState cacheState, int selfIndex, CommState commState,
                                   ConnectionManager connections, KvCacheView cache, GroupComm statusGroup) {
        Objects.requireNonNull(cacheState, "cacheState");
        Objects.requireNonNull(cache, "cache");
        FormatterProvider provider = formatterProvider(cacheState.attentionType());
        DefaultTransferBufferPool pool = new DefaultTransferBufferPool(buffers, config.slotBytes(cache.layout()),
                config.sendConcurrency(), config.recvSlots(), config.allowDynamicBuffers());
        try {
            CacheFormatter formatter = provider.create(cache, pool);
            return new CacheTransceiver(config, cacheState, selfIndex, commState, connections, formatter, pool,
                    buffers, statusGroup, errors, meters).closeWith(pool);
        } catch (RuntimeException e) {
            pool.close();
            throw e;
        }
    }
}
