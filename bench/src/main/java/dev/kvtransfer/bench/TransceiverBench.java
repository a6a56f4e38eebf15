package dev.kvtransfer.bench;

import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.api.model.ContextPhaseParams;
import dev.kvtransfer.api.transport.TransportConfig;
import dev.kvtransfer.api.transport.TransportProvider;
import dev.kvtransfer.core.RequestState;
import dev.kvtransfer.core.TransceiverConfig;
import dev.kvtransfer.core.TransferRequest;
import dev.kvtransfer.core.local.LocalInstance;
import dev.kvtransfer.core.pattern.KvPattern;
import dev.kvtransfer.core.plugin.Plugins;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.OptionalInt;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;

/**
 * Transceiver level: a context and a generation {@link LocalInstance} in this JVM over one transport (found through
 * the SPI), {@code CacheTransceiver} pairs moving whole requests: the context ranks {@code respondAndSendAsync},
 * the generation ranks {@code requestAndReceiveAsync} with the context side's {@code ContextPhaseParams}. Requests
 * go in windows of {@code inflight}: their blocks are allocated (and filled with {@link KvPattern} under
 * {@code --verify}) before the window, then the window is timed from the first submit to the last generation
 * completion, then (untimed) the status agreement runs on every rank, every element is verified and the blocks are
 * freed. Latency per request: its generation submit to its completion. Heap: bytes allocated by all threads during
 * the timed part of each window, per request.
 */
final class TransceiverBench implements AutoCloseable {
    private final String level;
    private final TransportProvider provider;
    private final String mode;
    private final String checksums;
    private final int blocks;
    private final int inflight;
    private final Duration timeout;
    /** The context instance in this JVM, or null when it runs in {@link #ctxPeer}. */
    private final LocalInstance ctx;
    /** The child JVM running the context instance ({@code --peer process}), or null. */
    private final PeerProcess ctxPeer;
    private final CacheState ctxState;
    private final int ctxRanks;
    private final LocalInstance gen;
    private final long requestBytes;
    private final ExecutorService sync;
    private final AtomicLong backgroundErrors = new AtomicLong();
    private volatile String firstBackgroundError = "";
    private long peerBackgroundErrors;
    private String peerFirstBackground = "";
    private long nextId = 1;

    TransceiverBench(String level, TransportProvider provider, Plugins plugins, TransportConfig base,
            TransceiverConfig config, CacheState ctxState, CacheState genState, int blocks, int inflight,
            Duration timeout) {
        this(level, provider, plugins, base, config, ctxState, genState, blocks, inflight, timeout, null, null);
    }

    /**
     * With {@code ctxPeerTransport} non-null the context instance runs in a child JVM ({@link ContextPeer}) started
     * with these transport properties and {@code ctxPeerConfig} (the transceiver properties); the generation
     * instance stays here.
     */
    TransceiverBench(String level, TransportProvider provider, Plugins plugins, TransportConfig base,
            TransceiverConfig config, CacheState ctxState, CacheState genState, int blocks, int inflight,
            Duration timeout, Map<String, String> ctxPeerTransport, Map<String, String> ctxPeerConfig) {
        this.level = Objects.requireNonNull(level, "level");
        this.provider = Objects.requireNonNull(provider, "provider");
        this.mode = config.transferMode().toString().toLowerCase(java.util.Locale.ROOT);
        this.checksums = config.partChecksums() ? "on" : "off";
        this.blocks = blocks;
        this.inflight = inflight;
        this.timeout = timeout;
        int perRank = Math.multiplyExact(blocks, inflight);
        this.ctxState = ctxState;
        LocalInstance c = null;
        PeerProcess p = null;
        try {
            if (ctxPeerTransport != null) {
                p = PeerProcess.start(provider.name() + " context peer", PeerProcess.command(
                        ContextPeer.class.getName(), ContextPeer.arguments(timeout, ctxState, perRank,
                                ctxPeerTransport, ctxPeerConfig)), ContextPeer.READY_PREFIX, timeout.plusSeconds(30));
            } else {
                c = start("bench-ctx", ctxState, provider, plugins, base, config, perRank);
            }
            this.ctx = c;
            this.ctxPeer = p;
            this.gen = start("bench-gen", genState, provider, plugins, base, config, perRank);
        } catch (RuntimeException e) {
            if (c != null) {
                c.close();
            }
            if (p != null) {
                p.close(Duration.ofSeconds(5));
            }
            throw e;
        }
        this.ctxRanks = ctx != null ? ctx.ranks() : ctxState.worldSize();
        this.requestBytes = (long) blocks * ctxState.tokensPerBlock() * kvBytesPerToken(ctxState);
        int threads = ctxRanks + gen.ranks();
        this.sync = Executors.newFixedThreadPool(threads, r -> {
            Thread t = new Thread(r, "bench-status-sync");
            t.setDaemon(true);
            return t;
        });
    }

    private LocalInstance start(String name, CacheState state, TransportProvider provider, Plugins plugins,
            TransportConfig base, TransceiverConfig config, int blocksPerRank) {
        return LocalInstance.builder(name, state)
                .transport(provider, base.toBuilder().name(name).build())
                .plugins(plugins)
                .config(config)
                .blocksPerRank(blocksPerRank)
                .sharedBufferManager(true)
                .errorHandler(e -> {
                    if (backgroundErrors.getAndIncrement() == 0) {
                        firstBackgroundError = name + ": " + e.getMessage();
                    }
                })
                .start();
    }

    /** KV bytes of one token over all layers and heads of the model. */
    static long kvBytesPerToken(CacheState s) {
        long perLayer = (long) s.kvFactor() * s.sizePerHead() * s.dataType().bytes();
        long sum = 0;
        for (int h : s.kvHeadsPerLayer()) {
            sum += h * perLayer;
        }
        return sum;
    }

    /** @return bytes of one request over all ranks */
    long requestBytes() {
        return requestBytes;
    }

    String describe() {
        return "kvtransfer CacheTransceiver pair over " + provider.name() + " (LocalInstance ctx " + layout(ctxState)
                + (ctxPeer != null ? " in a child JVM (--peer process)" : "") + " -> gen " + layout(gen.cacheState())
                + ", " + mode + ", part checksums " + checksums + ")";
    }

    private static String layout(CacheState s) {
        return "TP" + s.tensorParallelism() + " PP" + s.pipelineParallelism();
    }

    private final class Window {
        final List<Long> ids = new ArrayList<>();
        final List<TransferRequest[]> ctxRequests = new ArrayList<>();
        final List<TransferRequest[]> genRequests = new ArrayList<>();
        final List<int[][]> genBlocks = new ArrayList<>();
    }

    /** The totals of the requests run so far. */
    private static final class Totals {
        long requests;
        long bytes;
        long nanos;
        long allocated;
        long verified;
        long mismatches;
        long failures;
        /** Requests whose context side (in the peer JVM) did not end complete. */
        long peerFailures;
        long pushed;
        /** The copy ledgers of the completed requests: generation ranks, context ranks (in this JVM only). */
        dev.kvtransfer.core.CopyLedger genLedger = dev.kvtransfer.core.CopyLedger.NONE;
        dev.kvtransfer.core.CopyLedger ctxLedger = dev.kvtransfer.core.CopyLedger.NONE;
        String firstError = "";
        final Latencies latency = new Latencies();
    }

    /**
     * @param requests timed requests (rounded up to whole windows)
     * @param warmup   untimed requests first (rounded up to whole windows; verified too)
     * @param verify   fill and check every element
     * @param repeat   repeat index for the row
     * @return the row
     */
    Measurement run(int requests, int warmup, boolean verify, int repeat) {
        Totals warm = new Totals();
        for (int done = 0; done < warmup; done += inflight) {
            window(warm, verify);
        }
        Totals t = new Totals();
        for (int done = 0; done < requests; done += inflight) {
            window(t, verify);
        }
        Latencies.Percentiles p = t.latency.percentiles();
        String note = t.firstError.isEmpty() ? warm.firstError : t.firstError;
        if (backgroundErrors.get() > 0) {
            note = (note.isEmpty() ? "" : note + "; ") + backgroundErrors.get() + " background errors, first: "
                    + firstBackgroundError;
        }
        if (peerBackgroundErrors > 0) {
            note = (note.isEmpty() ? "" : note + "; ") + "context peer JVM: " + peerBackgroundErrors
                    + " background errors, " + peerFirstBackground;
        }
        long peerFailed = t.peerFailures + warm.peerFailures;
        if (mode.equals("push") && t.pushed + warm.pushed < t.requests + warm.requests - t.failures - warm.failures) {
            // Push asked, but the transport or the formatter could not: those requests were pulled.
            note = (note.isEmpty() ? "" : note + "; ") + "push asked: " + (t.pushed + warm.pushed) + " of "
                    + (t.requests + warm.requests - t.failures - warm.failures) + " requests pushed, the rest pulled";
        }
        // The copy ledger per byte delivered: both sides' staging and checksums (the context's only when it runs in
        // this JVM), and the transport's passes as the senders saw them (the generation side's view without them).
        dev.kvtransfer.core.CopyLedger g = t.genLedger;
        dev.kvtransfer.core.CopyLedger c = t.ctxLedger;
        boolean both = ctx != null && c.bytes() == g.bytes() && g.bytes() > 0;
        double staged = both ? (c.staged() + g.staged()) / (double) g.bytes() : Double.NaN;
        double transport = (both && c.transportUnknown() == 0 ? c : g).transportPerByte();
        double crc = both ? (c.checksummed() + g.checksummed()) / (double) g.bytes() : Double.NaN;
        return new Measurement(level, provider.name(), "ours", describe(), mode, checksums, requestBytes, blocks,
                inflight, repeat, t.requests, t.bytes, Math.max(1, t.nanos), p.p50Us(), p.p99Us(), p.p999Us(),
                p.maxUs(), t.allocated < 0 || t.requests == 0 ? Double.NaN : t.allocated / (double) t.requests,
                t.verified + warm.verified, t.mismatches + warm.mismatches,
                t.failures + warm.failures + peerFailed, note, staged, transport, crc);
    }

    private void window(Totals totals, boolean verify) {
        CacheState cs = ctxState;
        int isl = blocks * cs.tokensPerBlock();
        Window w = new Window();
        // Untimed: allocate (and fill) both sides' blocks; a context peer also makes its requests ready.
        List<ContextPhaseParams> peerParams = null;
        long windowDeadline = System.nanoTime() + timeout.plusSeconds(30).toNanos();
        if (ctxPeer != null) {
            long first = nextId;
            ctxPeer.send("WINDOW " + first + " " + inflight + " " + blocks + " " + (verify ? 1 : 0));
            String line = ctxPeer.next(windowDeadline);
            if (!line.startsWith("PARAMS")) {
                throw new IllegalStateException("context peer: expected PARAMS, got '" + line + "'"
                        + ctxPeer.exitSummary());
            }
            String[] f = line.trim().split(" ");
            if (f.length != inflight + 1) {
                throw new IllegalStateException("context peer: " + (f.length - 1) + " params for " + inflight
                        + " requests");
            }
            peerParams = new ArrayList<>();
            for (int i = 0; i < inflight; i++) {
                ContextPhaseParams cp = ContextPhaseParams.fromBytes(java.util.Base64.getDecoder().decode(f[i + 1]));
                if (cp.requestId() != first + i) {
                    throw new IllegalStateException("context peer: params of request " + cp.requestId()
                            + " where " + (first + i) + " was expected");
                }
                peerParams.add(cp);
            }
        }
        for (int i = 0; i < inflight; i++) {
            long id = nextId++;
            w.ids.add(id);
            if (ctx != null) {
                TransferRequest[] cr = new TransferRequest[ctx.ranks()];
                for (int r = 0; r < ctx.ranks(); r++) {
                    int[] b = ctx.cache(r).allocate(id, blocks);
                    if (verify) {
                        KvPattern.fill(ctx.cache(r), b, ctx.cacheState(r), r, id, blocks);
                    }
                    cr[r] = TransferRequest.context(id, isl, b);
                }
                w.ctxRequests.add(cr);
            }
            int[][] gb = new int[gen.ranks()][];
            for (int r = 0; r < gen.ranks(); r++) {
                gb[r] = gen.cache(r).allocate(id, blocks);
            }
            w.genBlocks.add(gb);
        }
        // Timed: the window's transfers.
        HeapMeter heap = new HeapMeter();
        heap.start();
        long t0 = System.nanoTime();
        List<CompletableFuture<Long>> genDone = new ArrayList<>();
        List<CompletableFuture<?>> ctxDone = new ArrayList<>();
        long[] submitted = new long[inflight];
        for (int i = 0; i < inflight; i++) {
            long id = w.ids.get(i);
            ContextPhaseParams params;
            if (ctx != null) {
                TransferRequest[] cr = w.ctxRequests.get(i);
                for (int r = 0; r < cr.length; r++) {
                    ctx.transceiver(r).respondAndSendAsync(cr[r]);
                    ctxDone.add(cr[r].completion().toCompletableFuture());
                }
                params = ctx.contextPhaseParams(id, 0);
            } else {
                params = peerParams.get(i);
            }
            TransferRequest[] gr = new TransferRequest[gen.ranks()];
            CompletableFuture<?>[] parts = new CompletableFuture<?>[gen.ranks()];
            submitted[i] = System.nanoTime();
            for (int r = 0; r < gr.length; r++) {
                gr[r] = TransferRequest.generation(params, isl, w.genBlocks.get(i)[r]);
                gen.transceiver(r).requestAndReceiveAsync(gr[r]);
                parts[r] = gr[r].completion().toCompletableFuture();
            }
            w.genRequests.add(gr);
            genDone.add(CompletableFuture.allOf(parts).handle((v, e) -> System.nanoTime()));
        }
        long deadline = System.nanoTime() + timeout.plusSeconds(30).toNanos();
        long last = t0;
        for (int i = 0; i < inflight; i++) {
            Long end = await(genDone.get(i), deadline);
            if (end != null) {
                last = Math.max(last, end);
            }
        }
        for (CompletableFuture<?> f : ctxDone) {
            await(f, deadline);
        }
        long allocated = heap.stop();
        boolean allDone = true;
        for (int i = 0; i < genDone.size(); i++) {
            allDone &= genDone.get(i).isDone();
        }
        for (int i = 0; i < ctxDone.size(); i++) {
            allDone &= ctxDone.get(i).isDone();
        }
        if (!allDone) {
            // Freeing blocks under a transfer still running would be wrong: give up on this configuration.
            throw new IllegalStateException(level + " over " + provider.name() + ": requests " + w.ids
                    + " did not finish within " + timeout.plusSeconds(30).toSeconds() + " s");
        }
        long nanos = Math.max(1, last - t0);
        // Untimed: status agreement, verification, release.
        statusSync();
        if (ctxPeer != null) {
            // The peer's side: its heap during the window, its requests' states, its background errors.
            String line = ctxPeer.next(System.nanoTime() + timeout.plusSeconds(60).toNanos());
            if (!line.startsWith("WDONE ")) {
                throw new IllegalStateException("context peer: expected WDONE, got '" + line + "'"
                        + ctxPeer.exitSummary());
            }
            int tab = line.indexOf('\t');
            String[] f = (tab < 0 ? line : line.substring(0, tab)).split(" ", 5);
            long peerHeap = Long.parseLong(f[1]);
            allocated = allocated < 0 || peerHeap < 0 ? -1 : allocated + peerHeap;
            int peerFailures = Integer.parseInt(f[2]);
            long peerBackground = Long.parseLong(f[3]);
            if (peerFailures > 0 && totals.firstError.isEmpty()) {
                totals.firstError = f[4];
            }
            if (peerBackground > 0) {
                peerBackgroundErrors = peerBackground;
                if (tab >= 0) {
                    peerFirstBackground = line.substring(tab + 1);
                }
            }
            totals.peerFailures += peerFailures;
        }
        for (int i = 0; i < inflight; i++) {
            long id = w.ids.get(i);
            TransferRequest[] gr = w.genRequests.get(i);
            boolean ok = true;
            long bytes = 0;
            for (int r = 0; r < gr.length; r++) {
                if (gr[r].state() != RequestState.GENERATION_TRANS_COMPLETE) {
                    ok = false;
                    if (totals.firstError.isEmpty()) {
                        totals.firstError = "request " + id + " gen rank " + r + ": " + gr[r].state()
                                + gr[r].error().map(e -> " " + e.getMessage()).orElse("");
                    }
                }
                bytes += gr[r].kvCacheSize();
            }
            if (ctx != null) {
                for (TransferRequest c : w.ctxRequests.get(i)) {
                    if (c.state() != RequestState.CONTEXT_COMPLETE && totals.firstError.isEmpty()) {
                        totals.firstError = "request " + id + " context side: " + c.state()
                                + c.error().map(e -> " " + e.getMessage()).orElse("");
                    }
                }
            }
            if (ok) {
                totals.bytes += bytes;
                boolean pushed = true;
                for (TransferRequest g : gr) {
                    pushed &= g.wasPushed();
                }
                totals.pushed += pushed ? 1 : 0;
                for (TransferRequest g : gr) {
                    totals.genLedger = totals.genLedger.plus(g.copyLedger());
                }
                if (ctx != null) {
                    for (TransferRequest c : w.ctxRequests.get(i)) {
                        totals.ctxLedger = totals.ctxLedger.plus(c.copyLedger());
                    }
                }
                totals.latency.record(genDone.get(i).getNow(submitted[i]) - submitted[i]);
                if (verify) {
                    for (int r = 0; r < gen.ranks(); r++) {
                        KvPattern.Result v = KvPattern.verify(gen.cache(r), w.genBlocks.get(i)[r], gen.cacheState(r), r,
                                id, blocks);
                        totals.verified += v.checkedElements();
                        totals.mismatches += v.mismatches();
                        if (!v.ok() && totals.firstError.isEmpty()) {
                            totals.firstError = "request " + id + " gen rank " + r + ": " + v.firstMismatch();
                        }
                    }
                }
            } else {
                totals.failures++;
            }
            if (ctx != null) {
                for (int r = 0; r < ctx.ranks(); r++) {
                    ctx.cache(r).free(id);
                }
            }
            for (int r = 0; r < gen.ranks(); r++) {
                gen.cache(r).free(id);
            }
        }
        totals.requests += inflight;
        totals.nanos += nanos;
        totals.allocated = allocated < 0 || totals.allocated < 0 ? -1 : totals.allocated + allocated;
    }

    /** Runs the collective status checks on every rank of both instances at once. */
    private void statusSync() {
        statusAgreement(sync, ctx, gen, timeout);
    }

    /**
     * The collective status checks of every rank of the given instances at once (an instance that runs in
     * another process is null here), each bounded by {@code timeout} from the start. A rank's check is a
     * collective of its instance's ranks, so the ranks of a multi-rank instance run on {@code sync}'s threads at
     * once; a one-rank instance's check (its single-member fast path) runs on this thread, as an engine's step
     * thread would run it, after the others were started: no hand-off to another thread and back per window.
     *
     * @throws IllegalStateException naming the cause when a check fails or misses its deadline
     */
    static void statusAgreement(ExecutorService sync, LocalInstance ctx, LocalInstance gen, Duration timeout) {
        List<Future<?>> fs = new ArrayList<>();
        for (int r = 0; ctx != null && ctx.ranks() > 1 && r < ctx.ranks(); r++) {
            int rank = r;
            fs.add(sync.submit(() -> ctx.transceiver(rank).checkContextTransferStatus(OptionalInt.empty())));
        }
        for (int r = 0; gen != null && gen.ranks() > 1 && r < gen.ranks(); r++) {
            int rank = r;
            fs.add(sync.submit(() -> gen.transceiver(rank).checkGenTransferStatus(OptionalInt.empty())));
        }
        long deadline = System.nanoTime() + timeout.toNanos();
        try {
            if (ctx != null && ctx.ranks() == 1) {
                ctx.transceiver(0).checkContextTransferStatus(OptionalInt.empty());
            }
            if (gen != null && gen.ranks() == 1) {
                gen.transceiver(0).checkGenTransferStatus(OptionalInt.empty());
            }
            for (Future<?> f : fs) {
                f.get(Math.max(1, deadline - System.nanoTime()), TimeUnit.NANOSECONDS);
            }
        } catch (Exception e) {
            throw new IllegalStateException((gen == null ? "context " : "") + "status agreement failed: " + e, e);
        }
    }

    /** Asks the peer to close its instance (which fails on leaked buffers) and checks that it said so. */
    private void closePeer() {
        try {
            ctxPeer.send("QUIT");
            String line = ctxPeer.next(System.nanoTime() + timeout.plusSeconds(30).toNanos());
            if (!line.equals("CLOSED")) {
                throw new IllegalStateException("context peer: expected CLOSED, got '" + line + "'");
            }
        } finally {
            ctxPeer.close(Duration.ofSeconds(10));
        }
    }

    private static <T> T await(CompletableFuture<T> f, long deadline) {
        try {
            return f.get(Math.max(1, deadline - System.nanoTime()), TimeUnit.NANOSECONDS);
        } catch (java.util.concurrent.TimeoutException e) {
            return null;
        } catch (java.util.concurrent.ExecutionException e) {
            return null; // the request's state says why
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IllegalStateException("interrupted", e);
        }
    }

    @Override
    public void close() {
        sync.shutdownNow();
        RuntimeException failure = null;
        try {
            gen.close();
        } catch (RuntimeException e) {
            failure = e;
        }
        try {
            if (ctx != null) {
                ctx.close();
            } else {
                closePeer();
            }
        } catch (RuntimeException e) {
            if (failure == null) {
                failure = e;
            } else {
                failure.addSuppressed(e);
            }
        }
        if (failure != null) {
            throw failure;
        }
    }
}
