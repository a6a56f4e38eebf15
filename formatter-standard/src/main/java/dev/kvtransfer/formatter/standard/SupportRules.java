package dev.kvtransfer.formatter.standard;

import dev.kvtransfer.api.format.Support;
import dev.kvtransfer.api.model.AttentionType;
import dev.kvtransfer.api.model.CacheState;

import java.util.ArrayList;
import java.util.List;
import java.util.Objects;

/**
 * Which pairs of cache states the standard formatter can move between: the fields both sides must share and the CP
 * combination, every mismatch listed with the field and both values. Answers are remembered per (state instance, state
 * instance): the answer depends on the two immutable states only, and the control plane asks it for the same pair on
 * every request, so answering it afresh each time was garbage per request. The table is direct-mapped, of immutable
 * records in plain array slots: a racing reader sees a whole entry or another one.
 */
final class SupportRules {
    private static final int SUPPORT_SLOTS = 16;
    private final SupportEntry[] supportCache = new SupportEntry[SUPPORT_SLOTS];

    private record SupportEntry(CacheState self, CacheState peer, Support support) {
    }

    /** The (remembered) answer for this pair of states. */
    Support inquire(CacheState self, CacheState peer) {
        int slot = ((System.identityHashCode(self) * 31 + System.identityHashCode(peer)) >>> 3) & (SUPPORT_SLOTS - 1);
        SupportEntry e = supportCache[slot];
        if (e != null && e.self == self && e.peer == peer) {
            return e.support;
        }
        Support s = compute(self, peer);
        supportCache[slot] = new SupportEntry(self, peer, s);
        return s;
    }

    private static String windows(CacheState s) {
        return s.windowGroups() == null ? "none (full attention)" : s.windowGroups().compact();
    }

    static Support compute(CacheState self, CacheState peer) {
        List<String> why = new ArrayList<>();
        if (self.attentionType() != AttentionType.DEFAULT || peer.attentionType() != AttentionType.DEFAULT) {
            why.add("attentionType: self " + self.attentionType() + ", peer " + peer.attentionType()
                    + " (the standard formatter handles DEFAULT attention only; MLA needs the mla formatter)");
        }
        if (self.dataType() != peer.dataType()) {
            why.add("dataType: self " + self.dataType() + ", peer " + peer.dataType() + " (no conversion)");
        }
        if (self.kvFactor() != peer.kvFactor()) {
            why.add("kvFactor: self " + self.kvFactor() + ", peer " + peer.kvFactor());
        }
        if (self.tokensPerBlock() != peer.tokensPerBlock()) {
            why.add("tokensPerBlock: self " + self.tokensPerBlock() + ", peer " + peer.tokensPerBlock());
        }
        if (self.sizePerHead() != peer.sizePerHead()) {
            why.add("sizePerHead: self " + self.sizePerHead() + ", peer " + peer.sizePerHead());
        }
        if (self.numLayers() != peer.numLayers()) {
            why.add("layer count (kvHeadsPerLayer.size): self " + self.numLayers() + ", peer " + peer.numLayers());
        }
        boolean uniform = true;
        if (!self.uniformHeads()) {
            why.add("kvHeadsPerLayer: self has non-uniform head counts " + self.kvHeadsPerLayer()
                    + " (every layer must have the same KV heads)");
            uniform = false;
        }
        if (!peer.uniformHeads()) {
            why.add("kvHeadsPerLayer: peer has non-uniform head counts " + peer.kvHeadsPerLayer()
                    + " (every layer must have the same KV heads)");
            uniform = false;
        }
        if (uniform && !self.kvHeadsPerLayer().get(0).equals(peer.kvHeadsPerLayer().get(0))) {
            why.add("kvHeadsPerLayer: self " + self.kvHeadsPerLayer().get(0) + " KV heads, peer "
                    + peer.kvHeadsPerLayer().get(0) + " (the model's heads must be the same on both sides)");
        }
        int sc = self.contextParallelism();
        int pc = peer.contextParallelism();
        if (sc > 1 && pc > 1 && sc != pc) {
            why.add("contextParallelism: self " + sc + ", peer " + pc + " (context CP > 1 is supported only when"
                    + " the other side has CP 1 or the same CP; unequal CP > 1 on both sides would need blocks"
                    + " from ranks outside the target mapping)");
        }
        if (!Objects.equals(self.windowGroups(), peer.windowGroups())) {
            why.add("windowGroups: self " + windows(self) + ", peer " + windows(peer) + " (every attention layer"
                    + " needs the same sliding window on both sides, or the blocks moved would not be the ones read)");
        }
        RecurrentStates.unsupported(self, peer, why);
        return why.isEmpty() ? Support.yes() : Support.no(String.join("; ", why));
    }
}
