package dev.kvtransfer.memory.cuda;

import dev.kvtransfer.api.cache.KvCacheView;
import dev.kvtransfer.api.layout.BlockLayout;
import dev.kvtransfer.api.memory.BufferManager;
import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.memory.MemoryKind;
import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.core.memory.HostBufferManager;
import dev.kvtransfer.testkit.KvPattern;

import java.util.Objects;

/**
 * DESIGN §6's verification pattern on a device-resident pool, through a host mirror: {@link #fill} writes the
 * pattern with {@link KvPattern} into host memory and copies it to the device blocks; {@link #verify} copies the
 * device blocks to host memory and checks them with {@link KvPattern}. One copy per run of consecutive block ids
 * in each direction, so the pattern's own code (and its speed) is the testkit's.
 */
final class DeviceKvPattern {
    private DeviceKvPattern() {
    }

    /**
     * Writes the pattern of a rank's blocks of a request into a device pool.
     *
     * @param cuda        the manager that copies (host to device)
     * @param pool        the rank's device pool (its layout must be {@code BlockLayout.of(state, rank)})
     * @param blockIds    the rank's blocks of the request, in order
     * @param state       the rank's instance cache state
     * @param rank        the rank index
     * @param requestId   the request id
     * @param totalBlocks blocks of the whole request
     */
    static void fill(BufferManager cuda, KvCacheView pool, int[] blockIds, CacheState state, int rank,
                     long requestId, int totalBlocks) {
        try (HostBufferManager host = new HostBufferManager(); Mirror mirror = new Mirror(host, pool, blockIds)) {
            KvPattern.fill(mirror, mirror.ids, state, rank, requestId, totalBlocks);
            mirror.transfer(cuda, true);
            cuda.synchronize();
        }
    }

    /**
     * Checks every element of a rank's blocks of a request in a device pool.
     *
     * @return what {@link KvPattern#verify} found in the copy
     */
    static KvPattern.Result verify(BufferManager cuda, KvCacheView pool, int[] blockIds, CacheState state, int rank,
                                   long requestId, int totalBlocks) {
        try (HostBufferManager host = new HostBufferManager(); Mirror mirror = new Mirror(host, pool, blockIds)) {
            mirror.transfer(cuda, false);
            cuda.synchronize();
            return KvPattern.verify(mirror, mirror.ids, state, rank, requestId, totalBlocks);
        }
    }

    /** Host blocks 0..n-1 standing for the device blocks {@code blockIds[0..n-1]}. */
    private static final class Mirror implements KvCacheView, AutoCloseable {
        private final KvCacheView device;
        private final int[] deviceIds;
        private final int[] ids;
        private final BlockLayout layout;
        private final MemoryBuffer memory;

        Mirror(HostBufferManager host, KvCacheView device, int[] blockIds) {
            this.device = Objects.requireNonNull(device, "pool");
            this.deviceIds = blockIds.clone();
            this.layout = device.layout();
            this.ids = new int[blockIds.length];
            for (int i = 0; i < ids.length; i++) {
                ids[i] = i;
            }
            this.memory = host.allocate(Math.max(1, blockIds.length) * layout.blockBytes(), MemoryKind.HOST);
        }

        /**
         * Copies host to device ({@code toDevice}) or back: one copy per run of consecutive block ids of a
         * {@link DeviceKvPool} (adjacent in its memory), else one per block.
         */
        void transfer(BufferManager cuda, boolean toDevice) {
            long bb = layout.blockBytes();
            for (int i = 0; i < deviceIds.length; ) {
                int j = i + 1;
                if (device instanceof DeviceKvPool) {
                    while (j < deviceIds.length && deviceIds[j] == deviceIds[j - 1] + 1) {
                        j++;
                    }
                }
                MemoryBuffer dev = j - i == 1 ? device.block(deviceIds[i])
                        : ((DeviceKvPool) device).blocks(deviceIds[i], j - i);
                if (toDevice) {
                    cuda.copy(memory, i * bb, dev, 0, dev.size());
                } else {
                    cuda.copy(dev, 0, memory, i * bb, dev.size());
                }
                i = j;
            }
        }

        @Override
        public BlockLayout layout() {
            return layout;
        }

        @Override
        public MemoryBuffer block(int blockId) {
            Objects.checkIndex(blockId, ids.length);
            return memory.slice(blockId * layout.blockBytes(), layout.blockBytes());
        }

        @Override
        public int blockCount() {
            return ids.length;
        }

        @Override
        public void close() {
            memory.close();
        }
    }
}
