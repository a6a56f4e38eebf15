package dev.kvtransfer.core.protocol;

import java.nio.ByteBuffer;

/**
 * The part checksums of a pull, sender to receiver on the request's data tag after the sender's last part to that
 * peer: {@code [count u32][crc32c u32 x count]}, one CRC32C per message moved with that peer, in order. The
 * receiver compares them with what arrived before the request may complete.
 */
public final class PartChecksumsFlyweight extends Flyweight {
    /** Bytes before the checksums. */
    public static final int HEADER_LENGTH = 4;

    /**
     * @param count messages moved with the peer
     * @return the message's length
     */
    public static long length(int count) {
        return HEADER_LENGTH + 4L * count;
    }

    /**
     * @param buffer holds the message
     * @param offset where it starts
     * @return this
     */
    public PartChecksumsFlyweight wrap(ByteBuffer buffer, int offset) {
        wrapBuffer(buffer, offset);
        return this;
    }

    /** @return the message count as sent */
    public int count() {
        return buffer.getInt(offset);
    }

    /**
     * @param i index, below {@link #count()}
     * @return the i-th message's CRC32C
     */
    public int crc(int i) {
        return buffer.getInt(offset + HEADER_LENGTH + 4 * i);
    }

    /**
     * @param crcs  the checksums (the first {@code count} are written)
     * @param count how many
     * @return this
     */
    public PartChecksumsFlyweight write(int[] crcs, int count) {
        buffer.putInt(offset, count);
        for (int i = 0; i < count; i++) {
            buffer.putInt(offset + HEADER_LENGTH + 4 * i, crcs[i]);
        }
        return this;
    }
}
