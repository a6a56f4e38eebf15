package dev.kvtransfer.core.protocol;

import dev.kvtransfer.api.ErrorCode;

import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;

/**
 * A refusal's reason, context to generation on the request's data tag right after a ready signal whose status is
 * {@link ReadySignalFlyweight#STATUS_REFUSED}: two messages, {@code [length i32]} ({@value #LENGTH_BYTES} bytes),
 * then {@code length} bytes of UTF-8 text {@code "<ErrorCode name>: <reason>"}, at most {@value #MAX_REASON_BYTES}.
 * The requester fails with the responder's code when the text starts with one, {@code INTERNAL} otherwise.
 */
public final class RefusalCodec {
    /** Bytes of the length message. */
    public static final int LENGTH_BYTES = 4;
    /** Longest reason accepted (bytes); longer ones are cut by the sender and refused by the receiver. */
    public static final int MAX_REASON_BYTES = 64 * 1024;

    private RefusalCodec() {
    }

    /** A decoded refusal. */
    public record Refusal(ErrorCode code, String reason) {
    }

    /**
     * @param code   why, as a code
     * @param reason why, for a human
     * @return the text's bytes, cut to {@link #MAX_REASON_BYTES}
     */
    public static byte[] text(ErrorCode code, String reason) {
        byte[] text = (code.name() + ": " + reason).getBytes(StandardCharsets.UTF_8);
        return text.length <= MAX_REASON_BYTES ? text : java.util.Arrays.copyOf(text, MAX_REASON_BYTES);
    }

    /**
     * Writes the length message.
     *
     * @param b      the buffer
     * @param at     where
     * @param length the text's length
     */
    public static void writeLength(ByteBuffer b, int at, int length) {
        ByteBuffer le = b.order() == java.nio.ByteOrder.LITTLE_ENDIAN ? b
                : b.duplicate().order(java.nio.ByteOrder.LITTLE_ENDIAN);
        le.putInt(at, length);
    }

    /**
     * Reads the length message.
     *
     * @param b  the buffer
     * @param at where
     * @return the announced length, or -1 when it is negative or above {@link #MAX_REASON_BYTES}
     */
    public static int readLength(ByteBuffer b, int at) {
        ByteBuffer le = b.order() == java.nio.ByteOrder.LITTLE_ENDIAN ? b
                : b.duplicate().order(java.nio.ByteOrder.LITTLE_ENDIAN);
        int len = le.getInt(at);
        return len < 0 || len > MAX_REASON_BYTES ? -1 : len;
    }

    /**
     * Decodes a reason's text (any bytes: invalid UTF-8 is replaced, an unknown code keeps the whole text).
     *
     * @param text the text's bytes
     * @return the code and the reason
     */
    public static Refusal decode(byte[] text) {
        String s = new String(text, StandardCharsets.UTF_8);
        int colon = s.indexOf(':');
        if (colon > 0) {
            try {
                return new Refusal(ErrorCode.valueOf(s.substring(0, colon)), s.substring(colon + 1).trim());
            } catch (IllegalArgumentException e) {
                // Not one of ours: the whole text is the reason.
            }
        }
        return new Refusal(ErrorCode.INTERNAL, s);
    }
}
