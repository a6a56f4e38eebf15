package dev.kvtransfer.core.cache;

import dev.kvtransfer.api.cache.RecurrentStateView;
import dev.kvtransfer.api.memory.BufferManager;
import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.memory.MemoryKind;
import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.api.model.RecurrentStateShape;

import java.util.HashMap;
import java.util.Map;
import java.util.Objects;

/**
 * The reference {@link RecurrentStateView}: one off-heap allocation per request holding, for each of the rank's
 * recurrent layers in order, the conv state then the SSM state. Attach it to a {@link PagedKvCache} with
 * {@link PagedKvCache#attachRecurrentState} so formatters find it through the cache view.
 */
public final class RecurrentStatePool implements RecurrentStateView, AutoCloseable {
    private final BufferManager buffers;
    private final MemoryKind kind;
    private final int layers;
    private final long convBytes;
    private final long ssmBytes;
    private final Map<Long, MemoryBuffer> states = new HashMap<>();
    private boolean closed;

    /**
     * A pool for one rank of a hybrid instance.
     *
     * @param buffers where the states' memory comes from
     * @param kind    the memory kind
     * @param state   the instance's cache state (must declare a recurrent state)
     * @param rank    the rank
     */
    public RecurrentStatePool(BufferManager buffers, MemoryKind kind, CacheState state, int rank) {
        this.buffers = Objects.requireNonNull(buffers, "buffers");
        this.kind = Objects.requireNonNull(kind, "kind");
        RecurrentStateShape shape = Objects.requireNonNull(state, "state").recurrentState();
        if (shape == null) {
            throw new IllegalArgumentException("state " + state + " declares no recurrent state");
        }
        this.layers = RecurrentStateShape.holdsState(state, rank) ? shape.recurrentLayerCount(state.ppRank(rank)) : 0;
        this.convBytes = shape.convBytesPerRank(state.tensorParallelism());
        this.ssmBytes = shape.ssmBytesPerRank(state.tensorParallelism());
    }

    /** @return recurrent layers this rank holds states of (0 on a CP rank other than 0) */
    public int localLayers() {
        return layers;
    }

    /**
     * Allocates the states of a request (contents undefined until written).
     *
     * @param requestId the context request id
     * @throws IllegalStateException if the request already has states here, or the pool is closed
     */
    public synchronized void allocate(long requestId) {
        if (closed) {
            throw new IllegalStateException("recurrent state pool is closed (request " + requestId + ")");
        }
        if (states.containsKey(requestId)) {
            throw new IllegalStateException("request " + requestId + " already has recurrent states");
        }
        states.put(requestId, buffers.allocate(Math.max(1, layers * (convBytes + ssmBytes)), kind));
    }

    /**
     * Allocates the states of a request unless it has them (or this rank holds no states).
     *
     * @param requestId the context request id
     */
    public synchronized void allocateIfAbsent(long requestId) {
        if (layers > 0 && !states.containsKey(requestId)) {
            allocate(requestId);
        }
    }

    /**
     * Frees the states of a request; nothing when it has none.
     *
     * @param requestId the context request id
     */
    public synchronized void free(long requestId) {
        MemoryBuffer b = states.remove(requestId);
        if (b != null) {
            b.close();
        }
    }

    @Override
    public MemoryBuffer convState(long requestId, int localLayer) {
        return of(requestId, localLayer).slice(localLayer * (convBytes + ssmBytes), convBytes);
    }

    @Override
    public MemoryBuffer ssmState(long requestId, int localLayer) {
        return of(requestId, localLayer).slice(localLayer * (convBytes + ssmBytes) + convBytes, ssmBytes);
    }

    private synchronized MemoryBuffer of(long requestId, int localLayer) {
        MemoryBuffer b = states.get(requestId);
        if (b == null) {
            throw new IllegalArgumentException("request " + requestId + " has no recurrent state on this rank");
        }
        if (localLayer < 0 || localLayer >= layers) {
            throw new IllegalArgumentException("request " + requestId + ": recurrent layer " + localLayer
                    + " outside [0, " + layers + ")");
        }
        return b;
    }

    /** Frees every request's states. Idempotent. */
    @Override
    public synchronized void close() {
        closed = true;
        for (MemoryBuffer b : states.values()) {
            b.close();
        }
        states.clear();
    }

    @Override
    public String toString() {
        return "RecurrentStatePool{" + layers + " layers, conv " + convBytes + " B, ssm " + ssmBytes + " B, "
                + states.size() + " requests}";
    }
}
