package dev.kvtransfer.api.layout;

/**
 * One side of a {@link PartPlan}: its pool's real geometry, the geometry it plans with, and where the part is.
 *
 * <p>Part of the deprecated frozen copy of PartPlan (now in formatter-support): removed with it.
 */
final class PartSide {
    final PoolGeometry actual;
    /** Block pools of one block per region, layer pools of one region per plane segment: adjacency without ids. */
    final PoolGeometry plan;
    final int[] ids;
    final int first;
    final int firstLayer;
    final int firstHead;

    PartSide(PoolGeometry actual, int[] ids, int first, int firstLayer, int firstHead) {
        this.actual = actual;
        BlockLayout l = actual.blockLayout();
        this.plan = PoolGeometry.of(l, actual.poolLayout(), actual.layerKind() ? Integer.MAX_VALUE : 1);
        this.ids = ids;
        this.first = first;
        this.firstLayer = firstLayer;
        this.firstHead = firstHead;
    }

    static void checkRange(String side, int first, int count, int limit, String what) {
        if (first < 0 || count < 0 || first + count > limit) {
            throw new IllegalArgumentException(side + " " + what + " [" + first + ", " + first + "+" + count
                    + ") outside its " + limit);
        }
    }

    static void checkIds(String who, int[] ids, int first, int blocks) {
        if (first < 0 || first + blocks > ids.length) {
            throw new IllegalArgumentException(who + " block ids: " + ids.length + " ids, the part needs [" + first
                    + ", " + (first + blocks) + ")");
        }
    }
}
