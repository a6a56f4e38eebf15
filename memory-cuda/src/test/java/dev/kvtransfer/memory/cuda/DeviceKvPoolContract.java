package dev.kvtransfer.memory.cuda;

import dev.kvtransfer.api.layout.BlockLayout;
import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.memory.MemoryKind;
import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.api.model.DataType;
import dev.kvtransfer.core.memory.HostBufferManager;
import dev.kvtransfer.testkit.KvPattern;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/**
 * Device-resident KV pools carry DESIGN §6's pattern: filled and verified through a host mirror, corrupted bytes
 * are found, and a TP2 to TP1 re-shard done on the device with one {@code copy2d} per (block, peer) verifies on
 * the receiving layout. Runs on the fake runtime here ({@link DeviceKvPoolOnFakeRuntimeTest}) and on a GPU
 * ({@link DeviceKvPoolGpuTest}).
 */
abstract class DeviceKvPoolContract {
    private static final long REQUEST = 4242;

    protected CudaBufferManager cuda;

    protected abstract CudaBufferManager newManager();

    @BeforeEach
    void open() {
        cuda = newManager();
    }

    @AfterEach
    void close() {
        cuda.close();
    }

    /** Llama-like but small: 4 layers, 8 KV heads of 64, 16 tokens per block, fp16. */
    private static CacheState state(int tp) {
        return CacheState.builder().uniformKvHeads(4, 8).sizePerHead(64).tokensPerBlock(16)
                .tensorParallelism(tp).dataType(DataType.FLOAT16).build();
    }

    @Test
    void required_1_fillThenVerifyChecksEveryElement() {
        CacheState s = state(1);
        BlockLayout layout = BlockLayout.of(s, 0);
        int[] blocks = {5, 6, 7, 2, 9}; // two runs and two singles
        try (DeviceKvPool pool = new DeviceKvPool(cuda, layout, 12)) {
            DeviceKvPattern.fill(cuda, pool, blocks, s, 0, REQUEST, blocks.length);
            KvPattern.Result r = DeviceKvPattern.verify(cuda, pool, blocks, s, 0, REQUEST, blocks.length);
            assertThat(r.ok()).as(r.toString()).isTrue();
            assertThat(r.checkedElements()).isEqualTo(blocks.length * layout.blockBytes() / 2);
            // The same bytes are not the pattern of another request.
            assertThat(DeviceKvPattern.verify(cuda, pool, blocks, s, 0, REQUEST + 1, blocks.length).ok()).isFalse();
        }
    }

    @Test
    void required_2_aCorruptedDeviceByteIsFoundAndLocated() {
        CacheState s = state(1);
        BlockLayout layout = BlockLayout.of(s, 0);
        int[] blocks = {0, 1, 2};
        try (DeviceKvPool pool = new DeviceKvPool(cuda, layout, 3);
             HostBufferManager host = new HostBufferManager();
             MemoryBuffer junk = host.allocate(2, MemoryKind.HOST)) {
            DeviceKvPattern.fill(cuda, pool, blocks, s, 0, REQUEST, 3);
            // Overwrite element (layer 2, V, head 5, token 3, dim 7) of the second block with bytes read back
            // from elsewhere, then flip them.
            long at = layout.offset(2, 1, 5, 3, 7);
            cuda.copy(pool.block(1), at, junk, 0, 2);
            cuda.synchronize();
            junk.asByteBuffer().putShort(0, (short) ~junk.asByteBuffer().getShort(0));
            cuda.copy(junk, 0, pool.block(1), at, 2);
            KvPattern.Result r = DeviceKvPattern.verify(cuda, pool, blocks, s, 0, REQUEST, 3);
            assertThat(r.mismatches()).isEqualTo(1);
            assertThat(r.firstMismatch()).contains("layer 2").contains("kv 1").contains("head 5")
                    .contains("token 19").contains("dim 7");
        }
    }

    @Test
    void required_3_tp2ToTp1ReshardOnTheDeviceVerifies() {
        CacheState ctx = state(2);
        CacheState gen = state(1);
        BlockLayout ctxLayout = BlockLayout.of(ctx, 0);
        BlockLayout genLayout = BlockLayout.of(gen, 0);
        int[] ctxBlocks = {3, 1, 2};
        int[] genBlocks = {0, 4, 5};
        try (DeviceKvPool rank0 = new DeviceKvPool(cuda, ctxLayout, 4);
             DeviceKvPool rank1 = new DeviceKvPool(cuda, ctxLayout, 4);
             DeviceKvPool target = new DeviceKvPool(cuda, genLayout, 6)) {
            DeviceKvPattern.fill(cuda, rank0, ctxBlocks, ctx, 0, REQUEST, 3);
            DeviceKvPattern.fill(cuda, rank1, ctxBlocks, ctx, 1, REQUEST, 3);
            DeviceKvPool[] peers = {rank0, rank1};
            long rows = (long) ctxLayout.localLayers() * ctxLayout.kvFactor();
            for (int b = 0; b < ctxBlocks.length; b++) {
                for (int p = 0; p < peers.length; p++) {
                    // Peer p's heads are one contiguous [head range][token][dim] run per (layer, kv) plane.
                    cuda.copy2d(peers[p].block(ctxBlocks[b]), 0, ctxLayout.planeBytes(),
                            target.block(genBlocks[b]), p * ctxLayout.planeBytes(), genLayout.planeBytes(),
                            ctxLayout.planeBytes(), rows);
                }
            }
            KvPattern.Result r = DeviceKvPattern.verify(cuda, target, genBlocks, gen, 0, REQUEST, 3);
            assertThat(r.ok()).as(r.toString()).isTrue();
            assertThat(r.checkedElements()).isEqualTo(3 * genLayout.blockBytes() / 2);
        }
    }

    @Test
    void required_4_aPartialFillCopiesOnlyItsBlocksAndHostOverloadsRefuseTheDevice() {
        CacheState s = state(1);
        BlockLayout layout = BlockLayout.of(s, 0);
        int[] blocks = {4, 5, 0, 1};
        try (DeviceKvPool pool = new DeviceKvPool(cuda, layout, 6)) {
            KvPattern.fill(pool, cuda, blocks, s, 0, REQUEST, 4);
            // A prefix-cache style fill of global blocks [1, 3) with another request: the others keep theirs.
            KvPattern.fill(pool, cuda, blocks, s, 0, REQUEST + 1, 4, 1, 3);
            assertThat(KvPattern.verify(pool, cuda, blocks, s, 0, REQUEST, 4, 0, 1).ok()).isTrue();
            assertThat(KvPattern.verify(pool, cuda, blocks, s, 0, REQUEST + 1, 4, 1, 3).ok()).isTrue();
            KvPattern.Result last = KvPattern.verify(pool, cuda, blocks, s, 0, REQUEST, 4, 3, 4);
            assertThat(last.ok()).as(last.toString()).isTrue();
            assertThat(last.checkedElements()).isEqualTo(layout.blockBytes() / 2);
            // The CPU must never touch device memory: the host-only overloads say which one to use.
            assertThatThrownBy(() -> KvPattern.fill(pool, blocks, s, 0, REQUEST, 4))
                    .isInstanceOf(IllegalArgumentException.class).hasMessageContaining("DEVICE memory")
                    .hasMessageContaining("BufferManager");
            assertThatThrownBy(() -> KvPattern.verify(pool, blocks, s, 0, REQUEST, 4))
                    .isInstanceOf(IllegalArgumentException.class).hasMessageContaining("DEVICE memory");
        }
    }
}
