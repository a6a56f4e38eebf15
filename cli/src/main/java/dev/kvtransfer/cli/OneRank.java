package dev.kvtransfer.cli;

import dev.kvtransfer.api.ErrorHandler;
import dev.kvtransfer.api.memory.BufferManager;
import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.api.model.CommState;
import dev.kvtransfer.api.transport.ConnectionManager;
import dev.kvtransfer.api.transport.TransportConfig;
import dev.kvtransfer.api.transport.TransportProvider;
import dev.kvtransfer.core.CacheTransceiver;
import dev.kvtransfer.core.RankAssembly;
import dev.kvtransfer.core.TransceiverConfig;
import dev.kvtransfer.core.cache.PagedKvCache;
import dev.kvtransfer.core.plugin.Plugins;
import dev.kvtransfer.core.sync.RankRendezvous;
import dev.kvtransfer.core.sync.TransportGroups;
import dev.kvtransfer.core.transfer.ControlAuth;
import io.micrometer.core.instrument.MeterRegistry;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Objects;
import java.util.function.Consumer;

/**
 * One rank of an instance whose ranks are separate processes ({@code serve --rank R}): its transport, memory, KV
 * pool and transceiver, and its status groups as {@code TransportGroupComm}s over its own transport. Rank 0 leads
 * the {@link RankRendezvous} (the others join it at {@code --leader}); all learn every rank's address from it, and
 * the instance's token issuing key, so a token handed out by any rank verifies on all.
 */
final class OneRank implements ServeRanks, AutoCloseable {
    private final String name;
    private final CacheState state;
    private final CacheState rankState;
    private final int rank;
    private final List<String> addresses;
    private final ConnectionManager cm;
    private final BufferManager bm;
    private final PagedKvCache cache;
    private final TransportGroups groups;
    private final CacheTransceiver transceiver;

    private OneRank(String name, CacheState state, CacheState rankState, int rank, List<String> addresses, ConnectionManager cm,
                    BufferManager bm, PagedKvCache cache, TransportGroups groups, CacheTransceiver transceiver) {
        this.name = name;
        this.state = state;
        this.rankState = rankState;
        this.rank = rank;
        this.addresses = addresses;
        this.cm = cm;
        this.bm = bm;
        this.cache = cache;
        this.groups = groups;
        this.transceiver = transceiver;
    }

    /**
     * Starts rank {@code rank}: binds its transport, meets the other ranks, builds its transceiver.
     *
     * @param bound  called with this rank's transport address as soon as it listens (rank 0 prints it for the others)
     * @param leader rank 0's address (ranks other than 0), else null
     */
    static OneRank start(String name, CacheState state, int rank, DemoOptions options, int blocksPerRank,
                         MeterRegistry meters, String host, int port, String leader, Duration joinTimeout,
                         Consumer<String> bound) {
        Objects.checkIndex(rank, state.worldSize());
        Plugins plugins = Plugins.discover();
        PoolMemory memory = PoolMemory.resolve(options, plugins);
        TransceiverConfig config = options.transceiverConfig();
        TransportProvider transport = plugins.transport(config.backend());
        ErrorHandler errors = e -> System.err.println("kvtransfer[" + name + " rank " + rank + "]: " + e.getMessage());
        TransportConfig.Builder tc = TransportConfig.builder().name(name + "-rank-" + rank).host(host).port(port)
                .defaultTimeout(Duration.ofSeconds(options.timeoutSeconds)).properties(options.transportProperties)
                .errorHandler(errors);
        if (config.authSecret() != null) {
            tc.authSecret(config.authSecret());
        }
        List<AutoCloseable> opened = new ArrayList<>();
        try {
            ConnectionManager cm = transport.create(tc.build());
            opened.add(cm);
            bound.accept(cm.localAddress());
            RankRendezvous.Joined joined = rank == 0
                    ? RankRendezvous.lead(cm, name, state.worldSize(), ControlAuth.newIssuingKey(), joinTimeout)
                    : RankRendezvous.join(cm, name, rank, state.worldSize(), leader, joinTimeout);
            CacheState mine = state.attentionDpEnabled() ? state.withDpRank(state.tpRank(rank) / state.tpPerDpGroup())
                    : state;
            BufferManager bm = memory.factory().get();
            opened.add(0, bm);
            PagedKvCache cache = PagedKvCache.of(bm, mine, rank, blocksPerRank, memory.kind());
            opened.add(0, cache);
            TransportGroups groups = TransportGroups.join(name, state, rank, joined.addresses(), cm);
            opened.add(0, groups.context());
            opened.add(0, groups.generation());
            CommState comm = new CommState(transport.name(), joined.addresses(), -1);
            CacheTransceiver t = RankAssembly.of(config).rank(name, mine, rank, comm).connections(cm)
                    .memory(cache, bm).groups(groups.context(), groups.generation()).plugins(plugins)
                    .observability(errors, meters).tokenIssuingKey(joined.sharedKey()).build();
            return new OneRank(name, state, mine, rank, joined.addresses(), cm, bm, cache, groups, t);
        } catch (RuntimeException e) {
            for (AutoCloseable c : opened) {
                try {
                    c.close();
                } catch (Exception suppressed) {
                    e.addSuppressed(suppressed);
                }
            }
            throw e;
        }
    }

    /** @return this process's rank */
    int rank() {
        return rank;
    }

    /** @return this rank's manager (the command channel from rank 0 runs over it too) */
    ConnectionManager connections() {
        return cm;
    }

    @Override
    public String name() {
        return name;
    }

    @Override
    public CacheState cacheState() {
        return state;
    }

    @Override
    public CacheState cacheState(int r) {
        check(r);
        return rankState;
    }

    @Override
    public PagedKvCache cache(int r) {
        check(r);
        return cache;
    }

    @Override
    public BufferManager bufferManager(int r) {
        check(r);
        return bm;
    }

    @Override
    public CacheTransceiver transceiver(int r) {
        check(r);
        return transceiver;
    }

    @Override
    public List<Integer> local() {
        return List.of(rank);
    }

    @Override
    public List<String> addresses() {
        return addresses;
    }

    private void check(int r) {
        if (r != rank) {
            throw new IllegalArgumentException("rank " + r + " of " + name + " is not in this process (rank " + rank
                    + ")");
        }
    }

    /**
     * Closes as LocalInstance does, but the groups before the transport: leaving them tells the other ranks at once
     * (LEAVE), which needs the transport still open.
     */
    @Override
    public void close() {
        transceiver.shutdown();
        groups.context().close();
        groups.generation().close();
        cm.close();
        transceiver.close();
        cache.close();
        bm.close();
    }
}
