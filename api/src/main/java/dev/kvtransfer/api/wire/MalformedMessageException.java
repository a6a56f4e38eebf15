package dev.kvtransfer.api.wire;

import dev.kvtransfer.api.ErrorCode;
import dev.kvtransfer.api.KvTransferException;

/**
 * Thrown when bytes do not decode into a valid message: the message says what was wrong and at which
 * byte offset. Decoding hostile input never fails any other way.
 */
public class MalformedMessageException extends KvTransferException {
    private static final long serialVersionUID = 1L;

    /** Byte offset in the message at which decoding failed. */
    private final long offset;

    /**
     * Creates the exception.
     *
     * @param offset  byte offset in the message where decoding failed
     * @param message what was wrong
     */
    public MalformedMessageException(long offset, String message) {
        super(ErrorCode.MALFORMED, KvTransferException.NO_REQUEST, message + " (at offset " + offset + ")", null);
        this.offset = offset;
    }

    /**
     * Byte offset at which decoding failed.
     *
     * @return the offset
     */
    public long offset() {
        return offset;
    }
}
