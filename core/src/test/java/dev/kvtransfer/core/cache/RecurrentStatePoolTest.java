package dev.kvtransfer.core.cache;

import dev.kvtransfer.api.memory.BufferManager;
import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.memory.MemoryKind;
import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.api.model.DataType;
import dev.kvtransfer.api.model.RecurrentStateShape;
import dev.kvtransfer.core.memory.HostBufferManager;
import dev.kvtransfer.core.pattern.KvPattern;
import org.junit.jupiter.api.Test;

import java.util.List;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatIllegalArgumentException;

/** The reference recurrent-state pool, lent through PagedKvCache, and KvPattern over recurrent states. */
class RecurrentStatePoolTest {
    private static final RecurrentStateShape SHAPE = new RecurrentStateShape(RecurrentStateShape.kinds("AAAR", 2),
            List.of(), 8, 3, 4, 2, 4, DataType.FLOAT16, DataType.FLOAT32);

    private static CacheState state(int tp, int pp, int cp) {
        return CacheState.builder().uniformKvHeads(6, 4).sizePerHead(4).tokensPerBlock(8).tensorParallelism(tp)
                .pipelineParallelism(pp).contextParallelism(cp).recurrentState(SHAPE).build();
    }

    @Test
    void statesComeAndGoWithTheRequestsBlocksOnCpRankZeroOnly() {
        CacheState s = state(2, 1, 2);
        try (HostBufferManager mm = new HostBufferManager()) {
            for (int rank = 0; rank < s.worldSize(); rank++) {
                try (PagedKvCache cache = PagedKvCache.of(mm, s, rank, 4)) {
                    RecurrentStatePool pool = new RecurrentStatePool(mm, MemoryKind.HOST, s, rank);
                    cache.attachRecurrentState(pool);
                    cache.allocate(7, 1);
                    cache.allocate(7, 1); // more blocks for the same request: still one state
                    if (s.cpRank(rank) == 0) {
                        assertThat(pool.localLayers()).isEqualTo(2);
                        MemoryBuffer conv = cache.recurrentState().convState(7, 1);
                        assertThat(conv.size()).isEqualTo(4L * 3 * 2); // 8 channels / TP2, 3 entries, FP16
                        assertThat(cache.recurrentState().ssmState(7, 0).size()).isEqualTo(2L * 2 * 4 * 4);
                    } else {
                        assertThat(pool.localLayers()).isZero();
                        assertThatIllegalArgumentException().isThrownBy(() -> pool.convState(7, 0))
                                .withMessageContaining("request 7 has no recurrent state");
                    }
                    cache.free(7);
                    assertThatIllegalArgumentException().isThrownBy(() -> pool.ssmState(7, 0))
                            .withMessageContaining("request 7");
                }
            }
        }
    }

    /** "Device" memory the CPU may not touch: host-backed, copied only through the manager. */
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
            assertThat(kind).isEqualTo(MemoryKind.DEVICE);
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

    @Test
    void statesInDeviceMemoryAreFilledAndCheckedThroughAHostMirror() {
        CacheState s = state(2, 1, 1);
        try (HostBufferManager mm = new HostBufferManager()) {
            FakeDevice device = new FakeDevice(mm);
            try (RecurrentStatePool pool = new RecurrentStatePool(device, MemoryKind.DEVICE, s, 1)) {
                pool.allocate(5);
                assertThatIllegalArgumentException().isThrownBy(() -> KvPattern.fillRecurrent(pool, s, 1, 5))
                        .withMessageContaining("request 5").withMessageContaining("need a BufferManager");
                KvPattern.fillRecurrent(pool, device, s, 1, 5);
                assertThat(KvPattern.verifyRecurrent(pool, device, s, 1, 5).assertOk().checkedElements())
                        .isEqualTo(2L * (4 * 3 + 2 * 2 * 4));
                pool.allocate(6); // never written: its elements are not request 6's pattern
                assertThat(KvPattern.verifyRecurrent(pool, device, s, 1, 6).mismatches()).isPositive();
            }
        }
    }

    @Test
    void thePatternChecksEveryStateElementAndNamesTheFirstMismatch() {
        CacheState s = state(2, 2, 1);
        try (HostBufferManager mm = new HostBufferManager()) {
            int rank = s.rankOf(1, 1, 0);
            try (PagedKvCache cache = PagedKvCache.of(mm, s, rank, 4)) {
                cache.attachRecurrentState(new RecurrentStatePool(mm, MemoryKind.HOST, s, rank));
                cache.allocate(9, 1);
                KvPattern.fillRecurrent(cache.recurrentState(), s, rank, 9);
                KvPattern.Result ok = KvPattern.verifyRecurrent(cache.recurrentState(), s, rank, 9).assertOk();
                // PP rank 1 holds recurrent layer 1; TP rank 1 holds 4 of 8 channels and 2 of 4 heads.
                assertThat(ok.checkedElements()).isEqualTo(4L * 3 + 2L * 2 * 4);
                assertThat(KvPattern.verifyRecurrent(cache.recurrentState(), s, rank, 9, 10).mismatches())
                        .isEqualTo(ok.checkedElements());
                MemoryBuffer ssm = cache.recurrentState().ssmState(9, 0);
                ssm.asByteBuffer().put(5, (byte) (ssm.asByteBuffer().get(5) ^ 1));
                KvPattern.Result bad = KvPattern.verifyRecurrent(cache.recurrentState(), s, rank, 9);
                assertThat(bad.mismatches()).isOne();
                assertThat(bad.firstMismatch()).contains("ssm state", "recurrent layer 1", "head/channel 2", "byte 4");
                cache.free(9);
            }
        }
    }
}
