package dev.kvtransfer.core.transfer;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.KvTransferException;
import dev.kvtransfer.api.format.Support;
import dev.kvtransfer.api.layout.BlockDistribution;
import dev.kvtransfer.api.layout.RankMapping;
import dev.kvtransfer.api.layout.TargetRanks;
import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.memory.MemoryKind;
import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.api.model.CommState;
import dev.kvtransfer.api.model.ContextPhaseParams;
import dev.kvtransfer.api.model.RequestInfo;
import dev.kvtransfer.api.transport.Connection;
import dev.kvtransfer.api.transport.Tags;
import dev.kvtransfer.core.journal.TransferJournal;
import dev.kvtransfer.core.protocol.ReadySignalFlyweight;
import dev.kvtransfer.core.protocol.RequestHeaderFlyweight;
import dev.kvtransfer.core.protocol.RequestInfoFrame;
import dev.kvtransfer.core.timing.EpochClock;

import java.nio.ByteBuffer;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;

/**
 * The generation side's handshake for one request: connect to the counterparts, send each the request header
 * ({@link RequestHeaderFlyweight}) and info frame ({@link RequestInfoFrame}) atomically per connection, wait for
 * every ready signal ({@link ReadySignalFlyweight}) on the request's data tag (a refusal fails the request with the
 * responder's code and reason) and build the session that receives the data.
 */
final class GenerationHandshake {
    private final TransferEnv env;
    private final ControlBuffers control;
    private final PushReceive push;
    private final CacheReceiver owner;
    private final Map<String, Object> connectionLocks = new ConcurrentHashMap<>();
    private final LocalOneCopy localOneCopy;

    GenerationHandshake(TransferEnv env, ControlBuffers control, PushReceive push, CacheReceiver owner) {
        this.env = env;
        this.owner = owner;
        this.control = control;
        this.push = push;
        this.localOneCopy = new LocalOneCopy(env);
    }

    /**
     * Sends the infos and waits for the ready signals; returns the session, or null when nothing is to move. With
     * {@code postedReady}, when the transport supports it, posts the signals' receives instead and returns null
     * with {@code job.posted} set: the request thread is free, {@link PostedReady} carries the request on.
     */
    DefaultTransferSession handshake(GenerationJob job, int tag, boolean postedReady) {
        TransferHandle h = job.handle;
        long id = h.requestId();
        ContextPhaseParams params = h.contextPhaseParams();
        CacheState self = env.selfCache();
        CacheState ctx = params.contextState().cacheState();
        env.journal().peerContact(TransferJournal.Role.GENERATION, id, params.contextState());
        Support support;
        try {
            support = env.formatter().inquireSupport(self, ctx);
        } catch (RuntimeException e) {
            support = Support.no("the formatter could not check the layouts: " + e);
        }
        if (!support.supported()) {
            announceUnsupported(job, tag, params, support.reason());
            throw new KvTransferException(ErrorCode.UNSUPPORTED_LAYOUT, id, "unsupported layout: "
                    + support.reason(), null);
        }
        TargetRanks targets;
        List<Integer> counterparts;
        try {
            targets = RankMapping.targetRanks(ctx, self, env.selfIndex());
            counterparts = env.formatter().counterparts(self, env.selfIndex(), ctx);
        } catch (IllegalArgumentException e) {
            announceUnsupported(job, tag, params, e.getMessage());
            throw new KvTransferException(ErrorCode.UNSUPPORTED_LAYOUT, id, "unsupported layout: "
                    + e.getMessage(), e);
        }
        if (targets.isEmpty() || counterparts.isEmpty()) {
            h.started(EpochClock.nowNanos());
            return null;
        }
        // Only the counterparts' connections (no list of every rank's per request).
        List<String> addresses = params.contextState().commState().addresses();
        Connection[] conns = new Connection[targets.size()];
        int[] positions = new int[counterparts.size()];
        for (int k = 0; k < counterparts.size(); k++) {
            int rank = counterparts.get(k);
            int pos = targets.peerRanks().indexOf(rank);
            if (pos < 0 || rank >= addresses.size()) {
                throw new KvTransferException(ErrorCode.INTERNAL, id, "formatter counterpart rank " + rank
                        + " is not among the target ranks " + targets.peerRanks() + " of the context instance", null);
            }
            positions[k] = pos;
            conns[pos] = env.connections().connection(addresses.get(rank));
        }
        int totalBlocks = BlockDistribution.blocksFor(h.promptLength(), ctx.tokensPerBlock());
        int reused = h.reusedBlocks();
        if (reused > totalBlocks) {
            throw new KvTransferException(ErrorCode.MALFORMED, id, reused + " reused blocks but the prompt of "
                    + h.promptLength() + " tokens has " + totalBlocks, null);
        }
        int partial = h.partialReuseTokens();
        if (partial > 0 && (reused >= totalBlocks || partial >= ctx.tokensPerBlock())) {
            throw new KvTransferException(ErrorCode.MALFORMED, id, "partial reuse of " + partial + " tokens of block "
                    + reused + ": the prompt has " + totalBlocks + " blocks of " + ctx.tokensPerBlock()
                    + " tokens, so no such partly held block", null);
        }
        // As upstream's kvCacheTransferStart on the generation side: the handshake begins now.
        h.started(EpochClock.nowNanos());
        ControlAuth auth = env.auth();
        byte[] nonce = auth.nonce();
        int flags = (env.config().partChecksums() ? RequestInfo.FLAG_PART_CHECKSUMS : 0)
                | (env.config().coalesce() ? 0 : RequestInfo.FLAG_NO_COALESCE)
                | (partial > 0 ? RequestInfo.FLAG_PARTIAL_REUSE : 0)
                | (auth.enabled() ? RequestInfo.FLAG_TOKENS_CHECKSUM : 0);
        // With authentication the context side compares it with the checksum the request token was issued for.
        int tokensChecksum = auth.enabled() ? params.tokensChecksum() : 0;
        // Pull where every rank of both instances is local, from a size on, moves as one-copy writes too
        // (LocalOneCopy).
        boolean grant = env.config().transferMode() == dev.kvtransfer.core.TransceiverConfig.TransferMode.PUSH
                || localOneCopy.applies(params.contextState(), totalBlocks - reused);
        List<dev.kvtransfer.api.format.PeerPool.Grant> grants = grant && reused < totalBlocks
                ? push.registerGrants(job, totalBlocks, reused, writers(conns)) : List.of();
        if (!grants.isEmpty() && env.config().partChecksums()) {
            flags |= RequestInfo.FLAG_PROGRESS_NOTICES; // checks what was written while the rest is written
        }
        if (grants.isEmpty() && (long) (totalBlocks - reused) * env.cache().layout().blockBytes()
                > CacheSender.INLINE_SEND_BYTES) {
            // A pull above the inline size: the context ranks send once this rank's receive started (go), so no
            // context sender thread waits for a receive that waits for a thread (core README, pulls and threads).
            flags |= RequestInfo.FLAG_PULL_GO;
            job.goPeers = positions;
        }
        // Taken over, not copied: the request's own arrays (never changed after it was built) and fresh ones.
        RequestInfo info = RequestInfo.ofOwnedArrays(id, totalBlocks - 1, h.lastBlockKey(), env.selfState(), tag,
                env.config().chunkBytes(), reused, h.blockHashes(), h.blockIds(), params.requestToken(), nonce,
                System.currentTimeMillis(), flags, env.cache().blocksPerRegion(), grants, tokensChecksum);
        int infoBytes = info.messageSize();
        int mac = auth.macBytes();
        int infoAt = RequestHeaderFlyweight.LENGTH;
        owner.expect(h, positions.length);
        int[] readyAt = new int[positions.length];
        int[] ctxBlocks = new int[positions.length];
        int end = infoAt + infoBytes + mac;
        for (int k = 0; k < positions.length; k++) {
            int rank = targets.peerRanks().get(positions[k]);
            ctxBlocks[k] = BlockDistribution.count(totalBlocks, ctx.contextParallelism(), ctx.cpRank(rank));
            readyAt[k] = end;
            end += ReadySignalFlyweight.length(ctxBlocks[k], mac);
        }
        Asking a = new Asking(job, tag, targets, ctx, conns, positions, readyAt, ctxBlocks, mac, nonce,
                env.connections().localAddress(), totalBlocks, reused, control.acquire(end));
        try {
            ByteBuffer bb = a.lease.bytes();
            new RequestHeaderFlyweight().wrap(bb, 0).requestSend(RequestInfoFrame.length(infoBytes, mac), id, tag);
            info.writeMessage(bb, infoAt);
            for (int pos : positions) {
                Connection c = conns[pos];
                if (mac > 0) {
                    // The MAC binds the info to the context rank it is for: it cannot be replayed to another.
                    auth.infoMacInto(bb, infoAt, infoBytes, Texts.utf8(c.peer()), infoAt + infoBytes);
                }
                try {
                    sendInfo(job, c, a.lease.buffer(), infoAt, infoBytes + mac, tag);
                    env.journal().requestInfoSent(id, targets.peerRanks().get(pos));
                } catch (KvTransferException e) {
                    throw new KvTransferException(e.code(), id, "request info to context rank "
                            + targets.peerRanks().get(pos) + " (" + c.peer() + ") failed: " + e.getMessage(), e);
                }
            }
            job.timing.requestInfo(System.nanoTime());
        } catch (RuntimeException e) {
            a.lease.close();
            throw e;
        }
        if (postedReady && PostedReady.post(owner, this, a)) {
            job.posted = true;
            return null;
        }
        try {
            for (int k = 0; k < positions.length; k++) {
                Connection c = conns[positions[k]];
                try {
                    c.recv(tag, a.lease.buffer(), readyAt[k], a.readyLength(k), remaining(job,
                            "waiting for the ready signal of context rank " + a.rank(k)));
                } catch (KvTransferException e) {
                    throw noReady(a, k, e);
                }
                if (!accept(a, k)) {
                    throw refusal(a, k);
                }
            }
            a.lease.reusable();
        } finally {
            a.lease.close();
        }
        return session(a);
    }

    /** The session that moves the data, once every ready signal was accepted ({@link #accept}). */
    DefaultTransferSession session(Asking a) {
        GenerationJob job = a.job;
        TransferHandle h = job.handle;
        job.timing.preparation(System.nanoTime());
        int[] tagArr = new int[a.targets.size()];
        java.util.Arrays.fill(tagArr, a.tag);
        if (!job.push) {
            push.revokeGrants(job); // the context side pulls after all (its formatter cannot push): nothing is written
        }
        return DefaultTransferSession.builder(h.requestId(), false).states(env.selfState(), a.ctx, a.targets)
                .blocks(h.blockIds(), a.totalBlocks).connections(a.conns, tagArr, env.config().chunkBytes())
                .resources(env.pool(), env.buffers(), env.peerExecutor()).deadline(job.deadlineNanos, job.timing)
                .journal(env.journal()).reusedBlocks(a.reused)
                // Without coalescing both sides plan without the peer's ids: one message per block.
                .peerBlockIds(job.push || env.config().coalesce() ? a.peerIds : null).peerBlocksPerRegion(a.peerBpr)
                .checksums(env.config().partChecksums()).controlBuffers(control)
                .transportCapabilities(env.connections().capabilities()).build();
    }

    /**
     * Checks counterpart {@code k}'s ready signal, now in the lease: its MAC, then whether it refused, then (through
     * {@link CacheReceiver#readyArrived}, the state machine) that it agrees with the others on push / pull and layer
     * by layer. The one check of both paths: the blocking one (the request thread's) and the posted one (a transport
     * thread's, {@link PostedReady}).
     *
     * @return true when accepted; false when it refused (its reason follows on the tag: {@link #refusal})
     * @throws KvTransferException UNAUTHORIZED (bad MAC) or MALFORMED (disagreement)
     */
    boolean accept(Asking a, int k) {
        long id = a.job.handle.requestId();
        Connection c = a.conns[a.positions[k]];
        int rank = a.rank(k);
        int at = a.readyAt[k];
        int len = a.readyLength(k);
        ByteBuffer bb = a.lease.bytes();
        ReadySignalFlyweight ready = a.readyFly.wrap(bb, at);
        if (a.mac > 0) {
            if (!env.auth().readyMacValid(bb, at, len - a.mac, id, a.tag, a.nonce, Texts.utf8(c.peer()),
                    Texts.utf8(a.selfAddress))) {
                env.metrics().error(new KvTransferException(ErrorCode.UNAUTHORIZED, id, "ready signal on tag "
                        + a.tag + " from " + Texts.peer(c.peer()) + " failed authentication; refused", null));
                throw new KvTransferException(ErrorCode.UNAUTHORIZED, id, "the ready signal of context rank "
                        + rank + " (" + Texts.peer(c.peer()) + ") failed authentication (forged, replayed or a"
                        + " different deployment secret)", null);
            }
        }
        env.journal().readySignalReceived(id, rank, !ready.refused());
        if (ready.refused()) {
            return false;
        }
        owner.readyArrived(a.job, ready.push(), ready.layered());
        a.peerIds[a.positions[k]] = ready.blockIds(a.ctxBlocks[k], id, rank);
        a.peerBpr[a.positions[k]] = ready.blocksPerRegion();
        return true;
    }

    /** Reads the reason of counterpart {@code k}'s refusal (it follows the signal on the tag); blocks briefly. */
    KvTransferException refusal(Asking a, int k) {
        return Signals.readRefusal(env.buffers(), a.conns[a.positions[k]], a.tag, remaining(a.job,
                "reading a refusal"), a.job.handle.requestId());
    }

    /** Counterpart {@code k}'s ready signal did not come: the transport's failure, naming the request and rank. */
    static KvTransferException noReady(Asking a, int k, KvTransferException e) {
        Connection c = a.conns[a.positions[k]];
        return new KvTransferException(e.code(), a.job.handle.requestId(), "no ready signal from context rank "
                + a.rank(k) + " (" + c.peer() + "): " + e.getMessage(), e);
    }

    /** A request between its infos and its session: what its ready signals are checked against. */
    static final class Asking {
        final GenerationJob job;
        final int tag;
        final TargetRanks targets;
        final CacheState ctx;
        final Connection[] conns;
        /** Counterpart k's position among the target ranks. */
        final int[] positions;
        /** Where counterpart k's ready signal lands in the lease. */
        final int[] readyAt;
        final int[] ctxBlocks;
        final int mac;
        final byte[] nonce;
        final String selfAddress;
        final int totalBlocks;
        final int reused;
        /** Header, info and every ready signal; given back once no receive can touch it any more. */
        final ControlBuffers.Lease lease;
        final int[][] peerIds;
        final int[] peerBpr;
        final ReadySignalFlyweight readyFly = new ReadySignalFlyweight();

        Asking(GenerationJob job, int tag, TargetRanks targets, CacheState ctx, Connection[] conns, int[] positions,
               int[] readyAt, int[] ctxBlocks, int mac, byte[] nonce, String selfAddress, int totalBlocks,
               int reused, ControlBuffers.Lease lease) {
            this.job = job;
            this.tag = tag;
            this.targets = targets;
            this.ctx = ctx;
            this.conns = conns;
            this.positions = positions;
            this.readyAt = readyAt;
            this.ctxBlocks = ctxBlocks;
            this.mac = mac;
            this.nonce = nonce;
            this.selfAddress = selfAddress;
            this.totalBlocks = totalBlocks;
            this.reused = reused;
            this.lease = lease;
            this.peerIds = new int[targets.size()][];
            this.peerBpr = new int[targets.size()];
        }

        int rank(int k) {
            return targets.peerRanks().get(positions[k]);
        }

        int readyLength(int k) {
            return ReadySignalFlyweight.length(ctxBlocks[k], mac);
        }
    }

    /**
     * The layouts cannot be converted, so there are no counterparts to compute: the request info goes to every
     * context rank, each of which refuses it and fails its own copy of the request with
     * {@code UNSUPPORTED_LAYOUT} and the reason. Their refusals are not awaited (the request fails here at once);
     * they arrive on this request's data tag, which is never reused soon (see {@link DataTags}).
     */
    private void announceUnsupported(GenerationJob job, int tag, ContextPhaseParams params, String reason) {
        CommState ctxComm = params.contextState().commState();
        try {
            List<Connection> all = env.connections().getConnections(ctxComm);
            int totalBlocks = BlockDistribution.blocksFor(job.handle.promptLength(),
                    params.contextState().cacheState().tokensPerBlock());
            boolean auth = env.auth().enabled();
            RequestInfo info = new RequestInfo(job.handle.requestId(), totalBlocks - 1, new long[0], env.selfState(),
                    tag, env.config().chunkBytes(), 0, new long[0], job.handle.blockIds(),
                    params.requestToken(), env.auth().nonce(), System.currentTimeMillis(),
                    auth ? RequestInfo.FLAG_TOKENS_CHECKSUM : 0, 1, List.of(), auth ? params.tokensChecksum() : 0);
            sendInfos(job, all, info);
        } catch (RuntimeException e) {
            env.metrics().error(new KvTransferException(ErrorCode.UNSUPPORTED_LAYOUT, job.handle.requestId(),
                    "could not tell the context ranks that the layouts are unsupported (" + reason + "): "
                    + e.getMessage(), e));
        }
    }

    private void sendInfos(GenerationJob job, List<Connection> conns, RequestInfo info) {
        byte[] bytes = info.toBytes();
        int mac = env.auth().macBytes();
        int at = RequestHeaderFlyweight.LENGTH;
        try (MemoryBuffer ctl = env.buffers().allocate(at + bytes.length + mac, MemoryKind.HOST)) {
            ByteBuffer bb = ctl.asByteBuffer();
            new RequestHeaderFlyweight().wrap(bb, 0).requestSend(RequestInfoFrame.length(bytes.length, mac),
                    info.requestId(), info.dataTag());
            bb.put(at, bytes);
            for (Connection c : conns) {
                if (mac > 0) {
                    bb.put(at + bytes.length, env.auth().mac("INFO", bytes, Texts.utf8(c.peer())));
                }
                sendInfo(job, c, ctl, at, bytes.length + mac, info.dataTag());
            }
        }
    }

    private void sendInfo(GenerationJob job, Connection c, MemoryBuffer ctl, int infoAt, int infoBytes, int tag) {
        Object connLock = connectionLocks.computeIfAbsent(c.peer(), k -> new Object());
        // The info goes on the request's own data tag, which its header names: a lost or duplicated info is that
        // request's alone. Header and info still go together per connection, so a header's info is never far behind.
        synchronized (connLock) {
            c.send(Tags.ID_TAG, ctl, 0, RequestHeaderFlyweight.LENGTH, remaining(job, "sending the request header"));
            c.send(tag, ctl, infoAt, infoBytes, remaining(job, "sending the request info"));
        }
    }

    static Duration remaining(GenerationJob job, String what) {
        long left = job.deadlineNanos - System.nanoTime();
        if (left <= 0) {
            throw new KvTransferException(ErrorCode.TIMEOUT, job.handle.requestId(), "deadline passed before "
                    + what, null);
        }
        return Waits.left(left);
    }

    /** The request's counterparts: the only peers its push grants take writes from. */
    private static java.util.Set<String> writers(Connection[] conns) {
        java.util.Set<String> w = new java.util.HashSet<>();
        for (Connection c : conns) {
            if (c != null) {
                w.add(c.peer());
            }
        }
        return w;
    }
}
