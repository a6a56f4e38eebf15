package dev.kvtransfer.formatter.standard;

import dev.kvtransfer.api.layout.BlockDistribution;
import dev.kvtransfer.api.layout.BlockLayout;
import dev.kvtransfer.api.memory.BufferManager;
import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.memory.MemoryKind;
import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.api.model.DataType;
import dev.kvtransfer.core.buffer.DefaultTransferBufferPool;
import dev.kvtransfer.core.cache.PagedKvCache;
import dev.kvtransfer.core.memory.HostBufferManager;
import dev.kvtransfer.formatter.support.WritePlan;
import dev.kvtransfer.testkit.KvPattern;
import org.awaitility.Awaitility;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

import java.time.Duration;
import java.util.ArrayList;
import java.util.IdentityHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * The staging ring of staged pull parts: a receiver that scatters on helpers receives message {@code n} into ring
 * place {@code n % 4} only once message {@code n - 4} is scattered; an inline receiver and a gathering sender reuse
 * one place; helpers are used only when the staged parts and their helpers fit in the cores; the formatter's helper
 * pool is bounded (a receive that finds none free scatters itself) and ends with the formatter. Every element is
 * verified with KvPattern, and the places are read back from the session (no clock anywhere).
 */
class StagingRingTest {
    private static final long REQUEST = 7;
    private static final long OTHER = 8;
    private static final int BLOCKS = 10;

    private final HostBufferManager memory = new HostBufferManager();
    private final List<AutoCloseable> open = new ArrayList<>();
    private final Map<PagedKvCache, int[]> idsOf = new IdentityHashMap<>();

    @AfterEach
    void closeAll() throws Exception {
        for (int i = open.size() - 1; i >= 0; i--) {
            open.get(i).close();
        }
        memory.close();
    }

    private static CacheState model(int tp) {
        return CacheState.builder().uniformKvHeads(4, 4).sizePerHead(4).tokensPerBlock(4)
                .dataType(DataType.FLOAT32).tensorParallelism(tp).build();
    }

    private PagedKvCache cache(CacheState state, int rank, boolean fill) {
        return cache(state, rank, fill, REQUEST);
    }

    private PagedKvCache cache(CacheState state, int rank, boolean fill, long request) {
        int n = BlockDistribution.count(BLOCKS, state.contextParallelism(), state.cpRank(rank));
        PagedKvCache c = new PagedKvCache(memory, BlockLayout.of(state, rank), n + 1);
        open.add(c);
        int[] ids = c.allocate(request, n);
        idsOf.put(c, ids);
        if (fill) {
            KvPattern.fill(c, ids, state, rank, request, BLOCKS);
        }
        return c;
    }

    private StandardCacheFormatter formatter(PagedKvCache c, boolean ring, int helperCores) {
        return formatter(c, ring, helperCores, ScatterHelpers.defaultThreads());
    }

    private StandardCacheFormatter formatter(PagedKvCache c, boolean ring, int helperCores, int helperThreads) {
        DefaultTransferBufferPool pool = new DefaultTransferBufferPool(memory, 0, 1, 1, true);
        open.add(pool);
        StandardCacheFormatter f = new StandardCacheFormatter(c, pool,
                StandardCacheFormatter.DEFAULT_MIN_BOTH_DIRECT_BYTES, true,
                StandardCacheFormatter.DEFAULT_MIN_DIRECT_ENTRY_BYTES, WritePlan.DEFAULT_STAGING_CHUNK, ring,
                helperCores, helperThreads);
        open.add(f);
        return f;
    }

    private int[] ids(PagedKvCache c) {
        return idsOf.get(c);
    }

    /** What the two TP2 context ranks send to the TP1 generation rank (whole blocks, one message each). */
    private List<List<CapturingSession.Message>> tp2Sends(CacheState ctx, CacheState gen) {
        return tp2Sends(ctx, gen, REQUEST);
    }

    private List<List<CapturingSession.Message>> tp2Sends(CacheState ctx, CacheState gen, long request) {
        List<List<CapturingSession.Message>> sent = new ArrayList<>();
        for (int r = 0; r < 2; r++) {
            PagedKvCache c = cache(ctx, r, true, request);
            CapturingSession s = new CapturingSession(request, true, ctx, r, gen, ids(c), BLOCKS, memory, null);
            open.add(s);
            formatter(c, true, Integer.MAX_VALUE).format(s);
            assertThat(s.staging).as("rank %s sends its whole blocks", r).isEmpty();
            sent.add(s.perPeer.get(0));
        }
        return sent;
    }

    @Test
    void helperScatter_receivesIntoFourPlaces_andWaitsForEachToBeScattered() {
        CacheState ctx = model(2);
        CacheState gen = model(1);
        List<List<CapturingSession.Message>> sent = tp2Sends(ctx, gen);
        long row = sent.get(0).get(0).length();
        PagedKvCache g = cache(gen, 0, false);
        CapturingSession inner = new CapturingSession(REQUEST, false, gen, 0, ctx, ids(g), BLOCKS, memory, sent);
        open.add(inner);
        ScatterGate s = new ScatterGate(inner, row);
        inner.formatterManager = s;
        formatter(g, true, Integer.MAX_VALUE).unformat(inner);
        KvPattern.verify(g, ids(g), gen, 0, REQUEST, BLOCKS).assertOk();
        assertThat(inner.receivedAt).hasSize(2 * BLOCKS);
        for (int i = 0; i < 2 * BLOCKS; i++) {
            int n = i % BLOCKS; // peer 0's messages, then peer 1's (this session runs peers one after the other)
            assertThat(inner.receivedAt.get(i)).as("message %s", i)
                    .isEqualTo((n % StandardCacheFormatter.RECEIVE_RING_SLOTS) * row);
        }
        assertThat(s.gatedCopies).as("the helper's copies went through the gate").isPositive();
    }

    @Test
    void withoutTheRing_everyMessageKeepsItsStreamOffset() {
        CacheState ctx = model(2);
        CacheState gen = model(1);
        List<List<CapturingSession.Message>> sent = tp2Sends(ctx, gen);
        long row = sent.get(0).get(0).length();
        PagedKvCache g = cache(gen, 0, false);
        CapturingSession s = new CapturingSession(REQUEST, false, gen, 0, ctx, ids(g), BLOCKS, memory, sent);
        open.add(s);
        formatter(g, false, Integer.MAX_VALUE).unformat(s);
        KvPattern.verify(g, ids(g), gen, 0, REQUEST, BLOCKS).assertOk();
        for (int i = 0; i < 2 * BLOCKS; i++) {
            assertThat(s.receivedAt.get(i)).isEqualTo((i % BLOCKS) * row);
        }
    }

    @Test
    void twoStagedPartsOnTwoCores_scatterInline_intoOnePlace() {
        CacheState ctx = model(2);
        CacheState gen = model(1);
        List<List<CapturingSession.Message>> sent = tp2Sends(ctx, gen);
        PagedKvCache g = cache(gen, 0, false);
        CapturingSession s = new CapturingSession(REQUEST, false, gen, 0, ctx, ids(g), BLOCKS, memory, sent);
        open.add(s);
        formatter(g, true, 2).unformat(s); // 2 parts x (receiver + helper) > 2 cores: inline
        KvPattern.verify(g, ids(g), gen, 0, REQUEST, BLOCKS).assertOk();
        assertThat(s.receivedAt).hasSize(2 * BLOCKS).containsOnly(0L);
    }

    @Test
    void twoStagedPartsOnFourCores_useHelpers() {
        CacheState ctx = model(2);
        CacheState gen = model(1);
        List<List<CapturingSession.Message>> sent = tp2Sends(ctx, gen);
        long row = sent.get(0).get(0).length();
        PagedKvCache g = cache(gen, 0, false);
        CapturingSession s = new CapturingSession(REQUEST, false, gen, 0, ctx, ids(g), BLOCKS, memory, sent);
        open.add(s);
        formatter(g, true, 4).unformat(s);
        KvPattern.verify(g, ids(g), gen, 0, REQUEST, BLOCKS).assertOk();
        assertThat(s.receivedAt).contains(3 * row); // the ring's fourth place: a helper scattered
    }

    @Test
    void gatheringSender_sendsEveryMessageFromOnePlace() {
        CacheState ctx = model(1);
        CacheState gen = model(2);
        PagedKvCache c = cache(ctx, 0, true);
        CapturingSession s = new CapturingSession(REQUEST, true, ctx, 0, gen, ids(c), BLOCKS, memory, null);
        open.add(s);
        formatter(c, true, Integer.MAX_VALUE).format(s);
        assertThat(s.staging).as("the TP1 sender gathers each TP2 rank's heads").hasSize(2);
        for (int p = 0; p < 2; p++) {
            assertThat(s.perPeer.get(p)).hasSize(BLOCKS);
            for (CapturingSession.Message m : s.perPeer.get(p)) {
                assertThat(m.offset()).isZero();
                assertThat(s.staging).contains(m.source());
            }
            // Each generation rank receives its rows straight into its blocks, every element checked.
            PagedKvCache g = cache(gen, p, false);
            List<List<CapturingSession.Message>> deliveries = List.of(s.perPeer.get(p));
            CapturingSession r = new CapturingSession(REQUEST, false, gen, p, ctx, ids(g), BLOCKS, memory,
                    deliveries);
            open.add(r);
            formatter(g, true, Integer.MAX_VALUE).unformat(r);
            assertThat(r.staging).isEmpty();
            KvPattern.verify(g, ids(g), gen, p, REQUEST, BLOCKS).assertOk();
        }
    }

    @Test
    void helpersAreBounded_aReceiveThatFindsNoneFree_scattersItself() throws Exception {
        TwoRequests t = twoRequests();
        StandardCacheFormatter f = formatter(t.g, true, Integer.MAX_VALUE, 1);
        CapturingSession a = t.receiver(REQUEST);
        CapturingSession b = t.receiver(OTHER);
        HeldScatter hold = new HeldScatter(a);
        a.formatterManager = hold;
        ExecutorService runner = Executors.newSingleThreadExecutor();
        try {
            Future<?> first = runner.submit(() -> f.unformat(a));
            // The pool's only helper is now inside request A's first scatter, held there.
            Awaitility.await().atMost(Duration.ofSeconds(30)).until(() -> hold.entered);
            f.unformat(b);
            assertThat(b.receivedAt).as("B found no helper free: it received and scattered inline, in one place")
                    .hasSize(2 * BLOCKS).containsOnly(0L);
            t.verify(OTHER);
            hold.release.countDown();
            first.get(30, TimeUnit.SECONDS);
        } finally {
            hold.release.countDown();
            runner.shutdownNow();
        }
        t.verify(REQUEST);
        assertThat(a.receivedAt).as("A scattered on the helper, through the ring").contains(3 * t.row);
        assertThat(f.scatterHelpers().largestThreads()).isEqualTo(1);
    }

    @Test
    void close_endsTheHelpers_andLaterReceivesScatterThemselves() {
        TwoRequests t = twoRequests();
        StandardCacheFormatter f = formatter(t.g, true, Integer.MAX_VALUE, 2);
        CapturingSession a = t.receiver(REQUEST);
        f.unformat(a);
        t.verify(REQUEST);
        assertThat(a.receivedAt).as("scattered on a helper").contains(3 * t.row);
        String prefix = f.scatterHelpers().threadPrefix();
        f.close();
        f.close(); // idempotent
        Awaitility.await().atMost(Duration.ofSeconds(30)).until(() -> f.scatterHelpers().isTerminated()
                && Thread.getAllStackTraces().keySet().stream().noneMatch(th -> th.getName().startsWith(prefix)));
        CapturingSession b = t.receiver(OTHER);
        f.unformat(b);
        t.verify(OTHER);
        assertThat(b.receivedAt).as("after close: inline, one place").hasSize(2 * BLOCKS).containsOnly(0L);
    }

    /** Requests {@link #REQUEST} and {@link #OTHER}, TP2 → TP1, both sent and due on one generation cache. */
    private TwoRequests twoRequests() {
        CacheState ctx = model(2);
        CacheState gen = model(1);
        List<List<CapturingSession.Message>> sentA = tp2Sends(ctx, gen, REQUEST);
        List<List<CapturingSession.Message>> sentB = tp2Sends(ctx, gen, OTHER);
        PagedKvCache g = new PagedKvCache(memory, BlockLayout.of(gen, 0), 2 * BLOCKS);
        open.add(g);
        return new TwoRequests(ctx, gen, g, g.allocate(REQUEST, BLOCKS), g.allocate(OTHER, BLOCKS), sentA, sentB,
                sentA.get(0).get(0).length());
    }

    private final class TwoRequests {
        final CacheState ctx;
        final CacheState gen;
        final PagedKvCache g;
        final int[] idsA;
        final int[] idsB;
        final List<List<CapturingSession.Message>> sentA;
        final List<List<CapturingSession.Message>> sentB;
        /** Bytes of one message (a block's rows of one context rank). */
        final long row;

        TwoRequests(CacheState ctx, CacheState gen, PagedKvCache g, int[] idsA, int[] idsB,
                    List<List<CapturingSession.Message>> sentA, List<List<CapturingSession.Message>> sentB,
                    long row) {
            this.ctx = ctx;
            this.gen = gen;
            this.g = g;
            this.idsA = idsA;
            this.idsB = idsB;
            this.sentA = sentA;
            this.sentB = sentB;
            this.row = row;
        }

        CapturingSession receiver(long request) {
            boolean first = request == REQUEST;
            CapturingSession s = new CapturingSession(request, false, gen, 0, ctx, first ? idsA : idsB, BLOCKS,
                    memory, first ? sentA : sentB);
            open.add(s);
            return s;
        }

        void verify(long request) {
            KvPattern.verify(g, request == REQUEST ? idsA : idsB, gen, 0, request, BLOCKS).assertOk();
        }
    }

    /**
     * The session's buffer manager with a hook before every copy: the scatter's copies out of staging are what the
     * gates below hold back.
     */
    private abstract static class GatedCopies implements BufferManager {
        final CapturingSession session;
        private final BufferManager bm;

        GatedCopies(CapturingSession session) {
            this.session = session;
            this.bm = session.bufferManager();
        }

        /** Runs before a copy out of {@code src} of {@code bytes}. */
        abstract void gate(MemoryBuffer src, long bytes);

        @Override
        public MemoryBuffer allocate(long bytes, MemoryKind kind) {
            return bm.allocate(bytes, kind);
        }

        @Override
        public void copy(MemoryBuffer src, long srcOffset, MemoryBuffer dst, long dstOffset, long bytes) {
            gate(src, bytes);
            bm.copy(src, srcOffset, dst, dstOffset, bytes);
        }

        @Override
        public void synchronize() {
            bm.synchronize();
        }

        @Override
        public void close() {
            // the test's manager is closed by the test
        }
    }

    /** Holds the first scatter copy out of a session's staging until released (bounded), noting that it began. */
    private static final class HeldScatter extends GatedCopies {
        final CountDownLatch release = new CountDownLatch(1);
        volatile boolean entered;

        HeldScatter(CapturingSession session) {
            super(session);
        }

        @Override
        void gate(MemoryBuffer src, long bytes) {
            if (!session.staging.contains(src)) {
                return;
            }
            entered = true;
            try {
                assertThat(release.await(30, TimeUnit.SECONDS)).as("released within 30 s").isTrue();
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                throw new IllegalStateException(e);
            }
        }
    }

    /**
     * A buffer manager that gates the scatter: a copy out of a staging buffer that belongs to message {@code k} of
     * its part (counted by the bytes copied out of that buffer) waits, bounded, until the receiving thread has
     * received messages {@code 0 .. k + 3} of that peer (or all of them): all four ring places are then full, and a
     * receive that did not wait for its place would have overwritten message {@code k} before it is scattered.
     */
    private static final class ScatterGate extends GatedCopies {
        private final long messageBytes;
        private final Map<MemoryBuffer, long[]> copiedOut = new IdentityHashMap<>();
        volatile int gatedCopies;

        ScatterGate(CapturingSession session, long messageBytes) {
            super(session);
            this.messageBytes = messageBytes;
        }

        @Override
        void gate(MemoryBuffer src, long bytes) {
            int peer;
            long done;
            synchronized (copiedOut) {
                peer = session.staging.indexOf(src);
                if (peer < 0) {
                    return; // not a scatter out of staging
                }
                long[] c = copiedOut.computeIfAbsent(src, k -> new long[1]);
                done = c[0];
                c[0] += bytes;
            }
            int k = (int) (done / messageBytes);
            int need = Math.min(k + StandardCacheFormatter.RECEIVE_RING_SLOTS, BLOCKS);
            Awaitility.await().atMost(Duration.ofSeconds(30)).pollInterval(Duration.ofMillis(1))
                    .until(() -> session.received(peer) >= need);
            gatedCopies++;
        }
    }
}
