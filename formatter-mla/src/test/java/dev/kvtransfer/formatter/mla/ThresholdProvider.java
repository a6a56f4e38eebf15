package dev.kvtransfer.formatter.mla;

import dev.kvtransfer.api.cache.KvCacheView;
import dev.kvtransfer.api.format.CacheFormatter;
import dev.kvtransfer.api.format.FormatterProvider;
import dev.kvtransfer.api.format.TransferBufferPool;
import dev.kvtransfer.api.model.AttentionType;

/**
 * The MLA formatter with other thresholds (pull: direct runs; push: smallest average direct entry, staging chunk),
 * so tests and benchmarks can force either path.
 */
final class ThresholdProvider implements FormatterProvider {
    private final long directRunMinBytes;
    private final long minDirectEntryBytes;
    private final long stagingChunk;

    ThresholdProvider(long directRunMinBytes) {
        this(directRunMinBytes, MlaCacheFormatter.DEFAULT_MIN_DIRECT_ENTRY_BYTES,
                dev.kvtransfer.formatter.support.WritePlan.DEFAULT_STAGING_CHUNK);
    }

    ThresholdProvider(long directRunMinBytes, long minDirectEntryBytes, long stagingChunk) {
        this.directRunMinBytes = directRunMinBytes;
        this.minDirectEntryBytes = minDirectEntryBytes;
        this.stagingChunk = stagingChunk;
    }

    @Override
    public String name() {
        return "mla";
    }

    @Override
    public boolean handles(AttentionType type) {
        return type == AttentionType.MLA;
    }

    @Override
    public CacheFormatter create(KvCacheView cache, TransferBufferPool buffers) {
        return new MlaCacheFormatter(cache, buffers, directRunMinBytes, minDirectEntryBytes, stagingChunk);
    }
}
