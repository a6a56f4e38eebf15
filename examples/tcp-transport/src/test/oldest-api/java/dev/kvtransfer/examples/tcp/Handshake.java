package dev.kvtransfer.examples.tcp;

import javax.crypto.Mac;
import javax.crypto.spec.SecretKeySpec;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.security.GeneralSecurityException;
import java.security.MessageDigest;
import java.security.SecureRandom;
import java.util.ArrayDeque;
import java.util.Arrays;
import java.util.HashSet;
import java.util.Set;

/**
 * The first bytes of a connection. The connecting side sends HELLO: magic, version, its own listening address
 * (the peer's name for it), the address it meant to reach, a timestamp, a random nonce and, when the deployment has
 * a secret ({@code TransportConfig.authSecret()}), an HMAC-SHA256 over all of it. The accepting side checks the
 * target, the MAC (constant time), the timestamp (within {@value #MAX_SKEW_MS} ms) and that the nonce is new, and
 * answers WELCOME (status, and an HMAC over the hello's nonce and the status, so the connecting side knows it
 * reached a holder of the secret too) or a refusal with the reason. Without a secret the MACs are zeros and
 * nothing is checked but the format and the target; a side with a secret refuses a side without.
 */
final class Handshake {
    static final int MAGIC = 0x4354564b; // "KVTC" little-endian
    static final int VERSION = 1;
    static final int MAX_ADDRESS = 1024;
    static final int NONCE = 16;
    static final int MAC = 32;
    /** Fixed part of a hello: magic, version, two lengths, timestamp, nonce, mac. */
    static final int HELLO_FIXED = 4 + 4 + 4 + 4 + 8 + NONCE + MAC;
    /** Bytes of a welcome: magic, status, reason length, reason (at most 200 bytes, padded), mac. */
    static final int WELCOME = 4 + 4 + 4 + 200 + MAC;
    static final long MAX_SKEW_MS = 60_000;

    private final byte[] secret;
    private final SecureRandom random = new SecureRandom();
    private final Set<String> seenNonces = new HashSet<>();
    private final ArrayDeque<Object[]> nonceAges = new ArrayDeque<>();

    Handshake(byte[] secret) {
        this.secret = secret == null ? null : secret.clone();
    }

    /** A hello from {@code self} to {@code target}; the nonce is written into {@code nonceOut}. */
    ByteBuffer hello(String self, String target, byte[] nonceOut) {
        byte[] s = self.getBytes(StandardCharsets.UTF_8);
        byte[] t = target.getBytes(StandardCharsets.UTF_8);
        random.nextBytes(nonceOut);
        ByteBuffer b = ByteBuffer.allocate(HELLO_FIXED + s.length + t.length).order(ByteOrder.LITTLE_ENDIAN);
        b.putInt(MAGIC).putInt(VERSION).putInt(s.length).putInt(t.length).putLong(System.currentTimeMillis())
                .put(nonceOut).put(s).put(t);
        b.put(mac(b.array(), 0, b.position()));
        return b.flip();
    }

    /** The accepted side's view of a complete hello. */
    record Hello(String from, String target, byte[] nonce) {
    }

    /**
     * @return the total hello length once its fixed prefix (lengths) has arrived, or -1 when not yet
     * @throws IllegalArgumentException when the prefix is not a hello
     */
    static int helloLength(ByteBuffer b) {
        if (b.position() < 16) {
            return -1;
        }
        ByteBuffer d = b.duplicate().order(ByteOrder.LITTLE_ENDIAN);
        if (d.getInt(0) != MAGIC) {
            throw new IllegalArgumentException("not a kvtransfer tcp hello (magic " + Integer.toHexString(d.getInt(0))
                    + ")");
        }
        if (d.getInt(4) != VERSION) {
            throw new IllegalArgumentException("hello of protocol version " + d.getInt(4) + ", this side speaks "
                    + VERSION);
        }
        int s = d.getInt(8);
        int t = d.getInt(12);
        if (s < 1 || s > MAX_ADDRESS || t < 1 || t > MAX_ADDRESS) {
            throw new IllegalArgumentException("hello with address lengths " + s + " / " + t);
        }
        return HELLO_FIXED + s + t;
    }

    /**
     * Checks a complete hello meant for {@code self}.
     *
     * @throws IllegalArgumentException with the reason of a refusal
     */
    synchronized Hello accept(ByteBuffer complete, String self) {
        ByteBuffer d = complete.duplicate().order(ByteOrder.LITTLE_ENDIAN);
        int s = d.getInt(8);
        int t = d.getInt(12);
        long time = d.getLong(16);
        byte[] nonce = new byte[NONCE];
        d.get(24, nonce);
        byte[] from = new byte[s];
        d.get(24 + NONCE, from);
        byte[] target = new byte[t];
        d.get(24 + NONCE + s, target);
        int macAt = 24 + NONCE + s + t;
        byte[] mac = new byte[MAC];
        d.get(macAt, mac);
        String targetAddress = new String(target, StandardCharsets.UTF_8);
        if (!targetAddress.equals(self)) {
            throw new IllegalArgumentException("hello meant for " + targetAddress + ", this is " + self);
        }
        if (secret != null) {
            if (!MessageDigest.isEqual(mac, mac(d.array(), 0, macAt))) {
                throw new IllegalArgumentException("hello without a valid HMAC (wrong or no secret)");
            }
            long skew = Math.abs(System.currentTimeMillis() - time);
            if (skew > MAX_SKEW_MS) {
                throw new IllegalArgumentException("hello " + skew + " ms off this clock (at most " + MAX_SKEW_MS + ")");
            }
            String key = Arrays.toString(nonce);
            long now = System.currentTimeMillis();
            while (!nonceAges.isEmpty() && now - (long) nonceAges.peekFirst()[1] > 2 * MAX_SKEW_MS) {
                seenNonces.remove((String) nonceAges.pollFirst()[0]);
            }
            if (!seenNonces.add(key)) {
                throw new IllegalArgumentException("replayed hello");
            }
            nonceAges.addLast(new Object[] {key, now});
        }
        return new Hello(new String(from, StandardCharsets.UTF_8), targetAddress, nonce);
    }

    /** The answer to a hello: accepted ({@code reason == null}) or refused. */
    ByteBuffer welcome(byte[] nonce, String reason) {
        ByteBuffer b = ByteBuffer.allocate(WELCOME).order(ByteOrder.LITTLE_ENDIAN);
        byte[] r = reason == null ? new byte[0] : reason.getBytes(StandardCharsets.UTF_8);
        int n = Math.min(r.length, 200);
        b.putInt(MAGIC).putInt(reason == null ? 0 : 1).putInt(n).put(r, 0, n);
        b.position(4 + 4 + 4 + 200);
        byte[] signed = ByteBuffer.allocate(NONCE + 4).order(ByteOrder.LITTLE_ENDIAN).put(nonce)
                .putInt(reason == null ? 0 : 1).array();
        b.put(mac(signed, 0, signed.length));
        return b.flip();
    }

    /**
     * Checks a complete welcome for the hello that had {@code nonce}.
     *
     * @throws IllegalArgumentException with the refusal's reason, or why the welcome is not acceptable
     */
    void checkWelcome(ByteBuffer complete, byte[] nonce) {
        ByteBuffer d = complete.duplicate().order(ByteOrder.LITTLE_ENDIAN);
        if (d.getInt(0) != MAGIC) {
            throw new IllegalArgumentException("the peer answered something that is not a kvtransfer tcp welcome");
        }
        int status = d.getInt(4);
        int n = Math.min(Math.max(0, d.getInt(8)), 200);
        if (status != 0) {
            byte[] r = new byte[n];
            d.get(12, r);
            throw new IllegalArgumentException("refused by the peer: " + new String(r, StandardCharsets.UTF_8));
        }
        if (secret != null) {
            byte[] mac = new byte[MAC];
            d.get(4 + 4 + 4 + 200, mac);
            byte[] signed = ByteBuffer.allocate(NONCE + 4).order(ByteOrder.LITTLE_ENDIAN).put(nonce).putInt(0).array();
            if (!MessageDigest.isEqual(mac, mac(signed, 0, signed.length))) {
                throw new IllegalArgumentException("the peer's welcome has no valid HMAC (wrong or no secret)");
            }
        }
    }

    private byte[] mac(byte[] data, int off, int len) {
        if (secret == null) {
            return new byte[MAC];
        }
        try {
            Mac m = Mac.getInstance("HmacSHA256");
            m.init(new SecretKeySpec(secret, "HmacSHA256"));
            m.update(data, off, len);
            return m.doFinal();
        } catch (GeneralSecurityException e) {
            throw new IllegalStateException("HmacSHA256 unavailable", e);
        }
    }
}
