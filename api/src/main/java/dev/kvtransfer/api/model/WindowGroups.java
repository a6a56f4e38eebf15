package dev.kvtransfer.api.model;

import dev.kvtransfer.api.wire.MalformedMessageException;
import dev.kvtransfer.api.wire.WireReader;
import dev.kvtransfer.api.wire.WireWriter;

import java.util.ArrayList;
import java.util.List;
import java.util.Objects;
import java.util.TreeSet;

/**
 * Variable sliding-window attention (VSWA, as in Gemma 2 / 3 or Mistral): the attention window of every attention
 * layer, in tokens, {@link #UNLIMITED} for a full-attention layer. Layers with the same window form one <em>layer
 * group</em>. A windowed layer only ever reads the last {@code window} tokens, so of a request's prompt blocks only
 * the last {@link #blocksInWindow} are moved for it; a full-attention layer moves every block.
 *
 * <p>The list is indexed like {@link CacheState#kvHeadsPerLayer()}: attention layers in model order (a hybrid
 * model's recurrent layers have no window). All layers share one pool; the window only decides which of a request's
 * blocks a layer's slices move.
 */
public final class WindowGroups {
    /** The window of a full-attention layer: every block of the prompt moves. */
    public static final int UNLIMITED = 0;

    static final int WIRE_TAG = 0x77; // 'w'

    private final List<Integer> windows;

    private WindowGroups(List<Integer> windows) {
        this.windows = windows;
    }

    /**
     * One window per attention layer.
     *
     * @param windowPerLayer tokens of each attention layer's window, {@link #UNLIMITED} for full attention
     * @return the groups
     * @throws IllegalArgumentException naming the layer and value of a negative window or an empty list
     */
    public static WindowGroups of(List<Integer> windowPerLayer) {
        Objects.requireNonNull(windowPerLayer, "windowPerLayer");
        List<Integer> w = List.copyOf(windowPerLayer);
        CacheStateChecks.check(!w.isEmpty() && w.size() <= CacheState.MAX_LAYERS, "windowGroups.size", w.size(),
                "must be in [1, " + CacheState.MAX_LAYERS + "]");
        for (int l = 0; l < w.size(); l++) {
            CacheStateChecks.check(w.get(l) >= 0, "windowGroups[" + l + "]", w.get(l),
                    "must be a window in tokens or " + UNLIMITED + " (unlimited)");
        }
        return new WindowGroups(w);
    }

    /**
     * A repeating pattern over {@code layers} layers, as TensorRT-LLM's per-layer window vector repeats:
     * {@code pattern(26, List.of(1024, 1024, 1024, 1024, 1024, 0))} is five local layers to one global.
     *
     * @param layers  attention layers of the model
     * @param pattern one period of windows
     * @return the groups
     */
    public static WindowGroups pattern(int layers, List<Integer> pattern) {
        Objects.requireNonNull(pattern, "pattern");
        CacheStateChecks.check(!pattern.isEmpty(), "pattern", pattern, "needs at least one window");
        CacheStateChecks.check(layers >= 1 && layers <= CacheState.MAX_LAYERS, "layers", layers,
                "must be in [1, " + CacheState.MAX_LAYERS + "]");
        List<Integer> w = new ArrayList<>(layers);
        for (int l = 0; l < layers; l++) {
            w.add(pattern.get(l % pattern.size()));
        }
        return of(w);
    }

    /** @return the window of every attention layer, in tokens ({@link #UNLIMITED}: full attention) */
    public List<Integer> windowPerLayer() {
        return windows;
    }

    /** @return the attention layers described */
    public int layers() {
        return windows.size();
    }

    /**
     * @param layer a global attention layer
     * @return its window in tokens, {@link #UNLIMITED} for full attention
     */
    public int window(int layer) {
        return windows.get(layer);
    }

    /** @return the distinct windows, ascending ({@link #UNLIMITED} first when present): one per layer group */
    public List<Integer> groups() {
        return List.copyOf(new TreeSet<>(windows));
    }

    /**
     * Blocks of a request's prompt that a layer with this window reads: the last {@code ceil(window / T) + 1}
     * (the window's tokens may start inside a block), at most all of them; all of them for {@link #UNLIMITED}.
     * TensorRT-LLM's {@code window / T + 1} is the same when {@code T} divides the window.
     *
     * @param window         the window in tokens
     * @param tokensPerBlock tokens per block
     * @param totalBlocks    blocks of the request's prompt
     * @return blocks moved for the layer
     */
    public static int blocksInWindow(int window, int tokensPerBlock, int totalBlocks) {
        if (window == UNLIMITED) {
            return totalBlocks;
        }
        long blocks = ((long) window + tokensPerBlock - 1) / tokensPerBlock + 1;
        return (int) Math.min(totalBlocks, blocks);
    }

    /**
     * The first global block a layer's slices move from: past the reused prefix and inside the layer's window.
     *
     * @param layer          a global attention layer
     * @param tokensPerBlock tokens per block
     * @param totalBlocks    blocks of the request's prompt
     * @param reusedBlocks   leading blocks the generation side already holds
     * @return the first block moved for the layer ({@code totalBlocks}: none)
     */
    public int firstMovedBlock(int layer, int tokensPerBlock, int totalBlocks, int reusedBlocks) {
        return Math.max(reusedBlocks, totalBlocks - blocksInWindow(window(layer), tokensPerBlock, totalBlocks));
    }

    /**
     * The end of the run of layers from {@code layer} on that share its window, within {@code [layer, end)}.
     *
     * @param layer first global attention layer of the run
     * @param end   global layer after the last to consider
     * @return the global layer after the run
     */
    public int runEnd(int layer, int end) {
        int w = window(layer);
        int l = layer + 1;
        while (l < end && window(l) == w) {
            l++;
        }
        return l;
    }

    void write(WireWriter w) {
        w.writeByte(WIRE_TAG);
        w.writeIntList(windows);
    }

    static WindowGroups read(WireReader r) {
        int start = r.offset();
        int tag = r.readByte("WindowGroups tag");
        if (tag != WIRE_TAG) {
            throw new MalformedMessageException(start, "expected WindowGroups tag " + WIRE_TAG + ", found " + tag);
        }
        List<Integer> w = r.readIntList("windowGroups", 0, Integer.MAX_VALUE);
        if (w.isEmpty()) {
            throw new MalformedMessageException(start, "windowGroups: no layer");
        }
        return new WindowGroups(w);
    }

    @Override
    public boolean equals(Object o) {
        return o instanceof WindowGroups g && windows.equals(g.windows);
    }

    @Override
    public int hashCode() {
        return windows.hashCode();
    }

    @Override
    public String toString() {
        return "windows=" + compact();
    }

    /** Runs of equal windows, {@code 1024x5,full,...}, short enough for an error message naming both sides. */
    public String compact() {
        StringBuilder sb = new StringBuilder("[");
        int l = 0;
        while (l < windows.size()) {
            int e = runEnd(l, windows.size());
            if (l > 0) {
                sb.append(',');
            }
            sb.append(windows.get(l) == UNLIMITED ? "full" : String.valueOf(windows.get(l)));
            if (e - l > 1) {
                sb.append('x').append(e - l);
            }
            l = e;
        }
        return sb.append(']').toString();
    }
}
