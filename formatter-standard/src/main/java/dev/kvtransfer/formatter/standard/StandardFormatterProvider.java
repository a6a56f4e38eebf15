package dev.kvtransfer.formatter.standard;

import dev.kvtransfer.api.cache.KvCacheView;
import dev.kvtransfer.api.format.CacheFormatter;
import dev.kvtransfer.api.format.FormatterProvider;
import dev.kvtransfer.api.format.TransferBufferPool;
import dev.kvtransfer.api.model.AttentionType;

import java.util.Objects;

/**
 * The plugin entry of the standard (MHA/GQA) formatter: name {@value #NAME}, handles
 * {@link AttentionType#DEFAULT}. Registered in {@code META-INF/services/dev.kvtransfer.api.format.FormatterProvider}.
 */
public final class StandardFormatterProvider implements FormatterProvider {
    /** The provider name. */
    public static final String NAME = "standard";

    /** Creates the provider (ServiceLoader needs a public no-argument constructor). */
    public StandardFormatterProvider() {
    }

    @Override
    public String name() {
        return NAME;
    }

    @Override
    public boolean handles(AttentionType type) {
        return type == AttentionType.DEFAULT;
    }

    @Override
    public CacheFormatter create(KvCacheView cache, TransferBufferPool buffers) {
        return new StandardCacheFormatter(Objects.requireNonNull(cache, "cache"),
                Objects.requireNonNull(buffers, "buffers"));
    }

    @Override
    public String toString() {
        return "StandardFormatterProvider{" + NAME + "}";
    }
}
