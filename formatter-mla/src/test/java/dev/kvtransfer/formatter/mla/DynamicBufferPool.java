package dev.kvtransfer.formatter.mla;

import dev.kvtransfer.api.format.TransferBufferPool;
import dev.kvtransfer.api.memory.BufferManager;
import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.memory.MemoryKind;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Objects;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * A dynamic-only {@link TransferBufferPool} (slot size 0, every carved buffer allocated from a
 * {@link BufferManager}) for the in-JVM MLA tests; counts the buffers it carved so tests can tell a zero-copy
 * transfer (nothing carved) from a staged one.
 */
final class DynamicBufferPool implements TransferBufferPool {
    private final BufferManager memory;
    private final AtomicInteger carvedBuffers = new AtomicInteger();

    DynamicBufferPool(BufferManager memory) {
        this.memory = Objects.requireNonNull(memory, "memory");
    }

    int carvedBuffers() {
        return carvedBuffers.get();
    }

    @Override
    public long slotBytes() {
        return 0;
    }

    @Override
    public Slot acquire(Direction direction, Duration timeout) {
        Objects.requireNonNull(direction, "direction");
        Objects.requireNonNull(timeout, "timeout");
        return new Slot() {
            private final List<MemoryBuffer> owned = new ArrayList<>();

            @Override
            public MemoryBuffer[] carve(long[] sizes) {
                MemoryBuffer[] out = new MemoryBuffer[sizes.length];
                for (int i = 0; i < sizes.length; i++) {
                    out[i] = memory.allocate(sizes[i], MemoryKind.HOST);
                    owned.add(out[i]);
                }
                carvedBuffers.addAndGet(sizes.length);
                return out;
            }

            @Override
            public int covered() {
                return 0;
            }

            @Override
            public void close() {
                owned.forEach(MemoryBuffer::close);
                owned.clear();
            }
        };
    }
}
