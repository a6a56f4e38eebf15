package dev.kvtransfer.testkit.harness;

import dev.kvtransfer.api.format.CacheFormatter;
import dev.kvtransfer.api.format.FormatterProvider;
import dev.kvtransfer.api.layout.BlockDistribution;
import dev.kvtransfer.api.layout.BlockLayout;
import dev.kvtransfer.api.memory.MemoryKind;
import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.api.model.CommState;
import dev.kvtransfer.api.transport.ConnectionManager;
import dev.kvtransfer.api.transport.TransportConfig;
import dev.kvtransfer.core.buffer.DefaultTransferBufferPool;
import dev.kvtransfer.core.cache.PagedKvCache;
import dev.kvtransfer.core.cache.RecurrentStatePool;
import dev.kvtransfer.core.memory.HostBufferManager;
import dev.kvtransfer.testkit.LayoutPair;
import dev.kvtransfer.testkit.loopback.LoopbackTransportProvider;
import java.util.ArrayList;
import java.util.List;

/**
 * One side (instance) of a {@link FormatterHarness} run: per-rank caches, pools, formatters and loopback endpoints.
 */
final class HarnessInstance implements AutoCloseable {
    private final LayoutPair pair;
    private final HarnessOptions options;
    private final FormatterProvider provider;
    private final int requests;
    final CacheState state;
    final HostBufferManager memory = new HostBufferManager();
    final PagedKvCache[] caches;
    final DefaultTransferBufferPool[] pools;
    final CacheFormatter[] formatters;
    final ConnectionManager[] managers;
    final int holeEvery;
    final int[] allocated;
    CommState comm;

    HarnessInstance(String side, CacheState state, int holeEvery, String fabric, LayoutPair pair,
                    HarnessOptions options, FormatterProvider provider, int requests) {
        this.pair = pair;
        this.options = options;
        this.provider = provider;
        this.requests = requests;
        this.state = state;
        this.holeEvery = holeEvery;
        int n = state.worldSize();
        caches = new PagedKvCache[n];
        pools = new DefaultTransferBufferPool[n];
        formatters = new CacheFormatter[n];
        managers = new ConnectionManager[n];
        allocated = new int[n];
        List<String> addresses = new ArrayList<>(n);
        LoopbackTransportProvider transport = new LoopbackTransportProvider();
        for (int r = 0; r < n; r++) {
            int blocks = 1;
            for (int len : pair.promptLengths()) {
                int total = BlockDistribution.blocksFor(len, state.tokensPerBlock());
                blocks += BlockDistribution.count(total, state.contextParallelism(), state.cpRank(r));
            }
            if (options.fragmentBlocks()) {
                blocks *= 2; // room for the fillers between the requests' blocks
            }
            if (options.indexerDim() > 0) {
                BlockLayout main = BlockLayout.of(state, r);
                BlockLayout idx = new BlockLayout(main.localLayers(), 1, 1, state.tokensPerBlock(),
                        options.indexerDim(), 1);
                caches[r] = new PagedKvCache(memory, main, state.poolLayout(), MemoryKind.HOST, idx, blocks);
            } else {
                caches[r] = PagedKvCache.of(memory, state, r, blocks);
            }
            if (state.recurrentState() != null) {
                caches[r].attachRecurrentState(new RecurrentStatePool(memory, MemoryKind.HOST, state, r));
            }
            // Slots of the direction this side uses for every concurrent request, one of the other.
            boolean sender = side.equals("ctx");
            pools[r] = new DefaultTransferBufferPool(memory, options.slotBytes(), sender ? requests : 1,
                    sender ? 1 : requests, true);
            formatters[r] = provider.create(caches[r], pools[r]);
            managers[r] = transport.create(TransportConfig.builder().name(side + "-rank-" + r)
                    .defaultTimeout(options.timeout())
                    .property(LoopbackTransportProvider.FABRIC_PROPERTY, fabric).build());
            addresses.add(managers[r].localAddress());
        }
        comm = new CommState(LoopbackTransportProvider.NAME, addresses, -1);
    }

    /** Blocks for a request, with a filler after every {@code holeEvery}-th block when fragmenting. */
    int[] allocate(int rank, long requestId, int count) {
        if (count == 0) {
            return new int[0];
        }
        if (!options.fragmentBlocks()) {
            return caches[rank].allocate(requestId, count);
        }
        int[] ids = new int[count];
        for (int i = 0; i < count; i++) {
            ids[i] = caches[rank].allocate(requestId, 1)[0];
            if (++allocated[rank] % holeEvery == 0) {
                caches[rank].allocate(fillerId(rank), 1);
            }
        }
        return ids;
    }

    private long fillerId(int rank) {
        return -1 - rank;
    }

    void freeFillers() {
        for (int r = 0; r < caches.length; r++) {
            caches[r].free(fillerId(r));
        }
    }

    /** Closes everything; the memory manager last, so a leaked buffer shows up as its exception. */
    @Override
    public void close() {
        RuntimeException first = closeManagers();
        for (int r = 0; r < caches.length; r++) {
            first = closeQuietly(pools[r], first);
            first = closeQuietly(caches[r], first);
        }
        first = closeQuietly(memory, first);
        if (first != null) {
            throw first;
        }
    }

    /**
     * Closes the endpoints, at once when several ran one-sided agents: an emulated agent's close waits for its
     * poll interval, which would otherwise add up rank by rank.
     */
    private RuntimeException closeManagers() {
        if (!options.mode().push() || managers.length == 1) {
            RuntimeException first = null;
            for (ConnectionManager m : managers) {
                first = closeQuietly(m, first);
            }
            return first;
        }
        RuntimeException[] errors = new RuntimeException[managers.length];
        Thread[] threads = new Thread[managers.length];
        for (int r = 0; r < managers.length; r++) {
            int rank = r;
            threads[r] = new Thread(() -> errors[rank] = closeQuietly(managers[rank], null),
                    "fmt-harness-close-" + FormatterHarness.THREADS.incrementAndGet());
            threads[r].setDaemon(true);
            threads[r].start();
        }
        RuntimeException first = null;
        for (int r = 0; r < threads.length; r++) {
            try {
                threads[r].join();
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
            if (errors[r] != null) {
                if (first == null) {
                    first = errors[r];
                } else {
                    first.addSuppressed(errors[r]);
                }
            }
        }
        return first;
    }

    private RuntimeException closeQuietly(AutoCloseable c, RuntimeException first) {
        if (c == null) {
            return first;
        }
        try {
            c.close();
        } catch (Exception e) {
            RuntimeException r = e instanceof RuntimeException re ? re : new IllegalStateException(e);
            if (first == null) {
                return r;
            }
            first.addSuppressed(r);
        }
        return first;
    }
}
