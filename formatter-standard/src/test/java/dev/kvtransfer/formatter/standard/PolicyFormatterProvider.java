package dev.kvtransfer.formatter.standard;

import dev.kvtransfer.api.cache.KvCacheView;
import dev.kvtransfer.api.format.CacheFormatter;
import dev.kvtransfer.api.format.FormatterProvider;
import dev.kvtransfer.api.format.TransferBufferPool;
import dev.kvtransfer.api.model.AttentionType;

/**
 * The standard formatter with other thresholds (pull: both-direct; push: smallest average direct entry, staging
 * chunk), so tests and benchmarks can force either plan.
 */
public final class PolicyFormatterProvider implements FormatterProvider {
    private final long minBothDirectBytes;
    private final boolean pipelinedScatter;
    private final long minDirectEntryBytes;
    private final long stagingChunk;
    private final boolean stagingRing;

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
        this(minBothDirectBytes, pipelinedScatter, StandardCacheFormatter.DEFAULT_MIN_DIRECT_ENTRY_BYTES,
                dev.kvtransfer.formatter.support.WritePlan.DEFAULT_STAGING_CHUNK);
    }

    /**
     * @param minBothDirectBytes  the both-direct threshold (pull)
     * @param pipelinedScatter    whether staged receives scatter on a helper thread
     * @param minDirectEntryBytes push: smallest average entry written straight from the pool (0 = always direct,
     *                            {@code Long.MAX_VALUE} = staged whenever that needs fewer entries)
     * @param stagingChunk        push: largest staging buffer per peer
     */
    public PolicyFormatterProvider(long minBothDirectBytes, boolean pipelinedScatter, long minDirectEntryBytes,
                                   long stagingChunk) {
        this(minBothDirectBytes, pipelinedScatter, minDirectEntryBytes, stagingChunk, true);
    }

    /**
     * @param minBothDirectBytes  the both-direct threshold (pull)
     * @param pipelinedScatter    whether staged receives scatter on a helper thread
     * @param minDirectEntryBytes push: smallest average direct entry
     * @param stagingChunk        push: largest staging buffer per peer
     * @param stagingRing         pull: whether staged messages reuse a ring of places in the staging buffer
     */
    public PolicyFormatterProvider(long minBothDirectBytes, boolean pipelinedScatter, long minDirectEntryBytes,
                                   long stagingChunk, boolean stagingRing) {
        this.stagingRing = stagingRing;
        this.minBothDirectBytes = minBothDirectBytes;
        this.pipelinedScatter = pipelinedScatter;
        this.minDirectEntryBytes = minDirectEntryBytes;
        this.stagingChunk = stagingChunk;
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
        return new StandardCacheFormatter(cache, buffers, minBothDirectBytes, pipelinedScatter, minDirectEntryBytes,
                stagingChunk, stagingRing);
    }
}
