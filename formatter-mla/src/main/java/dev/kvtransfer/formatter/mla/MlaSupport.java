package dev.kvtransfer.formatter.mla;

import dev.kvtransfer.api.format.Support;
import dev.kvtransfer.api.model.AttentionType;
import dev.kvtransfer.api.model.CacheState;

import java.util.Objects;

/**
 * The layout pairs the MLA formatter converts, with the reason for each one it does not. Every rule names the
 * fields and values that break it.
 *
 * <p>Rules (context → generation): both sides MLA; equal data type, kvFactor, tokens per block, head size and
 * layer count; one latent head per layer on <em>both</em> sides (upstream checks its own side twice); with
 * attention DP the side's TP divisible by its DP size; context CP 1. Attention DP on either side with any TP
 * per DP group is accepted (upstream additionally requires {@code TP == dpSize} on a DP generation side; the
 * designated-sender and pick rules are consistent without it, see the module README).
 */
public final class MlaSupport {
    private MlaSupport() {
    }

    /**
     * Whether the MLA formatter converts a context layout into a generation layout.
     *
     * @param ctx the context (sending) side's state
     * @param gen the generation (receiving) side's state
     * @return yes, or no with the reason
     */
    public static Support check(CacheState ctx, CacheState gen) {
        Objects.requireNonNull(ctx, "ctx");
        Objects.requireNonNull(gen, "gen");
        Support common = checkCommon(ctx, "context", gen, "generation");
        if (!common.supported()) {
            return common;
        }
        if (ctx.contextParallelism() != 1) {
            return Support.no("MLA formatter needs context CP 1 (blocks are split over generation CP ranks only): "
                    + "context contextParallelism=" + ctx.contextParallelism() + ", generation contextParallelism="
                    + gen.contextParallelism());
        }
        return Support.yes();
    }

    /**
     * The answer to {@code CacheFormatter.inquireSupport(self, peer)}, which does not say which side is the
     * context: supported when the pair converts with either side as the context side (the only rule that
     * depends on the direction is "context CP must be 1", so a pair where exactly one side has CP &gt; 1 is
     * supported with that side as the generation side, and a pair where both have CP &gt; 1 never is). The
     * formatter enforces the direction again when it formats or unformats.
     *
     * @param self this side's state
     * @param peer the other side's state
     * @return yes, or no with the reason
     */
    public static Support inquire(CacheState self, CacheState peer) {
        Objects.requireNonNull(self, "self");
        Objects.requireNonNull(peer, "peer");
        Support common = checkCommon(self, "self", peer, "peer");
        if (!common.supported()) {
            return common;
        }
        if (self.contextParallelism() != 1 && peer.contextParallelism() != 1) {
            return Support.no("MLA formatter needs context CP 1 (blocks are split over generation CP ranks only), "
                    + "but both sides have CP > 1, so the context side does: self contextParallelism="
                    + self.contextParallelism() + ", peer contextParallelism=" + peer.contextParallelism());
        }
        return Support.yes();
    }

    private static Support checkCommon(CacheState a, String aName, CacheState b, String bName) {
        if (a.attentionType() != AttentionType.MLA || b.attentionType() != AttentionType.MLA) {
            return Support.no("MLA formatter needs MLA attention on both sides: " + aName + " attentionType="
                    + a.attentionType() + ", " + bName + " attentionType=" + b.attentionType());
        }
        if (a.dataType() != b.dataType()) {
            return Support.no("MLA formatter needs the same data type on both sides: " + aName + " dataType="
                    + a.dataType() + ", " + bName + " dataType=" + b.dataType());
        }
        if (a.kvFactor() != b.kvFactor()) {
            return Support.no("MLA formatter needs the same kvFactor on both sides: " + aName + " kvFactor="
                    + a.kvFactor() + ", " + bName + " kvFactor=" + b.kvFactor());
        }
        if (a.tokensPerBlock() != b.tokensPerBlock()) {
            return Support.no("MLA formatter needs the same tokens per block on both sides: " + aName
                    + " tokensPerBlock=" + a.tokensPerBlock() + ", " + bName + " tokensPerBlock="
                    + b.tokensPerBlock());
        }
        if (a.sizePerHead() != b.sizePerHead()) {
            return Support.no("MLA formatter needs the same latent size on both sides: " + aName + " sizePerHead="
                    + a.sizePerHead() + ", " + bName + " sizePerHead=" + b.sizePerHead());
        }
        if (a.indexerDimPerHead() != b.indexerDimPerHead()
                || a.indexerKCacheQuantBlockSize() != b.indexerKCacheQuantBlockSize()
                || a.indexerKCacheUseFp4() != b.indexerKCacheUseFp4()) {
            return Support.no("MLA formatter needs the same indexer-K cache on both sides: " + aName + " "
                    + indexer(a) + ", " + bName + " " + indexer(b));
        }
        if (a.numLayers() != b.numLayers()) {
            return Support.no("MLA formatter needs the same number of layers on both sides: " + aName
                    + " layers=" + a.numLayers() + ", " + bName + " layers=" + b.numLayers());
        }
        Support heads = checkHeads(a, aName);
        if (!heads.supported()) {
            return heads;
        }
        heads = checkHeads(b, bName);
        if (!heads.supported()) {
            return heads;
        }
        Support dp = checkDp(a, aName);
        if (!dp.supported()) {
            return dp;
        }
        return checkDp(b, bName);
    }

    /** How a state's indexer-K declaration reads in a refusal. */
    static String indexer(CacheState s) {
        return s.hasIndexerKCache() ? "indexerK=" + s.indexerDimPerHead() + " B/token, quantBlockSize="
                + s.indexerKCacheQuantBlockSize() + ", fp4=" + s.indexerKCacheUseFp4() : "indexerK=none";
    }

    private static Support checkHeads(CacheState s, String name) {
        for (int l = 0; l < s.numLayers(); l++) {
            int h = s.kvHeadsPerLayer().get(l);
            if (h != 1) {
                return Support.no("MLA formatter needs one latent head per layer: " + name + " kvHeadsPerLayer["
                        + l + "]=" + h + " (" + name + " kvHeadsPerLayer=" + s.kvHeadsPerLayer() + ")");
            }
        }
        return Support.yes();
    }

    private static Support checkDp(CacheState s, String name) {
        if (s.attentionDpEnabled() && s.tensorParallelism() % s.dpSize() != 0) {
            return Support.no("MLA formatter with attention DP needs TP divisible by the DP size: " + name
                    + " tensorParallelism=" + s.tensorParallelism() + ", " + name + " dpSize=" + s.dpSize());
        }
        return Support.yes();
    }
}
