package dev.kvtransfer.api.layout;

import java.util.List;
import java.util.Objects;

/**
 * The peer ranks one rank exchanges a request's cache with, as computed by
 * {@link RankMapping#targetRanks}. Peers are listed CP-major, then TP, then PP (PP innermost), so the peer at
 * position {@code p} belongs to PP-domain slot {@code p % domainPp()}.
 *
 * @param peerRanks          peer rank indices in the peer instance
 * @param domainTp           number of peer TP ranks spanned
 * @param domainPp           number of peer PP ranks spanned
 * @param domainCp           number of peer CP ranks spanned
 * @param dupHeadFactor      how many self TP ranks hold the same heads relative to the peer (1 = none)
 * @param peerDupHeadFactor  how many peer TP ranks hold the same heads relative to self (1 = none)
 * @param peerPpDomainLayers layers shared with each peer PP rank of the domain, in PP order
 */
public record TargetRanks(List<Integer> peerRanks, int domainTp, int domainPp, int domainCp, int dupHeadFactor,
                          int peerDupHeadFactor, List<Integer> peerPpDomainLayers) {
    /** The result for a rank that owns no layer: no peers, all domains 0. */
    public static final TargetRanks EMPTY = new TargetRanks(List.of(), 0, 0, 0, 1, 1, List.of());

    /**
     * Copies the lists.
     *
     * @param peerRanks          peers
     * @param domainTp           TP domain
     * @param domainPp           PP domain
     * @param domainCp           CP domain
     * @param dupHeadFactor      self duplication
     * @param peerDupHeadFactor  peer duplication
     * @param peerPpDomainLayers layers per PP-domain slot
     */
    public TargetRanks {
        peerRanks = List.copyOf(Objects.requireNonNull(peerRanks, "peerRanks"));
        peerPpDomainLayers = List.copyOf(Objects.requireNonNull(peerPpDomainLayers, "peerPpDomainLayers"));
    }

    /** @return whether there is no peer (a rank that owns no layer) */
    public boolean isEmpty() {
        return peerRanks.isEmpty();
    }

    /** @return number of peers */
    public int size() {
        return peerRanks.size();
    }

    /**
     * Layers shared with the peer at a position of {@link #peerRanks()}.
     *
     * @param peerIndex position in the peer list
     * @return the layer count
     * @throws IndexOutOfBoundsException if {@code peerIndex} is not a position of {@link #peerRanks()}
     */
    public int peerLayers(int peerIndex) {
        Objects.checkIndex(peerIndex, peerRanks.size());
        return peerPpDomainLayers.get(peerIndex % domainPp);
    }
}
