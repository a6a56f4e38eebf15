package dev.kvtransfer.api.format;

import dev.kvtransfer.api.model.CacheState;

import java.util.List;
import java.util.Set;

/**
 * Turns a request's blocks into one part per peer rank (format, context side) and back (unformat, generation
 * side), re-sharding heads (TP), layers (PP) and blocks (CP).
 *
 * <p>Thread-safe: core calls it from several transfer threads at once, each with its own session.
 */
public interface CacheFormatter {
    /**
     * Sends this rank's share of a request to the peers of the session (nothing when another rank holding
     * identical data is the designated sender).
     *
     * @param session the transfer
     */
    void format(TransferSession session);

    /**
     * Receives the parts from the picked peers and writes them into this rank's blocks of the request.
     *
     * @param session the transfer
     */
    void unformat(TransferSession session);

    /**
     * Whether this formatter can convert between the two layouts.
     *
     * @param self this side's state
     * @param peer the other side's state
     * @return the answer, with the reason when unsupported
     */
    Support inquireSupport(CacheState self, CacheState peer);

    /**
     * Peer rank indices this rank exchanges handshakes with (all of them get a request / ready signal).
     *
     * @param self      this side's state
     * @param selfIndex this rank
     * @param peer      the other side's state
     * @return peer rank indices, in target-rank order
     */
    List<Integer> counterparts(CacheState self, int selfIndex, CacheState peer);

    /**
     * Of the counterparts (positions {@code 0..counterparts-1}), those this generation rank receives data
     * from.
     *
     * @param self      this (generation) side's state
     * @param selfIndex this rank
     * @param peer      the context side's state
     * @return positions in the counterpart list
     */
    List<Integer> pickRecvConnections(CacheState self, int selfIndex, CacheState peer);

    /**
     * Whether this context rank sends data (as opposed to only the ready signal) to the given peer instance.
     *
     * @param self      this (context) side's state
     * @param selfIndex this rank
     * @param peer      the generation side's state
     * @return true when it sends
     */
    boolean needSendCache(CacheState self, int selfIndex, CacheState peer);

    /** @return what this formatter can do beyond whole-request two-sided transfers (none by default) */
    default Set<FormatterCapability> capabilities() {
        return Set.of();
    }

    /**
     * Layer-wise, context side: sends this rank's share of global layers {@code [firstLayer, firstLayer +
     * layers)} (the layers this rank does not hold are skipped). Core calls the same ranges on both sides in the
     * same order, so the two sides agree on every message.
     *
     * @param session    the transfer
     * @param firstLayer first global layer
     * @param layers     number of layers
     * @throws UnsupportedOperationException without {@link FormatterCapability#LAYER_RANGES}
     */
    default void format(TransferSession session, int firstLayer, int layers) {
        throw new UnsupportedOperationException(getClass().getName() + " does not declare LAYER_RANGES");
    }

    /**
     * Checks a layer range given to {@link #format(TransferSession, int, int)}, {@link #unformat(TransferSession,
     * int, int)} or a push against the model's layer count, for every formatter alike.
     *
     * @param session    the transfer
     * @param firstLayer first global layer
     * @param layers     number of layers
     * @throws dev.kvtransfer.api.KvTransferException {@code INTERNAL} naming the request when outside the model
     */
    static void checkLayerRange(TransferSession session, int firstLayer, int layers) {
        int total = session.selfState().cacheState().numLayers();
        if (firstLayer < 0 || layers < 0 || (long) firstLayer + layers > total) {
            throw new dev.kvtransfer.api.KvTransferException(dev.kvtransfer.api.ErrorCode.INTERNAL,
                    session.requestId(), "layer range [" + firstLayer + ", " + firstLayer + "+" + layers
                    + ") outside the model's " + total + " layers", null);
        }
    }

    /**
     * Layer-wise, generation side: receives global layers {@code [firstLayer, firstLayer + layers)}.
     *
     * @param session    the transfer
     * @param firstLayer first global layer
     * @param layers     number of layers
     * @throws UnsupportedOperationException without {@link FormatterCapability#LAYER_RANGES}
     */
    default void unformat(TransferSession session, int firstLayer, int layers) {
        throw new UnsupportedOperationException(getClass().getName() + " does not declare LAYER_RANGES");
    }

    /**
     * One-sided push, context side: writes this rank's share of global layers {@code [firstLayer, firstLayer +
     * layers)} straight into the peers' pools ({@link TransferSession#peerPool}, {@link TransferSession#write}),
     * re-sharding and converting pool layouts, contiguous runs coalesced into one entry, duplicated heads written
     * once, reused blocks ({@link TransferSession#reusedBlocks()}) not written. Returns when every write it issued
     * completed (remote completion).
     *
     * @param session    the transfer ({@link TransferSession#isPush()} true)
     * @param firstLayer first global layer
     * @param layers     number of layers
     * @throws UnsupportedOperationException without {@link FormatterCapability#PUSH}
     */
    default void push(TransferSession session, int firstLayer, int layers) {
        throw new UnsupportedOperationException(getClass().getName() + " does not declare PUSH");
    }
}
