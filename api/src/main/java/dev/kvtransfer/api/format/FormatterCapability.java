package dev.kvtransfer.api.format;

/**
 * What a formatter can do beyond moving a whole request two-sided ({@link CacheFormatter#format} /
 * {@link CacheFormatter#unformat}). Core uses a capability only when the formatter declares it; the testkit
 * asserts that an undeclared one is refused with {@link UnsupportedOperationException}.
 */
public enum FormatterCapability {
    /** Layer-wise: {@code format} / {@code unformat} of a range of global layers, in the order both sides agree. */
    LAYER_RANGES,
    /** One-sided push: {@link CacheFormatter#push} writes straight into the peers' pools. */
    PUSH
}
