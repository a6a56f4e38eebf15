package dev.kvtransfer.api.model;

/**
 * What one layer of a hybrid model keeps per request: KV blocks ({@link #ATTENTION}) or one recurrent state
 * ({@link #RECURRENT}: a conv state and an SSM state, Mamba / GDN style). See {@link RecurrentStateShape}.
 */
public enum LayerKind {
    /** An attention layer: paged KV blocks, described by the rest of {@link CacheState}. */
    ATTENTION,
    /** A recurrent (state-space) layer: one conv state and one SSM state per request. */
    RECURRENT
}
