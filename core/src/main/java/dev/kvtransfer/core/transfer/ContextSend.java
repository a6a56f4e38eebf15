package dev.kvtransfer.core.transfer;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.KvTransferException;
import dev.kvtransfer.api.layout.BlockDistribution;
import dev.kvtransfer.api.layout.TargetRanks;
import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.api.model.RequestInfo;
import dev.kvtransfer.api.transport.Connection;
import dev.kvtransfer.core.protocol.PushNoticeFlyweight;
import dev.kvtransfer.core.protocol.ReadySignalFlyweight;
import dev.kvtransfer.core.timing.EpochClock;
import dev.kvtransfer.core.timing.TransferTiming;
import dev.kvtransfer.core.transfer.ContextRequests.Asked;
import dev.kvtransfer.core.transfer.ContextRequests.Dispatch;
import dev.kvtransfer.core.transfer.ContextRequests.Refusal;

import java.nio.ByteBuffer;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.function.BooleanSupplier;

/**
 * Sends what {@link ContextRequests} dispatched, on a sender thread or inline: the counterparts' agreement, the
 * session, the ready signals ({@link ReadySignalFlyweight}), the pull / push / layer-wise move, the local request's
 * outcome; and the refusals ({@link Signals}) of requests that will not be served.
 */
final class ContextSend {
    private final TransferEnv env;
    private final ControlBuffers control;
    private final BooleanSupplier closing;

    ContextSend(TransferEnv env, ControlBuffers control, BooleanSupplier closing) {
        this.env = env;
        this.control = control;
        this.closing = closing;
    }

    void sendRefusals(List<Refusal<Connection>> refusals) {
        for (Refusal<Connection> r : refusals) {
            try {
                sendReady(r.conn(), r.info(), false, null, env.controlTimeout());
                Signals.sendReason(env.buffers(), r.conn(), r.info().dataTag(), r.code(), r.reason(),
                        env.controlTimeout());
                env.journal().readySignalSent(r.requestId(), -1, false);
            } catch (RuntimeException e) {
                env.metrics().error(new KvTransferException(TransferErrors.codeOf(e), r.requestId(), "could not tell "
                        + Texts.peer(r.conn().peer()) + " that the request was refused (" + r.reason() + "): "
                        + e.getMessage(), e));
            }
        }
    }

    /**
     * Sends a ready signal on the request's data tag: status, this rank's block count and ids (zeros for a
     * refusal), and with authentication the MAC binding it to the request's nonce and both ends.
     */
    private void sendReady(Connection conn, RequestInfo info, boolean ok, int[] ids, Duration timeout) {
        sendReady(conn, info, ok, ids, timeout, false, false);
    }

    private void sendReady(Connection conn, RequestInfo info, boolean ok, int[] ids, Duration timeout, boolean push,
                           boolean layered) {
        CacheState self = env.selfCache();
        int n = BlockDistribution.count(info.indexFromEnd() + 1, self.contextParallelism(),
                self.cpRank(env.selfIndex()));
        ControlAuth auth = env.auth();
        int mac = auth.macBytes();
        int len = ReadySignalFlyweight.length(n, mac);
        try (ControlBuffers.Lease lease = control.acquire(len)) {
            MemoryBuffer buf = lease.buffer();
            ByteBuffer bb = lease.bytes();
            new ReadySignalFlyweight().wrap(bb, 0).write(ok ? ReadySignalFlyweight.status(push, layered)
                    : ReadySignalFlyweight.STATUS_REFUSED, n, env.cache().blocksPerRegion(), ids);
            if (mac > 0) {
                auth.readyMacInto(bb, len - mac, info, Texts.utf8(env.connections().localAddress()),
                        Texts.utf8(conn.peer()));
            }
            conn.send(info.dataTag(), buf, 0, len, timeout);
            lease.reusable();
        }
    }

    /**
     * A dispatched request whose ready signals went out: what its move needs. The move may then run on another
     * thread ({@link #finish}); until it has, the request holds its session.
     */
    static final class Signalled {
        final Dispatch<Connection, TransferHandle> d;
        final DefaultTransferSession session;
        final TransferTiming timing;
        final boolean push;
        final boolean layered;
        /** Whether this rank moves bytes for the request ({@code needSendCache}); else it only signals. */
        final boolean moves;
        /** A pull: per counterpart, whether its go comes before anything moves ({@link PullGo}); null for none. */
        final boolean[] go;

        Signalled(Dispatch<Connection, TransferHandle> d, DefaultTransferSession session, TransferTiming timing,
                boolean push, boolean layered, boolean moves, boolean[] go) {
            this.d = d;
            this.session = session;
            this.timing = timing;
            this.push = push;
            this.layered = layered;
            this.moves = moves;
            this.go = go;
        }
    }

    /**
     * Sends a dispatched request on the calling thread: {@link #signal}, then {@link #finish}. Never a pull that waits
     * for its requester's go ({@code ContextDispatch.serveInline} leaves those to {@link PullGo}).
     *
     * @param d the request
     */
    void send(Dispatch<Connection, TransferHandle> d) {
        Signalled s = signal(d);
        if (s != null) {
            finish(s);
        }
    }

    /** @return the reused control buffers (a pull's go lands in one: {@link PullGo}) */
    ControlBuffers control() {
        return control;
    }

    /**
     * The first step of a dispatched request: checks the counterparts agree, builds the session and sends every
     * counterpart its ready signal. The signals are small messages that never wait for the peer, so this runs on
     * the dispatching thread: a ready signal must never wait behind another request's move, or two context ranks
     * that took two requests in opposite orders would each wait for the generation side, which waits for the
     * other's signal (a cycle that only the deadline breaks).
     *
     * @param d the request
     * @return the signalled request, or null when it failed here (the local request failed, counterparts told)
     */
    Signalled signal(Dispatch<Connection, TransferHandle> d) {
        TransferHandle h = d.local();
        long id = d.requestId();
        int n = d.targets().size();
        List<Asked<Connection>> asked = d.asked();
        TransferTiming timing = new TransferTiming(id, d.readyNanos());
        timing.requestInfo(d.firstInfoNanos());
        Connection[] conns = new Connection[n];
        int[] tags = new int[n];
        for (int i = 0; i < n; i++) {
            conns[i] = asked.get(i).conn();
            tags[i] = asked.get(i).info().dataTag();
        }
        long chunk = asked.get(0).info().chunkBytes();
        DefaultTransferSession session = null;
        // The transfer starts when the request is dispatched (every counterpart has asked and it is ready).
        h.started(EpochClock.nowNanos());
        try {
            if (closing.getAsBoolean()) {
                throw new KvTransferException(ErrorCode.CANCELLED, id, "the transceiver is closing", null);
            }
            int totalBlocks = BlockDistribution.blocksFor(h.promptLength(), env.selfCache().tokensPerBlock());
            for (Asked<Connection> a : asked) {
                if (a.info().indexFromEnd() + 1 != totalBlocks) {
                    throw new KvTransferException(ErrorCode.MALFORMED, id, "generation rank "
                            + a.info().requesterState().selfIndex() + " asked for " + (a.info().indexFromEnd() + 1)
                            + " blocks but the context request has " + totalBlocks + " (prompt "
                            + h.promptLength() + " tokens)", null);
                }
            }
            int reused = checkReuse(d, h, totalBlocks);
            checkPartialReuse(d, reused);
            checkBlockKey(d, h);
            boolean checksums = asked.get(0).info().partChecksums();
            boolean coalesce = asked.get(0).info().coalesce();
            int[][] peerIds = new int[n][];
            int[] peerBpr = new int[n];
            for (int i = 0; i < n; i++) {
                peerIds[i] = asked.get(i).info().blockIds();
                peerBpr[i] = asked.get(i).info().blocksPerRegion();
                if (asked.get(i).info().partChecksums() != checksums) {
                    throw new KvTransferException(ErrorCode.MALFORMED, id, "generation ranks of request " + id
                            + " disagree on part checksums", null);
                }
                if (asked.get(i).info().coalesce() != coalesce) {
                    throw new KvTransferException(ErrorCode.MALFORMED, id, "generation ranks of request " + id
                            + " disagree on coalescing (" + dev.kvtransfer.core.TransceiverConfig.P_COALESCE + ")",
                            null);
                }
            }
            // A generation rank with no block past the reused prefix (a CP rank of a short prompt) registers no
            // grant, so its info reads as pull: it receives nothing either way and does not decide the mode.
            boolean push = false;
            if (canPush()) {
                for (int i = 0; i < asked.size() && !push; i++) {
                    push = asked.get(i).info().push(); // a loop: a stream here cost every request a pipeline
                }
            }
            dev.kvtransfer.api.format.PeerPool[] pools = null;
            if (push) {
                pools = new dev.kvtransfer.api.format.PeerPool[n];
                for (int i = 0; i < n; i++) {
                    RequestInfo ai = asked.get(i).info();
                    if (!ai.push() && receives(ai, totalBlocks, reused)) {
                        throw new KvTransferException(ErrorCode.MALFORMED, id, "generation ranks of request " + id
                                + " disagree on push and pull", null);
                    }
                    pools[i] = new dev.kvtransfer.api.format.PeerPool(d.peerCache(), ai.requesterState().selfIndex(),
                            ai.blockIds(), ai.blocksPerRegion(), ai.grants());
                }
            }
            boolean layered = h.layerWise() && env.formatter().capabilities().contains(
                    push ? dev.kvtransfer.api.format.FormatterCapability.PUSH
                            : dev.kvtransfer.api.format.FormatterCapability.LAYER_RANGES);
            session = DefaultTransferSession.builder(id, true).states(env.selfState(), d.peerCache(), d.targets())
                    .blocks(h.blockIds(), totalBlocks).connections(conns, tags, chunk)
                    .resources(env.pool(), env.buffers(), env.peerExecutor()).deadline(d.deadlineNanos(), timing)
                    .journal(env.journal()).reusedBlocks(reused)
                    // Without coalescing both sides plan without the peer's ids: one message per block.
                    .peerBlockIds(push || coalesce ? peerIds : null).peerBlocksPerRegion(peerBpr)
                    .checksums(checksums).push(pools).controlBuffers(control)
                    .transportCapabilities(env.connections().capabilities()).build();
            if (push) {
                boolean[] progress = new boolean[n];
                for (int i = 0; i < n; i++) {
                    progress[i] = asked.get(i).info().progressNotices();
                }
                session.progressNotices(progress);
            }
            for (int i = 0; i < n; i++) {
                try {
                    sendReady(conns[i], asked.get(i).info(), true, h.blockIds(),
                            session.remaining("sending the ready signal"), push, layered);
                    env.journal().readySignalSent(id, d.targets().peerRanks().get(i), true);
                } catch (KvTransferException e) {
                    throw new KvTransferException(e.code(), id, "ready signal to generation rank "
                            + d.targets().peerRanks().get(i) + " (" + Texts.peer(conns[i].peer()) + ") failed: "
                            + e.getMessage(), e);
                }
            }
            timing.preparation(System.nanoTime());
            boolean[] go = null;
            for (int i = 0; i < n && !push; i++) {
                if (asked.get(i).info().pullGo()) {
                    if (go == null) {
                        go = new boolean[n];
                    }
                    go[i] = true;
                }
            }
            return new Signalled(d, session, timing, push, layered,
                    env.formatter().needSendCache(env.selfCache(), env.selfIndex(), d.peerCache()), go);
        } catch (RuntimeException e) {
            failed(d, e, session);
            if (session != null) {
                session.close();
            }
            return null;
        }
    }

    /**
     * The second step: moves this rank's share (when it has one) and completes the local request, or fails it.
     * Closes the session.
     *
     * @param s a request {@link #signal} returned
     */
    void finish(Signalled s) {
        try {
            if (s.moves) {
                move(s.d.local(), s.session, s.push, s.layered);
            }
        } catch (RuntimeException e) {
            failMove(s, e);
            return;
        }
        conclude(s);
    }

    /** Completes a request whose share moved (or had nothing to move), or fails it; closes its session. */
    void conclude(Signalled s) {
        try {
            complete(s);
        } catch (RuntimeException e) {
            failed(s.d, e, s.session);
        } finally {
            s.session.close();
        }
    }

    /** Completes a request whose share moved; throws what fails it. */
    private void complete(Signalled s) {
        TransferHandle h = s.d.local();
        DefaultTransferSession session = s.session;
        TransferTiming timing = s.timing;
        timing.postprocess(System.nanoTime());
        long bytes = session.movedBytes();
        int messages = session.messageCount();
        long[] perPeer = session.peerBytesAfterClose(); // the session moves nothing more: no copy
        List<Integer> peers = session.targets().peerRanks();
        session.close();
        dev.kvtransfer.core.CopyLedger ledger = session.copyLedger();
        h.recordMessages(messages, session.isPush());
        h.recordLedger(ledger);
        long end = EpochClock.nowNanos();
        h.succeed(bytes, end, () -> {
            env.metrics().outcome(true, true, bytes);
            env.metrics().messages(true, messages);
            env.metrics().ledger(true, ledger);
            env.metrics().completed(true, end - h.startedEpochNanos(end), peers, perPeer);
            if (env.timing() != null) {
                env.timing().submit(true, timing);
            }
        });
    }

    /** Fails a signalled request whose move failed, and closes its session. */
    void failMove(Signalled s, RuntimeException e) {
        try {
            failed(s.d, e, s.session);
        } finally {
            s.session.close();
        }
    }

    /**
     * Ends a signalled request whose move never ran (the transceiver closed before a sender thread took it). Its
     * counterparts were told ready already: a push peer gets an abort notice, a pull peer sees the transport close.
     */
    void drop(Signalled s, String why) {
        try {
            failed(s.d, new KvTransferException(ErrorCode.CANCELLED, s.d.requestId(), why, null), s.session);
        } finally {
            s.session.close();
        }
    }

    /** Fails a dispatched request; without a session yet, every counterpart is told why, so none waits. */
    private void failed(Dispatch<Connection, TransferHandle> d, RuntimeException e, DefaultTransferSession session) {
        long id = d.requestId();
        int n = d.targets().size();
        List<Asked<Connection>> asked = d.asked();
        KvTransferException k = TransferErrors.forRequest(e, id, "sending");
        if ((k.code() == ErrorCode.MALFORMED || k.code() == ErrorCode.UNSUPPORTED_LAYOUT) && session == null) {
            // Nothing was signalled yet: tell every counterpart why, so none waits for its deadline.
            List<Refusal<Connection>> refusals = new ArrayList<>();
            for (int i = 0; i < n; i++) {
                refusals.add(new Refusal<>(asked.get(i).conn(), asked.get(i).info(), k.code(), k.getMessage(), id));
            }
            sendRefusals(refusals);
        } else if (k.code() == ErrorCode.CANCELLED && session == null) {
            List<Refusal<Connection>> refusals = new ArrayList<>();
            for (int i = 0; i < n; i++) {
                refusals.add(new Refusal<>(asked.get(i).conn(), asked.get(i).info(), k.code(), "context side closing",
                        id));
            }
            sendRefusals(refusals);
        }
        if (session != null && session.isPush()) {
            abortPush(session, k);
        }
        long moved = session == null ? 0 : session.movedBytes();
        d.local().fail(k, () -> env.metrics().outcome(true, false, moved));
    }

    /** @return whether this rank can write one-sided: the formatter pushes (the transport then needs the capability) */
    private boolean canPush() {
        return env.formatter().capabilities().contains(dev.kvtransfer.api.format.FormatterCapability.PUSH);
    }

    /**
     * Moves this rank's share: pull (format) or push (one-sided writes, then each peer's done notice with what was
     * written), the whole request at once or layer by layer as the engine marks layers ready.
     */
    void move(TransferHandle h, DefaultTransferSession session, boolean push, boolean layered) {
        if (nothingToMove(session)) {
            // The generation side holds every block already: nothing moves (both sides know it). A hybrid model's
            // recurrent states are not blocks: they move whatever the reuse.
            return;
        }
        CacheState self = env.selfCache();
        int first = self.firstLayer(self.ppRank(env.selfIndex()));
        int count = layerCount();
        long deadline = session.deadlineNanos();
        if (!layered && h.layerWise() && !h.awaitLayersReady(count, deadline)) {
            // The formatter moves whole requests only: wait for the last layer, then move all of them.
            throw layersNotReady(h, count);
        }
        PushTrace.at("ctx", h.requestId(), "move", layered ? 1 : 0);
        if (!layered) {
            if (push) {
                env.formatter().push(session, first, count);
                PushTrace.at("ctx", h.requestId(), "pushed-all", -1);
            } else {
                env.formatter().format(session);
            }
        } else {
            for (int l = 0; l < count; l++) {
                if (!h.awaitLayersReady(l + 1, deadline)) {
                    throw layersNotReady(h, l + 1);
                }
                moveLayer(h, session, push, l);
            }
        }
        endMove(session, push);
    }

    /** @return whether this rank's share of a request moves nothing (the generation side holds every block) */
    boolean nothingToMove(DefaultTransferSession session) {
        return session.reusedBlocks() == session.totalBlocks() && env.selfCache().recurrentState() == null;
    }

    /** @return the local layers this rank moves */
    int layerCount() {
        CacheState self = env.selfCache();
        return self.layerCount(self.ppRank(env.selfIndex()));
    }

    /**
     * Moves local layer {@code l} (ready already): pushes it and tells each peer that holds it, or formats it.
     */
    void moveLayer(TransferHandle h, DefaultTransferSession session, boolean push, int l) {
        CacheState self = env.selfCache();
        int g = self.firstLayer(self.ppRank(env.selfIndex())) + l;
        PushTrace.at("ctx", h.requestId(), "ready-seen", l);
        if (push) {
            env.formatter().push(session, g, 1);
            PushTrace.at("ctx", h.requestId(), "pushed", l);
            TargetRanks t = session.targets();
            for (int k = 0; k < t.size(); k++) {
                if (holds(session.peerCacheState(), t.peerRanks().get(k), g)) {
                    session.sendLayerWritten(k, g);
                }
            }
        } else {
            env.formatter().format(session, g, 1);
        }
    }

    /** The end of a move: every peer's done notice (push) or the part checksums (pull). */
    void endMove(DefaultTransferSession session, boolean push) {
        if (push) {
            PushTrace.at("ctx", session.requestId(), "before-done", -1);
            for (int k = 0; k < session.targets().size(); k++) {
                session.sendPushDone(k);
            }
            PushTrace.at("ctx", session.requestId(), "done-sent", -1);
        } else {
            session.sendChecksums();
        }
    }

    KvTransferException layersNotReady(TransferHandle h, int needed) {
        return new KvTransferException(ErrorCode.TIMEOUT, h.requestId(), "context rank " + env.selfIndex() + ": "
                + h.layersReady() + " of " + needed + " layers were marked ready before the deadline", null);
    }

    /** @return whether a rank of a state holds a global layer */
    static boolean holds(CacheState s, int rank, int globalLayer) {
        int pp = s.ppRank(rank);
        int a0 = s.firstLayer(pp);
        return globalLayer >= a0 && globalLayer < a0 + s.layerCount(pp);
    }

    /** Tells every push peer that this rank failed, so none waits for its deadline. */
    private void abortPush(DefaultTransferSession session, KvTransferException k) {
        for (int i = 0; i < session.targets().size(); i++) {
            try {
                session.sendNotice(i, PushNoticeFlyweight.TYPE_ABORT, 0, k.code().ordinal());
            } catch (RuntimeException e) {
                env.metrics().error(new KvTransferException(TransferErrors.codeOf(e), session.requestId(),
                        "could not tell generation rank " + session.targets().peerRanks().get(i) + " that the push "
                        + "failed: " + e.getMessage(), e));
            }
        }
    }

    /** @return whether a generation rank holds a block past the reused prefix (its blocks are contiguous) */
    private static boolean receives(RequestInfo info, int totalBlocks, int reused) {
        CacheState gen = info.requesterState().cacheState();
        int cpRank = gen.cpRank(info.requesterState().selfIndex());
        int first = BlockDistribution.firstGlobalBlock(totalBlocks, gen.contextParallelism(), cpRank);
        int count = BlockDistribution.count(totalBlocks, gen.contextParallelism(), cpRank);
        return count > 0 && first + count > reused;
    }

    /**
     * Partial block reuse: a requester that holds the leading tokens of block {@code reused} gets that block whole
     * (it is never sent from an offset inside it), over its copy. Both cache states must declare partial reuse;
     * otherwise refused naming both values, before a byte moves.
     */
    private void checkPartialReuse(Dispatch<Connection, TransferHandle> d, int reused) {
        boolean partial = d.asked().get(0).info().partialReuse();
        for (Asked<Connection> a : d.asked()) {
            if (a.info().partialReuse() != partial) {
                throw new KvTransferException(ErrorCode.MALFORMED, d.requestId(), "generation ranks of request "
                        + d.requestId() + " disagree on partial reuse", null);
            }
        }
        if (!partial) {
            return;
        }
        boolean theirs = d.asked().get(0).info().requesterState().cacheState().partialReuse();
        boolean ours = env.selfCache().partialReuse();
        if (!theirs || !ours) {
            throw new KvTransferException(ErrorCode.UNSUPPORTED_LAYOUT, d.requestId(), "request " + d.requestId()
                    + ": the generation side reused part of block " + reused + " (generation partialReuse " + theirs
                    + ", context partialReuse " + ours + "); the block is sent whole over the requester's copy only "
                    + "when both cache states declare partialReuse (nothing was sent)", null);
        }
    }

    /**
     * The key of the prompt's last block (LoRA task id, extra keys): every counterpart's must be this request's,
     * or the same tokens would bring another adapter's KV. Refused naming the request and both keys, before a byte
     * moves.
     */
    private static void checkBlockKey(Dispatch<Connection, TransferHandle> d, TransferHandle h) {
        long[] ours = h.lastBlockKey();
        for (Asked<Connection> a : d.asked()) {
            if (!a.info().lastBlockKeyMatches(ours)) {
                throw new KvTransferException(ErrorCode.UNSUPPORTED_LAYOUT, d.requestId(), "request "
                        + d.requestId() + ": generation rank " + a.info().requesterState().selfIndex()
                        + " expects last block key " + Texts.key(a.info().lastBlockKey()) + " but the context side "
                        + "computed the request under " + Texts.key(ours) + " (another LoRA adapter or other extra "
                        + "keys: other KV; nothing was sent)", null);
            }
        }
    }

    /**
     * Prefix reuse: every counterpart names the same reused prefix, and each reused block's hash is this
     * request's hash of that block; a disagreement is refused naming the first differing block, never moved.
     *
     * @return the reused block count
     */
    private int checkReuse(Dispatch<Connection, TransferHandle> d, TransferHandle h, int totalBlocks) {
        List<Asked<Connection>> asked = d.asked();
        RequestInfo first = asked.get(0).info();
        int reused = first.reusedBlocks();
        long[] theirs = reused == 0 ? null : first.reusedBlockHashes(); // a copy: only when there is a prefix
        for (int i = 1; i < asked.size(); i++) { // indexed: no iterator per request
            Asked<Connection> a = asked.get(i);
            if (a.info().reusedBlocks() != reused
                    || reused > 0 && !java.util.Arrays.equals(a.info().reusedBlockHashes(), theirs)) {
                throw new KvTransferException(ErrorCode.MALFORMED, d.requestId(), "generation ranks of request "
                        + d.requestId() + " disagree on the reused prefix: " + reused + " vs " + a.info().reusedBlocks()
                        + " blocks", null);
            }
        }
        if (reused == 0) {
            return 0;
        }
        long[] ours = h.blockHashes();
        if (ours.length == 0) {
            throw new KvTransferException(ErrorCode.UNSUPPORTED_LAYOUT, d.requestId(), "the generation side reuses "
                    + reused + " blocks but this context request carries no block hashes to check them against "
                    + "(create it with TransferRequest.context(id, prompt, blocks, blockHashes))", null);
        }
        if (ours.length < totalBlocks) {
            throw new KvTransferException(ErrorCode.INTERNAL, d.requestId(), "the context request has " + ours.length
                    + " block hashes for " + totalBlocks + " blocks", null);
        }
        for (int b = 0; b < reused; b++) {
            if (ours[b] != theirs[b]) {
                throw new KvTransferException(ErrorCode.UNSUPPORTED_LAYOUT, d.requestId(), "prefix mismatch at block "
                        + b + " of " + totalBlocks + ": the generation side's reused block hash is "
                        + Long.toHexString(theirs[b]) + ", the context side's is " + Long.toHexString(ours[b])
                        + " (the two sides' prefix caches disagree; nothing was sent)", null);
            }
        }
        return reused;
    }
}
