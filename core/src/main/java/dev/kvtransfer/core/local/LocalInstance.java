package dev.kvtransfer.core.local;

import dev.kvtransfer.api.format.FormatterProvider;
import dev.kvtransfer.api.layout.BlockLayout;
import dev.kvtransfer.api.memory.BufferManager;
import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.api.model.CommState;
import dev.kvtransfer.api.model.ContextPhaseParams;
import dev.kvtransfer.api.model.TransceiverState;
import dev.kvtransfer.api.sync.GroupComm;
import dev.kvtransfer.api.transport.ConnectionManager;
import dev.kvtransfer.api.transport.TransportConfig;
import dev.kvtransfer.api.transport.TransportProvider;
import dev.kvtransfer.core.CacheTransceiver;
import dev.kvtransfer.core.RankAssembly;
import dev.kvtransfer.api.ErrorHandler;
import dev.kvtransfer.core.TransceiverConfig;
import dev.kvtransfer.core.cache.PagedKvCache;
import dev.kvtransfer.core.cache.RecurrentStatePool;
import dev.kvtransfer.core.memory.HostBufferManager;
import dev.kvtransfer.core.plugin.Plugins;
import dev.kvtransfer.core.sync.InProcessGroup;
import io.micrometer.core.instrument.MeterRegistry;
import io.micrometer.core.instrument.simple.SimpleMeterRegistry;

import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;

/**
 * An instance (context or generation) whose ranks are threads of this JVM: per rank a
 * {@link HostBufferManager} (or one shared), a {@link PagedKvCache} in the rank's block layout, a connection
 * manager of the given transport, a staging pool, a formatter and a {@link CacheTransceiver}. The
 * {@link CommState} is gathered from every rank's {@code localAddress()} before any transceiver is built.
 *
 * <p>Status groups (reference §5): context completion is agreed by the ranks of one PP stage (all TP and CP
 * ranks; with attention DP those of one DP group of the stage), generation completion by the whole instance
 * (with attention DP: one DP group across every PP stage). With attention DP each rank's cache state carries
 * its own DP rank ({@code tpRank / (TP / dpSize)}).
 *
 * <p>{@link #close()} shuts every transceiver down, closes the connection managers (waking blocked transport
 * calls), waits for the transceivers' threads, then closes pools, caches, groups and buffer managers; a buffer
 * manager with outstanding buffers makes close fail naming them.
 */
public final class LocalInstance implements AutoCloseable {
    private final String name;
    private final CacheState state;
    private final CommState commState;
    private final List<Rank> ranks;
    private final List<InProcessGroup> groups;
    private final List<BufferManager> bufferManagers;
    private volatile boolean closed;

    private record Rank(CacheState state, BufferManager buffers, PagedKvCache cache, ConnectionManager connections,
                        CacheTransceiver transceiver, GroupComm contextGroup, GroupComm generationGroup) {
    }

    private LocalInstance(String name, CacheState state, CommState commState, List<Rank> ranks,
                          List<InProcessGroup> groups, List<BufferManager> bufferManagers) {
        this.name = name;
        this.state = state;
        this.commState = commState;
        this.ranks = ranks;
        this.groups = groups;
        this.bufferManagers = bufferManagers;
    }

    /**
     * Starts an instance with default options (a buffer manager per rank, formatter given).
     *
     * @param name          instance name (thread and transport names)
     * @param state         the instance's cache state
     * @param transport     the transport
     * @param baseTransport transport settings every rank starts from (its name and, when non-zero, port + rank
     *                      are set per rank)
     * @param formatter     the formatter provider
     * @param config        transceiver settings
     * @param blocksPerRank KV blocks of each rank's pool
     * @return the running instance
     */
    public static LocalInstance start(String name, CacheState state, TransportProvider transport,
                                      TransportConfig baseTransport, FormatterProvider formatter,
                                      TransceiverConfig config, int blocksPerRank) {
        return builder(name, state).transport(transport, baseTransport).formatter(formatter).config(config)
                .blocksPerRank(blocksPerRank).start();
    }

    /**
     * A builder.
     *
     * @param name  instance name
     * @param state the instance's cache state
     * @return the builder
     */
    public static Builder builder(String name, CacheState state) {
        return new Builder(name, state);
    }

    /** @return the instance name */
    public String name() {
        return name;
    }

    /** @return the instance's cache state (as given) */
    public CacheState cacheState() {
        return state;
    }

    /**
     * A rank's cache state (with attention DP: its own DP rank).
     *
     * @param rank rank index
     * @return the state
     */
    public CacheState cacheState(int rank) {
        return rank(rank).state;
    }

    /** @return number of ranks */
    public int ranks() {
        return ranks.size();
    }

    /**
     * @param rank rank index
     * @return the rank's transceiver
     */
    public CacheTransceiver transceiver(int rank) {
        return rank(rank).transceiver;
    }

    /**
     * @param rank rank index
     * @return the rank's KV pool
     */
    public PagedKvCache cache(int rank) {
        return rank(rank).cache;
    }

    /**
     * @param rank rank index
     * @return the rank's buffer manager
     */
    public BufferManager bufferManager(int rank) {
        return rank(rank).buffers;
    }

    /**
     * @param rank rank index
     * @return the rank's connection manager
     */
    public ConnectionManager connections(int rank) {
        return rank(rank).connections;
    }

    /** @return every rank's address (selfIndex -1) */
    public CommState commState() {
        return commState;
    }

    /** @return rank 0's transceiver state: what a generation instance needs to reach this one */
    public TransceiverState transceiverState() {
        return transceiverState(0);
    }

    /**
     * A rank's transceiver state (with attention DP, pick a rank of the DP group serving the request).
     *
     * @param rank rank index
     * @return the state
     */
    public TransceiverState transceiverState(int rank) {
        return transceiver(rank).state();
    }

    /**
     * What the context side hands the generation side for a request served by a rank's DP group.
     *
     * @param requestId the context request id
     * @param rank      a rank of the serving DP group (any rank without attention DP)
     * @return the params (no first generated tokens)
     */
    public ContextPhaseParams contextPhaseParams(long requestId, int rank) {
        return transceiver(rank).contextPhaseParams(requestId, new long[0]);
    }

    private Rank rank(int r) {
        Objects.checkIndex(r, ranks.size());
        return ranks.get(r);
    }

    /**
     * Closes everything in dependency order (see the class comment).
     *
     * @throws IllegalStateException naming what failed to close (e.g. leaked buffers), after closing the rest
     */
    @Override
    public void close() {
        if (closed) {
            return;
        }
        closed = true;
        List<Throwable> failures = new ArrayList<>();
        for (Rank r : ranks) {
            run(failures, () -> r.transceiver.shutdown());
        }
        for (Rank r : ranks) {
            run(failures, () -> r.connections.close());
        }
        for (Rank r : ranks) {
            run(failures, () -> r.transceiver.close());
        }
        for (Rank r : ranks) {
            run(failures, () -> r.cache.close());
        }
        for (Rank r : ranks) {
            run(failures, () -> r.contextGroup.close());
            run(failures, () -> r.generationGroup.close());
        }
        for (BufferManager b : bufferManagers) {
            run(failures, b::close);
        }
        if (!failures.isEmpty()) {
            IllegalStateException e = new IllegalStateException("closing instance " + name + ": "
                    + failures.get(0).getMessage(), failures.get(0));
            for (int i = 1; i < failures.size(); i++) {
                e.addSuppressed(failures.get(i));
            }
            throw e;
        }
    }

    private static void run(List<Throwable> failures, Runnable r) {
        try {
            r.run();
        } catch (RuntimeException e) {
            failures.add(e);
        }
    }

    @Override
    public String toString() {
        return "LocalInstance{" + name + " " + state + " " + commState.addresses() + "}";
    }

    /**
     * The key of a rank's context status group: its PP stage and, with attention DP, its DP group.
     *
     * @param s    the instance state
     * @param rank the rank
     * @return the key
     */
    static String contextGroupKey(CacheState s, int rank) {
        int pp = s.ppRank(rank);
        return s.attentionDpEnabled() ? pp + "/" + s.tpRank(rank) / s.tpPerDpGroup() : Integer.toString(pp);
    }

    /**
     * The key of a rank's generation status group: the whole instance or, with attention DP, its DP group across
     * every PP stage.
     *
     * @param s    the instance state
     * @param rank the rank
     * @return the key
     */
    static String generationGroupKey(CacheState s, int rank) {
        return s.attentionDpEnabled() ? "dp" + s.tpRank(rank) / s.tpPerDpGroup() : "all";
    }

    /** One in-process group per distinct key; member order = rank order. */
    private static GroupComm[] groups(List<InProcessGroup> all, int n, java.util.function.IntFunction<String> key) {
        Map<String, List<Integer>> members = new LinkedHashMap<>();
        for (int r = 0; r < n; r++) {
            members.computeIfAbsent(key.apply(r), k -> new ArrayList<>()).add(r);
        }
        GroupComm[] out = new GroupComm[n];
        for (List<Integer> m : members.values()) {
            InProcessGroup g = new InProcessGroup(m.size());
            all.add(g);
            for (int i = 0; i < m.size(); i++) {
                out[m.get(i)] = g.member(i);
            }
        }
        return out;
    }

    /** Builds and starts a {@link LocalInstance}. */
    public static final class Builder {
        private final String name;
        private final CacheState state;
        private TransportProvider transport;
        private TransportConfig baseTransport = TransportConfig.builder().build();
        private FormatterProvider formatter;
        private Plugins plugins;
        private TransceiverConfig config = TransceiverConfig.defaults();
        private int blocksPerRank = 64;
        private boolean sharedBuffers;
        private java.util.function.Supplier<BufferManager> bufferFactory = HostBufferManager::new;
        private dev.kvtransfer.api.memory.MemoryKind poolKind = dev.kvtransfer.api.memory.MemoryKind.HOST;
        private ErrorHandler errors = e -> { };
        private MeterRegistry meters;

        private Builder(String name, CacheState state) {
            this.name = Objects.requireNonNull(name, "name");
            this.state = Objects.requireNonNull(state, "state");
        }

        /**
         * @param provider the transport
         * @param base     settings every rank starts from
         * @return this builder
         */
        public Builder transport(TransportProvider provider, TransportConfig base) {
            this.transport = Objects.requireNonNull(provider, "provider");
            this.baseTransport = Objects.requireNonNull(base, "base");
            return this;
        }

        /**
         * @param provider the formatter; when not set, it is found through {@link Plugins} (config name, else
         *                 attention type)
         * @return this builder
         */
        public Builder formatter(FormatterProvider provider) {
            this.formatter = Objects.requireNonNull(provider, "provider");
            return this;
        }

        /**
         * @param v plugins used when no transport or formatter is given (default: discovered)
         * @return this builder
         */
        public Builder plugins(Plugins v) {
            this.plugins = Objects.requireNonNull(v, "plugins");
            return this;
        }

        /**
         * @param v transceiver settings
         * @return this builder
         */
        public Builder config(TransceiverConfig v) {
            this.config = Objects.requireNonNull(v, "config");
            return this;
        }

        /**
         * @param v KV blocks per rank
         * @return this builder
         */
        public Builder blocksPerRank(int v) {
            if (v < 1) {
                throw new IllegalArgumentException("blocksPerRank = " + v + ": must be >= 1");
            }
            this.blocksPerRank = v;
            return this;
        }

        /**
         * @param v whether all ranks share one buffer manager (default: one per rank)
         * @return this builder
         */
        public Builder sharedBufferManager(boolean v) {
            this.sharedBuffers = v;
            return this;
        }

        /**
         * Where the ranks' memory comes from (default: a {@link HostBufferManager} each, host pools).
         *
         * @param factory  makes a rank's (or, shared, the instance's) buffer manager, closed with the instance; it
         *                 must allocate {@code poolKind}, {@code HOST} (control buffers) and, for a device pool,
         *                 {@code PINNED_HOST} (staging)
         * @param poolKind where the KV pools live ({@code DEVICE}: a GPU-resident pool, never touched by the CPU)
         * @return this builder
         */
        public Builder memory(java.util.function.Supplier<BufferManager> factory,
                              dev.kvtransfer.api.memory.MemoryKind poolKind) {
            this.bufferFactory = Objects.requireNonNull(factory, "factory");
            this.poolKind = Objects.requireNonNull(poolKind, "poolKind");
            return this;
        }

        /**
         * @param v background error handler of every rank
         * @return this builder
         */
        public Builder errorHandler(ErrorHandler v) {
            this.errors = Objects.requireNonNull(v, "errorHandler");
            return this;
        }

        /**
         * @param v meter registry of every rank (default: one {@link SimpleMeterRegistry} for the instance)
         * @return this builder
         */
        public Builder meters(MeterRegistry v) {
            this.meters = Objects.requireNonNull(v, "meters");
            return this;
        }

        /**
         * Starts every rank.
         *
         * @return the running instance
         */
        public LocalInstance start() {
            Plugins p = plugins;
            TransportProvider tp = transport;
            if (tp == null) {
                p = p != null ? p : Plugins.discover();
                tp = p.transport(config.backend());
            }
            FormatterProvider fp = formatter;
            if (fp == null) {
                p = p != null ? p : Plugins.discover();
                fp = config.formatter().isPresent() ? p.formatter(config.formatter().get())
                        : p.formatterFor(state.attentionType());
            }
            MeterRegistry registry = meters != null ? meters : new SimpleMeterRegistry();
            int n = state.worldSize();
            List<BufferManager> bms = new ArrayList<>();
            List<PagedKvCache> caches = new ArrayList<>();
            List<ConnectionManager> cms = new ArrayList<>();
            List<CacheTransceiver> transceivers = new ArrayList<>();
            List<InProcessGroup> groups = new ArrayList<>();
            try {
                BufferManager shared = sharedBuffers ? add(bms, bufferFactory.get()) : null;
                List<CacheState> states = new ArrayList<>();
                List<String> addresses = new ArrayList<>();
                for (int r = 0; r < n; r++) {
                    CacheState s = state.attentionDpEnabled()
                            ? state.withDpRank(state.tpRank(r) / state.tpPerDpGroup()) : state;
                    states.add(s);
                    BufferManager bm = shared != null ? shared : add(bms, bufferFactory.get());
                    caches.add(PagedKvCache.of(bm, s, r, blocksPerRank, poolKind));
                    if (s.recurrentState() != null) {
                        caches.get(r).attachRecurrentState(new RecurrentStatePool(bm, poolKind, s, r));
                    }
                    TransportConfig tc = TransportConfig.builder().name(name + "-rank-" + r)
                            .host(baseTransport.host())
                            .port(baseTransport.port() == 0 ? 0 : baseTransport.port() + r)
                            .defaultTimeout(baseTransport.defaultTimeout())
                            .properties(baseTransport.properties()).errorHandler(errors)
                            .authSecret(baseTransport.authSecret() != null ? baseTransport.authSecret()
                                    : config.authSecret()).build();
                    ConnectionManager cm = tp.create(tc);
                    cms.add(cm);
                    addresses.add(cm.localAddress());
                }
                CommState comm = new CommState(tp.name(), addresses, -1);
                GroupComm[] ctxGroups = groups(groups, n, r -> contextGroupKey(state, r));
                GroupComm[] genGroups = groups(groups, n, r -> generationGroupKey(state, r));
                List<Rank> ranks = new ArrayList<>();
                // One token issuing key for the instance's ranks: a token handed out by any rank verifies on all.
                byte[] tokenKey = dev.kvtransfer.core.transfer.ControlAuth.newIssuingKey();
                for (int r = 0; r < n; r++) {
                    BufferManager bm = shared != null ? shared : bms.get(r);
                    CacheTransceiver t = RankAssembly.of(config).rank(name, states.get(r), r, comm)
                            .connections(cms.get(r)).memory(caches.get(r), bm).groups(ctxGroups[r], genGroups[r])
                            .formatter(fp).observability(errors, registry).tokenIssuingKey(tokenKey).build();
                    transceivers.add(t);
                    ranks.add(new Rank(states.get(r), bm, caches.get(r), cms.get(r), t, ctxGroups[r],
                            genGroups[r]));
                }
                return new LocalInstance(name, state, comm, List.copyOf(ranks), List.copyOf(groups), List.copyOf(bms));
            } catch (RuntimeException e) {
                for (CacheTransceiver t : transceivers) {
                    t.shutdown();
                }
                cms.forEach(c -> closeQuietly(c::close, e));
                transceivers.forEach(t -> closeQuietly(t::close, e));
                caches.forEach(c -> closeQuietly(c::close, e));
                bms.forEach(b -> closeQuietly(b::close, e));
                throw e;
            }
        }

        private static BufferManager add(List<BufferManager> list, BufferManager b) {
            list.add(b);
            return b;
        }

        private static void closeQuietly(Runnable r, Throwable into) {
            try {
                r.run();
            } catch (RuntimeException e) {
                into.addSuppressed(e);
            }
        }
    }

    /** Longest time {@link #close()} waits per rank for transceiver threads (documented for callers). */
    public static final Duration CLOSE_WAIT = Duration.ofSeconds(5);
}
