package dev.kvtransfer.connector;

import dev.kvtransfer.api.model.ContextPhaseParams;

import java.util.Objects;
import java.util.Optional;

/**
 * What the connector needs to know of one engine request (the parts of vLLM's {@code Request} a KV connector
 * reads): its id, prompt length, the prefix-cache key of each full prompt block, and what to do with its KV — save
 * it for a remote decode ({@code do_remote_decode}), load it from a remote prefill ({@code kv_transfer_params}), or
 * neither. Immutable.
 */
public final class ConnectorRequest {
    private final long requestId;
    private final int promptTokens;
    private final long[] blockHashes;
    private final boolean saveForRemote;
    private final ContextPhaseParams loadFrom;
    private final boolean remotePrefill;
    private final long[] lastBlockKey;

    private ConnectorRequest(long requestId, int promptTokens, long[] blockHashes, boolean saveForRemote,
                             ContextPhaseParams loadFrom) {
        this(requestId, promptTokens, blockHashes, saveForRemote, loadFrom, loadFrom != null, new long[0]);
    }

    private ConnectorRequest(long requestId, int promptTokens, long[] blockHashes, boolean saveForRemote,
                             ContextPhaseParams loadFrom, boolean remotePrefill, long[] lastBlockKey) {
        if (promptTokens < 1) {
            throw new IllegalArgumentException("request " + requestId + ": promptTokens = " + promptTokens
                    + ": must be >= 1");
        }
        this.requestId = requestId;
        this.promptTokens = promptTokens;
        this.blockHashes = Objects.requireNonNull(blockHashes, "blockHashes").clone();
        this.saveForRemote = saveForRemote;
        this.loadFrom = loadFrom;
        this.remotePrefill = remotePrefill;
        this.lastBlockKey = Objects.requireNonNull(lastBlockKey, "lastBlockKey").clone();
    }

    /**
     * This request with the key of its prompt's last block (the engine's extra keys: LoRA adapter, multimodal
     * hashes, cache salt). A decode request's key must equal its prefill request's, or the prefill side refuses
     * the load ({@code UNSUPPORTED_LAYOUT}, naming both keys) before a byte moves; empty matches only empty.
     *
     * @param key the key
     * @return a request with that key
     */
    public ConnectorRequest withLastBlockKey(long[] key) {
        return new ConnectorRequest(requestId, promptTokens, blockHashes, saveForRemote, loadFrom, remotePrefill,
                Objects.requireNonNull(key, "key"));
    }

    /** @return a copy of the key of the prompt's last block (empty unless set) */
    public long[] lastBlockKey() {
        return lastBlockKey.clone();
    }

    long[] lastBlockKeyView() {
        return lastBlockKey;
    }

    /**
     * A prefill request whose KV a remote decode instance will load. Its id is the context request id the decode
     * side names.
     *
     * @param requestId    the request id
     * @param promptTokens prompt length
     * @param blockHashes  prefix-cache key of each full block of the prompt, in order (may be empty; a decode side
     *                     that reuses a prefix is checked against them)
     * @return the request
     */
    public static ConnectorRequest prefill(long requestId, int promptTokens, long[] blockHashes) {
        return new ConnectorRequest(requestId, promptTokens, blockHashes, true, null);
    }

    /**
     * A decode request whose prompt KV is loaded from the prefill instance named by {@code kvTransferParams}.
     *
     * @param requestId        this engine's id of the request (may differ from the context request id)
     * @param promptTokens     prompt length (as on the prefill side)
     * @param blockHashes      prefix-cache key of each full block of the prompt, in order: those of the blocks this
     *                         instance already holds are sent along so the prefill side can check them
     * @param kvTransferParams what the prefill instance handed out
     * @return the request
     */
    public static ConnectorRequest decode(long requestId, int promptTokens, long[] blockHashes,
                                          ContextPhaseParams kvTransferParams) {
        return new ConnectorRequest(requestId, promptTokens, blockHashes, false,
                Objects.requireNonNull(kvTransferParams, "kvTransferParams"));
    }

    /**
     * A decode request whose prompt KV comes from a remote prefill whose params have not arrived yet (vLLM's
     * {@code do_remote_prefill} before its {@code kv_transfer_params}: e.g. a router that sends the request to the
     * decode side first). Until {@link SchedulerConnector#kvTransferParamsArrived} hands them over,
     * {@link SchedulerConnector#getNumNewMatchedTokens} answers {@link MatchResult#LATER}.
     *
     * @param requestId    this engine's id of the request
     * @param promptTokens prompt length (as on the prefill side)
     * @param blockHashes  prefix-cache key of each full block of the prompt, in order
     * @return the request
     */
    public static ConnectorRequest remotePrefill(long requestId, int promptTokens, long[] blockHashes) {
        return new ConnectorRequest(requestId, promptTokens, blockHashes, false, null, true, new long[0]);
    }

    /**
     * A request the connector has nothing to do for (computed and kept locally).
     *
     * @param requestId    the request id
     * @param promptTokens prompt length
     * @return the request
     */
    public static ConnectorRequest local(long requestId, int promptTokens) {
        return new ConnectorRequest(requestId, promptTokens, new long[0], false, null);
    }

    /** @return the engine's request id */
    public long requestId() {
        return requestId;
    }

    /** @return prompt length in tokens */
    public int promptTokens() {
        return promptTokens;
    }

    /** @return a copy of the prompt blocks' prefix-cache keys */
    public long[] blockHashes() {
        return blockHashes.clone();
    }

    long[] blockHashesView() {
        return blockHashes;
    }

    /** @return whether the KV is saved for a remote decode instance */
    public boolean saveForRemote() {
        return saveForRemote;
    }

    /** @return whether the KV comes from a remote prefill (params known or not yet) */
    public boolean loadsFromRemote() {
        return remotePrefill;
    }

    /** @return this request with the params that arrived */
    ConnectorRequest withParams(ContextPhaseParams params) {
        return new ConnectorRequest(requestId, promptTokens, blockHashes, saveForRemote,
                Objects.requireNonNull(params, "params"), true, lastBlockKey);
    }

    /** @return where the KV is loaded from, for a decode request */
    public Optional<ContextPhaseParams> kvTransferParams() {
        return Optional.ofNullable(loadFrom);
    }

    @Override
    public String toString() {
        return "ConnectorRequest{" + requestId + " prompt=" + promptTokens + (saveForRemote ? " save" : "")
                + (loadFrom != null ? " load from context request " + loadFrom.requestId()
                : remotePrefill ? " load (params pending)" : "") + "}";
    }
}
