package dev.kvtransfer.formatter.standard;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.KvTransferException;
import dev.kvtransfer.api.format.Support;
import dev.kvtransfer.api.format.TransferSession;
import dev.kvtransfer.api.layout.RankMapping;
import dev.kvtransfer.api.layout.TargetRanks;
import dev.kvtransfer.api.model.CacheState;

/**
 * The split plans of {@link StandardCacheFormatter}'s requests, made once per distinct request shape and
 * remembered: planning per request was a large share of the control plane's garbage.
 *
 * <p>A request's split plan depends only on (direction, own state, own index, peer state, target ranks, blocks,
 * reused blocks): states are immutable and decoded once per distinct bytes (api StateCodecCache), target ranks
 * are memoized, so the same few instances come back on every request and the plan is remembered per instance
 * (PLAN_SLOTS direct-mapped entries). A part's message plan also depends on both sides' block ids, which differ
 * from request to request in an engine: it is built per request (a cache by ids' content would hit only in a
 * benchmark that reuses its blocks, and copy the ids on every miss). Entries are immutable records in plain array
 * slots (a racing reader sees a whole entry or another one); every plan is immutable and shared read-only by the
 * peer threads already.
 */
final class SplitPlans {
    private static final int PLAN_SLOTS = 16;
    private final PlanEntry[] planCache = new PlanEntry[PLAN_SLOTS];
    private final SupportRules support;

    SplitPlans(SupportRules support) {
        this.support = support;
    }

    private record PlanEntry(boolean sender, CacheState self, int selfIndex, CacheState peer, TargetRanks t,
                             int totalBlocks, int reused, SplitPlan plan) {
    }

    private static int planSlot(boolean sender, CacheState self, int selfIndex, CacheState peer, TargetRanks t,
                                int totalBlocks, int reused) {
        int h = System.identityHashCode(self);
        h = h * 31 + System.identityHashCode(peer);
        h = h * 31 + System.identityHashCode(t);
        h = h * 31 + selfIndex;
        h = h * 31 + totalBlocks;
        h = h * 31 + reused;
        h = h * 2 + (sender ? 1 : 0);
        return (h ^ (h >>> 16)) & (PLAN_SLOTS - 1);
    }

    SplitPlan plan(TransferSession session, CacheState self, int selfIndex, CacheState peer, TargetRanks t,
                           boolean sender) {
        int totalBlocks = session.totalBlocks();
        int reusedBlocks = session.reusedBlocks();
        int slot = planSlot(sender, self, selfIndex, peer, t, totalBlocks, reusedBlocks);
        PlanEntry e = planCache[slot];
        if (e != null && e.sender == sender && e.self == self && e.selfIndex == selfIndex && e.peer == peer
                && e.t == t && e.totalBlocks == totalBlocks && e.reused == reusedBlocks) {
            return e.plan;
        }
        SplitPlan made = makePlan(session, self, selfIndex, peer, t, sender);
        planCache[slot] = new PlanEntry(sender, self, selfIndex, peer, t, totalBlocks, reusedBlocks, made);
        return made;
    }

    private SplitPlan makePlan(TransferSession session, CacheState self, int selfIndex, CacheState peer,
                               TargetRanks t, boolean sender) {
        Support s = support.inquire(self, peer);
        if (!s.supported()) {
            throw new KvTransferException(ErrorCode.UNSUPPORTED_LAYOUT, session.requestId(), s.reason(), null);
        }
        int reused = session.reusedBlocks();
        if (reused < 0 || reused > session.totalBlocks()) {
            throw new KvTransferException(ErrorCode.INTERNAL, session.requestId(), "reusedBlocks " + reused
                    + " outside [0, " + session.totalBlocks() + "]", null);
        }
        try {
            return sender
                    ? SplitPlan.forSender(self, selfIndex, peer, t, session.totalBlocks(), reused)
                    : SplitPlan.forReceiver(self, selfIndex, peer, t,
                    PeerSelection.pick(self, RankMapping.targetRanks(peer, self, selfIndex)), session.totalBlocks(),
                    reused);
        } catch (RuntimeException e) {
            throw new KvTransferException(ErrorCode.INTERNAL, session.requestId(), "cannot plan the "
                    + (sender ? "split" : "concat") + " of rank " + selfIndex + " of " + self + " against " + peer
                    + ": " + e.getMessage(), e);
        }
    }
}
