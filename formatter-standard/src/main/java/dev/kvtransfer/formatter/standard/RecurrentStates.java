package dev.kvtransfer.formatter.standard;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.KvTransferException;
import dev.kvtransfer.api.cache.RecurrentStateView;
import dev.kvtransfer.api.format.TransferSession;
import dev.kvtransfer.api.layout.TargetRanks;
import dev.kvtransfer.api.memory.BufferManager;
import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.api.model.LayerKind;
import dev.kvtransfer.api.model.RecurrentStateShape;

import java.util.Arrays;
import java.util.List;
import java.util.Objects;

/**
 * The recurrent states of a hybrid model, moved after the KV parts of the same request on the same connections
 * (one transfer): per peer, for every recurrent layer both ranks hold (ascending), the conv channels both hold, then
 * the SSM heads both hold. TP splits channels and heads in contiguous ranges, so each is one run on both sides; PP
 * splits layers; only CP rank 0 of each side holds states ({@link RecurrentStateShape#holdsState}). Both sides derive
 * the same runs from the two cache states, so a disagreement shows as a length mismatch, never as misplaced bytes.
 */
final class RecurrentStates {
    private RecurrentStates() {
    }

    /** Adds to {@code why} every reason the recurrent halves of the two states cannot be moved. */
    static void unsupported(CacheState self, CacheState peer, List<String> why) {
        RecurrentStateShape s = self.recurrentState();
        RecurrentStateShape p = peer.recurrentState();
        if (s == null && p == null) {
            return;
        }
        if (s == null || p == null) {
            why.add("recurrentState: self " + (s == null ? "none" : s.pattern()) + ", peer "
                    + (p == null ? "none" : p.pattern()) + " (both sides must tag the same layers recurrent)");
            return;
        }
        int before = why.size();
        differ(why, "recurrentState.layerKinds", s.pattern(), p.pattern());
        differ(why, "recurrentState.convChannels", s.convChannels(), p.convChannels());
        differ(why, "recurrentState.convWidth", s.convWidth(), p.convWidth());
        differ(why, "recurrentState.ssmHeads", s.ssmHeads(), p.ssmHeads());
        differ(why, "recurrentState.ssmHeadDim", s.ssmHeadDim(), p.ssmHeadDim());
        differ(why, "recurrentState.ssmStateDim", s.ssmStateDim(), p.ssmStateDim());
        differ(why, "recurrentState.convDataType", s.convDataType(), p.convDataType());
        differ(why, "recurrentState.ssmDataType", s.ssmDataType(), p.ssmDataType());
        if (self.attentionDpEnabled() || peer.attentionDpEnabled()) {
            why.add("attentionDp: self " + self.attentionDpEnabled() + ", peer " + peer.attentionDpEnabled()
                    + " (recurrent states are split over the whole TP group; attention DP is not supported with them)");
        }
        if (why.size() == before) {
            String orphan = orphanStages(s, p);
            if (orphan != null) {
                why.add("recurrentState.layersPerPp: self " + s.layersPerPp() + ", peer " + p.layersPerPp() + " ("
                        + orphan + " share recurrent layers but no attention layer, so no KV connection joins them)");
            }
        }
    }

    private static void differ(List<String> why, String field, Object self, Object peer) {
        if (!self.equals(peer)) {
            why.add(field + ": self " + self + ", peer " + peer);
        }
    }

    /** The first pair of PP stages sharing a recurrent layer but no attention layer, or null. */
    private static String orphanStages(RecurrentStateShape s, RecurrentStateShape p) {
        List<LayerKind> kinds = s.layerKinds();
        for (int a = 0; a < s.layersPerPp().size(); a++) {
            int a0 = s.firstModelLayer(a);
            int a1 = a0 + s.layersPerPp().get(a);
            for (int b = 0; b < p.layersPerPp().size(); b++) {
                int b0 = p.firstModelLayer(b);
                int b1 = b0 + p.layersPerPp().get(b);
                boolean recurrent = false;
                boolean attention = false;
                for (int l = Math.max(a0, b0); l < Math.min(a1, b1); l++) {
                    recurrent |= kinds.get(l) == LayerKind.RECURRENT;
                    attention |= kinds.get(l) == LayerKind.ATTENTION;
                }
                if (recurrent && !attention) {
                    return "self PP rank " + a + " and peer PP rank " + b;
                }
            }
        }
        return null;
    }

    /**
     * Fails before a byte moves when this rank's state declares recurrent states its cache view does not lend.
     */
    static void requireView(TransferSession session, RecurrentStateView view) {
        CacheState self = session.selfState().cacheState();
        if (self.recurrentState() != null && view == null) {
            throw new KvTransferException(ErrorCode.INTERNAL, session.requestId(), "the cache state declares "
                    + self.recurrentState() + " but the cache view lends no recurrent state (KvCacheView"
                    + ".recurrentState() is null)", null);
        }
    }

    /** Sends this rank's state runs to every peer that holds part of them (nothing for an attention-only model). */
    static void send(TransferSession session, RecurrentStateView view) {
        move(session, view, true);
    }

    /** Receives every state run this rank is owed (nothing for an attention-only model). */
    static void receive(TransferSession session, RecurrentStateView view) {
        move(session, view, false);
    }

    private static void move(TransferSession session, RecurrentStateView view, boolean sender) {
        CacheState self = session.selfState().cacheState();
        int selfIndex = session.selfState().selfIndex();
        CacheState peer = session.peerCacheState();
        if (!RecurrentStateShape.holdsState(self, selfIndex)) {
            return;
        }
        Objects.requireNonNull(view, "view");
        RecurrentStateShape s = self.recurrentState();
        TargetRanks t = session.targets();
        List<Integer> peers = t.peerRanks();
        int[] active = new int[peers.size()];
        int n = 0;
        for (int p = 0; p < peers.size(); p++) {
            if (RecurrentStateShape.holdsState(peer, peers.get(p)) && sharedLayers(self, selfIndex, peer,
                    peers.get(p))[1] > 0) {
                active[n++] = p;
            }
        }
        int[] act = Arrays.copyOf(active, n);
        long requestId = session.requestId();
        // A state the transport cannot take (device memory) goes through one staging buffer per peer.
        MemoryBuffer[] staging = new MemoryBuffer[peers.size()];
        if (n > 0 && !session.transportAccepts(view.convState(requestId, 0).kind())) {
            long[] sizes = new long[n];
            Arrays.fill(sizes, Math.max(s.convBytesPerRank(self.tensorParallelism()),
                    s.ssmBytesPerRank(self.tensorParallelism())));
            MemoryBuffer[] got = session.stagingBuffers(sizes);
            for (int i = 0; i < n; i++) {
                staging[act[i]] = got[i];
            }
        }
        session.forEachPeer(act, p -> {
            long start = System.nanoTime();
            int peerRank = peers.get(p);
            int[] layers = sharedLayers(self, selfIndex, peer, peerRank);
            int first = s.firstRecurrentLayer(self.ppRank(selfIndex));
            long[] conv = runs(s.convChannels(), self, selfIndex, peer, peerRank,
                    (long) s.convWidth() * s.convDataType().bytes());
            long[] ssm = runs(s.ssmHeads(), self, selfIndex, peer, peerRank,
                    (long) s.ssmHeadDim() * s.ssmStateDim() * s.ssmDataType().bytes());
            long bytes = 0;
            for (int l = layers[0]; l < layers[0] + layers[1]; l++) {
                int local = l - first;
                bytes += part(session, p, view.convState(requestId, local), conv[0], conv[1], staging[p], sender);
                bytes += part(session, p, view.ssmState(requestId, local), ssm[0], ssm[1], staging[p], sender);
            }
            session.recordMeasure(p, start, System.nanoTime(), bytes);
        });
    }

    /** {@code [first global recurrent layer, count]} both ranks hold. */
    private static int[] sharedLayers(CacheState self, int selfIndex, CacheState peer, int peerRank) {
        RecurrentStateShape s = self.recurrentState();
        RecurrentStateShape p = peer.recurrentState();
        int s0 = s.firstRecurrentLayer(self.ppRank(selfIndex));
        int s1 = s0 + s.recurrentLayerCount(self.ppRank(selfIndex));
        int p0 = p.firstRecurrentLayer(peer.ppRank(peerRank));
        int p1 = p0 + p.recurrentLayerCount(peer.ppRank(peerRank));
        int a = Math.max(s0, p0);
        return new int[] {a, Math.max(0, Math.min(s1, p1) - a)};
    }

    /**
     * The run of {@code total} TP-split rows both ranks hold: {@code [offset in this rank's state, bytes]}, rows of
     * {@code rowBytes}.
     */
    private static long[] runs(int total, CacheState self, int selfIndex, CacheState peer, int peerRank,
                               long rowBytes) {
        int sn = total / self.tensorParallelism();
        int pn = total / peer.tensorParallelism();
        int s0 = self.tpRank(selfIndex) * sn;
        int p0 = peer.tpRank(peerRank) * pn;
        int a = Math.max(s0, p0);
        int b = Math.min(s0 + sn, p0 + pn);
        return new long[] {(a - s0) * rowBytes, Math.max(0, b - a) * rowBytes};
    }

    /** Moves one run straight from / into the state, or through staging when the transport cannot take it. */
    private static long part(TransferSession session, int p, MemoryBuffer state, long offset, long length,
                             MemoryBuffer staging, boolean sender) {
        if (length == 0) {
            return 0;
        }
        if (staging == null) {
            if (sender) {
                session.send(p, state, offset, length);
            } else {
                session.recv(p, state, offset, length);
            }
            return length;
        }
        BufferManager bm = session.bufferManager();
        if (sender) {
            bm.copy(state, offset, staging, 0, length);
            bm.synchronize();
            session.send(p, staging, 0, length);
        } else {
            session.recv(p, staging, 0, length);
            bm.copy(staging, 0, state, offset, length);
            bm.synchronize();
        }
        return length;
    }
}
