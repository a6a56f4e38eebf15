package dev.kvtransfer.connector;

import dev.kvtransfer.api.model.CacheState;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Objects;
import java.util.stream.IntStream;

/**
 * Settings shared by a {@link SchedulerConnector} and its {@link WorkerConnector}s. Immutable; the {@code with…}
 * methods return changed copies.
 *
 * <p>Without attention DP one connector covers the whole instance ({@code members = 0 .. worldSize - 1}). With
 * attention DP each DP rank has its own scheduler connector, as each vLLM DP rank runs its own engine core and
 * scheduler: {@link #of(KvRole, CacheState, int)} makes the config of one DP rank, whose members are the instance
 * ranks of that DP group (every PP stage, the TP ranks {@code tpRank / tpPerDpGroup == dpRank}). Its requests live on
 * those ranks only; block tables are indexed by member (0 .. {@code ranks - 1}), in instance rank order.
 *
 * @param role               what the instance does
 * @param ranks              ranks this connector drives (the members; every request of it lives on every member)
 * @param tokensPerBlock     tokens per KV block (prefix reuse counts whole blocks)
 * @param loadAsync          whether loads are asynchronous (the request waits for
 *                           {@link ConnectorUpdate#finishedRecving()}, default) or layer by layer inside the step
 *                           ({@link WorkerConnector#waitForLayerLoad})
 * @param layerLoadTimeout   longest one {@link WorkerConnector#waitForLayerLoad} call waits
 * @param loadFailurePolicy  what a failed load asks the engine to do (vLLM's {@code kv_load_failure_policy})
 * @param dpRank             the DP rank this connector serves (0 without attention DP)
 * @param members            the instance ranks this connector drives, ascending ({@code ranks} of them)
 */
public record ConnectorConfig(KvRole role, int ranks, int tokensPerBlock, boolean loadAsync,
                              Duration layerLoadTimeout, LoadFailurePolicy loadFailurePolicy, int dpRank,
                              List<Integer> members) {
    /** Default of {@link #layerLoadTimeout}. */
    public static final Duration DEFAULT_LAYER_LOAD_TIMEOUT = Duration.ofSeconds(30);

    /**
     * Validates.
     *
     * @param role              role
     * @param ranks             ranks
     * @param tokensPerBlock    tokens per block
     * @param loadAsync         asynchronous loads
     * @param layerLoadTimeout  per-call bound of layer waits
     * @param loadFailurePolicy failure policy
     * @param dpRank            DP rank
     * @param members           instance ranks driven
     */
    public ConnectorConfig {
        Objects.requireNonNull(role, "role");
        Objects.requireNonNull(layerLoadTimeout, "layerLoadTimeout");
        Objects.requireNonNull(loadFailurePolicy, "loadFailurePolicy");
        members = List.copyOf(Objects.requireNonNull(members, "members"));
        if (ranks < 1) {
            throw new IllegalArgumentException("ranks = " + ranks + ": must be >= 1");
        }
        if (members.size() != ranks) {
            throw new IllegalArgumentException(members.size() + " members " + members + " for " + ranks + " ranks");
        }
        for (int i = 0; i < members.size(); i++) {
            if (members.get(i) < 0 || i > 0 && members.get(i) <= members.get(i - 1)) {
                throw new IllegalArgumentException("members " + members + ": must be ascending instance ranks");
            }
        }
        if (dpRank < 0) {
            throw new IllegalArgumentException("dpRank = " + dpRank + ": must be >= 0");
        }
        if (tokensPerBlock < 1) {
            throw new IllegalArgumentException("tokensPerBlock = " + tokensPerBlock + ": must be >= 1");
        }
        if (layerLoadTimeout.isNegative() || layerLoadTimeout.isZero()) {
            throw new IllegalArgumentException("layerLoadTimeout = " + layerLoadTimeout + ": must be positive");
        }
    }

    /**
     * A config over instance ranks {@code 0 .. ranks - 1}, failed loads recomputed, no attention DP.
     *
     * @param role             role
     * @param ranks            ranks
     * @param tokensPerBlock   tokens per block
     * @param loadAsync        asynchronous loads
     * @param layerLoadTimeout per-call bound of layer waits
     */
    public ConnectorConfig(KvRole role, int ranks, int tokensPerBlock, boolean loadAsync, Duration layerLoadTimeout) {
        this(role, ranks, tokensPerBlock, loadAsync, layerLoadTimeout, LoadFailurePolicy.RECOMPUTE, 0,
                IntStream.range(0, Math.max(ranks, 0)).boxed().toList());
    }

    /**
     * The config of an instance without attention DP: every rank, block size from its cache state, asynchronous
     * loads, failed loads recomputed.
     *
     * @param role  what the instance does
     * @param state the instance's cache state
     * @return the config
     * @throws IllegalArgumentException with attention DP (use {@link #of(KvRole, CacheState, int)}, one per DP rank)
     */
    public static ConnectorConfig of(KvRole role, CacheState state) {
        Objects.requireNonNull(state, "state");
        if (state.attentionDpEnabled()) {
            throw new IllegalArgumentException("attention DP (" + state.dpSize() + " DP ranks): each DP rank has its "
                    + "own connector, made by ConnectorConfig.of(role, state, dpRank)");
        }
        return new ConnectorConfig(role, state.worldSize(), state.tokensPerBlock(), true, DEFAULT_LAYER_LOAD_TIMEOUT);
    }

    /**
     * The config of one DP rank of an instance with attention DP: its members are the ranks of that DP group (every
     * PP stage, CP rank and TP rank of the group). Without attention DP, {@code dpRank} must be 0 and this is
     * {@link #of(KvRole, CacheState)}.
     *
     * @param role   what the instance does
     * @param state  the instance's cache state (any rank's: its own {@code dpRank} is not read)
     * @param dpRank the DP rank served
     * @return the config
     */
    public static ConnectorConfig of(KvRole role, CacheState state, int dpRank) {
        Objects.requireNonNull(state, "state");
        if (!state.attentionDpEnabled()) {
            if (dpRank != 0) {
                throw new IllegalArgumentException("dpRank = " + dpRank + " without attention DP: must be 0");
            }
            return of(role, state);
        }
        if (dpRank < 0 || dpRank >= state.dpSize()) {
            throw new IllegalArgumentException("dpRank = " + dpRank + " outside [0, " + state.dpSize() + ")");
        }
        List<Integer> members = new ArrayList<>();
        for (int r = 0; r < state.worldSize(); r++) {
            if (dpRankOf(state, r) == dpRank) {
                members.add(r);
            }
        }
        return new ConnectorConfig(role, members.size(), state.tokensPerBlock(), true, DEFAULT_LAYER_LOAD_TIMEOUT,
                LoadFailurePolicy.RECOMPUTE, dpRank, members);
    }

    /**
     * The DP rank an instance rank belongs to (0 without attention DP).
     *
     * @param state the instance's cache state
     * @param rank  an instance rank
     * @return its DP rank
     */
    public static int dpRankOf(CacheState state, int rank) {
        return state.attentionDpEnabled() ? state.tpRank(rank) / state.tpPerDpGroup() : 0;
    }

    /**
     * @param instanceRank an instance rank
     * @return its index among the members (its row of a {@link BlockTable}), or -1 when it is not a member
     */
    public int memberIndex(int instanceRank) {
        return members.indexOf(instanceRank);
    }

    /**
     * @param v asynchronous (true) or layer-by-layer (false) loads
     * @return a copy with it
     */
    public ConnectorConfig withLoadAsync(boolean v) {
        return new ConnectorConfig(role, ranks, tokensPerBlock, v, layerLoadTimeout, loadFailurePolicy, dpRank,
                members);
    }

    /**
     * @param v per-call bound of {@link WorkerConnector#waitForLayerLoad}
     * @return a copy with it
     */
    public ConnectorConfig withLayerLoadTimeout(Duration v) {
        return new ConnectorConfig(role, ranks, tokensPerBlock, loadAsync, v, loadFailurePolicy, dpRank, members);
    }

    /**
     * @param v what a failed load asks the engine to do
     * @return a copy with it
     */
    public ConnectorConfig withLoadFailurePolicy(LoadFailurePolicy v) {
        return new ConnectorConfig(role, ranks, tokensPerBlock, loadAsync, layerLoadTimeout, v, dpRank, members);
    }
}
