package dev.kvtransfer.formatter.support;

import dev.kvtransfer.api.memory.BufferManager;
import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.memory.MemoryKind;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.Objects;
import java.util.concurrent.atomic.AtomicLong;

/** A heap-backed {@link BufferManager} for formatter-support tests (it depends on the api alone); counts copy calls. */
final class HeapMemory implements BufferManager {
    private static final AtomicLong IDS = new AtomicLong(1);
    long copies;
    long copy2ds;
    long copiedBytes;

    /** A heap buffer or a view of one. */
    static final class Buf implements MemoryBuffer {
        final byte[] bytes;
        final int base;
        final int size;
        final long id;

        Buf(byte[] bytes, int base, int size, long id) {
            this.bytes = bytes;
            this.base = base;
            this.size = size;
            this.id = id;
        }

        @Override
        public long address() {
            return (id << 32) + base;
        }

        @Override
        public long size() {
            return size;
        }

        @Override
        public MemoryKind kind() {
            return MemoryKind.HOST;
        }

        @Override
        public MemoryBuffer slice(long offset, long length) {
            Objects.checkFromIndexSize(offset, length, size);
            return new Buf(bytes, base + (int) offset, (int) length, id);
        }

        @Override
        public ByteBuffer asByteBuffer() {
            return ByteBuffer.wrap(bytes, base, size).slice().order(ByteOrder.LITTLE_ENDIAN);
        }

        @Override
        public void close() {
        }

        byte get(long i) {
            Objects.checkIndex(i, size);
            return bytes[base + (int) i];
        }

        void put(long i, byte v) {
            Objects.checkIndex(i, size);
            bytes[base + (int) i] = v;
        }
    }

    @Override
    public Buf allocate(long bytes, MemoryKind kind) {
        return new Buf(new byte[Math.toIntExact(bytes)], 0, (int) bytes, IDS.getAndIncrement());
    }

    @Override
    public void copy(MemoryBuffer src, long srcOffset, MemoryBuffer dst, long dstOffset, long bytes) {
        Buf s = (Buf) src;
        Buf d = (Buf) dst;
        Objects.checkFromIndexSize(srcOffset, bytes, s.size);
        Objects.checkFromIndexSize(dstOffset, bytes, d.size);
        System.arraycopy(s.bytes, s.base + (int) srcOffset, d.bytes, d.base + (int) dstOffset, (int) bytes);
        copies++;
        copiedBytes += bytes;
    }

    @Override
    public void copy2d(MemoryBuffer src, long srcOffset, long srcPitch, MemoryBuffer dst, long dstOffset,
                       long dstPitch, long rowBytes, long rows) {
        copy2ds++;
        BufferManager.super.copy2d(src, srcOffset, srcPitch, dst, dstOffset, dstPitch, rowBytes, rows);
    }

    @Override
    public void synchronize() {
    }

    @Override
    public void close() {
    }
}
