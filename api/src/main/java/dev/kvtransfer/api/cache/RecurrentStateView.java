package dev.kvtransfer.api.cache;

import dev.kvtransfer.api.memory.MemoryBuffer;

/**
 * How a serving engine lends the recurrent states of a hybrid model (see
 * {@link dev.kvtransfer.api.model.RecurrentStateShape}): one conv state and one SSM state per request and per
 * recurrent layer this rank holds. A request is named by its context request id, which both sides know (the
 * generation side from the context-phase params). Local layer {@code i} is the rank's {@code i}-th recurrent layer
 * ({@code RecurrentStateShape.firstRecurrentLayer(ppRank) + i} globally).
 *
 * <p>The conv state is {@code [channel][convWidth]} for the rank's {@code convChannels / TP} channels (TP rank
 * {@code t} holds global channels from {@code t * convChannels / TP} on), elements of the conv data type; the SSM
 * state is {@code [head][ssmHeadDim][ssmStateDim]} for the rank's {@code ssmHeads / TP} heads, elements of the
 * SSM data type. The engine must not free a request's states while a transfer holds them.
 */
public interface RecurrentStateView {
    /**
     * The conv state of a request on one local recurrent layer.
     *
     * @param requestId  the context request id
     * @param localLayer the rank's recurrent layer index
     * @return a view of exactly {@code RecurrentStateShape.convBytesPerRank(TP)} bytes
     * @throws IllegalArgumentException naming the request when it has no state here, or the layer is unknown
     */
    MemoryBuffer convState(long requestId, int localLayer);

    /**
     * The SSM state of a request on one local recurrent layer.
     *
     * @param requestId  the context request id
     * @param localLayer the rank's recurrent layer index
     * @return a view of exactly {@code RecurrentStateShape.ssmBytesPerRank(TP)} bytes
     * @throws IllegalArgumentException naming the request when it has no state here, or the layer is unknown
     */
    MemoryBuffer ssmState(long requestId, int localLayer);
}
