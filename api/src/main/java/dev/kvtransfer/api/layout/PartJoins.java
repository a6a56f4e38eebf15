package dev.kvtransfer.api.layout;

/**
 * Which whole blocks of a {@link PartPlan} with both sides direct and one block per run join into one message
 * ({@link PartPlan.Builder#mergeBlocks}): a message that ends at a block's last unit continues into the next block
 * where that block's bytes continue in both pools' real geometry, up to a cap. Both ranks build it from the same
 * facts, so they agree on every joined message.
 *
 * <p>Part of the deprecated frozen copy of PartPlan (now in formatter-support): removed with it.
 */
@SuppressWarnings("removal") // the frozen PartPlan it serves
final class PartJoins {
    private final PartPlan p;
    final long maxBytes;
    /**
     * End of the units a message starting at a block's first unit holds within that block, and their bytes: the same
     * for every block (the adjacency of units inside a block does not depend on its id), so what each joined block
     * adds. Found on first use: only a plan whose slices are contiguous on both sides asks (-1 before).
     */
    private int blockEnd = -1;
    private long blockBytes;

    PartJoins(PartPlan plan, long maxBytes) {
        this.p = plan;
        this.maxBytes = maxBytes;
    }

    /** @return the units a joined block adds to a message: {@code [0, blockEnd())} */
    int blockEnd() {
        if (blockEnd < 0) {
            blockEnd = unitsFrom(0);
            blockBytes = unitsBytes(0, blockEnd);
        }
        return blockEnd;
    }

    /** @return the bytes a joined block adds to a message */
    long blockBytes() {
        blockEnd();
        return blockBytes;
    }

    /** Messages of both sides direct with one-block runs where whole blocks join. */
    int count() {
        int u = p.units();
        int n = 0;
        int b = 0;
        int s = 0;
        while (b < p.blocks) {
            n++;
            int e = unitsFrom(s);
            if (e == u) {
                int j = joinable(b, unitsBytes(s, e));
                b += j;
                e = j > 0 ? blockEnd() : e;
            }
            if (e == u) {
                b++;
                s = 0;
            } else {
                s = e;
            }
        }
        return n;
    }

    /**
     * How many of the blocks after part block {@code b} join a message that ends at {@code b}'s last unit and
     * holds {@code len} bytes: while the next block's bytes continue in both pools and the cap allows (each joined
     * block adds the units from its first that follow one another, the same for every block).
     */
    int joinable(int b, long len) {
        int n = 0;
        long add = blockBytes();
        while (b + n + 1 < p.blocks && len + add <= maxBytes && blockJoins(b + n + 1)) {
            n++;
            len += add;
            if (blockEnd < p.units()) {
                break; // the joined block's message ends inside it
            }
        }
        return n;
    }

    /** End of the units one both-direct message of a one-block run holds when it starts at unit {@code start}. */
    private int unitsFrom(int start) {
        int u = p.units();
        int end = start + 1;
        while (end < u && p.follows(p.snd, 1, end) && p.follows(p.rcv, 1, end)) {
            end++;
        }
        return end;
    }

    /** Bytes of units {@code [u0, u1)} of a one-block run. */
    private long unitsBytes(int u0, int u1) {
        long len = 0;
        for (int k = u0; k < u1; k++) {
            len += p.unitBytes(1, k);
        }
        return len;
    }

    /** Whether the part's block {@code b} starts where block {@code b - 1} ends, in both pools' real geometry. */
    private boolean blockJoins(int b) {
        int last = p.units() - 1;
        return joins(p.snd, b, last) && joins(p.rcv, b, last);
    }

    private boolean joins(PartSide x, int b, int last) {
        PoolGeometry g = x.actual;
        int prev = x.ids[x.first + b - 1];
        int id = x.ids[x.first + b];
        return p.unitRegion(x, g, prev, last) == p.unitRegion(x, g, id, 0)
                && p.unitOffset(x, g, prev, last) + p.unitBytes(1, last) == p.unitOffset(x, g, id, 0);
    }
}
