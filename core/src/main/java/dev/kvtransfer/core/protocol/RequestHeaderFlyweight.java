package dev.kvtransfer.core.protocol;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.KvTransferException;
import dev.kvtransfer.api.transport.Tags;

import java.nio.ByteBuffer;

/**
 * The request header, generation to context on {@code Tags.ID_TAG}: {@value #LENGTH} bytes
 * {@code [kind u32][info tag u32][info length u64][request id u64]}. It announces the request info that follows on
 * the request's own data tag of the same connection ({@link RequestInfoFrame}), so an info lost or duplicated on the
 * way is that request's alone: the next header's info is never taken for it. Kind {@link #KIND_REQUEST_SEND} asks for
 * a request; {@link #KIND_TERMINATION} is a peer's orderly goodbye and carries nothing else.
 */
public final class RequestHeaderFlyweight extends Flyweight {
    /** Bytes of a header. */
    public static final int LENGTH = 24;
    /** Kind: a request info of {@link #infoLength()} bytes follows. */
    public static final long KIND_REQUEST_SEND = 1;
    /** Kind: the peer is leaving (nothing follows). */
    public static final long KIND_TERMINATION = 2;

    static final int KIND_OFFSET = 0;
    static final int INFO_TAG_OFFSET = 4;
    static final int INFO_LENGTH_OFFSET = 8;
    static final int REQUEST_ID_OFFSET = 16;

    /**
     * @param buffer holds the header
     * @param offset where it starts
     * @return this
     */
    public RequestHeaderFlyweight wrap(ByteBuffer buffer, int offset) {
        wrapBuffer(buffer, offset);
        return this;
    }

    /** @return the kind ({@link #KIND_REQUEST_SEND}, {@link #KIND_TERMINATION}, or anything a hostile peer sent) */
    public long kind() {
        return buffer.getInt(offset + KIND_OFFSET) & 0xffff_ffffL;
    }

    /** @return the tag the info frame travels on: the request's data tag (at least {@code Tags.FIRST_DATA_TAG}) */
    public int infoTag() {
        return buffer.getInt(offset + INFO_TAG_OFFSET);
    }

    /** @return bytes of the announced info frame (request info and MAC), as sent */
    public long infoLength() {
        return buffer.getLong(offset + INFO_LENGTH_OFFSET);
    }

    /** @return the request id */
    public long requestId() {
        return buffer.getLong(offset + REQUEST_ID_OFFSET);
    }

    /**
     * Writes a request-send header.
     *
     * @param infoLength bytes of the info frame that follows
     * @param requestId  the request
     * @param infoTag    the tag the info frame follows on (the request's data tag)
     * @return this
     */
    public RequestHeaderFlyweight requestSend(long infoLength, long requestId, int infoTag) {
        buffer.putInt(offset + KIND_OFFSET, (int) KIND_REQUEST_SEND);
        buffer.putInt(offset + INFO_TAG_OFFSET, infoTag);
        buffer.putLong(offset + INFO_LENGTH_OFFSET, infoLength);
        buffer.putLong(offset + REQUEST_ID_OFFSET, requestId);
        return this;
    }

    /**
     * The check of {@link #checkRequestSend} without its message: a valid header costs no allocation.
     *
     * @param macBytes     the MAC length the info frame carries (0 without authentication)
     * @param maxInfoBytes the largest request info accepted
     * @return whether {@link #checkRequestSend} would pass
     */
    public boolean isValidRequestSend(int macBytes, long maxInfoBytes) {
        long size = infoLength();
        return kind() == KIND_REQUEST_SEND && infoTag() >= Tags.FIRST_DATA_TAG && size > macBytes
                && size <= maxInfoBytes + macBytes;
    }

    /**
     * Checks a received request-send header.
     *
     * @param macBytes     the MAC length the info frame carries (0 without authentication)
     * @param maxInfoBytes the largest request info accepted
     * @param who          names the rank and peer in the error
     * @throws KvTransferException MALFORMED naming the request, the kind or the announced length
     */
    public void checkRequestSend(int macBytes, long maxInfoBytes, String who) {
        long kind = kind();
        if (kind != KIND_REQUEST_SEND) {
            throw new KvTransferException(ErrorCode.MALFORMED, requestId(), who + ": unknown request kind " + kind
                    + " (dropped)", null);
        }
        if (infoTag() < Tags.FIRST_DATA_TAG) {
            throw new KvTransferException(ErrorCode.MALFORMED, requestId(), who + ": request info announced on tag "
                    + infoTag() + ", not a data tag (dropped)", null);
        }
        long size = infoLength();
        if (size <= macBytes || size > maxInfoBytes + macBytes) {
            throw new KvTransferException(ErrorCode.MALFORMED, requestId(), who + ": request info of " + size
                    + " bytes announced (limit " + maxInfoBytes + "); dropped", null);
        }
    }
}
