package dev.kvtransfer.connector;

import dev.kvtransfer.api.model.CacheState;

import java.time.Duration;
import java.util.Objects;

/**
 * Settings shared by an instance's {@link SchedulerConnector} and its {@link WorkerConnector}s. Immutable; the
 * {@code with…} methods return changed copies.
 *
 * @param role             what the instance does
 * @param ranks            ranks of the instance (every request lives on every rank)
 * @param tokensPerBlock   tokens per KV block (prefix reuse counts whole blocks)
 * @param loadAsync        whether loads are asynchronous (the request waits for {@link ConnectorUpdate#finishedRecving()},
 *                         default) or layer by layer inside the step ({@link WorkerConnector#waitForLayerLoad})
 * @param layerLoadTimeout longest one {@link WorkerConnector#waitForLayerLoad} call waits
 */
public record ConnectorConfig(KvRole role, int ranks, int tokensPerBlock, boolean loadAsync,
                              Duration layerLoadTimeout) {
    /** Default of {@link #layerLoadTimeout}. */
    public static final Duration DEFAULT_LAYER_LOAD_TIMEOUT = Duration.ofSeconds(30);

    /**
     * Validates.
     *
     * @param role             role
     * @param ranks            ranks
     * @param tokensPerBlock   tokens per block
     * @param loadAsync        asynchronous loads
     * @param layerLoadTimeout per-call bound of layer waits
     */
    public ConnectorConfig {
        Objects.requireNonNull(role, "role");
        Objects.requireNonNull(layerLoadTimeout, "layerLoadTimeout");
        if (ranks < 1) {
            throw new IllegalArgumentException("ranks = " + ranks + ": must be >= 1");
        }
        if (tokensPerBlock < 1) {
            throw new IllegalArgumentException("tokensPerBlock = " + tokensPerBlock + ": must be >= 1");
        }
        if (layerLoadTimeout.isNegative() || layerLoadTimeout.isZero()) {
            throw new IllegalArgumentException("layerLoadTimeout = " + layerLoadTimeout + ": must be positive");
        }
    }

    /**
     * The config of an instance: ranks and block size from its cache state, asynchronous loads.
     *
     * @param role  what the instance does
     * @param state the instance's cache state
     * @return the config
     */
    public static ConnectorConfig of(KvRole role, CacheState state) {
        Objects.requireNonNull(state, "state");
        if (state.attentionDpEnabled()) {
            throw new IllegalArgumentException("attention DP: a request lives on one DP group only, which the "
                    + "connector does not track yet");
        }
        return new ConnectorConfig(role, state.worldSize(), state.tokensPerBlock(), true,
                DEFAULT_LAYER_LOAD_TIMEOUT);
    }

    /**
     * @param v asynchronous (true) or layer-by-layer (false) loads
     * @return a copy with it
     */
    public ConnectorConfig withLoadAsync(boolean v) {
        return new ConnectorConfig(role, ranks, tokensPerBlock, v, layerLoadTimeout);
    }

    /**
     * @param v per-call bound of {@link WorkerConnector#waitForLayerLoad}
     * @return a copy with it
     */
    public ConnectorConfig withLayerLoadTimeout(Duration v) {
        return new ConnectorConfig(role, ranks, tokensPerBlock, loadAsync, v);
    }
}
