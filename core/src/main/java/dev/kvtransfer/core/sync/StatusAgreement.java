package dev.kvtransfer.core.sync;

import java.util.ArrayList;
import java.util.Comparator;
import java.util.HashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.OptionalInt;
import java.util.Set;

/**
 * Which requests a status check selects, given what every member of the status group has finished. Pure
 * functions; the rules of TensorRT-LLM's {@code checkContextTransferStatus} / {@code checkGenTransferStatus}
 * (reference §5). Only ids of this rank's pending list are ever selected.
 */
public final class StatusAgreement {
    private StatusAgreement() {
    }

    /**
     * Context side: the ids finished on <em>every</em> member; then, while fewer than {@code atLeast} are
     * selected, unfinished pending ids in insertion order. Without {@code atLeast} ("block all") every pending
     * id is selected: the result is then an unmodifiable view of {@code pendingInOrder} (no copy), so the caller
     * does not change that list while it uses the selection.
     *
     * @param pendingInOrder this rank's pending ids, oldest first
     * @param finishedPerMember every member's finished ids (this rank's included)
     * @param atLeast        the minimum number to select, or empty for all
     * @return the selected ids in selection order
     */
    public static List<Long> selectContext(List<Long> pendingInOrder, List<long[]> finishedPerMember,
                                           OptionalInt atLeast) {
        if (atLeast.isEmpty()) {
            return java.util.Collections.unmodifiableList(pendingInOrder); // a view: no copy per status check
        }
        Set<Long> selected = new LinkedHashSet<>(finishedOnAll(pendingInOrder, finishedPerMember));
        for (Long id : pendingInOrder) {
            if (selected.size() >= atLeast.getAsInt()) {
                break;
            }
            selected.add(id);
        }
        return new ArrayList<>(selected);
    }

    /**
     * Generation side: pending ids ordered by how many members finished them (most first, ties in insertion
     * order) taken until {@code atLeast}; then pending ids in insertion order until {@code atLeast}; then every
     * id finished on every member. Without {@code atLeast} every pending id is selected (an unmodifiable view of
     * {@code pendingInOrder}, as for {@link #selectContext}).
     *
     * @param pendingInOrder    this rank's pending ids, oldest first
     * @param finishedPerMember every member's finished ids
     * @param atLeast           the minimum number to select, or empty for all
     * @return the selected ids in selection order
     */
    public static List<Long> selectGeneration(List<Long> pendingInOrder, List<long[]> finishedPerMember,
                                              OptionalInt atLeast) {
        if (atLeast.isEmpty()) {
            return java.util.Collections.unmodifiableList(pendingInOrder); // a view: no copy per status check
        }
        int want = atLeast.getAsInt();
        Map<Long, Integer> freq = frequencies(finishedPerMember);
        Map<Long, Integer> order = new HashMap<>();
        for (int i = 0; i < pendingInOrder.size(); i++) {
            order.putIfAbsent(pendingInOrder.get(i), i);
        }
        List<Long> byFreq = new ArrayList<>();
        for (Long id : order.keySet()) {
            if (freq.getOrDefault(id, 0) > 0) {
                byFreq.add(id);
            }
        }
        byFreq.sort(Comparator.<Long>comparingInt(id -> -freq.get(id)).thenComparingInt(order::get));
        Set<Long> selected = new LinkedHashSet<>();
        for (Long id : byFreq) {
            if (selected.size() >= want) {
                break;
            }
            selected.add(id);
        }
        for (Long id : pendingInOrder) {
            if (selected.size() >= want) {
                break;
            }
            selected.add(id);
        }
        selected.addAll(finishedOnAll(pendingInOrder, finishedPerMember));
        return new ArrayList<>(selected);
    }

    /**
     * The pending ids that every member reports finished, in pending order.
     *
     * @param pendingInOrder    this rank's pending ids
     * @param finishedPerMember every member's finished ids
     * @return the agreed ids
     */
    public static List<Long> finishedOnAll(List<Long> pendingInOrder, List<long[]> finishedPerMember) {
        Map<Long, Integer> freq = frequencies(finishedPerMember);
        int members = finishedPerMember.size();
        List<Long> out = new ArrayList<>();
        for (Long id : pendingInOrder) {
            if (freq.getOrDefault(id, 0) >= members && !out.contains(id)) {
                out.add(id);
            }
        }
        return out;
    }

    private static Map<Long, Integer> frequencies(List<long[]> finishedPerMember) {
        Map<Long, Integer> freq = new HashMap<>();
        for (long[] ids : finishedPerMember) {
            // A member lists an id once; dedupe anyway so a buggy member cannot count twice.
            Set<Long> seen = new java.util.HashSet<>();
            for (long id : ids) {
                if (seen.add(id)) {
                    freq.merge(id, 1, Integer::sum);
                }
            }
        }
        return freq;
    }

    /**
     * What a group agreed on: for each request every member finished, whether all succeeded.
     *
     * @param gatheredPairs every member's finished requests as (id, 1 = succeeded / 0 = failed) pairs
     * @return the agreed outcomes
     */
    public static Outcome agree(List<long[]> gatheredPairs) {
        // Primitive arrays, no boxing (this runs per status check, for every request): the distinct ids sorted, then
        // per id how many members finished it and how many of those failed it, found by binary search.
        if (gatheredPairs.size() == 1 && gatheredPairs.get(0).length / 2 <= SMALL) {
            // One member (e.g. TP1 without DP), a few ids: the answer is read from its pairs themselves.
            return new Outcome(gatheredPairs.get(0));
        }
        int total = 0;
        for (long[] pairs : gatheredPairs) {
            total += pairs.length / 2;
        }
        long[] ids = new long[total];
        int n = 0;
        for (long[] pairs : gatheredPairs) {
            for (int i = 0; i + 1 < pairs.length; i += 2) {
                ids[n++] = pairs[i];
            }
        }
        java.util.Arrays.sort(ids, 0, n);
        int distinct = 0;
        for (int i = 0; i < n; i++) {
            if (i == 0 || ids[i] != ids[i - 1]) {
                ids[distinct++] = ids[i];
            }
        }
        int[] finished = new int[distinct];
        int[] failed = new int[distinct];
        int[] lastMember = new int[distinct];
        int member = 0;
        for (long[] pairs : gatheredPairs) {
            member++;
            for (int i = 0; i + 1 < pairs.length; i += 2) {
                int k = java.util.Arrays.binarySearch(ids, 0, distinct, pairs[i]);
                if (lastMember[k] == member) {
                    continue; // a member lists an id once; never count a buggy member twice
                }
                lastMember[k] = member;
                finished[k]++;
                if (pairs[i + 1] == 0) {
                    failed[k]++;
                }
            }
        }
        return new Outcome(ids, distinct, finished, failed, gatheredPairs.size());
    }

    /** The agreed outcomes of one status check. */
    /** Up to this many ids of a single member are answered by a linear scan of its pairs (no arrays made). */
    static final int SMALL = 16;

    public static final class Outcome {
        private final long[] single;
        private final long[] ids;
        private final int distinct;
        private final int[] finished;
        private final int[] failed;
        private final int members;

        private Outcome(long[] singleMemberPairs) {
            this.single = singleMemberPairs;
            this.ids = null;
            this.distinct = 0;
            this.finished = null;
            this.failed = null;
            this.members = 1;
        }

        private Outcome(long[] ids, int distinct, int[] finished, int[] failed, int members) {
            this.single = null;
            this.ids = ids;
            this.distinct = distinct;
            this.finished = finished;
            this.failed = failed;
            this.members = members;
        }

        /**
         * @param id a request id
         * @return {@code null} while some member has not finished it; else true when every member succeeded,
         *         false when any failed
         */
        public Boolean outcome(long id) {
            if (single != null) {
                // The member's first listing of the id counts (as below: a member never counts twice).
                for (int i = 0; i + 1 < single.length; i += 2) {
                    if (single[i] == id) {
                        return single[i + 1] != 0;
                    }
                }
                return null;
            }
            int k = java.util.Arrays.binarySearch(ids, 0, distinct, id);
            if (k < 0 || finished[k] < members) {
                return null;
            }
            return failed[k] == 0;
        }

        /**
         * @return whether some request succeeded on every member: the same answer on every member (they agree on
         *         the same gathered arrays), so a collective that follows only on success stays in step
         */
        public boolean anySucceeded() {
            if (single != null) {
                for (int i = 0; i + 1 < single.length; i += 2) {
                    if (single[i + 1] != 0 && outcome(single[i]) == Boolean.TRUE) {
                        return true;
                    }
                }
                return false;
            }
            for (int k = 0; k < distinct; k++) {
                if (finished[k] == members && failed[k] == 0) {
                    return true;
                }
            }
            return false;
        }
    }
}
