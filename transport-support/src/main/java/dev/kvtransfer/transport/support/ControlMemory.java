package dev.kvtransfer.transport.support;

import dev.kvtransfer.api.memory.BufferManager;
import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.memory.MemoryKind;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.Objects;
import java.util.function.ToLongFunction;

/**
 * Host memory for the small control buffers (headers, entry lists, replies) of {@link EmulatedOneSided}: direct
 * little-endian {@link ByteBuffer}s freed by the GC, for a plugin that depends on the api alone. The api has no
 * portable way to read a direct buffer's address, so the transport says how ({@link #withAddresses}, e.g. jucx's
 * {@code UcxUtils::getAddress}); a transport that moves bytes through {@link MemoryBuffer#asByteBuffer()} only uses
 * {@link #ControlMemory()}, whose buffers refuse {@link MemoryBuffer#address()}.
 */
public final class ControlMemory implements BufferManager {
    private final String transport;
    private final ToLongFunction<ByteBuffer> addressOf;

    /**
     * Buffers without an address (used through {@link MemoryBuffer#asByteBuffer()} only).
     *
     * @param transport the transport's name, for messages
     */
    public ControlMemory(String transport) {
        this(transport, null);
    }

    private ControlMemory(String transport, ToLongFunction<ByteBuffer> addressOf) {
        this.transport = Objects.requireNonNull(transport, "transport");
        this.addressOf = addressOf;
    }

    /**
     * Buffers whose {@link MemoryBuffer#address()} the given function reads from the direct buffer.
     *
     * @param transport the transport's name, for messages
     * @param addressOf the address of a direct buffer's first byte
     * @return the memory
     */
    public static ControlMemory withAddresses(String transport, ToLongFunction<ByteBuffer> addressOf) {
        return new ControlMemory(transport, Objects.requireNonNull(addressOf, "addressOf"));
    }

    @Override
    public MemoryBuffer allocate(long bytes, MemoryKind kind) {
        Objects.requireNonNull(kind, "kind");
        if (kind == MemoryKind.DEVICE) {
            throw new UnsupportedOperationException(transport + " control memory is host memory");
        }
        if (bytes < 0 || bytes > Integer.MAX_VALUE) {
            throw new IllegalArgumentException("control buffer of " + bytes + " bytes");
        }
        // At least one byte, so even an empty buffer has an address.
        ByteBuffer b = ByteBuffer.allocateDirect((int) Math.max(1, bytes)).order(ByteOrder.LITTLE_ENDIAN);
        return new Buffer(b.slice(0, (int) bytes).order(ByteOrder.LITTLE_ENDIAN), kind, this);
    }

    @Override
    public void copy(MemoryBuffer src, long srcOffset, MemoryBuffer dst, long dstOffset, long bytes) {
        ByteBuffer s = src.slice(srcOffset, bytes).asByteBuffer();
        dst.slice(dstOffset, bytes).asByteBuffer().put(s);
    }

    @Override
    public void synchronize() {
        // Copies are synchronous.
    }

    @Override
    public void close() {
        // Buffers are freed by the GC (direct buffer cleaners).
    }

    /** A direct buffer, or a view of one. */
    private static final class Buffer implements MemoryBuffer {
        private final ByteBuffer bytes;
        private final MemoryKind kind;
        private final ControlMemory owner;

        Buffer(ByteBuffer bytes, MemoryKind kind, ControlMemory owner) {
            this.bytes = bytes;
            this.kind = kind;
            this.owner = owner;
        }

        @Override
        public long address() {
            if (owner.addressOf == null) {
                throw new UnsupportedOperationException(owner.transport
                        + " control buffers are used through asByteBuffer() only");
            }
            return owner.addressOf.applyAsLong(bytes);
        }

        @Override
        public long size() {
            return bytes.capacity();
        }

        @Override
        public MemoryKind kind() {
            return kind;
        }

        @Override
        public MemoryBuffer slice(long offset, long length) {
            Objects.checkFromIndexSize(offset, length, bytes.capacity());
            return new Buffer(bytes.slice((int) offset, (int) length).order(ByteOrder.LITTLE_ENDIAN), kind, owner);
        }

        @Override
        public ByteBuffer asByteBuffer() {
            return bytes.duplicate().clear().order(ByteOrder.LITTLE_ENDIAN);
        }

        @Override
        public void close() {
            // Freed by the GC.
        }
    }
}
