package dev.kvtransfer.api.layout;

import dev.kvtransfer.api.memory.BufferManager;
import dev.kvtransfer.api.memory.MemoryBuffer;

/**
 * Strided copies of one block's slice of a plane between a pool and a buffer in another element order, through a
 * {@link BufferManager} only ({@code copy} / {@code copy2d}), so device pools work as well as host ones.
 *
 * <p>Part of the deprecated frozen copy of PartPlan and WritePlan (now in formatter-support): removed with it.
 */
final class SliceCopy {
    private SliceCopy() {
    }

    /**
     * Copies a box of {@code heads x tokens} rows of {@code rowBytes} from {@code (src, srcOff)} to
     * {@code (dst, dstOff)}, element {@code (h, t)} at {@code h * srcH + t * srcT} resp. {@code h * dstH + t * dstT},
     * collapsing the dimensions that are contiguous on both sides into the fewest {@code copy}/{@code copy2d} calls.
     */
    static void copy3d(BufferManager bm, MemoryBuffer src, long srcOff, long srcH, long srcT, MemoryBuffer dst,
                       long dstOff, long dstH, long dstT, int heads, int tokens, long rowBytes) {
        if (heads == 0 || tokens == 0 || rowBytes == 0) {
            return;
        }
        if ((tokens == 1 || srcT == rowBytes && dstT == rowBytes)) {
            // Tokens of one head are contiguous on both sides.
            long run = tokens * rowBytes;
            if (heads == 1 || srcH == run && dstH == run) {
                bm.copy(src, srcOff, dst, dstOff, heads * run);
            } else {
                bm.copy2d(src, srcOff, srcH, dst, dstOff, dstH, run, heads);
            }
            return;
        }
        if (heads == 1 || srcH == rowBytes && dstH == rowBytes) {
            // Heads of one token are contiguous on both sides (token-major on both).
            bm.copy2d(src, srcOff, srcT, dst, dstOff, dstT, heads * rowBytes, tokens);
            return;
        }
        // A transpose between head-major and token-major: one strided copy per head (or per token).
        if (heads <= tokens) {
            for (int h = 0; h < heads; h++) {
                bm.copy2d(src, srcOff + h * srcH, srcT, dst, dstOff + h * dstH, dstT, rowBytes, tokens);
            }
        } else {
            for (int t = 0; t < tokens; t++) {
                bm.copy2d(src, srcOff + t * srcT, srcH, dst, dstOff + t * dstT, dstH, rowBytes, heads);
            }
        }
    }
}
