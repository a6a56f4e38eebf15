package dev.kvtransfer.core.protocol;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.Objects;

/**
 * The part every message flyweight shares: the wrapped buffer (little-endian) and the message's offset in it.
 * A flyweight is reused: {@link #wrap} points it at another message; it holds no other state.
 */
abstract class Flyweight {
    ByteBuffer buffer;
    int offset;

    /**
     * Points this flyweight at a message.
     *
     * @param buffer the buffer holding it; a big-endian buffer is viewed little-endian (one duplicate per wrap)
     * @param offset where the message starts
     */
    void wrapBuffer(ByteBuffer buffer, int offset) {
        Objects.requireNonNull(buffer, "buffer");
        if (offset < 0 || offset > buffer.capacity()) {
            throw new IndexOutOfBoundsException("offset " + offset + " outside a buffer of " + buffer.capacity());
        }
        this.buffer = buffer.order() == ByteOrder.LITTLE_ENDIAN ? buffer
                : buffer.duplicate().order(ByteOrder.LITTLE_ENDIAN);
        this.offset = offset;
    }

    /** @return the wrapped buffer (little-endian) */
    public ByteBuffer buffer() {
        return buffer;
    }

    /** @return where the message starts in {@link #buffer()} */
    public int offset() {
        return offset;
    }
}
