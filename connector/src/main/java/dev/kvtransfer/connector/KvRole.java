package dev.kvtransfer.connector;

/** What an instance does with KV caches through its connector (vLLM's {@code kv_role}). */
public enum KvRole {
    /** Prefill: saves the KV of its requests for a remote decode instance ({@code kv_producer}). */
    PRODUCER,
    /** Decode: loads the KV of its requests from a remote prefill instance ({@code kv_consumer}). */
    CONSUMER,
    /** Both ({@code kv_both}). */
    BOTH;

    /** @return whether this role saves (context side) */
    public boolean saves() {
        return this != CONSUMER;
    }

    /** @return whether this role loads (generation side) */
    public boolean loads() {
        return this != PRODUCER;
    }
}
