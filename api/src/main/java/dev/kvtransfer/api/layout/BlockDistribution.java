package dev.kvtransfer.api.layout;

/**
 * How the blocks of a request are spread over context-parallel ranks: contiguously, lower CP ranks first,
 * the remainder to the lowest ranks. For {@code n = 10, cp = 4}: counts {@code [3, 3, 2, 2]}, global ids
 * {@code [0..2] [3..5] [6,7] [8,9]}.
 */
public final class BlockDistribution {
    private BlockDistribution() {
    }

    /**
     * Blocks held by one CP rank.
     *
     * @param totalBlocks blocks of the request
     * @param cpSize      CP size
     * @param cpRank      CP rank
     * @return the count
     */
    public static int count(int totalBlocks, int cpSize, int cpRank) {
        return totalBlocks / cpSize + (cpRank < totalBlocks % cpSize ? 1 : 0);
    }

    /**
     * Global index of a CP rank's first block.
     *
     * @param totalBlocks blocks of the request
     * @param cpSize      CP size
     * @param cpRank      CP rank
     * @return the global block index
     */
    public static int firstGlobalBlock(int totalBlocks, int cpSize, int cpRank) {
        return (totalBlocks / cpSize) * cpRank + Math.min(cpRank, totalBlocks % cpSize);
    }

    /**
     * Blocks needed for a number of tokens.
     *
     * @param tokens         token count
     * @param tokensPerBlock tokens per block
     * @return {@code ceil(tokens / tokensPerBlock)}
     */
    public static int blocksFor(long tokens, int tokensPerBlock) {
        return (int) ((tokens + tokensPerBlock - 1) / tokensPerBlock);
    }
}
