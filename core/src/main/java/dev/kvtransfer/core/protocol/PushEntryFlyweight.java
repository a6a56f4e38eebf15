package dev.kvtransfer.core.protocol;

import java.nio.ByteBuffer;

/**
 * One write a context rank reports after a {@link PushNoticeFlyweight} LAYER or DONE notice: {@value #LENGTH} bytes
 * {@code [region id u64][offset u64][length u64][crc32c u32]}, consecutive entries in one message. The generation
 * side checks each entry lies inside a region its request granted, and (with checksums on) that the CRC32C of the
 * memory as it is now equals the writer's.
 */
public final class PushEntryFlyweight extends Flyweight {
    /** Bytes of one entry. */
    public static final int LENGTH = 28;

    static final int REGION_OFFSET = 0;
    static final int WRITE_OFFSET = 8;
    static final int WRITE_LENGTH_OFFSET = 16;
    static final int CRC_OFFSET = 24;

    /**
     * @param buffer holds the entries
     * @param offset where the message of entries starts
     * @param index  which entry
     * @return this
     */
    public PushEntryFlyweight wrap(ByteBuffer buffer, int offset, int index) {
        wrapBuffer(buffer, offset + LENGTH * index);
        return this;
    }

    /** @return the region (grant) id */
    public long regionId() {
        return buffer.getLong(offset + REGION_OFFSET);
    }

    /** @return the byte offset written, inside the region */
    public long writeOffset() {
        return buffer.getLong(offset + WRITE_OFFSET);
    }

    /** @return the bytes written */
    public long writeLength() {
        return buffer.getLong(offset + WRITE_LENGTH_OFFSET);
    }

    /** @return the writer's CRC32C of what it wrote (0 without checksums) */
    public int crc() {
        return buffer.getInt(offset + CRC_OFFSET);
    }

    /**
     * @param regionId the region
     * @param at       byte offset in it
     * @param length   bytes
     * @param crc      the CRC32C, or 0
     * @return this
     */
    public PushEntryFlyweight write(long regionId, long at, long length, int crc) {
        buffer.putLong(offset + REGION_OFFSET, regionId);
        buffer.putLong(offset + WRITE_OFFSET, at);
        buffer.putLong(offset + WRITE_LENGTH_OFFSET, length);
        buffer.putInt(offset + CRC_OFFSET, crc);
        return this;
    }
}
