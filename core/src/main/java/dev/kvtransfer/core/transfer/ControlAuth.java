package dev.kvtransfer.core.transfer;

import javax.crypto.Mac;
import javax.crypto.spec.SecretKeySpec;
import java.nio.charset.StandardCharsets;
import java.security.GeneralSecurityException;
import java.security.MessageDigest;
import java.security.SecureRandom;
import java.util.Arrays;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;

/**
 * Authentication of the control plane with the deployment's shared secret (HMAC-SHA256 from the JDK): MACs over
 * control messages, unguessable per-request tokens, fresh nonces and a replay window. Two keys are derived from
 * the secret (one for MACs, one for tokens), so neither a MAC nor a token reveals the other. With no secret
 * ({@link #OFF}) every method is a no-op: MACs are empty, tokens are empty, everything verifies.
 *
 * <p>What each MAC covers is fixed by its caller: the message's bytes, the sender's and the receiver's transport
 * addresses (the identity is the transport session's, never a claim in the payload) and the request's nonce. A
 * nonce is accepted once within the window; a message whose timestamp is further than the window from this
 * host's clock is refused. Thread-safe. Internal to core: public only so the transceiver can build it.
 */
public final class ControlAuth {
    /** Bytes of one MAC. */
    static final int MAC_BYTES = 32;
    /** Bytes of one nonce. */
    static final int NONCE_BYTES = 16;
    /** Bytes of one request token. */
    static final int TOKEN_BYTES = 16;
    /** How far a timestamp may be from this clock, and how long a nonce is remembered. */
    static final long WINDOW_MILLIS = 120_000;
    /** Most nonces remembered at once; beyond that new requests are refused until old ones expire. */
    static final int MAX_NONCES = 1 << 20;

    /** No authentication. */
    static final ControlAuth OFF = new ControlAuth(null);

    private final byte[] macKey;
    private final byte[] tokenKey;
    private final ThreadLocal<Mac> macs;
    private final ThreadLocal<Mac> tokens;
    private final SecureRandom random = new SecureRandom();
    private final Map<Nonce, Long> seen = new ConcurrentHashMap<>();
    private volatile long nextPurge;

    private ControlAuth(byte[] secret) {
        if (secret == null) {
            macKey = null;
            tokenKey = null;
            macs = null;
            tokens = null;
            return;
        }
        macKey = hmac(secret, "kvtransfer-control-mac-v1".getBytes(StandardCharsets.US_ASCII));
        tokenKey = hmac(secret, "kvtransfer-request-token-v1".getBytes(StandardCharsets.US_ASCII));
        macs = ThreadLocal.withInitial(() -> newMac(macKey));
        tokens = ThreadLocal.withInitial(() -> newMac(tokenKey));
    }

    /**
     * @param secret the deployment secret, or null for no authentication
     * @return the context
     */
    public static ControlAuth of(byte[] secret) {
        return secret == null ? OFF : new ControlAuth(secret);
    }

    /** @return whether messages are authenticated */
    boolean enabled() {
        return macKey != null;
    }

    /** @return bytes a MAC adds to a message: {@link #MAC_BYTES}, or 0 when off */
    int macBytes() {
        return enabled() ? MAC_BYTES : 0;
    }

    /**
     * The request's token: the same on every context rank sharing the secret, unguessable without it.
     *
     * @param requestId the context request id
     * @return {@link #TOKEN_BYTES} bytes, or empty when off
     */
    public byte[] token(long requestId) {
        if (!enabled()) {
            return new byte[0];
        }
        Mac m = tokens.get();
        byte[] id = new byte[8];
        for (int i = 0; i < 8; i++) {
            id[i] = (byte) (requestId >>> (8 * i));
        }
        return Arrays.copyOf(m.doFinal(id), TOKEN_BYTES);
    }

    /**
     * @param requestId the request
     * @param token     a claimed token
     * @return whether it is the request's token (constant-time); always true when off
     */
    boolean tokenValid(long requestId, byte[] token) {
        return !enabled() || MessageDigest.isEqual(token(requestId), token);
    }

    /** @return a fresh nonce, or empty when off */
    byte[] nonce() {
        if (!enabled()) {
            return new byte[0];
        }
        byte[] n = new byte[NONCE_BYTES];
        random.nextBytes(n);
        return n;
    }

    /** @return a random int (data tags) */
    int randomInt() {
        return random.nextInt();
    }

    /**
     * The MAC of a message made of parts (each length-prefixed, so part boundaries are bound too).
     *
     * @param domain what kind of message (e.g. "INFO", "READY")
     * @param parts  the covered byte arrays
     * @return the MAC, or empty when off
     */
    byte[] mac(String domain, byte[]... parts) {
        if (!enabled()) {
            return new byte[0];
        }
        Mac m = macs.get();
        updateAscii(m, domain);
        for (byte[] p : parts) {
            update(m, p);
        }
        return m.doFinal();
    }

    /**
     * @param expected what {@link #mac} computes for the message
     * @param claimed  the MAC that came with it
     * @return whether they match (constant-time); always true when off
     */
    boolean macValid(byte[] expected, byte[] claimed) {
        return !enabled() || MessageDigest.isEqual(expected, claimed);
    }

    /**
     * Accepts a nonce once within the window and a timestamp close to this clock.
     *
     * @param nonce           the message's nonce
     * @param timestampMillis the sender's clock
     * @return null when fresh, else why not
     */
    String checkFresh(byte[] nonce, long timestampMillis) {
        if (!enabled()) {
            return null;
        }
        long now = System.currentTimeMillis();
        if (Math.abs(now - timestampMillis) > WINDOW_MILLIS) {
            return "timestamp " + timestampMillis + " is " + (now - timestampMillis) + " ms from this host's clock"
                    + " (window " + WINDOW_MILLIS + " ms): stale, replayed or a clock too far off";
        }
        if (nonce.length != NONCE_BYTES) {
            return "no nonce";
        }
        purge(now);
        if (seen.size() >= MAX_NONCES) {
            return "too many requests within the replay window (" + MAX_NONCES + ")";
        }
        Long before = seen.putIfAbsent(new Nonce(longAt(nonce, 0), longAt(nonce, 8)), now + WINDOW_MILLIS);
        return before == null ? null : "nonce already used: a replayed message";
    }

    private void purge(long now) {
        if (now < nextPurge) {
            return;
        }
        nextPurge = now + 1_000;
        seen.values().removeIf(expiry -> expiry < now);
    }

    private static void update(Mac m, byte[] b) {
        updateLength(m, b.length);
        m.update(b);
    }

    /** The same bytes as {@code update(m, s.getBytes(US_ASCII))} for an ASCII domain name, without the array. */
    private static void updateAscii(Mac m, String s) {
        int n = s.length();
        updateLength(m, n);
        for (int i = 0; i < n; i++) {
            char c = s.charAt(i);
            m.update(c < 0x80 ? (byte) c : (byte) '?');
        }
    }

    private static void updateLength(Mac m, int n) {
        m.update((byte) n);
        m.update((byte) (n >>> 8));
        m.update((byte) (n >>> 16));
        m.update((byte) (n >>> 24));
    }

    private static byte[] hmac(byte[] key, byte[] data) {
        Mac m = newMac(key);
        return m.doFinal(data);
    }

    private static Mac newMac(byte[] key) {
        try {
            Mac m = Mac.getInstance("HmacSHA256");
            m.init(new SecretKeySpec(key, "HmacSHA256"));
            return m;
        } catch (GeneralSecurityException e) {
            throw new IllegalStateException("HmacSHA256 is not available in this JDK", e);
        }
    }

    /** A nonce seen in the replay window: its 16 bytes as two longs (a smaller key than its hex string). */
    private record Nonce(long high, long low) {
    }

    private static long longAt(byte[] b, int at) {
        long v = 0;
        for (int i = 0; i < 8; i++) {
            v |= (b[at + i] & 0xFFL) << (8 * i);
        }
        return v;
    }
}
