package dev.kvtransfer.aeron;

import org.agrona.DirectBuffer;
import org.agrona.MutableDirectBuffer;

import javax.crypto.Mac;
import javax.crypto.spec.SecretKeySpec;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.security.GeneralSecurityException;
import java.security.MessageDigest;
import java.security.SecureRandom;
import java.util.HashMap;
import java.util.Iterator;
import java.util.Map;

/**
 * The HELLO that opens every stream: who the sender is (its address and incarnation), whom it meant to reach (our
 * address), when, and — with {@code TransportConfig.authSecret()} — an HMAC-SHA256 over all of it with a fresh
 * nonce. It ties the stream (Aeron session) to one peer for the stream's lifetime; nothing later on the stream
 * can change that, and no other stream can join that peer's session.
 *
 * <pre>
 *  0 int    magic "KVH2"
 *  4 int    flags: bit 0 = carries a MAC
 *  8 long   incarnation (random per manager: tells a restarted peer from its predecessor)
 * 16 long   timestamp (sender's wall clock, ms)
 * 24 16 B   nonce (SecureRandom)
 * 40 short  sender address length s (at most 256)
 * 42 short  receiver address length r (at most 256)
 * 44 s B    sender address (UTF-8), then r B receiver address
 *  . 32 B   HMAC-SHA256(secret, bytes 0 .. 44+s+r) when flag 0 is set
 * </pre>
 *
 * A receiver with a secret refuses a HELLO without a valid MAC, one whose timestamp is more than
 * {@code aeron.authWindowMs} from its clock, one whose nonce it has seen within that window (a replay), one
 * addressed to another manager, and one for another incarnation of its own address (the receiver address carries
 * the receiver's random incarnation, {@link Address}: a HELLO captured before the receiver restarted on the same
 * port is refused, though its nonce is new to the restarted manager's memory); every receiver refuses malformed
 * HELLOs and overlong addresses. Verification runs on the agent only.
 */
final class Handshake {
    static final int MAGIC = 0x3248564B; // "KVH2" little-endian
    static final int FLAG_MAC = 1;
    static final int FIXED = 44;
    static final int MAC_BYTES = 32;
    static final int NONCE_BYTES = 16;
    private static final int MAX_REPLAY_ENTRIES = 1 << 16;

    private final byte[] secret;
    private final long windowMs;
    private final SecureRandom random = new SecureRandom();
    private final Mac signer;
    private final Mac verifier;
    /** Nonces of accepted authenticated HELLOs, with the time they expire (agent only). */
    private final Map<Nonce, Long> seen = new HashMap<>();

    Handshake(byte[] secret, long windowMs) {
        this.secret = secret;
        this.windowMs = windowMs;
        this.signer = secret == null ? null : newMac(secret);
        this.verifier = secret == null ? null : newMac(secret);
    }

    private static Mac newMac(byte[] secret) {
        try {
            Mac m = Mac.getInstance("HmacSHA256");
            m.init(new SecretKeySpec(secret, "HmacSHA256"));
            return m;
        } catch (GeneralSecurityException e) {
            throw new IllegalStateException("HmacSHA256 is not available in this JDK", e);
        }
    }

    boolean authenticates() {
        return secret != null;
    }

    /** @return a random incarnation id */
    long newIncarnation() {
        long v;
        do {
            v = random.nextLong();
        } while (v == 0);
        return v;
    }

    /**
     * Writes a HELLO body (callers of one connection; the signer is shared, hence synchronized).
     *
     * @return the body length
     */
    int encode(MutableDirectBuffer b, int offset, String sender, String receiver, long incarnation) {
        return encode(b, offset, sender, receiver, incarnation, System.currentTimeMillis());
    }

    /** As {@link #encode(MutableDirectBuffer, int, String, String, long)} with a given timestamp (tests). */
    int encode(MutableDirectBuffer b, int offset, String sender, String receiver, long incarnation, long timestampMs) {
        byte[] s = sender.getBytes(StandardCharsets.UTF_8);
        byte[] r = receiver.getBytes(StandardCharsets.UTF_8);
        byte[] nonce = new byte[NONCE_BYTES];
        random.nextBytes(nonce);
        b.putInt(offset, MAGIC, ByteOrder.LITTLE_ENDIAN);
        b.putInt(offset + 4, secret == null ? 0 : FLAG_MAC, ByteOrder.LITTLE_ENDIAN);
        b.putLong(offset + 8, incarnation, ByteOrder.LITTLE_ENDIAN);
        b.putLong(offset + 16, timestampMs, ByteOrder.LITTLE_ENDIAN);
        b.putBytes(offset + 24, nonce);
        b.putShort(offset + 40, (short) s.length, ByteOrder.LITTLE_ENDIAN);
        b.putShort(offset + 42, (short) r.length, ByteOrder.LITTLE_ENDIAN);
        b.putBytes(offset + FIXED, s);
        b.putBytes(offset + FIXED + s.length, r);
        int signed = FIXED + s.length + r.length;
        if (secret == null) {
            return signed;
        }
        byte[] body = new byte[signed];
        b.getBytes(offset, body);
        byte[] mac;
        synchronized (signer) {
            mac = signer.doFinal(body);
        }
        b.putBytes(offset + signed, mac);
        return signed + MAC_BYTES;
    }

    /** The largest HELLO body. */
    static int maxLength() {
        return FIXED + 2 * AeronSettings.MAX_ADDRESS_BYTES + MAC_BYTES;
    }

    /** A decoded HELLO, or why it was refused. */
    static final class Result {
        String sender;
        long incarnation;
        boolean authenticated;
        /** Null when accepted. */
        String refusal;
        /** True when the refusal is an authentication failure (UNAUTHORIZED), not a malformed frame. */
        boolean unauthorized;

        Result refuse(String why, boolean auth) {
            this.refusal = why;
            this.unauthorized = auth;
            return this;
        }
    }

    /**
     * Decodes and checks a HELLO body (agent only).
     *
     * @param self our own address: a HELLO for another manager is refused
     */
    Result verify(DirectBuffer b, int offset, int length, String self) {
        Result r = new Result();
        if (length < FIXED || length > maxLength()) {
            return r.refuse("HELLO body of " + length + " B (expected " + FIXED + ".." + maxLength() + ")", false);
        }
        if (b.getInt(offset, ByteOrder.LITTLE_ENDIAN) != MAGIC) {
            return r.refuse("HELLO with magic 0x" + Integer.toHexString(b.getInt(offset, ByteOrder.LITTLE_ENDIAN))
                    + " (not this transport's version)", false);
        }
        int flags = b.getInt(offset + 4, ByteOrder.LITTLE_ENDIAN);
        long incarnation = b.getLong(offset + 8, ByteOrder.LITTLE_ENDIAN);
        long ts = b.getLong(offset + 16, ByteOrder.LITTLE_ENDIAN);
        int sLen = b.getShort(offset + 40, ByteOrder.LITTLE_ENDIAN) & 0xffff;
        int rLen = b.getShort(offset + 42, ByteOrder.LITTLE_ENDIAN) & 0xffff;
        if (sLen == 0 || sLen > AeronSettings.MAX_ADDRESS_BYTES || rLen > AeronSettings.MAX_ADDRESS_BYTES) {
            return r.refuse("HELLO with addresses of " + sLen + " and " + rLen + " B (at most "
                    + AeronSettings.MAX_ADDRESS_BYTES + ")", false);
        }
        boolean hasMac = (flags & FLAG_MAC) != 0;
        int signed = FIXED + sLen + rLen;
        if (length != signed + (hasMac ? MAC_BYTES : 0)) {
            return r.refuse("HELLO body of " + length + " B does not match its address lengths " + sLen + "+"
                    + rLen + (hasMac ? " and a MAC" : ""), false);
        }
        byte[] sb = new byte[sLen];
        b.getBytes(offset + FIXED, sb);
        byte[] rb = new byte[rLen];
        b.getBytes(offset + FIXED + sLen, rb);
        r.sender = new String(sb, StandardCharsets.UTF_8);
        r.incarnation = incarnation;
        String receiver = new String(rb, StandardCharsets.UTF_8);
        if (!Address.hostPortOf(receiver).equals(Address.hostPortOf(self))) {
            return r.refuse("HELLO from " + ErrorReporter.peerText(r.sender) + " is addressed to "
                    + ErrorReporter.peerText(receiver) + ", not to this manager", secret != null);
        }
        if (secret == null) {
            return r;
        }
        long forIncarnation;
        long ours;
        try {
            forIncarnation = Address.parse(receiver).incarnation();
            ours = Address.parse(self).incarnation();
        } catch (IllegalArgumentException e) {
            return r.refuse("HELLO from " + ErrorReporter.peerText(r.sender) + " names a malformed receiver: "
                    + e.getMessage(), true);
        }
        if (forIncarnation != ours) {
            // The MAC covers the receiver's address, incarnation included: a HELLO is good for one start of ours.
            return r.refuse("HELLO from " + ErrorReporter.peerText(r.sender) + " is for incarnation "
                    + Long.toHexString(forIncarnation) + " of this address, not the current "
                    + Long.toHexString(ours) + " (replayed from before a restart, or an old address of ours)", true);
        }
        if (!hasMac) {
            return r.refuse("HELLO from " + ErrorReporter.peerText(r.sender) + " carries no MAC and this manager"
                    + " requires authentication", true);
        }
        byte[] body = new byte[signed];
        b.getBytes(offset, body);
        byte[] expected = verifier.doFinal(body);
        byte[] got = new byte[MAC_BYTES];
        b.getBytes(offset + signed, got);
        if (!MessageDigest.isEqual(expected, got)) {
            return r.refuse("HELLO claiming " + ErrorReporter.peerText(r.sender) + " has a wrong MAC (another secret,"
                    + " or forged)", true);
        }
        long now = System.currentTimeMillis();
        if (Math.abs(now - ts) > windowMs) {
            return r.refuse("HELLO from " + ErrorReporter.peerText(r.sender) + " is " + (now - ts) + " ms old (window "
                    + windowMs + " ms): replayed, or clocks apart", true);
        }
        Nonce n = new Nonce(b.getLong(offset + 24, ByteOrder.LITTLE_ENDIAN),
                b.getLong(offset + 32, ByteOrder.LITTLE_ENDIAN));
        expire(now);
        if (seen.containsKey(n)) {
            return r.refuse("HELLO from " + ErrorReporter.peerText(r.sender) + " replays a nonce already used", true);
        }
        if (seen.size() >= MAX_REPLAY_ENTRIES) {
            return r.refuse("HELLO from " + ErrorReporter.peerText(r.sender) + " refused: " + MAX_REPLAY_ENTRIES
                    + " authenticated HELLOs within " + windowMs + " ms", true);
        }
        seen.put(n, now + 2 * windowMs);
        r.authenticated = true;
        return r;
    }

    private void expire(long now) {
        if (seen.size() < 1024) {
            return;
        }
        for (Iterator<Long> it = seen.values().iterator(); it.hasNext(); ) {
            if (it.next() < now) {
                it.remove();
            }
        }
    }

    private record Nonce(long a, long b) {
    }
}
