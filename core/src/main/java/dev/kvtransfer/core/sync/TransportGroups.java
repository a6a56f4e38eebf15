package dev.kvtransfer.core.sync;

import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.api.transport.ConnectionManager;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Objects;
import java.util.function.IntFunction;

/**
 * One rank's two status groups as {@link TransportGroupComm}s, formed the way {@code LocalInstance} forms its
 * in-process ones: the context group is the rank's PP stage (with attention DP: its DP group of the stage), the
 * generation group the whole instance (with attention DP: its DP group across every stage); members in rank order.
 * The context group uses channel {@value #CONTEXT_CHANNEL}, the generation group {@value #GENERATION_CHANNEL}; the
 * group ids are derived from the instance name and the group's key, so two instances never mistake each other's
 * messages.
 */
public final class TransportGroups {
    /** The context status group's channel. */
    public static final int CONTEXT_CHANNEL = 0;
    /** The generation status group's channel. */
    public static final int GENERATION_CHANNEL = 1;

    private final TransportGroupComm context;
    private final TransportGroupComm generation;

    private TransportGroups(TransportGroupComm context, TransportGroupComm generation) {
        this.context = context;
        this.generation = generation;
    }

    /**
     * Joins a rank's groups (nothing is exchanged until the first status check).
     *
     * @param instance  the instance's name, the same on every rank
     * @param state     the instance's cache state (parallelism)
     * @param rank      this rank, {@code 0 .. worldSize-1}
     * @param addresses every rank's transport address, index = rank
     * @param manager   this rank's manager (listening at {@code addresses[rank]})
     * @return the rank's groups
     */
    public static TransportGroups join(String instance, CacheState state, int rank, List<String> addresses,
                                       ConnectionManager manager) {
        Objects.requireNonNull(instance, "instance");
        Objects.requireNonNull(state, "state");
        Objects.requireNonNull(manager, "manager");
        int n = state.worldSize();
        if (addresses.size() != n) {
            throw new IllegalArgumentException(addresses.size() + " rank addresses " + addresses + " for an instance"
                    + " of " + n + " ranks");
        }
        Objects.checkIndex(rank, n);
        TransportGroupComm ctx = member(instance, n, rank, addresses, manager, CONTEXT_CHANNEL,
                r -> contextKey(state, r));
        try {
            TransportGroupComm gen = member(instance, n, rank, addresses, manager, GENERATION_CHANNEL,
                    r -> generationKey(state, r));
            return new TransportGroups(ctx, gen);
        } catch (RuntimeException e) {
            ctx.close();
            throw e;
        }
    }

    /** @return the context status group */
    public TransportGroupComm context() {
        return context;
    }

    /** @return the generation status group */
    public TransportGroupComm generation() {
        return generation;
    }

    /** The key of a rank's context group (as {@code LocalInstance.contextGroupKey}). */
    static String contextKey(CacheState s, int rank) {
        int pp = s.ppRank(rank);
        return s.attentionDpEnabled() ? pp + "/" + s.tpRank(rank) / s.tpPerDpGroup() : Integer.toString(pp);
    }

    /** The key of a rank's generation group (as {@code LocalInstance.generationGroupKey}). */
    static String generationKey(CacheState s, int rank) {
        return s.attentionDpEnabled() ? "dp" + s.tpRank(rank) / s.tpPerDpGroup() : "all";
    }

    private static TransportGroupComm member(String instance, int n, int rank, List<String> addresses,
                                             ConnectionManager manager, int channel, IntFunction<String> key) {
        String mine = key.apply(rank);
        List<String> members = new ArrayList<>();
        int me = -1;
        for (int r = 0; r < n; r++) {
            if (key.apply(r).equals(mine)) {
                if (r == rank) {
                    me = members.size();
                }
                members.add(addresses.get(r));
            }
        }
        return TransportGroupComm.join(manager, members, me, groupId(instance, channel, mine), channel);
    }

    /** FNV-1a 64 over "instance/channel/key": stable across JVMs, distinct per instance and group. */
    static long groupId(String instance, int channel, String key) {
        long h = 0xcbf29ce484222325L;
        for (byte b : (instance + "/" + channel + "/" + key).getBytes(StandardCharsets.UTF_8)) {
            h ^= b & 0xff;
            h *= 0x100000001b3L;
        }
        return h;
    }
}
