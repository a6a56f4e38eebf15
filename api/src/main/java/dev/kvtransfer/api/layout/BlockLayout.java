package dev.kvtransfer.api.layout;

import dev.kvtransfer.api.model.CacheState;

/**
 * Byte layout of one KV block on one rank, outermost first:
 * {@code [localLayer][kv][localHead][token][dim]}, each element {@code elementBytes} wide. Within a block,
 * {@code [head range][tokens][dim]} of one (layer, kv) plane is contiguous.
 *
 * @param localLayers    layers held by the rank
 * @param kvFactor       2 (K, V) or 1 (K only)
 * @param localHeads     KV heads held by the rank
 * @param tokensPerBlock tokens per block
 * @param sizePerHead    elements per head
 * @param elementBytes   bytes per element
 */
public record BlockLayout(int localLayers, int kvFactor, int localHeads, int tokensPerBlock, int sizePerHead,
                          int elementBytes) {

    /**
     * Validates.
     *
     * @param localLayers    layers
     * @param kvFactor       kv planes
     * @param localHeads     heads
     * @param tokensPerBlock tokens
     * @param sizePerHead    dim
     * @param elementBytes   element width
     */
    public BlockLayout {
        if (localLayers < 0 || kvFactor < 1 || kvFactor > 2 || localHeads < 1 || tokensPerBlock < 1
                || sizePerHead < 1 || elementBytes < 1) {
            throw new IllegalArgumentException("invalid block layout: layers=" + localLayers + " kv=" + kvFactor
                    + " heads=" + localHeads + " tokens=" + tokensPerBlock + " dim=" + sizePerHead
                    + " elementBytes=" + elementBytes);
        }
    }

    /**
     * The block layout of a rank of an instance.
     *
     * @param state the instance's cache state (heads must be uniform across layers)
     * @param rank  the rank index
     * @return the layout
     */
    public static BlockLayout of(CacheState state, int rank) {
        // Remembered per (state instance, rank): states are immutable and the control plane asks for the same few
        // (its own and its peers', decoded once) on every request. 64 direct-mapped entries; a miss computes.
        int slot = (System.identityHashCode(state) * 31 + rank) & (OF_SLOTS - 1);
        Of e = OF[slot];
        if (e != null && e.state == state && e.rank == rank) {
            return e.layout;
        }
        BlockLayout l = compute(state, rank);
        OF[slot] = new Of(state, rank, l);
        return l;
    }

    private static final int OF_SLOTS = 64;
    // Entries are immutable: unsynchronized slots are safe to share (a racing reader sees a whole entry or another).
    private static final Of[] OF = new Of[OF_SLOTS];

    private record Of(CacheState state, int rank, BlockLayout layout) {
    }

    private static BlockLayout compute(CacheState state, int rank) {
        return new BlockLayout(state.layerCount(state.ppRank(rank)), state.kvFactor(), state.kvHeadsPerRank(),
                state.tokensPerBlock(), state.sizePerHead(), state.dataType().bytes());
    }

    /** @return bytes of one head's tokens: {@code tokensPerBlock * sizePerHead * elementBytes} */
    public long headBytes() {
        return (long) tokensPerBlock * sizePerHead * elementBytes;
    }

    /** @return bytes of one (layer, kv) plane: all local heads */
    public long planeBytes() {
        return headBytes() * localHeads;
    }

    /** @return bytes of one layer: all kv planes */
    public long layerBytes() {
        return planeBytes() * kvFactor;
    }

    /** @return bytes of a whole block */
    public long blockBytes() {
        return layerBytes() * localLayers;
    }

    /**
     * Byte offset of one element inside the block.
     *
     * @param layer local layer
     * @param kv    0 = K, 1 = V
     * @param head  local head
     * @param token token in block
     * @param dim   element within the head
     * @return the byte offset
     */
    public long offset(int layer, int kv, int head, int token, int dim) {
        return layer * layerBytes() + kv * planeBytes() + head * headBytes()
                + ((long) token * sizePerHead + dim) * elementBytes;
    }
}
