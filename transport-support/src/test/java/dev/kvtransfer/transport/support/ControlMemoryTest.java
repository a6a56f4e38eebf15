package dev.kvtransfer.transport.support;

import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.memory.MemoryKind;
import org.junit.jupiter.api.Test;

import java.nio.ByteBuffer;
import java.util.concurrent.atomic.AtomicInteger;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/** The control memory of the one-sided emulation: direct little-endian buffers, with or without addresses. */
class ControlMemoryTest {
    @Test
    void buffersHoldTheirBytesSlicesShareThemAndCopiesMoveThem() {
        ControlMemory m = new ControlMemory("test");
        MemoryBuffer a = m.allocate(64, MemoryKind.HOST);
        MemoryBuffer b = m.allocate(64, MemoryKind.PINNED_HOST);
        assertThat(a.size()).isEqualTo(64);
        assertThat(b.kind()).isEqualTo(MemoryKind.PINNED_HOST);
        ByteBuffer bb = a.asByteBuffer();
        assertThat(bb.order()).isEqualTo(java.nio.ByteOrder.LITTLE_ENDIAN);
        bb.putLong(8, 0x0102030405060708L);
        MemoryBuffer view = a.slice(8, 8);
        assertThat(view.asByteBuffer().getLong(0)).isEqualTo(0x0102030405060708L);
        m.copy(a, 8, b, 40, 8);
        assertThat(b.asByteBuffer().getLong(40)).isEqualTo(0x0102030405060708L);
        assertThat(m.allocate(0, MemoryKind.HOST).size()).isZero();
        assertThatThrownBy(() -> a.slice(60, 8)).isInstanceOf(IndexOutOfBoundsException.class);
    }

    @Test
    void addressesComeOnlyFromTheTransportsFunction() {
        MemoryBuffer plain = new ControlMemory("tcp").allocate(16, MemoryKind.HOST);
        assertThatThrownBy(plain::address).isInstanceOf(UnsupportedOperationException.class)
                .hasMessageContaining("tcp control buffers are used through asByteBuffer() only");
        AtomicInteger asked = new AtomicInteger();
        ControlMemory addressed = ControlMemory.withAddresses("ucx", b -> {
            asked.incrementAndGet();
            return 4096L + b.capacity();
        });
        MemoryBuffer x = addressed.allocate(16, MemoryKind.HOST);
        assertThat(x.address()).isEqualTo(4096L + 16);
        assertThat(x.slice(4, 8).address()).isEqualTo(4096L + 8);
        assertThat(asked).hasValue(2);
    }

    @Test
    void deviceMemoryAndOversizedBuffersAreRefused() {
        ControlMemory m = new ControlMemory("test");
        assertThatThrownBy(() -> m.allocate(8, MemoryKind.DEVICE)).isInstanceOf(UnsupportedOperationException.class)
                .hasMessageContaining("test control memory is host memory");
        assertThatThrownBy(() -> m.allocate(-1, MemoryKind.HOST)).isInstanceOf(IllegalArgumentException.class);
        assertThatThrownBy(() -> m.allocate(1L << 31, MemoryKind.HOST)).isInstanceOf(IllegalArgumentException.class);
    }
}
