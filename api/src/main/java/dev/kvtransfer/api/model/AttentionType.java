package dev.kvtransfer.api.model;

/** Kind of attention, which decides the cache formatter. */
public enum AttentionType {
    /** Multi-head / grouped-query attention: K and V per KV head. */
    DEFAULT,
    /** Multi-head latent attention (DeepSeek style): one latent head per layer, K only. */
    MLA
}
