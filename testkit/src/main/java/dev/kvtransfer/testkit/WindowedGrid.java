package dev.kvtransfer.testkit;

import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.api.model.DataType;
import dev.kvtransfer.api.model.RecurrentStateShape;
import dev.kvtransfer.api.model.WindowGroups;

import java.util.List;

/** The {@link LayoutGrid} of sliding-window caches (VSWA), apart so the grid class stays small. */
public final class WindowedGrid {
    private WindowedGrid() {
    }

    /**
     * Sliding-window attention (VSWA): local layers with a 16-token window interleaved with full-attention layers
     * (2 : 1, as Gemma 2 / 3 interleave theirs) at 8 tokens a block, so a 60- or 80-token prompt moves only its last 3
     * blocks for a local layer and all of them for a global one; and TensorRT-LLM's two-window model (80 and 16
     * tokens, no full layer); a hybrid with windows. TP both ways (and TP above the KV heads), PP both ways with splits that cut window
     * runs, generation CP, 1-, 2- and 4-byte elements, and one unsupported pair per window mismatch.
     *
     * @return the grid
     */
    public static LayoutGrid windowed() {
        LayoutGrid.Builder b = LayoutGrid.builder().layers(6).heads(4).tokensPerBlock(8)
                .windows(WindowGroups.pattern(6, List.of(16, 16, WindowGroups.UNLIMITED)));
        b.dataTypes(DataType.FLOAT16, DataType.INT8, DataType.FLOAT32);
        b.pair(LayoutGrid.Side.of(1, 1), LayoutGrid.Side.of(1, 1));
        b.pair(LayoutGrid.Side.of(2, 1), LayoutGrid.Side.of(1, 1));
        b.pair(LayoutGrid.Side.of(1, 1), LayoutGrid.Side.of(2, 1));
        b.pair(LayoutGrid.Side.of(1, 2), LayoutGrid.Side.of(1, 1));
        b.pair(LayoutGrid.Side.of(1, 1), LayoutGrid.Side.of(1, 2));
        b.pair(LayoutGrid.Side.of(2, 2), LayoutGrid.Side.of(4, 1));
        b.pair(LayoutGrid.Side.of(1, 2).layers(1, 5), LayoutGrid.Side.of(1, 3).layers(4, 0, 2));
        b.pair(LayoutGrid.Side.of(1, 1), LayoutGrid.Side.of(1, 1).cp(2));
        b.pair(LayoutGrid.Side.of(2, 1), LayoutGrid.Side.of(1, 2).cp(2));
        b.heads(2).pair(LayoutGrid.Side.of(1, 1), LayoutGrid.Side.of(4, 1));
        b.layers(5).heads(4).windows(WindowGroups.pattern(5, List.of(80, 16))).dataTypes(DataType.FLOAT16);
        b.pair(LayoutGrid.Side.of(1, 1), LayoutGrid.Side.of(1, 1));
        b.pair(LayoutGrid.Side.of(2, 2), LayoutGrid.Side.of(1, 1));
        b.layers(6).windows(WindowGroups.pattern(6, List.of(16, 16, WindowGroups.UNLIMITED)));
        // A hybrid with windows (3 attention : 1 recurrent): the states move whole beside the windows' blocks.
        b.recurrent(new RecurrentStateShape(RecurrentStateShape.kinds("AAAR", 2), List.of(), 8, 3, 4, 4, 8,
                DataType.FLOAT16, DataType.FLOAT32));
        b.pair(LayoutGrid.Side.of(2, 1), LayoutGrid.Side.of(1, 1));
        b.pair(LayoutGrid.Side.of(1, 2), LayoutGrid.Side.of(1, 1));
        b.recurrent(null);
        CacheState base = b.state(LayoutGrid.Side.of(1, 1));
        b.unsupported("windowGroups", base, b.copy().windows(WindowGroups.pattern(6, List.of(32, 32,
                WindowGroups.UNLIMITED))).state(LayoutGrid.Side.of(1, 1)));
        b.unsupported("windowGroups", base, b.copy().windows(null).state(LayoutGrid.Side.of(2, 1)));
        return b.build();
    }
}
