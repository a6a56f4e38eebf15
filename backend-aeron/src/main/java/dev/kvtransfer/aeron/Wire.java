package dev.kvtransfer.aeron;

import org.agrona.DirectBuffer;
import org.agrona.MutableDirectBuffer;

import java.nio.ByteOrder;

/**
 * Our header at the start of every Aeron message (little-endian, 32 bytes). Aeron's own frame header
 * already carries the session (which identifies the sending connection) and the fragment flags.
 *
 * <pre>
 *  0 int  type    HELLO, EAGER, RTS, CTS, REJECT, CANCEL, DATA
 *  4 int  tag     the user's tag (EAGER, RTS; echoed in CTS/REJECT/CANCEL/DATA for diagnostics)
 *  8 long seq     the sending connection's rendezvous sequence (RTS, CTS, REJECT, CANCEL, DATA)
 * 16 long value   EAGER/RTS: message length; DATA: offset of this chunk in the message; HELLO: body length
 * 24 long spare   0
 * </pre>
 *
 * An EAGER message may span several Aeron fragments (up to {@code aeron.eagerLimit}); our header is in the first.
 */
final class Wire {
    static final int HEADER_LENGTH = 32;
    static final int TYPE = 0;
    static final int TAG = 4;
    static final int SEQ = 8;
    static final int VALUE = 16;
    static final int SPARE = 24;

    /** First message on every publication: who sends (see {@link Handshake}). */
    static final int HELLO = 1;
    /** A whole message of at most the eager limit; payload follows the header. */
    static final int EAGER = 2;
    /** Request to send a large message of {@code value} bytes; data follows once the receiver answers CTS. */
    static final int RTS = 3;
    /** Clear to send: the receiver posted a matching receive for {@code seq}. */
    static final int CTS = 4;
    /** The receiver's receive had another length: the sender fails with MALFORMED. */
    static final int REJECT = 5;
    /** The sender gave up on an RTS (its deadline passed) before the data went out. */
    static final int CANCEL = 6;
    /** A chunk of a large message at offset {@code value}; may span many Aeron fragments. */
    static final int DATA = 7;

    private Wire() {
    }

    static void write(MutableDirectBuffer b, int type, int tag, long seq, long value) {
        b.putInt(TYPE, type, ByteOrder.LITTLE_ENDIAN);
        b.putInt(TAG, tag, ByteOrder.LITTLE_ENDIAN);
        b.putLong(SEQ, seq, ByteOrder.LITTLE_ENDIAN);
        b.putLong(VALUE, value, ByteOrder.LITTLE_ENDIAN);
        b.putLong(SPARE, 0, ByteOrder.LITTLE_ENDIAN);
    }

    static int type(DirectBuffer b, int offset) {
        return b.getInt(offset + TYPE, ByteOrder.LITTLE_ENDIAN);
    }

    static int tag(DirectBuffer b, int offset) {
        return b.getInt(offset + TAG, ByteOrder.LITTLE_ENDIAN);
    }

    static long seq(DirectBuffer b, int offset) {
        return b.getLong(offset + SEQ, ByteOrder.LITTLE_ENDIAN);
    }

    static long value(DirectBuffer b, int offset) {
        return b.getLong(offset + VALUE, ByteOrder.LITTLE_ENDIAN);
    }

    static String typeName(int type) {
        switch (type) {
            case HELLO: return "HELLO";
            case EAGER: return "EAGER";
            case RTS: return "RTS";
            case CTS: return "CTS";
            case REJECT: return "REJECT";
            case CANCEL: return "CANCEL";
            case DATA: return "DATA";
            default: return "type " + type;
        }
    }
}
