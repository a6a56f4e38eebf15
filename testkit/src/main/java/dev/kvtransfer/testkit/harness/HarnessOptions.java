package dev.kvtransfer.testkit.harness;

import java.time.Duration;
import java.util.Objects;

/**
 * How {@link FormatterHarness} runs a layout pair.
 *
 * @param timeout          deadline of one pair run (all its requests), also every session's deadline
 * @param chunkBytes       largest message a session sends, 0 = one message per part
 * @param parallelPeers    whether sessions run per-peer actions concurrently
 * @param slotBytes        bytes of one staging slot (parts beyond it get dynamic buffers)
 * @param exchangeBlockIds whether each session knows its peers' block ids ({@code TransferSession.peerBlockIds}),
 *                         so formatters can coalesce runs; false = {@code null}, the per-block fallback
 * @param fragmentBlocks   whether the requests' block ids have holes (a filler block after every third block on the
 *                         context side, every second on the generation side), so runs that are consecutive on
 *                         both sides split at different places; false = consecutive ids
 * @param verify           whether {@link FormatterHarness#report()} checks every generation element with KvPattern
 * @param indexerDim       bytes per token of an MLA indexer-K pool on every rank (block pool, same block ids), 0 =
 *                         none
 * @param mode             how the requests move: whole two-sided parts, two-sided layer ranges, a one-sided push of
 *                         the whole request, or one push per layer range
 * @param layerStep        global layers per range in the layer-wise modes (core uses 1): the ranges are
 *                         {@code [i*step, (i+1)*step)} over the model's layers, each side calling, in ascending order,
 *                         those that intersect its own layers
 */
public record HarnessOptions(Duration timeout, long chunkBytes, boolean parallelPeers, long slotBytes,
                             boolean exchangeBlockIds, boolean fragmentBlocks, boolean verify, int indexerDim,
                             Mode mode, int layerStep) {
    /** How a run moves its requests. */
    public enum Mode {
        /** {@code format} / {@code unformat} of the whole request (two-sided). */
        PULL(false, false),
        /** {@code format} / {@code unformat} of one global layer range at a time, on both sides (two-sided). */
        PULL_LAYERS(false, true),
        /**
         * {@code push} of each context rank's whole layer range into the generation ranks' registered pools
         * (one-sided, over loopback's emulated writes); the generation side registers its grants as core does and
         * the harness checks what was written as core's receiver does.
         */
        PUSH(true, false),
        /** {@code push} of one global layer range at a time. */
        PUSH_LAYERS(true, true);

        private final boolean push;
        private final boolean layered;

        Mode(boolean push, boolean layered) {
            this.push = push;
            this.layered = layered;
        }

        /** @return whether the context side writes one-sided */
        public boolean push() {
            return push;
        }

        /** @return whether the request moves one layer range at a time */
        public boolean layered() {
            return layered;
        }
    }

    /**
     * Validates.
     *
     * @param timeout          deadline
     * @param chunkBytes       message size or 0
     * @param parallelPeers    parallel peers
     * @param slotBytes        slot size
     * @param exchangeBlockIds peers' block ids known
     * @param fragmentBlocks   holes between block ids
     * @param verify           verify the generation blocks
     * @param indexerDim       indexer-K bytes per token, 0 = none
     * @param mode             pull or push, whole or by layer ranges
     * @param layerStep        global layers per range
     */
    public HarnessOptions {
        Objects.requireNonNull(timeout, "timeout");
        if (timeout.isZero() || timeout.isNegative()) {
            throw new IllegalArgumentException("timeout = " + timeout + ": must be positive");
        }
        if (indexerDim < 0) {
            throw new IllegalArgumentException("indexerDim = " + indexerDim + ": must be at least 0");
        }
        Objects.requireNonNull(mode, "mode");
        if (layerStep < 1) {
            throw new IllegalArgumentException("layerStep = " + layerStep + ": must be at least 1");
        }
        if (chunkBytes < 0 || slotBytes < 0) {
            throw new IllegalArgumentException("chunkBytes = " + chunkBytes + ", slotBytes = " + slotBytes
                    + ": must be at least 0");
        }
    }

    /**
     * 30 s per pair, unchunked parts, parallel peers, 16 KiB slots (small enough that the larger parts of the
     * grids fall back to dynamic buffers, so both paths run), block ids exchanged and fragmented, verified, whole
     * requests pulled (layer ranges of one layer when layer-wise).
     *
     * @return the defaults
     */
    public static HarnessOptions defaults() {
        return new HarnessOptions(Duration.ofSeconds(30), 0, true, 16 * 1024, true, true, true, 0, Mode.PULL, 1);
    }

    /**
     * @param v message size, 0 = unchunked
     * @return a copy with that chunk size
     */
    public HarnessOptions withChunkBytes(long v) {
        return new HarnessOptions(timeout, v, parallelPeers, slotBytes, exchangeBlockIds, fragmentBlocks,
                verify, indexerDim, mode, layerStep);
    }

    /**
     * @param v whether per-peer actions run concurrently
     * @return a copy
     */
    public HarnessOptions withParallelPeers(boolean v) {
        return new HarnessOptions(timeout, chunkBytes, v, slotBytes, exchangeBlockIds, fragmentBlocks,
                verify, indexerDim, mode, layerStep);
    }

    /**
     * @param v deadline of a pair run
     * @return a copy
     */
    public HarnessOptions withTimeout(Duration v) {
        return new HarnessOptions(v, chunkBytes, parallelPeers, slotBytes, exchangeBlockIds, fragmentBlocks,
                verify, indexerDim, mode, layerStep);
    }

    /**
     * @param v staging slot size
     * @return a copy
     */
    public HarnessOptions withSlotBytes(long v) {
        return new HarnessOptions(timeout, chunkBytes, parallelPeers, v, exchangeBlockIds, fragmentBlocks,
                verify, indexerDim, mode, layerStep);
    }

    /**
     * @param v whether sessions know their peers' block ids
     * @return a copy
     */
    public HarnessOptions withExchangeBlockIds(boolean v) {
        return new HarnessOptions(timeout, chunkBytes, parallelPeers, slotBytes, v, fragmentBlocks, verify,
                indexerDim, mode, layerStep);
    }

    /**
     * @param v whether block ids have holes
     * @return a copy
     */
    public HarnessOptions withFragmentBlocks(boolean v) {
        return new HarnessOptions(timeout, chunkBytes, parallelPeers, slotBytes, exchangeBlockIds, v, verify,
                indexerDim, mode, layerStep);
    }

    /**
     * @param v indexer-K bytes per token of every rank's indexer pool, 0 = none
     * @return a copy
     */
    public HarnessOptions withIndexerDim(int v) {
        return new HarnessOptions(timeout, chunkBytes, parallelPeers, slotBytes, exchangeBlockIds, fragmentBlocks,
                verify, v, mode, layerStep);
    }

    /**
     * @param v whether reports verify every generation element
     * @return a copy
     */
    public HarnessOptions withVerify(boolean v) {
        return new HarnessOptions(timeout, chunkBytes, parallelPeers, slotBytes, exchangeBlockIds,
                fragmentBlocks, v, indexerDim, mode, layerStep);
    }

    /**
     * @param v how the requests move
     * @return a copy
     */
    public HarnessOptions withMode(Mode v) {
        return new HarnessOptions(timeout, chunkBytes, parallelPeers, slotBytes, exchangeBlockIds, fragmentBlocks,
                verify, indexerDim, v, layerStep);
    }

    /**
     * @param v global layers per range in the layer-wise modes
     * @return a copy
     */
    public HarnessOptions withLayerStep(int v) {
        return new HarnessOptions(timeout, chunkBytes, parallelPeers, slotBytes, exchangeBlockIds, fragmentBlocks,
                verify, indexerDim, mode, v);
    }
}
