package dev.kvtransfer.formatter.mla;

import dev.kvtransfer.api.cache.KvCacheView;
import dev.kvtransfer.api.format.CacheFormatter;
import dev.kvtransfer.api.format.FormatterProvider;
import dev.kvtransfer.api.format.TransferBufferPool;
import dev.kvtransfer.api.model.AttentionType;

import java.util.Objects;

/**
 * The formatter plugin for MLA caches ({@link AttentionType#MLA}), named {@value #NAME}; registered in
 * {@code META-INF/services/dev.kvtransfer.api.format.FormatterProvider}. Needs nothing installed.
 */
public final class MlaFormatterProvider implements FormatterProvider {
    /** The provider's name. */
    public static final String NAME = "mla";

    /** Creates the provider (ServiceLoader needs a public no-argument constructor). */
    public MlaFormatterProvider() {
        // Stateless: every formatter is created per cache view.
    }

    @Override
    public String name() {
        return NAME;
    }

    @Override
    public boolean handles(AttentionType type) {
        return type == AttentionType.MLA;
    }

    @Override
    public CacheFormatter create(KvCacheView cache, TransferBufferPool buffers) {
        Objects.requireNonNull(cache, "cache");
        Objects.requireNonNull(buffers, "buffers");
        return new MlaCacheFormatter(cache, buffers);
    }

    @Override
    public String toString() {
        return "MlaFormatterProvider[" + NAME + "]";
    }
}
