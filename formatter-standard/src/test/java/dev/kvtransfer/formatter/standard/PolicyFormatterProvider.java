package dev.kvtransfer.formatter.standard;

import dev.kvtransfer.api.cache.KvCacheView;
import dev.kvtransfer.api.format.CacheFormatter;
import dev.kvtransfer.api.format.FormatterProvider;
import dev.kvtransfer.api.format.TransferBufferPool;
import dev.kvtransfer.api.model.AttentionType;

/** The standard formatter with another both-direct threshold, so tests and benchmarks can force either plan. */
public final class PolicyFormatterProvider implements FormatterProvider {
    private final long minBothDirectBytes;
    private final boolean pipelinedScatter;

    /**
     * @param minBothDirectBytes the both-direct threshold
     */
    public PolicyFormatterProvider(long minBothDirectBytes) {
        this(minBothDirectBytes, true);
    }

    /**
     * @param minBothDirectBytes the both-direct threshold
     * @param pipelinedScatter   whether staged receives scatter on a helper thread
     */
    public PolicyFormatterProvider(long minBothDirectBytes, boolean pipelinedScatter) {
        this.minBothDirectBytes = minBothDirectBytes;
        this.pipelinedScatter = pipelinedScatter;
    }

    @Override
    public String name() {
        return "standard";
    }

    @Override
    public boolean handles(AttentionType type) {
        return type == AttentionType.DEFAULT;
    }

    @Override
    public CacheFormatter create(KvCacheView cache, TransferBufferPool buffers) {
        return new StandardCacheFormatter(cache, buffers, minBothDirectBytes, pipelinedScatter);
    }
}
