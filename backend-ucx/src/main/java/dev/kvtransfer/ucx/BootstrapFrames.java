package dev.kvtransfer.ucx;

import dev.kvtransfer.api.ErrorCode;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;

/**
 * The bootstrap's wire format. A frame is a little-endian {@code u32} payload length ({@code 1 ..}
 * {@value #MAX_FRAME}) and the payload, whose first byte is its type. Handshake:
 *
 * <pre>
 * dialer                                   acceptor
 *   HELLO   magic, version, flags, dialer instance id, nonce, timestamp, dialer address, the address it dialed,
 *           host id, mode, the sender id it gave the acceptor, its UCX worker address, MAC
 *                                          WELCOME  acceptor instance id, nonce, timestamp, host id, mode, the
 *                                                   sender id it gave the dialer, its worker address, MAC
 *   CONFIRM MAC
 *                                          READY    the final sender id (or REFUSE code, reason — at any step)
 * </pre>
 *
 * then PING / BYE / VALIDATE / VALIDATED / REVOKE / REVOKED / DISCARD / DISCARD_END / DISCARD_ENDED
 * ({@link AbandonedSends}), each followed (with a secret) by a 16-byte tag.
 * Every field is bounded before anything is sized from it; any violation is a {@link Violation} and the
 * connection is closed (nothing is ever allocated in proportion to a length a peer chose beyond these bounds).
 */
final class BootstrapFrames {
    static final int MAX_FRAME = 16 * 1024;
    static final int MAGIC = 0x4255564B; // "KVUB" little-endian
    static final int VERSION = 1;
    static final int MAX_ADDRESS = UcxAddresses.MAX_LENGTH;
    static final int MAX_HOST_ID = 64;
    static final int MAX_WORKER_ADDRESS = 4096;
    static final int MAX_REASON = 200;

    static final int HELLO = 1;
    static final int WELCOME = 2;
    static final int CONFIRM = 3;
    static final int READY = 4;
    static final int REFUSE = 5;
    static final int PING = 6;
    static final int BYE = 7;
    static final int VALIDATE = 8;
    static final int VALIDATED = 9;
    static final int REVOKE = 10;
    static final int REVOKED = 11;
    static final int DISCARD = 12;
    static final int DISCARD_END = 13;
    static final int DISCARD_ENDED = 14;

    static final int MODE_SHM = 0;
    static final int MODE_NET = 1;

    private BootstrapFrames() {
    }

    /** A frame broke the protocol: the session is closed (and refused with the code where still possible). */
    static final class Violation extends Exception {
        private static final long serialVersionUID = 1L;
        final ErrorCode code;

        Violation(ErrorCode code, String message) {
            super(message, null, false, false);
            this.code = code;
        }
    }

    /**
     * A dialer's hello.
     *
     * @param instance       the dialer manager's random instance id (its session identity)
     * @param nonce          fresh random bytes
     * @param timestamp      the dialer's clock, ms
     * @param address        the dialer's own listen address
     * @param target         the address it dialed (a hello meant for another manager is refused)
     * @param hostId         the dialer's host identity
     * @param mode           {@link #MODE_SHM} or {@link #MODE_NET}
     * @param senderIdForYou the sender id the dialer gave the acceptor
     * @param worker         the dialer's UCX worker address
     */
    record Hello(long instance, byte[] nonce, long timestamp, String address, String target, byte[] hostId, int mode,
                 int senderIdForYou, byte[] worker) {
    }

    /**
     * An acceptor's welcome.
     *
     * @param instance       the acceptor's instance id
     * @param nonce          fresh random bytes
     * @param timestamp      the acceptor's clock, ms
     * @param hostId         the acceptor's host identity
     * @param mode           its mode
     * @param senderIdForYou the sender id the acceptor gave the dialer
     * @param worker         its UCX worker address
     */
    record Welcome(long instance, byte[] nonce, long timestamp, byte[] hostId, int mode, int senderIdForYou,
                   byte[] worker) {
    }

    static ByteBuffer buffer(int capacity) {
        return ByteBuffer.allocate(capacity).order(ByteOrder.LITTLE_ENDIAN);
    }

    /** @return the hello's fields (type first, MAC not included), ready to read */
    static ByteBuffer encode(Hello h) {
        byte[] a = h.address().getBytes(StandardCharsets.UTF_8);
        byte[] t = h.target().getBytes(StandardCharsets.UTF_8);
        ByteBuffer b = buffer(64 + a.length + t.length + h.hostId().length + h.worker().length);
        b.put((byte) HELLO).putInt(MAGIC).putShort((short) VERSION).putLong(h.instance()).put(h.nonce())
                .putLong(h.timestamp());
        putBytes(b, a);
        putBytes(b, t);
        putBytes(b, h.hostId());
        b.put((byte) h.mode()).putInt(h.senderIdForYou());
        putBytes(b, h.worker());
        return b.flip();
    }

    /** @return the welcome's fields (type first, MAC not included), ready to read */
    static ByteBuffer encode(Welcome w) {
        ByteBuffer b = buffer(48 + w.hostId().length + w.worker().length);
        b.put((byte) WELCOME).putLong(w.instance()).put(w.nonce()).putLong(w.timestamp());
        putBytes(b, w.hostId());
        b.put((byte) w.mode()).putInt(w.senderIdForYou());
        putBytes(b, w.worker());
        return b.flip();
    }

    private static void putBytes(ByteBuffer b, byte[] v) {
        b.putShort((short) v.length).put(v);
    }

    /**
     * Parses a hello's fields; the caller has split off the MAC.
     *
     * @param b the fields, type byte first
     * @return the hello
     * @throws Violation on any bad byte
     */
    static Hello decodeHello(ByteBuffer b) throws Violation {
        Reader r = new Reader(b);
        r.expectType(HELLO);
        int magic = r.i32("magic");
        if (magic != MAGIC) {
            throw new Violation(ErrorCode.MALFORMED, "not a kvtransfer UCX bootstrap (magic 0x"
                    + Integer.toHexString(magic) + ")");
        }
        int version = r.u16("version");
        if (version != VERSION) {
            throw new Violation(ErrorCode.MALFORMED, "bootstrap version " + version + ", this side speaks "
                    + VERSION);
        }
        long instance = r.i64("instance");
        byte[] nonce = r.fixed("nonce", BootstrapAuth.NONCE_BYTES);
        long ts = r.i64("timestamp");
        String address = r.string("address", MAX_ADDRESS);
        String target = r.string("target", MAX_ADDRESS);
        byte[] host = r.bytes("host id", MAX_HOST_ID);
        int mode = r.mode();
        int id = r.senderId();
        byte[] worker = r.bytes("worker address", MAX_WORKER_ADDRESS);
        r.end();
        if (instance == 0 || worker.length == 0) {
            throw new Violation(ErrorCode.MALFORMED, "hello without instance id or worker address");
        }
        return new Hello(instance, nonce, ts, address, target, host, mode, id, worker);
    }

    static Welcome decodeWelcome(ByteBuffer b) throws Violation {
        Reader r = new Reader(b);
        r.expectType(WELCOME);
        long instance = r.i64("instance");
        byte[] nonce = r.fixed("nonce", BootstrapAuth.NONCE_BYTES);
        long ts = r.i64("timestamp");
        byte[] host = r.bytes("host id", MAX_HOST_ID);
        int mode = r.mode();
        int id = r.senderId();
        byte[] worker = r.bytes("worker address", MAX_WORKER_ADDRESS);
        r.end();
        if (instance == 0 || worker.length == 0) {
            throw new Violation(ErrorCode.MALFORMED, "welcome without instance id or worker address");
        }
        return new Welcome(instance, nonce, ts, host, mode, id, worker);
    }

    /** Bounded reads over one frame; every failure is a {@link Violation} naming the field. */
    static final class Reader {
        private final ByteBuffer b;

        Reader(ByteBuffer b) {
            this.b = b.duplicate().order(ByteOrder.LITTLE_ENDIAN);
        }

        private void need(int n, String what) throws Violation {
            if (b.remaining() < n) {
                throw new Violation(ErrorCode.MALFORMED, "truncated " + what + ": " + b.remaining()
                        + " bytes left, " + n + " needed");
            }
        }

        void expectType(int type) throws Violation {
            int t = u8("type");
            if (t != type) {
                throw new Violation(ErrorCode.MALFORMED, "frame type " + t + " where " + type + " was expected");
            }
        }

        int u8(String what) throws Violation {
            need(1, what);
            return b.get() & 0xff;
        }

        int u16(String what) throws Violation {
            need(2, what);
            return b.getShort() & 0xffff;
        }

        int i32(String what) throws Violation {
            need(4, what);
            return b.getInt();
        }

        long i64(String what) throws Violation {
            need(8, what);
            return b.getLong();
        }

        byte[] fixed(String what, int n) throws Violation {
            need(n, what);
            byte[] v = new byte[n];
            b.get(v);
            return v;
        }

        byte[] bytes(String what, int max) throws Violation {
            int n = u16(what + " length");
            if (n > max) {
                throw new Violation(ErrorCode.MALFORMED, what + " of " + n + " bytes: at most " + max);
            }
            return fixed(what, n);
        }

        String string(String what, int max) throws Violation {
            byte[] v = bytes(what, max);
            try {
                return StandardCharsets.UTF_8.newDecoder().onMalformedInput(CodingErrorAction.REPORT)
                        .onUnmappableCharacter(CodingErrorAction.REPORT).decode(ByteBuffer.wrap(v)).toString();
            } catch (CharacterCodingException e) {
                throw new Violation(ErrorCode.MALFORMED, what + " is not UTF-8");
            }
        }

        int mode() throws Violation {
            int m = u8("mode");
            if (m != MODE_SHM && m != MODE_NET) {
                throw new Violation(ErrorCode.MALFORMED, "unknown mode " + m);
            }
            return m;
        }

        int senderId() throws Violation {
            int id = i32("sender id");
            if (id <= 0) {
                throw new Violation(ErrorCode.MALFORMED, "sender id " + id + " must be positive");
            }
            return id;
        }

        int remaining() {
            return b.remaining();
        }

        void end() throws Violation {
            if (b.hasRemaining()) {
                throw new Violation(ErrorCode.MALFORMED, b.remaining() + " unexpected trailing bytes");
            }
        }
    }
}
