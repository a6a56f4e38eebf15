package dev.kvtransfer.ucx;

import javax.crypto.Mac;
import javax.crypto.spec.SecretKeySpec;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.security.GeneralSecurityException;
import java.security.MessageDigest;
import java.security.SecureRandom;
import java.util.ArrayDeque;
import java.util.HashSet;
import java.util.HexFormat;
import java.util.Set;

/**
 * The bootstrap's cryptography (JDK HMAC-SHA256 only): handshake MACs over the identities, nonces and
 * timestamps of both hellos, a replay cache of hello nonces, a session key per control connection and the
 * 16-byte tag every later control frame carries (over its direction and sequence number, so frames cannot be
 * replayed, reordered or moved to another session). Without a deployment secret every MAC is absent and
 * {@link #enabled()} is false: the handshake is still strict and bounded, but proves nothing. Bootstrap agent
 * thread only (not thread-safe), except the constructor.
 */
final class BootstrapAuth {
    static final int NONCE_BYTES = 16;
    static final int MAC_BYTES = 32;
    static final int TAG_BYTES = 16;
    private static final String ALGORITHM = "HmacSHA256";
    private static final byte[] HELLO_LABEL = label("kvtransfer-ucx hello v1");
    private static final byte[] WELCOME_LABEL = label("kvtransfer-ucx welcome v1");
    private static final byte[] CONFIRM_LABEL = label("kvtransfer-ucx confirm v1");
    private static final byte[] SESSION_LABEL = label("kvtransfer-ucx session v1");
    /** Hello nonces remembered for replay detection; older ones are outside the time window anyway. */
    static final int REPLAY_CACHE = 4096;

    private final byte[] secret;
    private final SecureRandom random = new SecureRandom();
    private final long maxSkewMillis;
    private final Set<String> seenNonces = new HashSet<>();
    private final ArrayDeque<String> nonceOrder = new ArrayDeque<>();
    private final Mac mac;

    /**
     * @param secret        the deployment secret, or null (no authentication)
     * @param maxSkewMillis how far a hello's timestamp may be from this clock
     */
    BootstrapAuth(byte[] secret, long maxSkewMillis) {
        this.secret = secret == null ? null : secret.clone();
        this.maxSkewMillis = maxSkewMillis;
        try {
            this.mac = secret == null ? null : Mac.getInstance(ALGORITHM);
        } catch (GeneralSecurityException e) {
            throw new IllegalStateException("the JDK offers no " + ALGORITHM, e);
        }
    }

    private static byte[] label(String s) {
        return s.getBytes(StandardCharsets.US_ASCII);
    }

    boolean enabled() {
        return secret != null;
    }

    byte[] nonce() {
        byte[] n = new byte[NONCE_BYTES];
        random.nextBytes(n);
        return n;
    }

    long randomLong() {
        return random.nextLong();
    }

    int randomInt() {
        return random.nextInt();
    }

    /** MAC of a hello's fields (everything before its MAC). */
    byte[] helloMac(ByteBuffer helloFields) {
        return hmac(secret, HELLO_LABEL, helloFields);
    }

    /** MAC of a welcome: over the whole hello (its MAC included) and the welcome's fields. */
    byte[] welcomeMac(ByteBuffer hello, ByteBuffer welcomeFields) {
        return hmac(secret, WELCOME_LABEL, hello, welcomeFields);
    }

    /** MAC of a confirm: over the whole hello and the whole welcome (which carries the acceptor's fresh nonce). */
    byte[] confirmMac(ByteBuffer hello, ByteBuffer welcome) {
        return hmac(secret, CONFIRM_LABEL, hello, welcome);
    }

    /** @return the session key of one control connection, or null without a secret */
    byte[] sessionKey(byte[] dialerNonce, byte[] acceptorNonce, long dialerInstance, long acceptorInstance) {
        if (secret == null) {
            return null;
        }
        ByteBuffer b = ByteBuffer.allocate(2 * NONCE_BYTES + 16);
        b.put(dialerNonce).put(acceptorNonce).putLong(dialerInstance).putLong(acceptorInstance).flip();
        return hmac(secret, SESSION_LABEL, b);
    }

    /**
     * The tag of one control frame.
     *
     * @param key       the session key
     * @param direction 0 = dialer to acceptor, 1 = the other way
     * @param seq       the frame's sequence number in its direction
     * @param frame     the frame's type and body
     * @return {@value #TAG_BYTES} bytes
     */
    byte[] frameTag(byte[] key, int direction, long seq, ByteBuffer frame) {
        ByteBuffer h = ByteBuffer.allocate(9);
        h.put((byte) direction).putLong(seq).flip();
        byte[] full = hmac(key, null, h, frame);
        byte[] t = new byte[TAG_BYTES];
        System.arraycopy(full, 0, t, 0, TAG_BYTES);
        return t;
    }

    static boolean equal(byte[] a, byte[] b) {
        return MessageDigest.isEqual(a, b);
    }

    /** @return whether a hello's timestamp is within the allowed skew of this clock */
    boolean fresh(long timestampMillis) {
        long d = System.currentTimeMillis() - timestampMillis;
        return d <= maxSkewMillis && d >= -maxSkewMillis;
    }

    /**
     * Records a hello nonce that passed its MAC check.
     *
     * @return false when it was seen before (a replay)
     */
    boolean firstUse(byte[] nonce) {
        String k = HexFormat.of().formatHex(nonce);
        if (!seenNonces.add(k)) {
            return false;
        }
        nonceOrder.add(k);
        if (nonceOrder.size() > REPLAY_CACHE) {
            seenNonces.remove(nonceOrder.poll());
        }
        return true;
    }

    private byte[] hmac(byte[] key, byte[] label, ByteBuffer... parts) {
        try {
            Mac m = key == secret ? mac : Mac.getInstance(ALGORITHM);
            m.init(new SecretKeySpec(key, ALGORITHM));
            if (label != null) {
                m.update(label);
            }
            for (ByteBuffer p : parts) {
                m.update(p.duplicate());
            }
            return m.doFinal();
        } catch (GeneralSecurityException e) {
            throw new IllegalStateException("HMAC failed", e);
        }
    }
}
