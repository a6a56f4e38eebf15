package dev.kvtransfer.formatter.mla;

import dev.kvtransfer.api.cache.KvCacheView;
import dev.kvtransfer.api.format.CacheFormatter;
import dev.kvtransfer.api.format.FormatterProvider;
import dev.kvtransfer.api.format.TransferBufferPool;
import dev.kvtransfer.api.model.AttentionType;

/** The MLA formatter with another direct-run threshold, so tests and benchmarks can force either path. */
final class ThresholdProvider implements FormatterProvider {
    private final long directRunMinBytes;

    ThresholdProvider(long directRunMinBytes) {
        this.directRunMinBytes = directRunMinBytes;
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
        return new MlaCacheFormatter(cache, buffers, directRunMinBytes);
    }
}
