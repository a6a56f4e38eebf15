package dev.kvtransfer.core.inject;

import dev.kvtransfer.api.cache.KvCacheView;
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
import dev.kvtransfer.core.RankAssembly;
import dev.kvtransfer.core.plugin.Plugins;
import io.micrometer.core.instrument.MeterRegistry;
import jakarta.inject.Inject;

import java.util.Objects;

/**
 * Builds ranks' {@link CacheTransceiver}s from the injected config, plugins, buffer manager, meters and error
 * handler, through {@link RankAssembly} (the one assembly every entry point uses). Usable with or without Guice.
 */
public final class CacheTransceiverFactory {
    private final TransceiverConfig config;
    private final Plugins plugins;
    private final BufferManager buffers;
    private final MeterRegistry meters;
    private final ErrorHandler errors;
    /** Per instance name, the token issuing key its ranks built here share. */
    private final java.util.Map<String, byte[]> tokenKeys = new java.util.concurrent.ConcurrentHashMap<>();

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
     * Builds a rank's transceiver through {@link RankAssembly}, so every {@link TransceiverConfig} key (journal,
     * timing, metrics, pool sizes) takes effect exactly as for any other entry point. The ranks of one instance
     * name built by this factory share a token issuing key (ranks in other processes need their own assembly's
     * {@code RankAssembly.tokenIssuingKey}).
     *
     * @param instanceName    the instance's name (journal queue, thread names)
     * @param cacheState      the rank's cache state
     * @param selfIndex       the rank's index
     * @param commState       every rank's address in the instance
     * @param connections     the rank's transport endpoint (the caller's to close)
     * @param cache           the rank's KV pool (the caller's)
     * @param contextGroup    the rank's context status group (the caller's)
     * @param generationGroup the rank's generation status group (the caller's)
     * @return the transceiver (it owns the staging pool and the journal)
     */
    public CacheTransceiver create(String instanceName, CacheState cacheState, int selfIndex, CommState commState,
                                   ConnectionManager connections, KvCacheView cache, GroupComm contextGroup,
                                   GroupComm generationGroup) {
        return RankAssembly.of(config).rank(instanceName, cacheState, selfIndex, commState).connections(connections)
                .memory(cache, buffers).groups(contextGroup, generationGroup).plugins(plugins)
                .observability(errors, meters)
                .tokenIssuingKey(tokenKeys.computeIfAbsent(instanceName,
                        n -> dev.kvtransfer.core.transfer.ControlAuth.newIssuingKey())).build();
    }
}
