package dev.kvtransfer.core.pattern;

import dev.kvtransfer.api.layout.BlockLayout;
import dev.kvtransfer.api.layout.PoolLayout;
import dev.kvtransfer.api.memory.BufferManager;
import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.memory.MemoryKind;
import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.api.model.WindowGroups;
import dev.kvtransfer.core.cache.PagedKvCache;
import dev.kvtransfer.core.memory.HostBufferManager;
import org.junit.jupiter.api.Test;

import java.util.List;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatIllegalArgumentException;

/** The window-aware byte count and check: per run of layers with one window, pattern inside, poison before. */
class WindowPatternTest {
    private static final long POISON = 1L << 42;
    /** 4 layers [16, 16, full, 16] at 8 tokens a block, 2 heads of 4, FP16: a layer of a block is 2*2*8*4*2 bytes. */
    private static final CacheState STATE = CacheState.builder().uniformKvHeads(4, 2).sizePerHead(4).tokensPerBlock(8)
            .windowGroups(WindowGroups.of(List.of(16, 16, WindowGroups.UNLIMITED, 16))).build();
    private static final long LAYER = 2L * 2 * 8 * 4 * 2;

    /** Fills a request (host pool) as a transfer leaves it: prefix and windows the pattern, the rest poisoned. */
    private static void transferred(PagedKvCache cache, int[] ids, CacheState s, int total, int reused) {
        KvPattern.fill(cache, ids, s, 0, 9, total, 0, reused);
        KvPattern.fill(cache, ids, s, 0, 9 + POISON, total, reused, total);
        WindowGroups w = s.windowGroups();
        for (int l = 0; l < s.numLayers(); l++) {
            int from = w.firstMovedBlock(l, s.tokensPerBlock(), total, reused);
            PatternWalk.main(cache, ids, s, 0, 9, total).layers(l, l + 1).run(cache, ids, ids, null, from, total);
        }
    }

    @Test
    void movedBytesCountEachLayersWindowAfterThePrefix() {
        // 9 blocks: windowed layers move 3 each, the full layer 9.
        assertThat(WindowPattern.movedBytes(STATE, 0, 9, 0)).isEqualTo((3 * 3 + 9) * LAYER);
        assertThat(WindowPattern.movedBytes(STATE, 0, 9, 8)).isEqualTo(4 * LAYER);
        assertThat(WindowPattern.movedBytes(STATE, 0, 2, 0)).isEqualTo(4 * 2 * LAYER);
        assertThat(WindowPattern.movedBytes(STATE, 0, 9, 9)).isZero();
        // Under CP2 rank 1 holds blocks 5..8 (contiguous split 5 + 4): 3 window blocks each, 4 for the full layer.
        CacheState cp = STATE.toBuilder().contextParallelism(2).build();
        assertThat(WindowPattern.movedBytes(cp, 1, 9, 0)).isEqualTo((3 * 3 + 4) * LAYER);
        assertThat(WindowPattern.movedBytes(cp, 0, 9, 0)).isEqualTo(5 * LAYER);
        // Without windows: every block after the prefix, whole.
        CacheState plain = STATE.toBuilder().windowGroups(null).build();
        assertThat(WindowPattern.movedBytes(plain, 0, 9, 2)).isEqualTo(7 * BlockLayout.of(plain, 0).blockBytes());
    }

    @Test
    void aTransferredRequestChecksOutAndAWriteBeforeAWindowIsFound() {
        for (PoolLayout pool : List.of(PoolLayout.BLOCK, PoolLayout.LAYER_HND)) {
            CacheState s = STATE.withPoolLayout(pool);
            try (HostBufferManager mm = new HostBufferManager();
                 PagedKvCache cache = PagedKvCache.of(mm, s, 0, 16)) {
                int[] ids = cache.allocate(9, 9);
                transferred(cache, ids, s, 9, 1);
                KvPattern.Result r = WindowPattern.verify(cache, ids, s, 0, 9, 9 + POISON, 9, 1);
                assertThat(r.assertOk().checkedElements()).as("%s", pool).isEqualTo(9L * 4 * 2 * 2 * 8 * 4);
                // Block 2 of layer 0 lies before its window (blocks 6..8): a write there is a mismatch.
                KvPattern.fill(cache, ids, s.toBuilder().windowGroups(null).build(), 0, 9, 9, 2, 3);
                KvPattern.Result bad = WindowPattern.verify(cache, ids, s, 0, 9, 9 + POISON, 9, 1);
                assertThat(bad.ok()).isFalse();
                assertThat(bad.mismatches()).as("%s", pool).isEqualTo(3L * 2 * 2 * 8 * 4);
            }
        }
    }

    @Test
    void aDevicePoolIsCheckedThroughAHostMirrorAndRefusedWithoutOne() {
        try (HostBufferManager mm = new HostBufferManager()) {
            FakeDevice device = new FakeDevice(mm);
            try (PagedKvCache cache = PagedKvCache.of(device, STATE, 0, 16, MemoryKind.DEVICE);
                 PagedKvCache host = PagedKvCache.of(mm, STATE, 0, 16)) {
                int[] ids = cache.allocate(9, 9);
                assertThat(host.allocate(9, 9)).containsExactly(ids);
                transferred(host, ids, STATE, 9, 0);
                long blockBytes = BlockLayout.of(STATE, 0).blockBytes();
                for (int id : ids) {
                    device.copy(host.block(id), 0, cache.block(id), 0, blockBytes);
                }
                assertThat(WindowPattern.verify(cache, device, ids, STATE, 0, 9, 9 + POISON, 9, 0).assertOk()
                        .checkedElements()).isEqualTo(9L * 4 * 2 * 2 * 8 * 4);
                assertThatIllegalArgumentException().isThrownBy(() -> WindowPattern.verify(cache, ids, STATE, 0, 9,
                        9 + POISON, 9, 0)).withMessageContaining("DEVICE memory");
            }
        }
    }

    /** "Device" memory the CPU may not touch: host-backed, reached only through this manager's copies. */
    private static final class FakeDevice implements BufferManager {
        private final HostBufferManager host;

        FakeDevice(HostBufferManager host) {
            this.host = host;
        }

        private record Buf(MemoryBuffer backing, long offset, long size) implements MemoryBuffer {
            @Override
            public long address() {
                throw new AssertionError("the CPU asked for a device address");
            }

            @Override
            public MemoryKind kind() {
                return MemoryKind.DEVICE;
            }

            @Override
            public MemoryBuffer slice(long off, long length) {
                return new Buf(backing, offset + off, length);
            }

            @Override
            public java.nio.ByteBuffer asByteBuffer() {
                throw new AssertionError("the CPU asked for device bytes");
            }

            @Override
            public void close() {
                if (offset == 0) {
                    backing.close();
                }
            }
        }

        @Override
        public MemoryBuffer allocate(long bytes, MemoryKind kind) {
            return new Buf(host.allocate(bytes, MemoryKind.HOST), 0, bytes);
        }

        @Override
        public void copy(MemoryBuffer src, long srcOffset, MemoryBuffer dst, long dstOffset, long bytes) {
            MemoryBuffer s = src instanceof Buf b ? b.backing().slice(b.offset(), b.size()) : src;
            MemoryBuffer d = dst instanceof Buf b ? b.backing().slice(b.offset(), b.size()) : dst;
            host.copy(s, srcOffset, d, dstOffset, bytes);
        }

        @Override
        public void synchronize() {
        }

        @Override
        public void close() {
        }
    }
}
