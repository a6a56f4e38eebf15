package dev.kvtransfer.core.transfer;

import javax.crypto.Mac;
import javax.crypto.spec.SecretKeySpec;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.security.GeneralSecurityException;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.security.SecureRandom;
import java.util.Arrays;

/**
 * Authentication of the control plane with the deployment's shared secret (HMAC-SHA256 from the JDK): MACs over
 * control messages, unguessable per-request tokens, fresh nonces and a replay window. The MAC key is derived from
 * the secret; the token key from the context instance's own issuing key, which no generation instance holds, so
 * a holder of the secret cannot compute a request's token, only present one it was handed. A token is issued for the
 * request <em>and</em> the checksum of its first generated and draft tokens: its first {@link #TOKEN_MAC_BYTES} bytes
 * are HMAC(issuing key, id, checksum), its last 4 the checksum itself, so every rank sharing the issuing key can
 * tell which tokens the params were issued with and refuse a requester that received others. With no secret
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
    /** Bytes of a token's MAC (the rest is the tokens checksum it was issued for): 96 bits, never guessed online. */
    static final int TOKEN_MAC_BYTES = TOKEN_BYTES - 4;
    /** How far a timestamp may be from this clock, and how long a nonce is remembered. */
    static final long WINDOW_MILLIS = 120_000;
    /** Most nonces remembered at once; beyond that new requests are refused until old ones expire. */
    static final int MAX_NONCES = 1 << 20;

    /** No authentication. */
    static final ControlAuth OFF = new ControlAuth(null, null);

    private final byte[] macKey;
    private final byte[] tokenKey;
    private final ThreadLocal<Hmac> macs;
    private final ThreadLocal<Hmac> tokens;
    private final SecureRandom random = new SecureRandom();
    private final ReplayWindow seen = new ReplayWindow();

    private ControlAuth(byte[] secret, byte[] issuingKey) {
        if (secret == null) {
            macKey = null;
            tokenKey = null;
            macs = null;
            tokens = null;
            return;
        }
        macKey = hmac(secret, "kvtransfer-control-mac-v1".getBytes(StandardCharsets.US_ASCII));
        // Tokens come from the context instance's own issuing key, never from the deployment secret: every holder
        // of the secret (each generation instance of the deployment) could otherwise compute any request's token.
        tokenKey = hmac(issuingKey != null ? issuingKey.clone() : newIssuingKey(),
                "kvtransfer-request-token-v3".getBytes(StandardCharsets.US_ASCII));
        macs = ThreadLocal.withInitial(() -> new Hmac(macKey));
        tokens = ThreadLocal.withInitial(() -> new Hmac(tokenKey));
    }

    /**
     * Authentication with tokens only this context rank can issue and check: its issuing key is drawn at random.
     * The ranks of a context instance that share one key use {@link #of(byte[], byte[])}.
     *
     * @param secret the deployment secret, or null for no authentication
     * @return the context
     */
    public static ControlAuth of(byte[] secret) {
        return of(secret, null);
    }

    /**
     * @param secret     the deployment secret, or null for no authentication
     * @param issuingKey the key the ranks of one context instance issue request tokens with (kept by that
     *                   instance, never given to a generation instance); null: a random key of this rank's own
     * @return the context
     */
    public static ControlAuth of(byte[] secret, byte[] issuingKey) {
        if (issuingKey != null && issuingKey.length < 16) {
            throw new IllegalArgumentException("a token issuing key needs at least 16 bytes, got "
                    + issuingKey.length);
        }
        return secret == null ? OFF : new ControlAuth(secret, issuingKey);
    }

    /** @return a fresh random issuing key for the ranks of one context instance to share */
    public static byte[] newIssuingKey() {
        byte[] k = new byte[32];
        new SecureRandom().nextBytes(k);
        return k;
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
     * The token of a request whose params carry no tokens: {@code token(requestId, tokensChecksum of two empty
     * lists)}.
     *
     * @param requestId the context request id
     * @return {@link #TOKEN_BYTES} bytes, or empty when off
     */
    public byte[] token(long requestId) {
        return token(requestId, NO_TOKENS_CHECKSUM);
    }

    private static final int NO_TOKENS_CHECKSUM = dev.kvtransfer.api.model.ContextPhaseParams.tokensChecksum(
            new long[0], new long[0]);

    /**
     * The request's token, issued for the checksum of its params' first generated and draft tokens: the same on
     * every context rank sharing the issuing key, unguessable without that key (the deployment secret alone does
     * not give it), and not valid for other tokens.
     *
     * @param requestId      the context request id
     * @param tokensChecksum {@code ContextPhaseParams.tokensChecksum} of the tokens the params will carry
     * @return {@link #TOKEN_BYTES} bytes, or empty when off
     */
    public byte[] token(long requestId, int tokensChecksum) {
        if (!enabled()) {
            return new byte[0];
        }
        Hmac m = tokens.get();
        tokenInto(m, requestId, tokensChecksum);
        return Arrays.copyOf(m.out, TOKEN_BYTES);
    }

    /**
     * The token into the first {@link #TOKEN_BYTES} bytes of {@code m.out}: the HMAC of (id, checksum), cut to
     * {@link #TOKEN_MAC_BYTES}, then the checksum little-endian.
     */
    private static void tokenInto(Hmac m, long requestId, int tokensChecksum) {
        m.start();
        for (int i = 0; i < 8; i++) {
            m.md.update((byte) (requestId >>> (8 * i)));
        }
        for (int i = 0; i < 4; i++) {
            m.md.update((byte) (tokensChecksum >>> (8 * i)));
        }
        m.finish(m.out, 0);
        for (int i = 0; i < 4; i++) {
            m.out[TOKEN_MAC_BYTES + i] = (byte) (tokensChecksum >>> (8 * i));
        }
    }

    /**
     * The tokens checksum a token says it was issued for (its last 4 bytes); only {@link #tokenValid(long, byte[])}
     * proves that the issuer wrote it.
     *
     * @param token a token of {@link #TOKEN_BYTES} bytes
     * @return the checksum
     */
    static int issuedChecksum(byte[] token) {
        int v = 0;
        for (int i = 0; i < 4; i++) {
            v |= (token[TOKEN_MAC_BYTES + i] & 0xFF) << (8 * i);
        }
        return v;
    }

    /**
     * @param requestId the request
     * @param token     a claimed token
     * @return whether it is a token this issuer issued for the request, for the checksum it carries
     *         (constant-time); always true when off
     */
    boolean tokenValid(long requestId, byte[] token) {
        if (!enabled()) {
            return true;
        }
        if (token.length != TOKEN_BYTES) {
            return false;
        }
        Hmac m = tokens.get();
        tokenInto(m, requestId, issuedChecksum(token));
        return equalRange(m.out, token, TOKEN_BYTES);
    }

    /**
     * {@link #tokenValid(long, byte[])} for the token an info carries.
     *
     * @param requestId the request
     * @param info      the request info claiming it
     * @return whether the info holds a token issued for the request (constant-time); always true when off
     */
    boolean tokenValid(long requestId, dev.kvtransfer.api.model.RequestInfo info) {
        return !enabled() || tokenValid(requestId, info.requestToken());
    }

    /**
     * Whether the info holds the request's token issued for exactly the tokens checksum given (the one the
     * requester echoes), without copying the token out of the info: the common case of a genuine requester.
     *
     * @param requestId      the request
     * @param tokensChecksum the checksum the token must have been issued for
     * @param info           the request info claiming it
     * @return whether it is (constant-time); always true when off
     */
    boolean tokenValid(long requestId, int tokensChecksum, dev.kvtransfer.api.model.RequestInfo info) {
        if (!enabled()) {
            return true;
        }
        Hmac m = tokens.get();
        tokenInto(m, requestId, tokensChecksum);
        return info.requestTokenMatches(m.out, 0, TOKEN_BYTES);
    }

    /**
     * The context side's token check of a request info: the token must be one this issuer issued for the request,
     * and the info must echo the checksum of the tokens the requester received, equal to the one the token was
     * issued for. A genuine info is checked in place (no copy).
     *
     * @param info the request info
     * @return null when it passes (always when off), else why not, naming the request and both checksums
     */
    String checkToken(dev.kvtransfer.api.model.RequestInfo info) {
        if (!enabled()) {
            return null;
        }
        long id = info.requestId();
        boolean echoed = info.echoesTokensChecksum();
        if (echoed && tokenValid(id, info.tokensChecksum(), info)) {
            return null; // the genuine requester, holding the tokens the token was issued for
        }
        byte[] token = info.requestToken();
        if (!tokenValid(id, token)) {
            return "wrong request token: the asker does not hold this request's ContextPhaseParams (build them "
                    + "with CacheTransceiver.contextPhaseParams)";
        }
        String issued = Integer.toHexString(issuedChecksum(token));
        if (!echoed) {
            return "request " + id + ": the request info does not echo the checksum of the first generated and "
                    + "draft tokens it received (the params were issued for tokens checksum " + issued + "), so "
                    + "they cannot be shown unchanged: a generation instance without this check";
        }
        return "request " + id + ": its first generated / draft tokens changed between the instances: the context "
                + "side issued the params for tokens checksum " + issued + ", the requester received tokens with "
                + "checksum " + Integer.toHexString(info.tokensChecksum()) + " (replaced on the way, e.g. by a router)";
    }

    /** @return a fresh nonce, or empty when off */
    byte[] nonce() {
        if (!enabled()) {
            return new byte[0];
        }
        byte[] n = new byte[NONCE_BYTES];
        NoncePool pool = noncePool.get();
        if (pool.at == pool.bytes.length) {
            random.nextBytes(pool.bytes); // the JDK's PRNG makes an array per call: one per 32 nonces, not per nonce
            pool.at = 0;
        }
        System.arraycopy(pool.bytes, pool.at, n, 0, NONCE_BYTES);
        java.util.Arrays.fill(pool.bytes, pool.at, pool.at + NONCE_BYTES, (byte) 0); // handed out once, not kept
        pool.at += NONCE_BYTES;
        return n;
    }

    /** Per thread, random bytes drawn ahead from the {@code SecureRandom}, each run of 16 handed out once. */
    private static final class NoncePool {
        final byte[] bytes = new byte[32 * NONCE_BYTES];
        int at = bytes.length;
    }

    private final ThreadLocal<NoncePool> noncePool = ThreadLocal.withInitial(NoncePool::new);

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
        Hmac m = macs.get();
        m.start();
        updateAscii(m.md, domain);
        for (byte[] p : parts) {
            update(m.md, p);
        }
        byte[] out = new byte[MAC_BYTES];
        m.finish(out, 0);
        return out;
    }

    /**
     * Whether the MAC at {@code claimedAt} of a buffer is {@code mac("INFO", <bytes [from, from + length)>,
     * address)}: the context side's check of a request info where it was received, without copying it out.
     *
     * @param bb        the received bytes (position and limit are restored)
     * @param from      where the info starts
     * @param length    the info's length
     * @param address   the receiving rank's own address bytes
     * @param claimedAt where the claimed MAC starts ({@link #MAC_BYTES} bytes)
     * @return whether it matches (constant-time); always true when off
     */
    boolean infoMacValid(ByteBuffer bb, int from, int length, byte[] address, int claimedAt) {
        if (!enabled()) {
            return true;
        }
        Hmac m = macs.get();
        m.start();
        updateAscii(m.md, "INFO");
        update(m.md, bb, from, length);
        update(m.md, address);
        m.finish(m.out, 0);
        return equalAt(m.out, bb, claimedAt);
    }

    /**
     * Writes the MAC of a request info at {@code macAt} of a buffer: {@code mac("INFO", <bytes [from, from +
     * length)>, address)}, the generation side's MAC for one context rank, without copies. No-op when off.
     *
     * @param bb      the message being built
     * @param from    where the info starts
     * @param length  the info's length
     * @param address the context rank's address bytes
     * @param macAt   where the MAC goes
     */
    void infoMacInto(ByteBuffer bb, int from, int length, byte[] address, int macAt) {
        if (!enabled()) {
            return;
        }
        Hmac m = macs.get();
        m.start();
        updateAscii(m.md, "INFO");
        update(m.md, bb, from, length);
        update(m.md, address);
        m.finish(m.out, 0);
        bb.put(macAt, m.out, 0, MAC_BYTES);
    }

    /**
     * The ready signal's MAC, as {@code mac("READY", <id, tag>, nonce, ctx, gen, body)} computes it (request id and tag, the request's
     * nonce, both ends' addresses, the body), over a body that lies in a buffer, into {@code m.out}.
     */
    private Hmac readyMac(long id, int tag, dev.kvtransfer.api.model.RequestInfo nonceOf, byte[] nonce,
                          byte[] ctxAddress, byte[] genAddress, ByteBuffer bb, int bodyAt, int bodyLength) {
        Hmac m = macs.get();
        m.start();
        MessageDigest md = m.md;
        updateAscii(md, "READY");
        updateLength(md, 12);
        for (int i = 0; i < 8; i++) {
            md.update((byte) (id >>> (8 * i)));
        }
        for (int i = 0; i < 4; i++) {
            md.update((byte) (tag >>> (8 * i)));
        }
        if (nonceOf != null) {
            int n = nonceOf.nonceLength();
            updateLength(md, n);
            for (int i = 0; i < n; i++) {
                md.update(nonceOf.nonceAt(i));
            }
        } else {
            update(md, nonce);
        }
        update(md, ctxAddress);
        update(md, genAddress);
        update(md, bb, bodyAt, bodyLength);
        m.finish(m.out, 0);
        return m;
    }

    /**
     * Writes a ready signal's MAC (the same bytes as {@code mac("READY", <id, tag>, nonce, ctx, gen, body)} over the body {@code [0,
     * bodyLength)} of the buffer) at {@code bodyLength}: the context side's, with the nonce read from the info in
     * place. No-op when off.
     *
     * @param bb         the signal being built
     * @param bodyLength the body's length; the MAC goes right after it
     * @param info       the request info answered (request id, tag and nonce)
     * @param ctxAddress this context rank's address bytes
     * @param genAddress the generation rank's address bytes
     */
    void readyMacInto(ByteBuffer bb, int bodyLength, dev.kvtransfer.api.model.RequestInfo info, byte[] ctxAddress,
                      byte[] genAddress) {
        if (!enabled()) {
            return;
        }
        Hmac m = readyMac(info.requestId(), info.dataTag(), info, null, ctxAddress, genAddress, bb, 0, bodyLength);
        bb.put(bodyLength, m.out, 0, MAC_BYTES);
    }

    /**
     * Whether a received ready signal's MAC (right after its body at {@code at}) is the one
     * {@link #readyMacInto} writes: the generation side's check, without copies.
     *
     * @param bb         the received bytes
     * @param at         where the signal starts
     * @param bodyLength its body's length
     * @param id         the request
     * @param tag        its data tag
     * @param nonce      the nonce the generation side sent
     * @param ctxAddress the context rank's address bytes
     * @param genAddress this generation rank's address bytes
     * @return whether it matches (constant-time); always true when off
     */
    boolean readyMacValid(ByteBuffer bb, int at, int bodyLength, long id, int tag, byte[] nonce, byte[] ctxAddress,
                          byte[] genAddress) {
        if (!enabled()) {
            return true;
        }
        Hmac m = readyMac(id, tag, null, nonce, ctxAddress, genAddress, bb, at, bodyLength);
        return equalAt(m.out, bb, at + bodyLength);
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
        if (nonce.length != NONCE_BYTES) {
            return checkFresh(0, 0, false, timestampMillis);
        }
        return checkFresh(longAt(nonce, 0), longAt(nonce, 8), true, timestampMillis);
    }

    /**
     * {@link #checkFresh(byte[], long)} for the nonce an info carries, without copying it out of the info.
     *
     * @param info the request info
     * @return null when fresh, else why not
     */
    String checkFresh(dev.kvtransfer.api.model.RequestInfo info) {
        if (!enabled()) {
            return null;
        }
        if (info.nonceLength() != NONCE_BYTES) {
            return checkFresh(0, 0, false, info.timestampMillis());
        }
        return checkFresh(info.nonceLong(0), info.nonceLong(8), true, info.timestampMillis());
    }

    private String checkFresh(long high, long low, boolean hasNonce, long timestampMillis) {
        long now = System.currentTimeMillis();
        if (Math.abs(now - timestampMillis) > WINDOW_MILLIS) {
            return "timestamp " + timestampMillis + " is " + (now - timestampMillis) + " ms from this host's clock"
                    + " (window " + WINDOW_MILLIS + " ms): stale, replayed or a clock too far off";
        }
        if (!hasNonce) {
            return "no nonce";
        }
        seen.purge(now);
        if (seen.size() >= MAX_NONCES) {
            return "too many requests within the replay window (" + MAX_NONCES + ")";
        }
        return seen.addIfAbsent(high, low, now + WINDOW_MILLIS) ? null : "nonce already used: a replayed message";
    }

    private static void update(MessageDigest m, byte[] b) {
        updateLength(m, b.length);
        m.update(b);
    }

    /** The same bytes as {@code update(m, <the bytes [from, from + length) of bb>)}, without copying them out. */
    private static void update(MessageDigest m, ByteBuffer bb, int from, int length) {
        updateLength(m, length);
        int pos = bb.position();
        int lim = bb.limit();
        try {
            bb.limit(from + length).position(from);
            m.update(bb);
        } finally {
            bb.limit(lim).position(pos);
        }
    }

    /** Constant-time comparison of the first {@code n} bytes of two arrays. */
    private static boolean equalRange(byte[] a, byte[] b, int n) {
        int diff = 0;
        for (int i = 0; i < n; i++) {
            diff |= a[i] ^ b[i];
        }
        return diff == 0;
    }

    /** Constant-time comparison of a computed MAC with the {@link #MAC_BYTES} bytes at {@code at} of a buffer. */
    private static boolean equalAt(byte[] mac, ByteBuffer bb, int at) {
        if (at < 0 || at + MAC_BYTES > bb.limit()) {
            return false;
        }
        int diff = 0;
        for (int i = 0; i < MAC_BYTES; i++) {
            diff |= mac[i] ^ bb.get(at + i);
        }
        return diff == 0;
    }

    /** The same bytes as {@code update(m, s.getBytes(US_ASCII))} for an ASCII domain name, without the array. */
    private static void updateAscii(MessageDigest m, String s) {
        int n = s.length();
        updateLength(m, n);
        for (int i = 0; i < n; i++) {
            char c = s.charAt(i);
            m.update(c < 0x80 ? (byte) c : (byte) '?');
        }
    }

    private static void updateLength(MessageDigest m, int n) {
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

    /**
     * HMAC-SHA256 (RFC 2104) over a {@link MessageDigest} with its padded keys kept, so that a MAC allocates
     * nothing: {@code javax.crypto.Mac} makes a new array per {@code doFinal} (even {@code doFinal(byte[], int)}
     * copies from one). The same bytes as {@code Mac.getInstance("HmacSHA256")} with the same key
     * ({@code ControlAuthTest} compares them). One per thread and key.
     */
    private static final class Hmac {
        private static final int BLOCK = 64;
        final MessageDigest md;
        private final byte[] ipad = new byte[BLOCK];
        private final byte[] opad = new byte[BLOCK];
        private final byte[] inner = new byte[MAC_BYTES];
        /** Scratch output of {@link #finish} for MACs that are compared or copied, never handed out. */
        final byte[] out = new byte[MAC_BYTES];

        Hmac(byte[] key) {
            try {
                md = MessageDigest.getInstance("SHA-256");
            } catch (NoSuchAlgorithmException e) {
                throw new IllegalStateException("SHA-256 is not available in this JDK", e);
            }
            byte[] k = key.length > BLOCK ? md.digest(key) : key;
            for (int i = 0; i < BLOCK; i++) {
                byte b = i < k.length ? k[i] : 0;
                ipad[i] = (byte) (b ^ 0x36);
                opad[i] = (byte) (b ^ 0x5c);
            }
        }

        void start() {
            md.reset();
            md.update(ipad);
        }

        void finish(byte[] dst, int at) {
            try {
                md.digest(inner, 0, MAC_BYTES);
                md.update(opad);
                md.update(inner);
                md.digest(dst, at, MAC_BYTES);
            } catch (java.security.DigestException e) {
                throw new IllegalStateException("SHA-256 digest", e);
            }
        }
    }

    private static long longAt(byte[] b, int at) {
        long v = 0;
        for (int i = 0; i < 8; i++) {
            v |= (b[at + i] & 0xFFL) << (8 * i);
        }
        return v;
    }
}
