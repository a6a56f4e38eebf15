package dev.kvtransfer.core.protocol;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.KvTransferException;

import java.nio.ByteBuffer;

/**
 * The ready signal, context to generation on the request's data tag, once every counterpart asked and the request
 * is locally ready (or refused): {@code [status u8][pad 3][block count u32][blocks per region u32]
 * [block id u32 x count][MAC]}. A status of {@link #STATUS_REFUSED} is followed by a {@link RefusalCodec refusal}
 * on the same tag; its block ids are zeros. Otherwise the status is {@link #STATUS_PULL} or {@link #STATUS_PUSH},
 * possibly with {@link #FLAG_LAYERS}. The MAC ({@code ControlAuth.readyMacInto}) covers {@code [0, macOffset)}.
 */
public final class ReadySignalFlyweight extends Flyweight {
    /** Bytes before the block ids. */
    public static final int HEADER_LENGTH = 12;
    /** Status: refused, a reason follows. */
    public static final byte STATUS_REFUSED = 0;
    /** Status: the context side sends the parts (pull). */
    public static final byte STATUS_PULL = 1;
    /** Status: the context side writes into the request's grants one-sided (push). */
    public static final byte STATUS_PUSH = 2;
    /** Status bit: layer by layer. */
    public static final byte FLAG_LAYERS = 4;

    static final int STATUS_OFFSET = 0;
    static final int BLOCK_COUNT_OFFSET = 4;
    static final int BLOCKS_PER_REGION_OFFSET = 8;

    /**
     * @param blockCount the context rank's blocks of the request
     * @param macBytes   MAC length (0 without authentication)
     * @return the signal's length
     */
    public static int length(int blockCount, int macBytes) {
        return HEADER_LENGTH + 4 * blockCount + macBytes;
    }

    /**
     * @param push    whether the context side pushes
     * @param layered whether layer by layer
     * @return the status byte of an accepted request
     */
    public static byte status(boolean push, boolean layered) {
        return (byte) ((push ? STATUS_PUSH : STATUS_PULL) | (layered ? FLAG_LAYERS : 0));
    }

    /**
     * @param buffer holds the signal
     * @param offset where it starts
     * @return this
     */
    public ReadySignalFlyweight wrap(ByteBuffer buffer, int offset) {
        wrapBuffer(buffer, offset);
        return this;
    }

    /** @return the status byte */
    public byte status() {
        return buffer.get(offset + STATUS_OFFSET);
    }

    /** @return whether the request was refused */
    public boolean refused() {
        return status() == STATUS_REFUSED;
    }

    /** @return whether the context side pushes (meaningful when not refused) */
    public boolean push() {
        return (status() & STATUS_PUSH) != 0;
    }

    /** @return whether layer by layer (meaningful when not refused) */
    public boolean layered() {
        return (status() & FLAG_LAYERS) != 0;
    }

    /** @return the block count as sent */
    public int blockCount() {
        return buffer.getInt(offset + BLOCK_COUNT_OFFSET);
    }

    /** @return the context rank's blocks per pool region, at least 1 */
    public int blocksPerRegion() {
        return Math.max(1, buffer.getInt(offset + BLOCKS_PER_REGION_OFFSET));
    }

    /**
     * @param i index, below {@link #blockCount()}
     * @return the context rank's i-th block id
     */
    public int blockId(int i) {
        return buffer.getInt(offset + HEADER_LENGTH + 4 * i);
    }

    /**
     * Writes the signal's body (not its MAC).
     *
     * @param status          {@link #STATUS_REFUSED} or {@link #status(boolean, boolean)}
     * @param blockCount      the block count
     * @param blocksPerRegion the context pool's blocks per region
     * @param ids             the block ids, or null for zeros (a refusal); missing ones are zeros
     * @return this
     */
    public ReadySignalFlyweight write(byte status, int blockCount, int blocksPerRegion, int[] ids) {
        buffer.put(offset + STATUS_OFFSET, status);
        buffer.put(offset + 1, (byte) 0);
        buffer.putShort(offset + 2, (short) 0);
        buffer.putInt(offset + BLOCK_COUNT_OFFSET, blockCount);
        buffer.putInt(offset + BLOCKS_PER_REGION_OFFSET, blocksPerRegion);
        boolean withIds = status != STATUS_REFUSED && ids != null;
        for (int i = 0; i < blockCount; i++) {
            buffer.putInt(offset + HEADER_LENGTH + 4 * i, withIds && i < ids.length ? ids[i] : 0);
        }
        return this;
    }

    /**
     * Checks an accepted signal's block count against the count this side computed and decodes the ids.
     *
     * @param expected  blocks the context rank holds of the request
     * @param requestId for the error
     * @param rank      the context rank, for the error
     * @return the block ids
     * @throws KvTransferException MALFORMED when the count differs
     */
    public int[] blockIds(int expected, long requestId, int rank) {
        int n = blockCount();
        if (n != expected) {
            throw new KvTransferException(ErrorCode.MALFORMED, requestId, "context rank " + rank + " holds " + n
                    + " blocks of the request, expected " + expected, null);
        }
        int[] ids = new int[n];
        for (int i = 0; i < n; i++) {
            ids[i] = blockId(i);
        }
        return ids;
    }
}
