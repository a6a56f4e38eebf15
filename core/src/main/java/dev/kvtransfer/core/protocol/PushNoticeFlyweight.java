package dev.kvtransfer.core.protocol;

import java.nio.ByteBuffer;

/**
 * The notices of a push (and of layer-wise pushes), context to generation on the request's data tag:
 * {@value #LENGTH} bytes {@code [type u32][layer u32][value u64]}. {@link #TYPE_LAYER}: a global layer was written;
 * {@link #TYPE_DONE}: every write of this rank completed. For both, value = the number of write entries since the
 * previous notice, which follow (when not 0) in one message of {@link PushEntryFlyweight#LENGTH} bytes each.
 * {@link #TYPE_ABORT}: the context side failed, value = the {@code ErrorCode} ordinal. {@link #TYPE_PROGRESS}: part
 * of a batch was written (to a requester that set {@code RequestInfo.FLAG_PROGRESS_NOTICES}); its entries follow.
 * {@link #TYPE_GO} goes the other way, generation to context, for a pull ({@code RequestInfo.FLAG_PULL_GO}).
 */
public final class PushNoticeFlyweight extends Flyweight {
    /** Bytes of a notice. */
    public static final int LENGTH = 16;
    /** A layer was written; its entries follow. */
    public static final int TYPE_LAYER = 1;
    /** The rank finished; its entries since the last layer notice follow. */
    public static final int TYPE_DONE = 2;
    /** The rank failed. */
    public static final int TYPE_ABORT = 3;
    /** Part of a large batch was written; its entries follow, and more writes come. */
    public static final int TYPE_PROGRESS = 4;
    /**
     * Generation to context, the other way: the requester's receive of a pull started (it holds its thread and
     * staging), so this context rank may send; only for a request whose info set {@code RequestInfo.FLAG_PULL_GO}.
     */
    public static final int TYPE_GO = 5;

    static final int TYPE_OFFSET = 0;
    static final int LAYER_OFFSET = 4;
    static final int VALUE_OFFSET = 8;

    /**
     * @param buffer holds the notice
     * @param offset where it starts
     * @return this
     */
    public PushNoticeFlyweight wrap(ByteBuffer buffer, int offset) {
        wrapBuffer(buffer, offset);
        return this;
    }

    /** @return the type as sent */
    public int type() {
        return buffer.getInt(offset + TYPE_OFFSET);
    }

    /** @return the global layer (LAYER), as sent */
    public int layer() {
        return buffer.getInt(offset + LAYER_OFFSET);
    }

    /** @return the entry count (LAYER, DONE) or the error code's ordinal (ABORT), as sent */
    public long value() {
        return buffer.getLong(offset + VALUE_OFFSET);
    }

    /**
     * @param type  the type
     * @param layer the layer (0 unless LAYER)
     * @param value entries that follow, or the error code's ordinal
     * @return this
     */
    public PushNoticeFlyweight write(int type, int layer, long value) {
        buffer.putInt(offset + TYPE_OFFSET, type);
        buffer.putInt(offset + LAYER_OFFSET, layer);
        buffer.putLong(offset + VALUE_OFFSET, value);
        return this;
    }
}
