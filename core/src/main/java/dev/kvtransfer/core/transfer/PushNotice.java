package dev.kvtransfer.core.transfer;

import java.nio.ByteBuffer;

/**
 * The small messages of a push (and of layer-wise transfers) on a request's data tag, context to generation:
 * {@value #BYTES} bytes {@code [type u32][layer u32][value u64]}. {@link #LAYER}: a global layer was written (push);
 * {@link #DONE}: every write of this rank completed. For both, value = the number of entries written since the
 * previous notice, which follow (when not 0) in one message of {@value #ENTRY_BYTES} bytes each
 * ({@code [region id u64][offset u64][length u64][crc32c u32]}): the receiver checks a layer's entries as its
 * notice arrives, while the next layer is written;
 * {@link #ABORT}: the context side failed, value = the {@code ErrorCode} ordinal.
 */
final class PushNotice {
    /** Bytes of a notice. */
    static final int BYTES = 16;
    /** Bytes of one written entry after a LAYER or DONE notice. */
    static final int ENTRY_BYTES = 28;
    /** A layer was written; its entries follow. */
    static final int LAYER = 1;
    /** The rank finished; its entries since the last layer notice follow. */
    static final int DONE = 2;
    /** The rank failed. */
    static final int ABORT = 3;

    private PushNotice() {
    }

    static void put(ByteBuffer b, int at, int type, int layer, long value) {
        b.putInt(at, type);
        b.putInt(at + 4, layer);
        b.putLong(at + 8, value);
    }
}
