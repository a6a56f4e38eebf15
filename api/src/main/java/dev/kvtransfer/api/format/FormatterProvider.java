package dev.kvtransfer.api.format;

import dev.kvtransfer.api.cache.KvCacheView;
import dev.kvtransfer.api.model.AttentionType;

/**
 * The entry point of a formatter plugin, registered in
 * {@code META-INF/services/dev.kvtransfer.api.format.FormatterProvider} and selected by {@link #name()} or
 * by the attention type it {@link #handles}.
 */
public interface FormatterProvider {
    /** @return the unique name, e.g. {@code "standard"} */
    String name();

    /**
     * @param type an attention kind
     * @return whether this formatter formats caches of that kind
     */
    boolean handles(AttentionType type);

    /**
     * Creates a formatter over one rank's KV pool.
     *
     * @param cache   the rank's blocks
     * @param buffers the rank's staging pool
     * @return the formatter
     */
    CacheFormatter create(KvCacheView cache, TransferBufferPool buffers);
}
