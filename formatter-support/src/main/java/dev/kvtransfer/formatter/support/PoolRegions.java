package dev.kvtransfer.formatter.support;

import dev.kvtransfer.api.cache.KvCacheView;
import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.memory.MemoryKind;

import java.util.Objects;
import java.util.concurrent.atomic.AtomicReferenceArray;
import java.util.function.IntFunction;

/**
 * The region views of one rank's pool, each fetched from the {@link KvCacheView} once and kept, so the hot loops of a
 * formatter (and the plans' copies, which take an {@code IntFunction} of regions) allocate nothing per message; and
 * where the pool lives. Thread-safe: {@link KvCacheView} promises stable regions, so racing threads store equivalent
 * views of the same region.
 */
public final class PoolRegions implements IntFunction<MemoryBuffer> {
    private final KvCacheView view;
    private final AtomicReferenceArray<MemoryBuffer> views;
    private final MemoryKind kind;

    /**
     * @param view the pool
     */
    public PoolRegions(KvCacheView view) {
        this.view = Objects.requireNonNull(view, "view");
        this.views = new AtomicReferenceArray<>(view.regionCount());
        this.kind = view.regionCount() > 0 ? view.region(0).kind() : MemoryKind.HOST;
    }

    /**
     * @param index region index
     * @return the region's view, fetched on first use
     */
    public MemoryBuffer region(int index) {
        MemoryBuffer b = views.get(index);
        if (b == null) {
            b = view.region(index);
            views.set(index, b); // racing threads store equivalent views of the same stable region
        }
        return b;
    }

    /** Same as {@link #region(int)}. */
    @Override
    public MemoryBuffer apply(int index) {
        return region(index);
    }

    /**
     * @return where the pool lives (its first region's kind; {@code HOST} for a pool without regions): a transport
     *         that does not accept it ({@code TransferSession.transportAccepts}) never sees the pool's memory
     */
    public MemoryKind kind() {
        return kind;
    }
}
