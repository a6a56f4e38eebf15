package dev.kvtransfer.memory.cuda;

import dev.kvtransfer.api.cache.KvCacheView;
import dev.kvtransfer.api.layout.BlockLayout;
import dev.kvtransfer.api.memory.BufferManager;
import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.memory.MemoryKind;

import java.util.Objects;

/**
 * A paged KV pool in device memory: one {@code DEVICE} allocation of {@code blocks * layout.blockBytes()}, block
 * {@code i} a view at {@code i * blockBytes}. What an engine lends kvtransfer on a GPU; here it is the target of
 * the device-pool checks.
 */
final class DeviceKvPool implements KvCacheView, AutoCloseable {
    private final BlockLayout layout;
    private final int blocks;
    private final MemoryBuffer memory;

    DeviceKvPool(BufferManager cuda, BlockLayout layout, int blocks) {
        this.layout = Objects.requireNonNull(layout, "layout");
        if (blocks < 1) {
            throw new IllegalArgumentException("blocks = " + blocks);
        }
        this.blocks = blocks;
        this.memory = cuda.allocate(layout.blockBytes() * blocks, MemoryKind.DEVICE);
    }

    @Override
    public BlockLayout layout() {
        return layout;
    }

    @Override
    public MemoryBuffer block(int blockId) {
        Objects.checkIndex(blockId, blocks);
        return memory.slice(blockId * layout.blockBytes(), layout.blockBytes());
    }

    /**
     * Consecutive blocks as one range (they are adjacent in the pool's allocation).
     *
     * @param first first block id
     * @param count number of blocks
     * @return a view of {@code count * blockBytes} bytes
     */
    MemoryBuffer blocks(int first, int count) {
        Objects.checkFromIndexSize(first, count, blocks);
        return memory.slice(first * layout.blockBytes(), count * layout.blockBytes());
    }

    @Override
    public int blockCount() {
        return blocks;
    }

    @Override
    public void close() {
        memory.close();
    }
}
