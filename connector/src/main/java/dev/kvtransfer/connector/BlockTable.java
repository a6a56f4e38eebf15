package dev.kvtransfer.connector;

import java.util.Arrays;
import java.util.Objects;

/**
 * The KV blocks the engine allocated for one request, per rank of the instance: the same ids on every rank (vLLM's
 * single block table, {@link #uniform}) or each rank its own ({@link #perRank}, e.g. context parallelism, where
 * each CP rank holds a share of the blocks). Immutable.
 */
public final class BlockTable {
    private final int[][] ids;

    private BlockTable(int[][] ids) {
        this.ids = ids;
    }

    /**
     * The same blocks on every rank.
     *
     * @param ranks    ranks of the instance
     * @param blockIds the request's blocks, in order
     * @return the table
     */
    public static BlockTable uniform(int ranks, int[] blockIds) {
        Objects.requireNonNull(blockIds, "blockIds");
        if (ranks < 1) {
            throw new IllegalArgumentException("ranks = " + ranks + ": must be >= 1");
        }
        int[][] t = new int[ranks][];
        int[] copy = blockIds.clone();
        Arrays.fill(t, copy);
        return new BlockTable(t);
    }

    /**
     * Each rank its own blocks.
     *
     * @param blockIds per rank, the request's blocks in order
     * @return the table
     */
    public static BlockTable perRank(int[][] blockIds) {
        Objects.requireNonNull(blockIds, "blockIds");
        if (blockIds.length < 1) {
            throw new IllegalArgumentException("a block table needs at least one rank");
        }
        int[][] t = new int[blockIds.length][];
        for (int r = 0; r < t.length; r++) {
            t[r] = Objects.requireNonNull(blockIds[r], "blockIds of rank " + r).clone();
        }
        return new BlockTable(t);
    }

    /** @return ranks covered */
    public int ranks() {
        return ids.length;
    }

    /**
     * @param rank a rank of the instance
     * @return a copy of that rank's block ids
     */
    public int[] rank(int rank) {
        Objects.checkIndex(rank, ids.length);
        return ids[rank].clone();
    }

    int[] rankView(int rank) {
        Objects.checkIndex(rank, ids.length);
        return ids[rank];
    }

    @Override
    public boolean equals(Object o) {
        return o instanceof BlockTable b && Arrays.deepEquals(ids, b.ids);
    }

    @Override
    public int hashCode() {
        return Arrays.deepHashCode(ids);
    }

    @Override
    public String toString() {
        return "BlockTable" + Arrays.deepToString(ids);
    }
}
