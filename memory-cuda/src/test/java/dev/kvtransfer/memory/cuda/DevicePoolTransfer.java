package dev.kvtransfer.memory.cuda;

import dev.kvtransfer.api.format.CacheFormatter;
import dev.kvtransfer.api.format.FormatterProvider;
import dev.kvtransfer.api.format.PeerPool;
import dev.kvtransfer.api.layout.BlockDistribution;
import dev.kvtransfer.api.layout.RankMapping;
import dev.kvtransfer.api.layout.TargetRanks;
import dev.kvtransfer.api.memory.BufferManager;
import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.memory.MemoryKind;
import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.api.model.CommState;
import dev.kvtransfer.api.model.TransceiverState;
import dev.kvtransfer.api.transport.Connection;
import dev.kvtransfer.api.transport.ConnectionManager;
import dev.kvtransfer.api.transport.RegisteredRegion;
import dev.kvtransfer.api.transport.Tags;
import dev.kvtransfer.api.transport.TransportCapability;
import dev.kvtransfer.api.transport.TransportConfig;
import dev.kvtransfer.api.transport.WriteBatch;
import dev.kvtransfer.core.buffer.DefaultTransferBufferPool;
import dev.kvtransfer.core.cache.PagedKvCache;
import dev.kvtransfer.core.timing.TransferTiming;
import dev.kvtransfer.core.transfer.DefaultTransferSession;
import dev.kvtransfer.testkit.KvPattern;
import dev.kvtransfer.testkit.LayoutPair;
import dev.kvtransfer.testkit.loopback.LoopbackTransportProvider;

import java.time.Duration;
import java.util.ArrayList;
import java.util.EnumSet;
import java.util.List;
import java.util.Set;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.LongAdder;

/**
 * One request moved between a context and a generation instance whose KV pools may be on the device, in one JVM,
 * through the production pieces: per rank a {@link PagedKvCache} of the given {@link MemoryKind} (allocated from the
 * one {@link CudaBufferManager}, which also serves the ranks' host memory), core's {@link DefaultTransferBufferPool}
 * with the staging kind core picks for the pool ({@code PINNED_HOST} for a device pool), the formatter, a loopback
 * endpoint and core's {@link DefaultTransferSession} (the block ids exchanged, so runs coalesce; the blocks
 * fragmented at different places on the two sides). The context blocks hold {@link KvPattern}, the generation
 * blocks poison; after the transfer every generation element is verified (device pools through the main code's
 * host mirror).
 *
 * <p>Every buffer handed to the transport is recorded by kind ({@link Watch}). Loopback refuses {@code DEVICE}
 * memory, like every transport without {@link TransportCapability#DEVICE_MEMORY}; with {@code deviceCapable} the
 * watch stands in for a transport that declares it (the session is told so, and the watch moves device buffers
 * through host memory itself), so the test sees whether the formatters then hand it the pool's own memory.
 */
final class DevicePoolTransfer {
    static final long REQUEST = 9001;
    static final long POISON = 2_000_000;
    private static final AtomicLong FABRICS = new AtomicLong();

    /**
     * What a transfer did.
     *
     * @param verify         the generation side's KvPattern check
     * @param expectedChecks elements the generation ranks hold for the request
     * @param deviceBuffers  buffers of kind DEVICE handed to the transport (send, recv, write sources)
     * @param messages       sends + recvs + write entries
     */
    record Outcome(KvPattern.Result verify, long expectedChecks, long deviceBuffers, long messages) {
    }

    private DevicePoolTransfer() {
    }

    /**
     * Runs one request.
     *
     * @param memory        the manager of both instances (device, pinned and host memory)
     * @param provider      the formatter
     * @param ctx           the context instance's state (with attention DP: DP rank 0 serves)
     * @param gen           the generation instance's state
     * @param ctxKind       where the context pools live
     * @param genKind       where the generation pools live
     * @param tokens        the prompt length
     * @param push          a one-sided push instead of a pull (the generation pool must then be host memory:
     *                      emulated one-sided writes register host memory only)
     * @param deviceCapable whether the transport declares DEVICE_MEMORY (emulated by the watch)
     * @return what happened
     */
    static Outcome run(BufferManager memory, FormatterProvider provider, CacheState ctx, CacheState gen,
                       MemoryKind ctxKind, MemoryKind genKind, int tokens, boolean push, boolean deviceCapable)
            throws Exception {
        CacheState cs = ctx.attentionDpEnabled() ? ctx.withDpRank(0) : ctx;
        CacheState gs = gen.attentionDpEnabled() ? gen.withDpRank(0) : gen;
        int total = BlockDistribution.blocksFor(tokens, cs.tokensPerBlock());
        String fabric = "device-grid-" + FABRICS.incrementAndGet();
        Duration timeout = Duration.ofSeconds(30);
        Set<TransportCapability> caps = deviceCapable ? EnumSet.of(TransportCapability.DEVICE_MEMORY)
                : new LoopbackTransportProvider().capabilities();
        Watch watch = new Watch(memory, deviceCapable);
        ExecutorService exe = Executors.newCachedThreadPool(r -> {
            Thread t = new Thread(r, "device-grid");
            t.setDaemon(true);
            return t;
        });
        try (Side c = new Side("ctx", memory, provider, cs, ctxKind, total, 2, timeout, fabric);
             Side g = new Side("gen", memory, provider, gs, genKind, total, 3, timeout, fabric)) {
            for (int r = 0; r < c.n; r++) {
                if (c.ids[r] != null) {
                    KvPattern.fill(c.caches[r], memory, c.ids[r], cs, r, REQUEST, total);
                }
            }
            for (int r = 0; r < g.n; r++) {
                if (g.ids[r] != null) {
                    KvPattern.fill(g.caches[r], memory, g.ids[r], gs, r, REQUEST + POISON, total);
                }
            }
            List<RegisteredRegion> registered = new ArrayList<>();
            PeerPool[] genPools = new PeerPool[g.n];
            if (push) {
                for (int r = 0; r < g.n; r++) {
                    if (g.ids[r] != null) {
                        genPools[r] = new PeerPool(gs, r, g.ids[r], g.caches[r].blocksPerRegion(),
                                grants(g.caches[r], g.ids[r], g.managers[r], registered));
                    }
                }
            }
            List<DefaultTransferSession> sessions = new ArrayList<>();
            List<Future<?>> running = new ArrayList<>();
            try {
                long deadline = System.nanoTime() + timeout.toNanos();
                for (int r = 0; r < c.n; r++) {
                    if (c.ids[r] == null) {
                        continue;
                    }
                    DefaultTransferSession s = session(true, c, cs, r, g, gs, push ? genPools : null, caps, watch,
                            deadline, exe);
                    sessions.add(s);
                    CacheFormatter f = c.formatters[r];
                    running.add(exe.submit(() -> {
                        if (push) {
                            f.push(s, 0, cs.numLayers());
                        } else {
                            f.format(s);
                        }
                        return null;
                    }));
                }
                for (int r = 0; r < g.n && !push; r++) {
                    if (g.ids[r] == null) {
                        continue;
                    }
                    DefaultTransferSession s = session(false, g, gs, r, c, cs, null, caps, watch, deadline, exe);
                    sessions.add(s);
                    CacheFormatter f = g.formatters[r];
                    running.add(exe.submit(() -> {
                        f.unformat(s);
                        return null;
                    }));
                }
                Exception first = null;
                for (Future<?> f : running) {
                    try {
                        f.get(timeout.toMillis(), TimeUnit.MILLISECONDS);
                    } catch (Exception e) {
                        if (first == null) {
                            first = e;
                            // Wake the other side's blocked calls: they fail with TransportClosedException.
                            c.closeManagers();
                            g.closeManagers();
                        }
                    }
                }
                if (first != null) {
                    throw first;
                }
            } finally {
                for (DefaultTransferSession s : sessions) {
                    s.close();
                }
                for (RegisteredRegion reg : registered) {
                    reg.close();
                }
            }
            KvPattern.Result verify = KvPattern.Result.empty();
            long expected = 0;
            for (int r = 0; r < g.n; r++) {
                if (g.ids[r] != null) {
                    verify.merge(KvPattern.verify(g.caches[r], memory, g.ids[r], gs, r, REQUEST, total));
                    expected += g.ids[r].length * g.caches[r].layout().blockBytes()
                            / g.caches[r].layout().elementBytes();
                }
            }
            return new Outcome(verify, expected, watch.device.sum(), watch.messages.sum());
        } finally {
            exe.shutdownNow();
        }
    }

    private static DefaultTransferSession session(boolean sender, Side self, CacheState selfState, int rank,
                                                  Side peer, CacheState peerState, PeerPool[] peerPools,
                                                  Set<TransportCapability> caps, Watch watch, long deadline,
                                                  ExecutorService exe) {
        TargetRanks t = RankMapping.targetRanks(peerState, selfState, rank);
        List<Connection> all = self.managers[rank].getConnections(peer.comm);
        Connection[] conns = new Connection[t.size()];
        int[] tags = new int[t.size()];
        int[][] peerIds = new int[t.size()][];
        PeerPool[] pools = peerPools == null ? null : new PeerPool[t.size()];
        for (int p = 0; p < t.size(); p++) {
            int peerRank = t.peerRanks().get(p);
            conns[p] = watch.wrap(all.get(peerRank));
            tags[p] = Tags.FIRST_DATA_TAG;
            peerIds[p] = peer.ids[peerRank] == null ? null : peer.ids[peerRank].clone();
            if (pools != null) {
                pools[p] = peerPools[peerRank];
            }
        }
        DefaultTransferSession.Builder b = DefaultTransferSession.builder(REQUEST, sender)
                .states(new TransceiverState(selfState, self.comm.withSelfIndex(rank)), peerState, t)
                .blocks(self.ids[rank].clone(), self.total)
                .connections(conns, tags, 48 * 1024)
                .resources(self.pools[rank], self.memory, exe)
                .deadline(deadline, new TransferTiming(REQUEST, System.nanoTime()))
                .peerBlockIds(peerIds)
                .transportCapabilities(caps);
        if (pools != null) {
            b.push(pools);
        }
        return b.build();
    }

    /** Registers every plane of the request's blocks, merged into runs per region: core's rule. */
    private static List<PeerPool.Grant> grants(PagedKvCache cache, int[] ids, ConnectionManager cm,
                                               List<RegisteredRegion> registered) {
        return dev.kvtransfer.core.transfer.PushGrants.register(cache, cm, ids, 0, 0, registered,
                new java.util.HashMap<>());
    }

    /** One instance: per rank its pool, staging, formatter, endpoint and blocks of the request. */
    private static final class Side implements AutoCloseable {
        final int n;
        final int total;
        final BufferManager memory;
        final PagedKvCache[] caches;
        final DefaultTransferBufferPool[] pools;
        final CacheFormatter[] formatters;
        final ConnectionManager[] managers;
        final int[][] ids;
        final CommState comm;
        private boolean managersClosed;

        Side(String name, BufferManager memory, FormatterProvider provider, CacheState state, MemoryKind kind,
             int total, int holeAfter, Duration timeout, String fabric) {
            this.n = state.worldSize();
            this.total = total;
            this.memory = memory;
            caches = new PagedKvCache[n];
            pools = new DefaultTransferBufferPool[n];
            formatters = new CacheFormatter[n];
            managers = new ConnectionManager[n];
            ids = new int[n][];
            List<String> addresses = new ArrayList<>();
            LoopbackTransportProvider transport = new LoopbackTransportProvider();
            try {
                for (int r = 0; r < n; r++) {
                    int mine = BlockDistribution.count(total, state.contextParallelism(), state.cpRank(r));
                    caches[r] = PagedKvCache.of(memory, state, r, mine + 2, kind);
                    pools[r] = new DefaultTransferBufferPool(memory, 64 * 1024, 2, 2, true,
                            DefaultTransferBufferPool.stagingKindFor(kind));
                    formatters[r] = provider.create(caches[r], pools[r]);
                    managers[r] = transport.create(TransportConfig.builder().name(name + "-rank-" + r)
                            .defaultTimeout(timeout).property(LoopbackTransportProvider.FABRIC_PROPERTY, fabric)
                            .build());
                    addresses.add(managers[r].localAddress());
                    if (LayoutPair.serves(state, r) && mine > 0) {
                        // A filler block after the first holeAfter blocks: runs split at different places per side.
                        int head = Math.min(holeAfter, mine);
                        int[] a = caches[r].allocate(REQUEST, head);
                        caches[r].allocate(-1, 1);
                        int[] b = caches[r].allocate(REQUEST, mine - head);
                        int[] all = new int[mine];
                        System.arraycopy(a, 0, all, 0, a.length);
                        System.arraycopy(b, 0, all, a.length, b.length);
                        ids[r] = all;
                    }
                }
            } catch (RuntimeException | Error e) {
                close();
                throw e;
            }
            comm = new CommState(LoopbackTransportProvider.NAME, addresses, -1);
        }

        void closeManagers() {
            if (managersClosed) {
                return;
            }
            managersClosed = true;
            for (ConnectionManager m : managers) {
                if (m != null) {
                    m.close();
                }
            }
        }

        @Override
        public void close() {
            closeManagers();
            for (DefaultTransferBufferPool p : pools) {
                if (p != null) {
                    p.close();
                }
            }
            for (PagedKvCache c : caches) {
                if (c != null) {
                    c.close();
                }
            }
        }
    }

    /**
     * Records the kind of every buffer handed to the transport. With {@code deviceCapable} it is a transport that
     * declares DEVICE_MEMORY: device buffers go through host memory here (the loopback underneath takes host memory
     * only); otherwise they reach the loopback, which refuses them.
     */
    private static final class Watch {
        final BufferManager memory;
        final boolean deviceCapable;
        final LongAdder device = new LongAdder();
        final LongAdder messages = new LongAdder();

        Watch(BufferManager memory, boolean deviceCapable) {
            this.memory = memory;
            this.deviceCapable = deviceCapable;
        }

        Connection wrap(Connection inner) {
            return new Connection() {
                @Override
                public Duration defaultTimeout() {
                    return inner.defaultTimeout();
                }

                @Override
                public void send(int tag, MemoryBuffer buffer, long offset, long length, Duration timeout) {
                    messages.increment();
                    if (buffer.kind() == MemoryKind.DEVICE) {
                        device.increment();
                        if (deviceCapable) {
                            try (MemoryBuffer h = memory.allocate(length, MemoryKind.HOST)) {
                                memory.copy(buffer, offset, h, 0, length);
                                memory.synchronize();
                                inner.send(tag, h, 0, length, timeout);
                            }
                            return;
                        }
                    }
                    inner.send(tag, buffer, offset, length, timeout);
                }

                @Override
                public void recv(int tag, MemoryBuffer buffer, long offset, long length, Duration timeout) {
                    messages.increment();
                    if (buffer.kind() == MemoryKind.DEVICE) {
                        device.increment();
                        if (deviceCapable) {
                            try (MemoryBuffer h = memory.allocate(length, MemoryKind.HOST)) {
                                inner.recv(tag, h, 0, length, timeout);
                                memory.copy(h, 0, buffer, offset, length);
                                memory.synchronize();
                            }
                            return;
                        }
                    }
                    inner.recv(tag, buffer, offset, length, timeout);
                }

                @Override
                public void write(WriteBatch batch, Duration timeout) {
                    for (int i = 0; i < batch.size(); i++) {
                        messages.increment();
                        if (batch.source(i).kind() == MemoryKind.DEVICE) {
                            device.increment();
                        }
                    }
                    inner.write(batch, timeout);
                }

                @Override
                public String peer() {
                    return inner.peer();
                }
            };
        }
    }
}
